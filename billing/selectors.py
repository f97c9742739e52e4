"""Reads for finance pages: few queries whatever the number of tenants and hours."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from decimal import Decimal

from django.db.models import Q, Sum

from .domain import SECONDS_PER_HOUR, month_start, utilisation
from .models import UsageHour, UsageMonth


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


def overview(tenant_ids, months: list[dt.date], *, route: str = "", q: str = ""
             ) -> tuple[list[TenantRow], list[dict]]:
    """Tenants × months, and per-month totals for the cards and the chart, of the tenants
    the filters leave (`q`: part of a name or slug). One aggregate query."""
    qs = UsageMonth.objects.filter(month__in=months)
    if tenant_ids is not None:
        qs = qs.filter(tenant_id__in=tenant_ids)
    if route:
        qs = qs.filter(allocation__route=route)
    q = q.replace("\x00", "")  # PostgreSQL text holds no NUL: such a filter matches nothing
    if q:
        qs = qs.filter(Q(tenant__name__icontains=q) | Q(tenant__slug__icontains=q))
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



def charge_days(tenant_ids, months: list[dt.date], *, route: str = "",
                tenant_slugs: set[str] | None = None):
    """FOCUS charge periods: per allocation, day and rate, the hours' sums (one query)."""
    from django.db.models.functions import TruncDay

    from fleet.domain import Route
    from fleet.models import Allocation

    from .domain import POLICIES, month_bounds, month_start
    from .focus import ChargeDay

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
        pk__in={d["allocation_id"] for d in days}).select_related("tenant", "pool")}
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
            amount=d["amount"] or Decimal(0)))
    return out
