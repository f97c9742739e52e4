"""Reads of stranded findings: who sees which (the tenant's own people theirs, admins and
finance every one), the fleet board (stranded device-hours per pool and day, what was given
back and by whom) and the figures /metrics exports. `day_hours` is pure."""

from __future__ import annotations

import datetime as dt
import pickle
from collections import defaultdict
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from decimal import Decimal

from django.db.models import Q, QuerySet

from fleet.domain import devices_text
from fleet.models import Allocation, Pool
from tenants.access import billing_scope
from tenants.kept_reads import kept_across_requests, key_of
from tenants.models import Tenant

from .models import StrandedFinding

F = StrandedFinding
DAY = dt.timedelta(days=1)
BOARD_DAYS = 90


def visible_findings(user) -> QuerySet[StrandedFinding]:
    """Every finding for finance and admins, a tenant's own for its people (PermissionDenied
    for anyone else, as billing's pages)."""
    scope = billing_scope(user)
    rows = F.objects.select_related("allocation", "tenant", "pool", "decided_by")
    return rows if scope is None else rows.filter(tenant_id__in=scope)


def day_hours(intervals: Iterable[tuple[dt.datetime, dt.datetime, Decimal]],
              first_day: dt.date, last_day: dt.date) -> dict[dt.date, Decimal]:
    """Device-hours of (start, end, devices) intervals falling on each UTC day in
    [first_day, last_day]; every day present, zero where nothing was stranded."""
    out = {first_day + dt.timedelta(days=i): Decimal(0)
           for i in range((last_day - first_day).days + 1)}
    for start, end, devices in intervals:
        day = max(start.date(), first_day)
        while day <= min(end.date(), last_day):
            lo = max(start, dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC))
            hi = min(end, dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC) + DAY)
            if hi > lo:
                out[day] += Decimal(devices) * Decimal((hi - lo).total_seconds()) / 3600
            day += DAY
    return out


def _interval(row: StrandedFinding, now: dt.datetime) -> tuple[dt.datetime, dt.datetime,
                                                                 Decimal]:
    return row.stranded_since, min(row.closed_at or now, now), row.stranded_devices


@dataclass(frozen=True)
class StandingFindings:
    """A tenant's (or an allocation's) open findings at a glance, for the pages people
    already read: how many, the devices they hold unused, what that costs a day."""

    count: int
    devices: Decimal
    cost_per_day: Decimal
    only: StrandedFinding | None  # the finding itself when there is one (a direct link)


def standing_findings(*, tenant_ids: Iterable[int] | None = None,
                      allocation_ids: Iterable[int] | None = None
                      ) -> dict[int, StandingFindings]:
    """Open findings summed per tenant (or per allocation, given `allocation_ids`), in one
    query; keys with none are absent. Kept across reading requests until a finding or an
    allocation is written (tenants.kept_reads)."""
    return _kept_standing(key_of(tenant_ids), key_of(allocation_ids))


@kept_across_requests(F, Allocation, freeze=pickle.dumps, thaw=pickle.loads)
def _kept_standing(tenant_ids: tuple[int, ...] | None, allocation_ids: tuple[int, ...] | None
                   ) -> dict[int, StandingFindings]:
    rows = F.objects.filter(status=F.Status.OPEN).select_related("allocation")
    by_allocation = allocation_ids is not None
    if by_allocation:
        rows = rows.filter(allocation_id__in=list(allocation_ids))
    elif tenant_ids is not None:
        rows = rows.filter(tenant_id__in=list(tenant_ids))
    grouped: dict[int, list[StrandedFinding]] = defaultdict(list)
    for r in rows.order_by("-cost_per_day", "pk"):
        grouped[r.allocation_id if by_allocation else r.tenant_id].append(r)
    return {key: StandingFindings(len(found), sum((f.stranded_devices for f in found),
                                                  Decimal(0)),
                                  sum((f.cost_per_day for f in found), Decimal(0)),
                                  found[0] if len(found) == 1 else None)
            for key, found in grouped.items()}


def review_notes(tenant_ids: Collection[int]) -> dict[int, str]:
    """For the review queue: each tenant with open findings, in a few words."""
    return {t: f"holds {devices_text(f.devices)} unused device(s)"
            for t, f in standing_findings(tenant_ids=tenant_ids).items()}


def standing_in(tenant_ids: Iterable[int] | None) -> StandingFindings | None:
    """Every open finding of these tenants (None: of every tenant) at a glance."""
    parts = list(standing_findings(tenant_ids=tenant_ids).values())
    if not parts:
        return None
    return StandingFindings(sum(p.count for p in parts),
                            sum((p.devices for p in parts), Decimal(0)),
                            sum((p.cost_per_day for p in parts), Decimal(0)),
                            parts[0].only if len(parts) == 1 else None)


