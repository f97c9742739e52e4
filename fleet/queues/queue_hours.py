"""Each followed ClusterQueue's state and its use over time: what its admitted Workloads
hold (the source of truth; Kueue's status lags), the state row stored per queue, and the
device-seconds held and borrowed integrated into hourly totals (billing's borrowed hours)."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import replace
from decimal import Decimal

from django.conf import settings

from tenants.bulk import update_rows

from ..models import Allocation, ClusterQueueState, QueueUsageHour
from .truth import HOLDING, PENDING, QueueFacts, WorkloadFacts


def held_by_admissions(queues: dict[str, QueueFacts], facts: list[WorkloadFacts], *,
                       followed: set[str]) -> dict[str, QueueFacts]:
    """Use and borrowing of the followed queues, summed from their admitted Workloads.

    Kueue writes a ClusterQueue's status some time after the admissions and evictions that
    change it (seen: a queue still reporting 6 devices in use, 4 borrowed, after its only
    workload had been preempted). The Workloads' own admissions are the source of truth."""
    held: dict[str, Decimal] = defaultdict(Decimal)
    waiting: dict[str, int] = defaultdict(int)
    running: dict[str, int] = defaultdict(int)
    for f in facts:
        if f.state in HOLDING:  # a stopping workload holds its quota until its pods stop
            held[f.cluster_queue] += f.devices
            running[f.cluster_queue] += 1
        elif f.state == PENDING:
            waiting[f.cluster_queue] += 1
    out = {}
    for name, q in queues.items():
        if name in followed:
            usage = held.get(name, Decimal(0))
            q = replace(q, usage=usage, borrowed=max(Decimal(0), usage - q.nominal),
                        pending=waiting.get(name, 0), admitted=running.get(name, 0))
        out[name] = q
    return out


def _split_hours(start: dt.datetime, end: dt.datetime) -> list[tuple[dt.datetime, float]]:
    out = []
    t = start
    while t < end:
        hour = t.replace(minute=0, second=0, microsecond=0)
        nxt = min(end, hour + dt.timedelta(hours=1))
        out.append((hour, (nxt - t).total_seconds()))
        t = nxt
    return out


# A queue whose use did not change is integrated at least this often while followed by
# watch (the piecewise-constant use since its last read is the same either way).
INTEGRATE_AT_LEAST = dt.timedelta(seconds=60)


def integration_due(queues: dict[str, QueueFacts], states: dict[str, ClusterQueueState],
                     now: dt.datetime, *, everything: bool) -> set[str]:
    """The queues whose held devices are integrated into queue-hours now: every one on a
    full list; on a watch burst only those whose use changes, or that were last integrated
    a while ago (a gap over PORTAL_QUEUE_MAX_GAP_SECONDS would not be counted at all) or in
    an earlier hour. Writing 500 queues' hours on every event would cost more than the
    event."""
    if everything:
        return set(queues)
    due = set()
    for name, q in queues.items():
        state = states.get(name)
        if state is None or state.usage != q.usage or state.borrowed != q.borrowed or \
                now - state.observed_at >= INTEGRATE_AT_LEAST or \
                state.observed_at.replace(minute=0, second=0, microsecond=0) != \
                now.replace(minute=0, second=0, microsecond=0):
            due.add(name)
    return due


def integrate_usage(states: dict[str, ClusterQueueState], now: dt.datetime) -> None:
    """Add what each queue held since its last read to its hourly totals. A gap longer than
    PORTAL_QUEUE_MAX_GAP_SECONDS (the portal was down) is not guessed at."""
    max_gap = dt.timedelta(seconds=settings.PORTAL_QUEUE_MAX_GAP_SECONDS)
    adds: dict[tuple[int, dt.datetime], list[Decimal]] = defaultdict(
        lambda: [Decimal(0), Decimal(0)])
    for state in states.values():
        if not state.allocation_id or state.observed_at >= now or \
                now - state.observed_at > max_gap or state.usage <= 0:
            continue
        for hour, seconds in _split_hours(state.observed_at, now):
            acc = adds[(state.allocation_id, hour)]
            acc[0] += state.usage * Decimal(str(seconds))
            acc[1] += state.borrowed * Decimal(str(seconds))
    if not adds:
        return
    existing = {(u.allocation_id, u.hour): u for u in QueueUsageHour.objects.filter(
        allocation_id__any={k[0] for k in adds}, hour__any={k[1] for k in adds})}
    create, update = [], []
    for (alloc_id, hour), (used, borrowed) in adds.items():
        row = existing.get((alloc_id, hour))
        if row is None:
            create.append(QueueUsageHour(allocation_id=alloc_id, hour=hour, used_s=used,
                                         borrowed_s=borrowed))
        else:
            row.used_s += used
            row.borrowed_s += borrowed
            update.append(row)
    QueueUsageHour.objects.bulk_create(create)
    update_rows(QueueUsageHour, update, ["used_s", "borrowed_s"])


def store_queues(queues: dict[str, QueueFacts], states: dict[str, ClusterQueueState],
                  allocations: dict[str, Allocation], now: dt.datetime, *,
                  due: set[str]) -> None:
    create, update = [], []
    fields = ["allocation_id", "cohort", "resource", "nominal", "borrowing_limit", "usage",
              "borrowed", "pending", "admitted", "active", "inactive_reason"]
    for name, q in queues.items():
        alloc = allocations.get(name)  # an allocation's ClusterQueue is named as its namespace
        values = {"allocation_id": alloc.pk if alloc else None, "cohort": q.cohort,
                  "resource": q.resource, "nominal": q.nominal,
                  "borrowing_limit": q.borrowing_limit, "usage": q.usage,
                  "borrowed": q.borrowed, "pending": q.pending, "admitted": q.admitted,
                  "active": q.active, "inactive_reason": q.inactive_reason[:120]}
        state = states.get(name)
        if state is None:
            create.append(ClusterQueueState(name=name, observed_at=now, **values))
        elif any(getattr(state, k) != v for k, v in values.items()):
            for k, v in values.items():
                setattr(state, k, v)
            update.append(state)
    if allocations:
        # A queue that is no longer followed keeps no allocation link (it may be reused).
        ClusterQueueState.objects.exclude(name__any=list(queues)).exclude(
            allocation=None).update(allocation=None)
    ClusterQueueState.objects.bulk_create(create)
    update_rows(ClusterQueueState, update, fields)
    # The queues integrated now count from now on. Only forward: a reader that began before
    # another's store must not count again the time that one already integrated.
    ClusterQueueState.objects.filter(name__any=sorted(due), observed_at__lt=now).update(
        observed_at=now)
