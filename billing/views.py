"""Finance pages: tenants × months, statements, drill-down, CSV, and /metrics."""

from __future__ import annotations

import csv
import datetime as dt

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse
from django.middleware.csrf import get_token
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from fleet.inventory.pricing import BEGINNING, money_text
from fleet.models import Allocation, Pool, Route
from tenants.access import billing_scope, require_rates_reader, roles_for, visible_tenants
from tenants.audit import REASON_MAX
from tenants.kept_reads import key_of
from tenants.models import Tenant

from . import budgets as budget_service
from . import services
from .budgets import status_for, this_month
from .domain import final_label, month_start, parse_month, rate_reprices
from .exports import statement_document, statement_response
from .figures import (
    apply_to_overview,
    month_figures,
    tenant_month,
)
from .focus import FOCUS_COLUMNS, focus_adjustment_row, focus_row
from .forms import AdjustmentForm, OverviewFilters
from .models import Adjustment, RateCard
from .renderers import budget_rows
from .selectors import (
    adjustment_charges,
    allocation_month_hours,
    budget_view,
    charge_days,
    hour_rows,
    hour_sums,
    last_months,
    month_chart,
    overview,
    overview_report,
)
from .statement_view import statement_view
from .stranded_board import standing_findings

# The exports' order, the same as the page's SQL (billing.selectors.ORDERINGS): ties by name.
SORTS = {"name": lambda r: (r.name.lower(), r.tenant_id),
         "amount": lambda r: (-r.amount, r.name.lower()),
         "allocated": lambda r: (-r.allocated_h, r.name.lower()),
         "used": lambda r: (-r.used_h, r.name.lower()),
         "utilisation": lambda r: (r.utilisation is None, r.utilisation or 0, r.name.lower())}


def _billing_reader(user):
    """Finance and admins see every tenant; leads and members their own (tenants.access)."""
    return billing_scope(user)


def _month(value: str) -> dt.date:
    """A month in a URL (billing.domain.parse_month), else 404."""
    month = parse_month(value)
    if month is None:
        raise Http404("No such month")
    return month


@login_required
def finance_overview(request):
    tenant_ids = _billing_reader(request.user)
    data = request.GET.copy()  # unset or empty filters show their defaults in the form
    for name, value in OverviewFilters.DEFAULTS.items():
        if not data.get(name):
            data[name] = str(value)
    filters = OverviewFilters(data)
    f = filters.values()
    months = last_months(f["months"], timezone.localdate())
    if request.GET.get("format") in ("csv", "focus"):
        rows, totals = overview(tenant_ids, months, route=f["route"], q=f["q"])
        apply_to_overview(rows, totals, month_figures(
            tenant_ids=[r.tenant_id for r in rows], months=months, route=f["route"]))
        rows.sort(key=SORTS[f["sort"]])
        if request.GET.get("format") == "csv":
            return _csv(rows, months)
        return _focus(tenant_ids, months, f["route"], {r.slug for r in rows} if f["q"] else None)
    # The numbers shown are the one number of billing.figures (statement = page = exports).
    page, report = overview_report(
        key_of(tenant_ids), tuple(months), f["route"], f["q"], f["sort"], request.GET.get("page"))
    budget = budget_view(tenant_ids, f["q"], report.single, f["route"])
    # htmx swaps the whole report (cards, chart, table, export links): filters apply to all.
    template = "billing/overview.html" + ("#report" if request.htmx else "")
    return render(request, template, {
        # The form shows what is in force: a value that was ignored shows its default.
        "filter_fields": filters.shown(), "query": filters.query(),
        "filter_errors": [(str(filters.fields[n].label or n.capitalize()) if n in filters.fields
                           else n, " ".join(e)) for n, e in filters.errors.items()],
        "report": report, "page": page, "sort": f["sort"], "route": f["route"],
        "q": f["q"], "n_months": len(months), "grand": report.grand, "budget": budget,
        "this_month": this_month(report.filtered, timezone.now())
        if roles_for(request.user).sees_all_tenants and not f["route"] else None,
        "route_label": dict(Route.choices).get(f["route"], ""),
        "chart": month_chart(report.totals, budget=budget),
    })


