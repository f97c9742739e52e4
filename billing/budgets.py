"""Monthly budgets per tenant: setting them, reading spend against them, and the
threshold notifications (each month and threshold once)."""

from __future__ import annotations

import datetime as dt
import pickle
from decimal import Decimal

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from billing.figures import FIGURE_MODELS, figure_sums, month_spend
from fleet.inventory.pricing import money, money_text
from tenants.audit import audit_record
from tenants.fields import decimal_for_column
from tenants.kept_reads import kept_across_requests, key_of
from tenants.models import Tenant
from tenants.notifications import Kind, finance_people, notify, tenant_leads
from tenants.paging import Window

from .domain import (
    HOUR,
    BudgetStatus,
    budget_status,
    forecast_extends,
    month_bounds,
    month_start,
    run_rate_forecast,
)
from .models import Budget, BudgetAlert, UsageHour
from .services import BillingError, require_billing_role


def spent_in(tenant_ids, month: dt.date) -> dict[int, Decimal]:
    """Each tenant's charges in `month`: the one number its statement shows (lines to the
    cent plus adjustments, as billing.figures.month_figures counts them), so the budget card
    and the statement agree; summed from the totals kept at write time (figure_sums, which
    the property test holds equal to month_figures), not recomputed from every usage month."""
    return {key[0]: sums["amount"] for key, sums in figure_sums(
        ("tenant_id",), tenant_ids=list(tenant_ids), months=[month]).items()}


def rolled_up_until(month: dt.date) -> dt.datetime | None:
    """The end of the latest hour of `month` the rollup has recorded: the spend so far is the
    spend up to here, so the run rate divides by these hours (none rolled up yet: None).
    One query (the index on the hour answers it)."""
    start, end = month_bounds(month)
    last = UsageHour.objects.filter(hour__gte=start, hour__lt=end).aggregate(
        last=Max("hour"))["last"]
    return last + HOUR if last else None


def budgets_in_force(tenant_ids, month: dt.date) -> dict[int, Decimal]:
    """Each tenant's budget for `month`: the latest row from that month or before; none
    where that row removed it. One query."""
    out: dict[int, Decimal] = {}
    seen: set[int] = set()
    rows = Budget.objects.filter(from_month__lte=month).order_by("tenant_id", "-from_month")
    if tenant_ids is not None:
        rows = rows.filter(tenant_id__in=list(tenant_ids))
    for tenant_id, amount in rows.values_list("tenant_id", "monthly_amount"):
        if tenant_id in seen:
            continue
        seen.add(tenant_id)
        if amount is not None:
            out[tenant_id] = amount
    return out


def status_for(tenant: Tenant | int, now: dt.datetime, month: dt.date | None = None
               ) -> BudgetStatus | None:
    """The budget in force in `month` (this month by default) against that month's spend."""
    month = month or month_start(now)
    tenant_id = getattr(tenant, "pk", tenant)
    budgets, spent, covered = _spend_against_budgets((tenant_id,), month)
    if tenant_id not in budgets:
        return None
    return budget_status(budget=budgets[tenant_id], spent=spent.get(tenant_id, Decimal(0)),
                         month=month, now=now, covered_until=covered)


@kept_across_requests(Budget, UsageHour, *FIGURE_MODELS, freeze=pickle.dumps,
                      thaw=pickle.loads)
def _spend_against_budgets(tenant_ids: tuple[int, ...], month: dt.date):
    """The tenants' budgets in force, their spend in the month and how far the rollup has
    come (what budgets_overview reckons with the clock), kept until a write to them."""
    return (budgets_in_force(tenant_ids, month), spent_in(tenant_ids, month),
            rolled_up_until(month))


def tenants_by_name() -> Window:
    """Every tenant by name, as Paginator pages the budgets page: its count and each page
    kept across reading requests until a tenant is written."""
    return Window(_tenant_count, _tenants_by_name)


@kept_across_requests(Tenant)
def _tenant_count() -> int:
    return Tenant.objects.count()


@kept_across_requests(Tenant, freeze=pickle.dumps, thaw=pickle.loads)
def _tenants_by_name(start: int, stop: int) -> list[Tenant]:
    return list(Tenant.objects.order_by("name", "pk")[start:stop])


def budgets_overview(now: dt.datetime, tenants=None
                     ) -> list[tuple[Tenant, BudgetStatus | None]]:
    """These tenants (default: all) with this month's spend against their budgets (finance's
    budgets page shows a page of them)."""
    month = month_start(now)
    tenants = list(Tenant.objects.order_by("name") if tenants is None else tenants)
    budgets, spent, covered = _spend_against_budgets(tuple(t.pk for t in tenants), month)
    return [(t, budget_status(budget=budgets[t.pk], spent=spent.get(t.pk, Decimal(0)),
                              month=month, now=now, covered_until=covered)
             if t.pk in budgets else None) for t in tenants]


def parse_budget(value) -> Decimal | None:
    """Empty → no budget; otherwise a positive amount that fits the column."""
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


class RemovalUnconfirmed(BillingError):
    """Emptying a budget's field removes it: asked once before it is done."""


