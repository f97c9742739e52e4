"""Monthly budgets per tenant: setting them, reading spend against them, and the
threshold notifications (each month and threshold once)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from django.db import IntegrityError, transaction
from django.db.models import Sum
from django.utils import timezone

from tenants.audit import audit_record
from tenants.models import Tenant

from .domain import BudgetStatus, budget_status, month_start
from .models import Budget, BudgetAlert, UsageMonth
from .services import BillingError, require_billing_role


def spent_in(tenant_ids, month: dt.date) -> dict[int, Decimal]:
    """Each tenant's charges so far in `month` (the open statement's figures), one query."""
    return {row["tenant_id"]: row["amount"] or Decimal(0) for row in UsageMonth.objects.filter(
        tenant_id__in=tenant_ids, month=month).values("tenant_id").annotate(
        amount=Sum("amount"))}


def status_for(tenant: Tenant, now: dt.datetime, month: dt.date | None = None
               ) -> BudgetStatus | None:
    budget = Budget.objects.filter(tenant=tenant).first()
    if budget is None:
        return None
    month = month or month_start(now)
    spent = spent_in([tenant.pk], month).get(tenant.pk, Decimal(0))
    return budget_status(budget=budget.monthly_amount, spent=spent, month=month, now=now)


def budgets_overview(now: dt.datetime, tenants=None
                     ) -> list[tuple[Tenant, BudgetStatus | None]]:
    """These tenants (default: all) with this month's spend against their budgets (finance's
    budgets page shows a page of them)."""
    month = month_start(now)
    tenants = list(Tenant.objects.order_by("name") if tenants is None else tenants)
    budgets = {b.tenant_id: b for b in Budget.objects.filter(tenant__in=tenants)}
    spent = spent_in([t.pk for t in tenants], month)
    return [(t, budget_status(budget=budgets[t.pk].monthly_amount,
                              spent=spent.get(t.pk, Decimal(0)), month=month, now=now)
             if t.pk in budgets else None) for t in tenants]


def parse_budget(value) -> Decimal | None:
    """Empty → no budget; otherwise a positive amount that fits the column."""
    from tenants.fields import decimal_for_column

    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    try:
        amount = decimal_for_column(value, max_digits=14, decimal_places=2,
                                    what="The monthly budget")
    except ValueError as exc:
        raise BillingError(str(exc)) from None
    if amount <= 0:
        raise BillingError("The monthly budget must be more than zero (leave it empty for "
                           "no budget).")
    return amount


@transaction.atomic
def budget_set(*, tenant: Tenant, amount_value, by) -> Budget | None:
    """Finance (or an admin) sets or removes a tenant's monthly budget; audited. A new
    budget is checked at once, so a tenant already past 50 % hears it now."""
    require_billing_role(by)
    amount = parse_budget(amount_value)
    old = Budget.objects.filter(tenant=tenant).first()
    if amount is None:
        if old is not None:
            audit_record(actor=by, subject=old, tenant=tenant, action="budget.removed",
                         reason=f"Monthly budget of {old.monthly_amount} removed.")
            old.delete()
        return None
    budget, _ = Budget.objects.update_or_create(tenant=tenant, defaults={
        "monthly_amount": amount, "set_by": by})
    audit_record(actor=by, subject=budget, tenant=tenant, action="budget.set",
                 reason=f"Monthly budget set to {amount}"
                        + (f" (was {old.monthly_amount})." if old else "."))
    transaction.on_commit(lambda: check_budgets(timezone.now()))
    return budget


def check_budgets(now: dt.datetime) -> list[BudgetAlert]:
    """Notify each threshold crossed this month that has not been notified yet: the tenant's
    leads and finance. Safe to run from any number of workers (the unique key decides)."""
    from django.conf import settings

    from tenants.notifications import Kind, finance_people, notify, tenant_leads

    month = month_start(now)
    budgets = list(Budget.objects.select_related("tenant"))
    spent = spent_in([b.tenant_id for b in budgets], month)
    done = set(BudgetAlert.objects.filter(month=month).values_list("tenant_id", "threshold"))
    created = []
    for b in budgets:
        status = budget_status(budget=b.monthly_amount, spent=spent.get(b.tenant_id,
                               Decimal(0)), month=month, now=now)
        for threshold in status.crossed:
            if (b.tenant_id, threshold) in done:
                continue
            try:
                with transaction.atomic():
                    alert = BudgetAlert.objects.create(
                        tenant=b.tenant, month=month, threshold=threshold,
                        spent=status.spent, budget=status.budget)
                    reason = (f"{b.tenant.name} has spent {settings.PORTAL_CURRENCY} "
                              f"{status.spent:,.2f} of its {settings.PORTAL_CURRENCY} "
                              f"{status.budget:,.2f} budget for {month:%B %Y}: "
                              f"{threshold}% crossed. {status.summary}")
                    audit_record(actor=None, subject=alert, tenant=b.tenant,
                                 action="budget.threshold", reason=reason)
                    notify([*tenant_leads(b.tenant), *finance_people()],
                           Kind.BUDGET_THRESHOLD,
                           f"{b.tenant.name}: {threshold}% of the {month:%B} budget spent",
                           reason, link=f"/billing/{b.tenant.slug}/{month:%Y-%m}/")
            except IntegrityError:
                continue  # another worker notified it first
            created.append(alert)
    return created
