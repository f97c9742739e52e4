"""Reads for finance pages: few queries whatever the number of tenants and hours."""

from __future__ import annotations

import datetime as dt
import pickle
from collections import defaultdict
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import NamedTuple

from django.conf import settings
from django.core.paginator import Page
from django.db import connection
from django.db.models import Count, F, OuterRef, Q, Subquery, Sum
from django.db.models.functions import TruncDay
from django.urls import reverse
from django.utils import timezone
from django.utils.safestring import SafeString

from fleet.domain import Route
from fleet.inventory.pricing import money, money_text
from fleet.models import Allocation, Cluster
from tenants.kept_reads import kept_across_requests
from tenants.models import Tenant
from tenants.paging import known_page

from . import budgets
from .cluster_usage import CENT
from .clusters import split_exactly
from .domain import POLICIES, SECONDS_PER_HOUR, hours_text, month_bounds, month_start, utilisation
from .figures import FIGURE_MODELS, apply_sums_to_overview, grand_total, month_totals
from .figures import hours as to_hours
from .focus import AdjustmentCharge, ChargeDay, ClusterDay, by_cluster, cents_by_day
from .models import (
    Adjustment,
    ClusterUsageHour,
    StatementLine,
    UsageHour,
    UsageMonth,
)
from .renderers import month_heads, tenant_rows, total_row


@dataclass
class TenantRow:
    tenant_id: int
    slug: str
    name: str
    months: dict[dt.date, dict] = field(default_factory=dict)
    allocated_h: Decimal = Decimal(0)
    used_h: Decimal = Decimal(0)
    amount: Decimal = Decimal(0)
    pending: int = 0

    @property
    def idle_h(self) -> Decimal:
        return max(Decimal(0), self.allocated_h - self.used_h)

    @property
    def utilisation(self) -> Decimal | None:
        return utilisation(self.used_h, self.allocated_h)


def last_months(n: int, today: dt.date) -> list[dt.date]:
    out, m = [], month_start(today)
    for _ in range(n):
        out.append(m)
        m = dt.date(m.year - (m.month == 1), (m.month - 2) % 12 + 1, 1)
    return list(reversed(out))


def _filtered_months(tenant_ids, months: list[dt.date], *, route: str = "", q: str = ""):
    qs = UsageMonth.objects.filter(month__in=months)
    if tenant_ids is not None:
        qs = qs.filter(tenant_id__in=tenant_ids)
    if route:
        qs = qs.filter(allocation__route=route)
    q = q.replace("\x00", "")  # PostgreSQL text holds no NUL: such a filter matches nothing
    if q:
        qs = qs.filter(Q(tenant__name__icontains=q) | Q(tenant__slug__icontains=q))
    return qs


def filtered_tenant_ids(tenant_ids, months: list[dt.date], *, route: str = "", q: str = ""
                        ) -> list[int]:
    """The tenants the overview's filters leave (for billing.figures)."""
    return list(_filtered_months(tenant_ids, months, route=route, q=q)
                .values_list("tenant_id", flat=True).distinct())


def overview(tenant_ids, months: list[dt.date], *, route: str = "", q: str = ""
             ) -> tuple[list[TenantRow], list[dict]]:
    """Tenants × months, and per-month totals for the cards and the chart, of the tenants
    the filters leave (`q`: part of a name or slug). One aggregate query. (The exports; the
    page reads one page of tenants: overview_page.)"""
    qs = _filtered_months(tenant_ids, months, route=route, q=q)
    data = (qs.values("tenant_id", "tenant__slug", "tenant__name", "month")
            .annotate(allocated=Sum("allocated_s"), used=Sum("used_s"), amount=Sum("amount"),
                      pending=Sum("pending_hours")))
    rows: dict[int, TenantRow] = {}
    totals = {m: {"month": m, "allocated_h": Decimal(0), "used_h": Decimal(0),
                  "amount": Decimal(0)} for m in months}
    for d in data:
        row = rows.setdefault(d["tenant_id"], TenantRow(d["tenant_id"], d["tenant__slug"],
                                                        d["tenant__name"]))
        alloc_h = Decimal(d["allocated"] or 0) / SECONDS_PER_HOUR
        used_h = Decimal(d["used"] or 0) / SECONDS_PER_HOUR
        amt = Decimal(d["amount"] or 0)
        row.months[d["month"]] = {"allocated_h": alloc_h, "used_h": used_h, "amount": amt}
        row.allocated_h += alloc_h
        row.used_h += used_h
        row.amount += amt
        row.pending += d["pending"] or 0
        t = totals[d["month"]]
        t["allocated_h"] += alloc_h
        t["used_h"] += used_h
        t["amount"] += amt
    return list(rows.values()), [totals[m] for m in months]