@transaction.atomic
def budget_set(*, tenant: Tenant, amount_value, by, confirm_removal: bool = False
               ) -> Budget | None:
    """Finance (or an admin) sets or removes a tenant's monthly budget; audited. A new
    budget is checked at once, so a tenant already past 50 % hears it now. Removing one
    needs `confirm_removal`: an emptied field may be a slip."""
    require_billing_role(by)
    amount = parse_budget(amount_value)
    month = month_start(timezone.now())
    old = budgets_in_force([tenant.pk], month).get(tenant.pk)
    if amount is None and old is None:
        return None
    if amount is None and not confirm_removal:
        raise RemovalUnconfirmed(
            f"Remove the monthly budget of {money_text(old)} for {tenant.name}? "
            f"From {month:%B %Y} on its spend is not checked against a budget and nobody is "
            "alerted.")
    # From this month on; earlier months keep the budget that was in force then.
    budget, _ = Budget.objects.update_or_create(tenant=tenant, from_month=month, defaults={
        "monthly_amount": amount, "set_by": by})
    if amount is None:
        audit_record(actor=by, subject=budget, tenant=tenant, action="budget.removed",
                     reason=f"Monthly budget of {old} removed from {month:%B %Y} on.")
        return None
    audit_record(actor=by, subject=budget, tenant=tenant, action="budget.set",
                 reason=f"Monthly budget set to {amount} from {month:%B %Y} on"
                        + (f" (was {old})." if old is not None else "."))
    transaction.on_commit(lambda: check_budgets(timezone.now()))
    return budget


def check_budgets(now: dt.datetime) -> list[BudgetAlert]:
    """Notify each threshold crossed this month that has not been notified yet: the tenant's
    leads and finance. Safe to run from any number of workers (the unique key decides)."""
    month = month_start(now)
    budgets = budgets_in_force(None, month)
    tenants = {t.pk: t for t in Tenant.objects.filter(pk__in=list(budgets))}
    spent = spent_in(list(budgets), month)
    done = set(BudgetAlert.objects.filter(month=month).values_list("tenant_id", "threshold",
                                                                   "budget"))
    created, covered = [], rolled_up_until(month)
    for tenant_id, amount in budgets.items():
        tenant = tenants[tenant_id]
        status = budget_status(budget=amount, spent=spent.get(tenant_id, Decimal(0)),
                               month=month, now=now, covered_until=covered)
        new = [t for t in status.crossed if (tenant_id, t, status.budget) not in done]
        if not new:
            continue
        try:
            with transaction.atomic():
                # Every threshold crossed is recorded, one notice is sent: the highest, with
                # the true percentage (a budget set below the spend is one e-mail, not four).
                alerts = [BudgetAlert.objects.create(
                    tenant=tenant, month=month, threshold=t, spent=status.spent,
                    budget=status.budget) for t in new]
                top = max(new)
                reason = (f"{tenant.name} has spent {settings.PORTAL_CURRENCY} "
                          f"{status.spent:,.2f} of its {settings.PORTAL_CURRENCY} "
                          f"{status.budget:,.2f} budget for {month:%B %Y} "
                          f"({status.percent}%): past {top}%. {status.summary}")
                audit_record(actor=None, subject=alerts[-1], tenant=tenant,
                             action="budget.threshold", reason=reason)
                notify([*tenant_leads(tenant), *finance_people()], Kind.BUDGET_THRESHOLD,
                       f"{tenant.name}: {status.percent}% of the {month:%B} budget spent",
                       reason, link=f"/billing/{tenant.slug}/{month:%Y-%m}/")
        except IntegrityError:
            continue  # another worker notified it first
        created += alerts
    return created


@kept_across_requests(Budget, UsageHour, *FIGURE_MODELS, freeze=pickle.dumps,
                      thaw=pickle.loads)
def _month_so_far(tenant_ids: tuple[int, ...] | None, month: dt.date, top: int):
    """The month's budgets, spend and how far the rollup has come: what this_month reads
    (the clock it reckons with is not kept), kept until a write to what it sums."""
    # Ranked and added up by the database (billing.figures.month_spend): the running month
    # of 5,000 tenants is a top three, a total and the spend of those with budgets.
    budgets = budgets_in_force(tenant_ids, month)
    return budgets, month_spend(tenant_ids, month, top=top, of=budgets), rolled_up_until(month)


def this_month(tenant_ids, now: dt.datetime, *, top: int = 3) -> dict:
    """Finance's month at a glance: spend so far (the statements' one number), the run-rate
    forecast, the top tenants by spend, and how many tenants are near or over budget."""
    month = month_start(now)
    budgets, spend, covered = _month_so_far(key_of(tenant_ids), month, top)
    total = money(spend.total)
    statuses = [budget_status(budget=budgets[t], spent=spent, month=month, now=now,
                              covered_until=covered)
                for t, spent in spend.of.items()]
    leaders = spend.leaders
    return {"month": month, "spent": total,
            "forecast": run_rate_forecast(total, month, now, covered),
            "extended": forecast_extends(month, now, covered),
            "top": [{"name": name, "spent": money(v)} for _, v, name in leaders],
            "over": sum(1 for st in statuses if st.level == "over"),
            "near": sum(1 for st in statuses if st.level == "warn"),
            # On course to end the month over (BudgetStatus.forecast_over): the one rule
            # the budgets page and the tenant's cost page flag by (the "over" included).
            "forecast_over": sum(1 for st in statuses if st.forecast_over),
            "budgets": len(statuses)}