def _csv(rows, months) -> HttpResponse:
    response = HttpResponse(content_type="text/csv")
    response["Content-Disposition"] = 'attachment; filename="device-hours.csv"'
    out = csv.writer(response)
    out.writerow(["tenant", "month", "allocated_device_hours", "used_device_hours",
                  "idle_device_hours", "amount", "currency"])
    for r in rows:
        for m in months:
            cell = r.months.get(m)
            if cell:
                idle = cell["allocated_h"] - cell["used_h"]  # exact: both to 4 places
                out.writerow([r.slug, f"{m:%Y-%m}", f"{cell['allocated_h']:.4f}",
                              f"{cell['used_h']:.4f}", f"{idle:.4f}", f"{cell['amount']:.2f}",
                              settings.PORTAL_CURRENCY])
    return response


def _focus(tenant_ids, months, route: str, slugs) -> HttpResponse:
    """The same view's charges in the FinOps FOCUS format: one row per allocation and
    charge period (a day at one price)."""
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="focus-charges.csv"'
    out = csv.DictWriter(response, fieldnames=[name for name, _ in FOCUS_COLUMNS])
    out.writeheader()
    for charge in charge_days(tenant_ids, months, route=route, tenant_slugs=slugs):
        out.writerow(focus_row(charge, currency=settings.PORTAL_CURRENCY,
                               provider=settings.PORTAL_PROVIDER_NAME))
    if not route:  # an adjustment is the whole tenant-month's, as in billing.figures
        for adjustment in adjustment_charges(tenant_ids, months, tenant_slugs=slugs):
            out.writerow(focus_adjustment_row(adjustment, currency=settings.PORTAL_CURRENCY,
                                              provider=settings.PORTAL_PROVIDER_NAME))
    return response


def _tenant_for(user, slug: str) -> Tenant:
    return get_object_or_404(visible_tenants(user), slug=slug)


@login_required
def statement(request, slug: str, month: str):
    return _statement_page(request, slug, month)


def _statement_page(request, slug: str, month: str, *, typed: dict | None = None,
                    status: int = 200, adjust_form: AdjustmentForm | None = None):
    """The statement; `typed` keeps what finance typed into a form that was refused (the
    adjustment form keeps its own)."""
    _billing_reader(request.user)
    tenant = _tenant_for(request.user, slug)
    m = _month(month)
    view = statement_view(tenant.pk, m)
    stmt, lines, figures = view.statement, view.lines, view.figures
    total = figures.usage_amount
    adjustments = view.adjustments
    if request.GET.get("format") in ("csv", "pdf"):
        return statement_response(statement_document(tenant, m), request.GET["format"])
    roles = roles_for(request.user)
    can_adjust = bool((roles.finance or roles.platform_admin) and stmt and stmt.closed)

    return render(request, "billing/statement.html", {
        "budget": status_for(tenant, timezone.now(), m) if m <= month_start(timezone.now())
        else None,
        "tenant": tenant, "month": m, "statement": stmt, "lines": lines, "total": total,
        "adjustments": adjustments,
        "where_it_ran": view.where_it_ran,
        # A line's idle hours lead to what the portal proposes about them.
        "findings": standing_findings(allocation_ids=[line.allocation_id for line in lines]),
        "final": figures.final, "final_label": final_label(figures.closed),
        "can_close": (roles.finance or roles.platform_admin) and not (stmt and stmt.closed)
        and m < month_start(timezone.now()),
        "can_adjust": can_adjust,
        "adjust_form": adjust_form or AdjustmentForm(final_before=figures.final),
        # Each adjustment, and what withdrawing it would leave (finance only).
        "adjustment_rows": [{"a": a, "withdrawal": getattr(a, "withdrawal", None),
                             "withdrawable": can_adjust and not a.withdraws_id
                             and getattr(a, "withdrawal", None) is None,
                             "final_if_withdrawn": figures.final - a.amount}
                            for a in adjustments],
        "can_reopen": (roles.finance or roles.platform_admin) and stmt and stmt.closed
        and not adjustments,
        "open_before": view.open_before
        if (roles.finance or roles.platform_admin) and not (stmt and stmt.closed) else [],
        "typed": typed or {},
        "pending": sum(getattr(line, "pending_hours", 0) for line in lines),
    }, status=status)