@dataclass(frozen=True)
class PoolBoard:
    pool: str
    days: list[tuple[dt.date, Decimal]]  # stranded device-hours per day, oldest first
    stranded_h: Decimal  # over the board's days
    open_findings: int
    open_devices: Decimal
    open_cost_per_day: Decimal
    given_back_devices: Decimal
    given_back: list[StrandedFinding]  # accepted findings that gave devices back

    @property
    def chart(self) -> dict:
        """The trend chart's series (static/js/charts.js `stranded`): stranded device-hours
        and devices given back, per day."""
        back: dict[dt.date, Decimal] = defaultdict(Decimal)
        for f in self.given_back:
            if f.closed_at:
                back[f.closed_at.date()] += f.given_back_devices
        return {"labels": [f"{d:%m-%d}" for d, _ in self.days],
                "stranded_h": [float(h) for _, h in self.days],
                "given_back": [float(back.get(d, 0)) for d, _ in self.days]}


def fleet_board(now: dt.datetime, days: int = BOARD_DAYS) -> list[PoolBoard]:
    """Per pool: stranded device-hours per day over the last `days` days (a finding counts
    from the start of the window that showed it to its close, or now), what is open now,
    and what was given back, by whom."""
    last = now.date()
    first = last - dt.timedelta(days=days - 1)
    since = dt.datetime.combine(first, dt.time(), tzinfo=dt.UTC)
    rows = list(F.objects.filter(Q(closed_at__isnull=True) | Q(closed_at__gte=since))
                .select_related("pool", "decided_by", "allocation", "tenant")
                .order_by("pool__slug", "-found_at"))
    by_pool: dict[str, list[StrandedFinding]] = defaultdict(list)
    for r in rows:
        by_pool[r.pool.slug].append(r)
    out = []
    for pool, found in sorted(by_pool.items()):
        per_day = day_hours((_interval(r, now) for r in found), first, last)
        still = [r for r in found if r.is_open]
        back = [r for r in found if r.given_back_devices > 0]
        out.append(PoolBoard(
            pool, sorted(per_day.items()), sum(per_day.values(), Decimal(0)), len(still),
            sum((r.stranded_devices for r in still), Decimal(0)),
            sum((r.cost_per_day for r in still), Decimal(0)),
            sum((r.given_back_devices for r in back), Decimal(0)), back))
    return out


def open_stranded_device_hours(now: dt.datetime) -> list[dict]:
    """Per tenant, pool and kind: the open findings' stranded devices, their device-hours
    so far (since the window that showed them) and their cost per day, for /metrics."""
    sums: dict[tuple[str, str, str], list[Decimal]] = {}
    for slug, pool, kind, since, devices, cost in _open_findings():
        hours = Decimal(devices) * Decimal(max(0.0, (now - since).total_seconds())) / 3600
        acc = sums.setdefault((slug, pool, kind), [Decimal(0)] * 3)
        acc[0] += devices
        acc[1] += hours
        acc[2] += cost
    return [{"tenant": t, "pool": p, "kind": k, "devices": v[0],
             "device_hours": v[1].quantize(Decimal("0.0001")), "cost_per_day": v[2]}
            for (t, p, k), v in sorted(sums.items())]


@kept_across_requests(F, Tenant, Pool)
def _open_findings() -> tuple[tuple, ...]:
    """The open findings as /metrics sums them (tenant, pool, kind, stranded since, devices,
    cost per day), kept until a finding, tenant or pool is written: their device-hours are
    reckoned from them at each scrape."""
    return tuple(F.objects.filter(status=F.Status.OPEN).values_list(
        "tenant__slug", "pool__slug", "kind", "stranded_since", "stranded_devices",
        "cost_per_day"))


@kept_across_requests(F, Tenant, Pool, freeze=pickle.dumps, thaw=pickle.loads)
def given_back_devices() -> tuple[dict, ...]:
    """Per tenant and pool: the devices accepted findings gave back (released or shrunk),
    ever, for /metrics; kept until a finding, tenant or pool is written."""
    sums: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    for slug, pool, devices in F.objects.filter(given_back_devices__gt=0).values_list(
            "tenant__slug", "pool__slug", "given_back_devices"):
        sums[(slug, pool)] += devices
    return tuple({"tenant": t, "pool": p, "devices": d} for (t, p), d in sorted(sums.items()))