# The overview's sorts in SQL, over the per-tenant sums (`s`) joined to the tenant (`t`);
# ties by name, then id, as views.SORTS orders the exports.
ORDERINGS = {
    "amount": "s.amount_sort DESC, LOWER(t.name), t.id",
    "allocated": "s.allocated DESC, LOWER(t.name), t.id",
    "used": "s.used DESC, LOWER(t.name), t.id",
    "name": "LOWER(t.name), t.id",
    "utilisation": ("CASE WHEN s.allocated > 0 THEN s.used * 100.0 / s.allocated END "
                    "ASC NULLS LAST, LOWER(t.name), t.id"),
}


def overview_page(tenant_ids, months: list[dt.date], *, route: str = "", q: str = "",
                  sort: str = "amount", page: str | int | None = 1, per_page: int = 50):
    """One page of the finance overview's tenants, sorted, paged and counted by the database
    in one query: the usage months the filters leave summed per tenant id (nothing else in
    the GROUP BY), the closed months' adjustments summed per tenant beside it (by what the
    tenant is charged; a route filter sorts by usage only), the tenant's name joined after
    grouping, ORDER BY, COUNT(*) OVER (), LIMIT. The numbers shown come from
    billing.figures (apply_to_overview); these sums only order and count the tenants."""
    usage = (_filtered_months(tenant_ids, months, route=route, q=q)
             .values(tid=F("tenant_id"))
             .annotate(allocated=Sum("allocated_s"), used=Sum("used_s"),
                       amount=Sum("amount"), pending=Sum("pending_hours")).order_by())
    usage_sql, usage_params = usage.query.sql_with_params()
    adjusted = "u.amount"
    joins, params = "", list(usage_params)
    if not route:
        adjustments = (Adjustment.objects.filter(statement__month__in=months)
                       .values(tid=F("statement__tenant_id")).annotate(total=Sum("amount"))
                       .order_by())
        adj_sql, adj_params = adjustments.query.sql_with_params()
        joins = f" LEFT JOIN ({adj_sql}) a ON a.tid = u.tid"
        adjusted = "u.amount + COALESCE(a.total, 0)"
        params += list(adj_params)
    try:
        # Past the end means the last page; a number too big for OFFSET means past the end.
        number = min(max(1, int(page or 1)), 1_000_000)
    except (TypeError, ValueError):
        number = 1
    order = ORDERINGS.get(sort, ORDERINGS["amount"])
    sql = (f"SELECT t.id, t.slug, t.name, s.allocated, s.used, s.amount, s.pending, "  # noqa: S608
           f"COUNT(*) OVER () FROM (SELECT u.tid, u.allocated, u.used, u.amount, u.pending, "
           f"{adjusted} AS amount_sort FROM ({usage_sql}) u{joins}) s "
           f"JOIN {Tenant._meta.db_table} t ON t.id = s.tid ORDER BY {order} LIMIT %s OFFSET %s")

    def fetch(n: int) -> list:
        with connection.cursor() as cursor:
            cursor.execute(sql, [*params, per_page, (n - 1) * per_page])
            return cursor.fetchall()

    found = fetch(number)
    if not found and number > 1:  # past the end: the last page, as Paginator.get_page does
        count = len(filtered_tenant_ids(tenant_ids, months, route=route, q=q))
        number = max(1, -(-count // per_page))
        found = fetch(number) if count else []
    count = found[0][7] if found else 0

    def dec(v) -> Decimal:  # SQLite sums decimals as floats
        return v if isinstance(v, Decimal) else Decimal(str(v or 0))

    rows = [TenantRow(r[0], r[1], r[2], allocated_h=dec(r[3]) / SECONDS_PER_HOUR,
                      used_h=dec(r[4]) / SECONDS_PER_HOUR, amount=dec(r[5]),
                      pending=int(r[6] or 0)) for r in found]
    current = known_page(rows, count, number, per_page)
    return current, rows


def allocation_month_hours(allocation, month: dt.date):
    """One allocation's usage hours in a month, in time order (the drill-down pages them)."""
    start, end = month_bounds(month)
    return UsageHour.objects.filter(allocation=allocation, hour__gte=start,
                                    hour__lt=end).order_by("hour")


def hour_rows(hours) -> list[dict]:
    """Usage hours as the drill-down shows them: device-seconds as hours to 4 places
    (billing.figures.hours); used and idle (allocated − used) only once use is measured."""
    return [{"hour": h.hour, "pending": h.pending, "allocated_h": to_hours(h.allocated_s),
             "used_h": None if h.used_s is None else to_hours(h.used_s),
             "idle_h": None if h.used_s is None else to_hours(h.allocated_s) - to_hours(
                 h.used_s),
             "borrowed_h": to_hours(h.borrowed_s), "credit_h": to_hours(h.credit_s),
             "charged_h": to_hours(h.charged_s), "rate": h.rate, "amount": h.amount}
            for h in hours]


def hour_sums(hours) -> dict:
    """The sums of these usage hours (one aggregate), as hours to 4 places and money."""
    sums = hours.order_by().aggregate(allocated=Sum("allocated_s"), used=Sum("used_s"),
                                      borrowed=Sum("borrowed_s"), charged=Sum("charged_s"),
                                      amount=Sum("amount"))
    return {"allocated_h": to_hours(sums["allocated"]), "used_h": to_hours(sums["used"]),
            "borrowed_h": to_hours(sums["borrowed"]), "charged_h": to_hours(sums["charged"]),
            "amount": sums["amount"] or 0}


def charge_days(tenant_ids, months: list[dt.date], *, route: str = "",
                tenant_slugs: set[str] | None = None):
    """FOCUS charge periods: per allocation, day and rate, the hours' sums (one query)."""
    if not months:
        return []
    start, _ = month_bounds(min(months))
    _, end = month_bounds(max(months))
    qs = UsageHour.objects.filter(hour__gte=start, hour__lt=end)
    if tenant_ids is not None:
        qs = qs.filter(tenant_id__in=tenant_ids)
    if route:
        qs = qs.filter(allocation__route=route)
    if tenant_slugs is not None:
        qs = qs.filter(tenant__slug__in=tenant_slugs)
    days = (qs.annotate(day=TruncDay("hour", tzinfo=dt.UTC))
            .values("allocation_id", "day", "rate")
            .annotate(used=Sum("used_s"), charged=Sum("charged_s"), amount=Sum("amount"))
            .order_by("allocation_id", "day", "rate"))
    allocations = {a.pk: a for a in Allocation.objects.filter(
        pk__in={d["allocation_id"] for d in days}).select_related("tenant", "pool__cluster")}
    out = []
    for d in days:
        a = allocations[d["allocation_id"]]
        billing_start, billing_end = month_bounds(month_start(d["day"]))
        out.append(ChargeDay(
            tenant_slug=a.tenant.slug, tenant_name=a.tenant.name,
            cost_centre=a.tenant.cost_centre, allocation_id=a.pk, namespace=a.namespace,
            route=a.route, route_label=Route(a.route).label,
            policy=POLICIES.get(a.route, "allocated hours"), pool_slug=a.pool.slug,
            pool_name=a.pool.name, gpu_model=a.pool.gpu_model, period_start=d["day"],
            period_end=d["day"] + dt.timedelta(days=1), billing_start=billing_start,
            billing_end=billing_end, used_seconds=d["used"] or Decimal(0),
            charged_seconds=d["charged"] or Decimal(0), rate=d["rate"],
            amount=d["amount"] or Decimal(0), cluster_slug=a.pool.cluster.slug,
            cluster_name=a.pool.cluster.name, cluster_region=a.pool.cluster.region))
    parts = _cluster_days(qs, start, end)
    return _in_cents([row for d in out for row in by_cluster(
        d, parts.get((d.allocation_id, d.period_start, d.rate), []))])


def _cluster_days(hours, start: dt.datetime, end: dt.datetime
                  ) -> dict[tuple[int, dt.datetime, Decimal], list[ClusterDay]]:
    """Dispatched allocations' charge periods per cluster (one query): their hours' parts
    summed by day and by the rate of the hour they split."""
    rate = UsageHour.objects.filter(allocation_id=OuterRef("allocation_id"),
                                    hour=OuterRef("hour")).values("rate")[:1]
    rows = (ClusterUsageHour.objects.filter(
        allocation_id__in=hours.values("allocation_id"), hour__gte=start, hour__lt=end)
        .annotate(day=TruncDay("hour", tzinfo=dt.UTC), rate=Subquery(rate))
        .values("allocation_id", "day", "rate", "cluster")
        .annotate(allocated=Sum("allocated_s"), used=Sum("used_s"), amt=Sum("amount"),
                  unmeasured=Count("pk", filter=Q(used_s__isnull=True)))
        .order_by("allocation_id", "day", "rate", "cluster"))
    clusters = {c.slug: c for c in Cluster.objects.all()}
    out: dict[tuple[int, dt.datetime, Decimal], list[ClusterDay]] = defaultdict(list)
    for r in rows:
        c = clusters.get(r["cluster"])  # a retired cluster keeps its slug in the parts
        out[(r["allocation_id"], r["day"], r["rate"])].append(ClusterDay(
            cluster_slug=r["cluster"], cluster_name=c.name if c else r["cluster"],
            cluster_region=c.region if c else "", allocated_seconds=r["allocated"],
            used_seconds=None if r["unmeasured"] else r["used"], amount=r["amt"]))
    return out


def _in_cents(days):
    """Each allocation-month's days in cents, summing to its statement line (the frozen one
    for a closed month)."""
    groups: dict[tuple[int, dt.datetime], list[int]] = defaultdict(list)
    for i, d in enumerate(days):
        groups[(d.allocation_id, d.billing_start)].append(i)
    frozen = {(line["allocation_id"], line["statement__month"]): line["amount"]
              for line in StatementLine.objects.filter(
                  allocation_id__in={k[0] for k in groups},
                  statement__closed_at__isnull=False).values(
                  "allocation_id", "statement__month", "amount")}
    out = list(days)
    for (alloc_id, billing_start), idx in groups.items():
        exact = [days[i].amount for i in idx]
        total = frozen.get((alloc_id, billing_start.date()), money(sum(exact, Decimal(0))))
        # A line that ran in several clusters: first its cents per cluster, as the statement
        # shows them (where_it_ran's split), then each cluster's days.
        per_cluster: dict[str, list[int]] = defaultdict(list)
        for i in idx:
            per_cluster[days[i].cluster_slug].append(i)
        shares = split_exactly(total, {c: sum((days[i].amount for i in rows), Decimal(0))
                                       for c, rows in per_cluster.items()}, places=CENT)
        if len(per_cluster) < 2 or not shares:
            per_cluster, shares = {"": idx}, {"": total}
        for c, rows in per_cluster.items():
            for i, cents in zip(rows, cents_by_day([days[i].amount for i in rows], shares[c]),
                                strict=True):
                out[i] = replace(days[i], billed=cents)
    return out


def adjustment_charges(tenant_ids, months: list[dt.date], *,
                       tenant_slugs: set[str] | None = None):
    """Closed months' adjustments as FOCUS charges (one query)."""
    qs = Adjustment.objects.filter(statement__month__in=months).select_related(
        "statement__tenant", "withdraws").order_by("statement__month", "at", "pk")
    if tenant_ids is not None:
        qs = qs.filter(statement__tenant_id__in=tenant_ids)
    if tenant_slugs is not None:
        qs = qs.filter(statement__tenant__slug__in=tenant_slugs)
    out = []
    for a in qs:
        t = a.statement.tenant
        start, end = month_bounds(a.statement.month)
        out.append(AdjustmentCharge(
            tenant_slug=t.slug, tenant_name=t.name, cost_centre=t.cost_centre,
            adjustment_id=a.pk, billing_start=start, billing_end=end, amount=a.amount,
            reason=a.description, withdraws=a.withdraws_id))
    return out


# ---------------------------------------------------------------------------------------
# The overview page's table, chart and budget, shaped once per view


def tenant_table(rows, months: list[dt.date]) -> list[dict]:
    """The visible page of tenants × months as ready-made text and links: formatting and
    URL reversing done once here, not per cell in the template (12 months × 50 tenants).
    Plain data: each row's `cells` are (statement address, amount text) per month, None
    for a month without figures; billing.renderers.month_cells turns them into markup."""
    currency = settings.PORTAL_CURRENCY
    # One reverse per month; the slug goes into the path (slugs are URL-safe).
    links = {m: reverse("billing:statement", args=["__slug__", f"{m:%Y-%m}"]) for m in months}
    out = []
    for r in rows:
        cells = [None if (cell := r.months.get(m)) is None else (
            links[m].replace("__slug__", r.slug), money_text(cell["amount"], currency))
            for m in months]
        out.append({"name": r.name, "pending": r.pending, "cells": cells,
                    "allocated": hours_text(r.allocated_h), "used": hours_text(r.used_h),
                    "idle": hours_text(r.idle_h), "utilisation": r.utilisation,
                    "amount": money_text(r.amount, currency)})
    return out


def month_chart(totals: list[dict], *, budget=None) -> dict:
    """Chart.js data for the months: hours as bars on the left axis, charges as a line on
    the right (plain numbers; the page's script formats them with the units)."""
    data = {
        "labels": [f"{t['month']:%b %Y}" for t in totals],
        "allocated_h": [round(float(t["allocated_h"]), 1) for t in totals],
        "used_h": [round(float(t["used_h"]), 1) for t in totals],
        "amount": [round(float(t["amount"]), 2) for t in totals],
        "currency": settings.PORTAL_CURRENCY,
    }
    if budget is not None:
        data["budget"] = round(float(budget.amount), 2)
    return data


def budget_view(tenant_ids, q: str, rows, route: str = ""):
    """The monthly budget to show beside the figures: when the page covers one tenant's whole
    spend (a lead's own, or finance filtered down to one), never beside a route's share of it
    or beside a filter that left nothing."""
    if route:
        return None
    ids = {r.tenant_id for r in rows}
    if tenant_ids is not None and len(tenant_ids) == 1 and not q:
        ids = set(tenant_ids)
    if len(ids) != 1:
        return None
    return budgets.status_for(ids.pop(), timezone.now())


class OverviewReport(NamedTuple):
    """The finance overview's figures for one set of filters, as the page shows them: which
    page of how many tenants, the page's rows when the filters leave one tenant (its budget
    shows beside them), the month totals of every tenant the filters leave and their grand
    total, those tenants (None: no filter), and the table's markup. Small on purpose: it is
    thawed on every view (the page's 50 rows of decimals were most of the thaw)."""

    number: int
    count: int
    per_page: int
    single: list
    totals: list[dict]
    grand: dict
    filtered: tuple[int, ...] | None
    rows_html: SafeString
    month_heads: SafeString
    total_row: SafeString


@kept_across_requests(*FIGURE_MODELS, freeze=pickle.dumps, thaw=pickle.loads)
def _overview_report(tenant_ids: tuple[int, ...] | None, months: tuple[dt.date, ...], route: str,
                     q: str, sort: str, page: str | None) -> OverviewReport:
    """Kept across reading requests until a write to what it sums (the markup too: it is
    only the figures, formatted)."""
    months = list(months)
    current, rows = overview_page(tenant_ids, months, route=route, q=q, sort=sort, page=page)
    totals = [{"month": m} for m in months]
    filtered = None if not q and tenant_ids is None else tuple(filtered_tenant_ids(
        tenant_ids, months, route=route, q=q))
    # The rows shown from their own figures; the month totals of every tenant the filters
    # leave summed by the database (billing.figures.month_totals: the same roundings).
    apply_sums_to_overview(rows, totals, months, route=route, month_sums=month_totals(
        tenant_ids=filtered, months=months, route=route))
    grand = grand_total(totals)
    count = current.paginator.count
    return OverviewReport(
        number=current.number, count=count, per_page=current.paginator.per_page,
        single=rows if count == 1 else [], totals=totals, grand=grand, filtered=filtered,
        rows_html=tenant_rows(tenant_table(rows, months)), month_heads=month_heads(months),
        total_row=total_row(grand, totals, settings.PORTAL_CURRENCY) if rows else SafeString(""))


def overview_report(tenant_ids: tuple[int, ...] | None, months: tuple[dt.date, ...], route: str,
                    q: str, sort: str, page: str | None) -> tuple[Page, OverviewReport]:
    """The finance overview's report for the filters, and its page for the pager."""
    report = _overview_report(tenant_ids, months, route, q, sort, page)
    return known_page([], report.count, report.number, report.per_page), report