@login_required
@require_POST
def statement_close(request, slug: str, month: str):
    services.require_billing_role(request.user)  # the role first: 403 before anything else
    tenant = _tenant_for(request.user, slug)
    try:
        services.statement_close(tenant=tenant, month=_month(month), by=request.user)
        messages.success(request, f"{_month(month):%B %Y} is closed for {tenant.name}.")
    except services.BillingError as exc:
        messages.error(request, exc.message)
    return redirect("billing:statement", slug=slug, month=month)


@login_required
@require_POST
def statement_adjust(request, slug: str, month: str):
    services.require_billing_role(request.user)  # the role first: 403 before anything else
    tenant = _tenant_for(request.user, slug)
    m = _month(month)
    stmt, _ = services.statement_for(tenant, m)
    form = AdjustmentForm(request.POST, final_before=tenant_month(tenant.pk, m).final)
    if stmt is None or not stmt.closed:
        messages.error(request, "Adjust only a closed month; an open one is recomputed from "
                                "usage.")
    elif form.is_valid():
        try:  # the service asks the same rule again, under the statement's lock
            adj = services.statement_adjust(
                statement=stmt, by=request.user, amount_value=form.cleaned_data["amount"],
                reason=form.cleaned_data["reason"], confirm=form.cleaned_data["confirm"])
        except services.BillingError as exc:
            for name, message in exc.fields.items():
                form.add_error(name if name in form.fields else None, message)
            if not exc.fields:
                form.add_error(None, exc.message)
        else:
            messages.success(request, f"Adjustment #{adj.pk} of {money_text(adj.amount)} "
                                      "recorded: the final is now "
                                      f"{money_text(tenant_month(tenant.pk, m).final)}.")
            return redirect("billing:statement", slug=slug, month=month)
    # Shown with what was typed, on its fields, so a corrected amount keeps the reason.
    return _statement_page(request, slug, month, status=400, adjust_form=form)


@login_required
@require_POST
def adjustment_withdraw(request, slug: str, month: str, adjustment_id: int):
    services.require_billing_role(request.user)  # the role first: 403 before anything else
    tenant = _tenant_for(request.user, slug)
    adjustment = get_object_or_404(Adjustment, pk=adjustment_id, statement__tenant=tenant,
                                   statement__month=_month(month))
    reason = request.POST.get("reason", "")
    try:
        withdrawal = services.adjustment_withdraw(adjustment=adjustment, by=request.user,
                                                  reason=reason)
    except services.BillingError as exc:
        messages.error(request, exc.message)
        return _statement_page(request, slug, month, status=400, typed={
            "withdraw_reason": reason[:REASON_MAX], "withdraw_id": adjustment.pk})
    messages.success(request, f"Adjustment #{adjustment.pk} withdrawn (#{withdrawal.pk}, "
                              f"{money_text(withdrawal.amount)}): the final is now "
                              f"{money_text(tenant_month(tenant.pk, _month(month)).final)}.")
    return redirect("billing:statement", slug=slug, month=month)


@login_required
@require_POST
def statement_reopen(request, slug: str, month: str):
    services.require_billing_role(request.user)  # the role first: 403 before anything else
    tenant = _tenant_for(request.user, slug)
    stmt, _ = services.statement_for(tenant, _month(month))
    reason = request.POST.get("reason", "")
    try:
        if stmt is None:
            raise services.BillingError(f"{_month(month):%B %Y} is open already.")
        services.statement_reopen(statement=stmt, by=request.user, reason=reason)
        messages.success(request, f"{_month(month):%B %Y} is open again for {tenant.name}.")
    except services.BillingError as exc:
        messages.error(request, exc.message)
        return _statement_page(request, slug, month, status=400,
                               typed={"reopen_reason": reason[:REASON_MAX]})
    return redirect("billing:statement", slug=slug, month=month)


@login_required
def allocation_hours(request, slug: str, month: str, allocation_id: int):
    """Drill-down: one allocation's hours in a month."""
    _billing_reader(request.user)
    tenant = _tenant_for(request.user, slug)
    alloc = get_object_or_404(Allocation.objects.select_related("pool"), pk=allocation_id,
                              tenant=tenant)
    hours = allocation_month_hours(alloc, _month(month))
    page = Paginator(hours, 7 * 24).get_page(request.GET.get("page"))
    figures = tenant_month(tenant.pk, _month(month))
    return render(request, "billing/hours.html", {
        "tenant": tenant, "month": _month(month), "alloc": alloc, "hours": hour_rows(page),
        "page": page, "total": hour_sums(hours),
        "closed": figures.closed, "currency": settings.PORTAL_CURRENCY})


@login_required
def budgets(request):
    """Monthly budgets: finance and admins set them; spend and run-rate forecast beside."""
    services.require_billing_role(request.user)
    errors: dict[str, str] = {}
    confirm: dict[str, str] = {}
    if request.method == "POST":
        tenant = get_object_or_404(Tenant, slug=request.POST.get("tenant", ""))
        try:
            budget = budget_service.budget_set(
                tenant=tenant, amount_value=request.POST.get("amount", ""), by=request.user,
                confirm_removal=request.POST.get("confirm_removal") == "yes")
            messages.success(request, f"Budget for {tenant.name} set to "
                             f"{money_text(budget.monthly_amount)} a month." if budget else
                             f"{tenant.name} has no monthly budget now.")
            page_no = request.POST.get("page", "")
            return redirect(reverse("billing:budgets") + (
                f"?page={page_no}" if page_no.isascii() and page_no.isdigit() else ""))
        except budget_service.RemovalUnconfirmed as exc:
            confirm[tenant.slug] = exc.message
        except services.BillingError as exc:
            errors[tenant.slug] = exc.message

    page = Paginator(budget_service.tenants_by_name(), 50).get_page(
        request.GET.get("page") or request.POST.get("page"))
    rows = budget_service.budgets_overview(timezone.now(), page.object_list)
    return render(request, "billing/budgets.html", {
        "rows": rows, "page": page, "budget_rows": budget_rows(
            rows, csrf_token=get_token(request), page_number=page.number,
            overview_url=reverse("billing:overview"), budgets_url=reverse("billing:budgets"),
            currency=settings.PORTAL_CURRENCY, errors=errors, confirm=confirm,
            posted=request.POST if errors else {})}, status=400 if errors else 200)


@login_required
def rates(request):
    """Rate cards: admins add them; finance reads them."""
    roles = require_rates_reader(request.user)
    errors, confirm = {}, ""
    if request.method == "POST":
        if not roles.platform_admin:
            raise PermissionDenied("Only platform admins set rates.")
        pool = Pool.objects.filter(slug=request.POST.get("pool", "")).first()
        rate = request.POST.get("rate", "").strip() or None  # checked by the service
        try:
            starts = dt.datetime.fromisoformat(request.POST.get("effective_from", ""))
            starts = starts.replace(tzinfo=dt.UTC) if starts.tzinfo is None else starts
        except ValueError:
            starts = None
        if pool is None:
            errors["pool"] = "Choose a pool."
        if rate is None:
            errors["rate"] = "The rate must be a number, e.g. 2.45."
        if starts is None:
            errors["effective_from"] = "Give the moment it starts, e.g. 2027-01-01T00:00."
        if not errors:
            try:
                services.ratecard_create(
                    pool=pool, rate=rate, effective_from=starts, by=request.user,
                    reprice_confirmed=request.POST.get("reprice_confirmed") == "yes")
                messages.success(request, f"New rate for {pool.name} recorded."
                                 + rate_reprices(starts, timezone.now()))
                return redirect("billing:rates")
            except services.RepriceUnconfirmed as exc:
                confirm = exc.message
            except services.BillingError as exc:
                errors["form"] = exc.message
    cards = list(RateCard.objects.select_related("pool").order_by("pool__name",
                                                                  "-effective_from"))
    for card in cards:  # a pool's first card holds from the start, not from 1970
        card.from_the_start = card.effective_from <= BEGINNING
    return render(request, "billing/rates.html", {
        "cards": cards,
        "pools": Pool.objects.all(), "errors": errors, "data": request.POST,
        "confirm": confirm, "can_edit": roles.platform_admin})
