"""Stored queue state read back as the pure functions see it, and the start-time estimates
the queue sync records: shared by the writer (queues.sync) and the pages (queues.explain),
so the writer never imports a page builder."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings

from tenants.bulk import update_rows

from ..models import ClusterQueueState, QueueEvent, QueueWorkload
from .estimates import Estimate, estimate_start
from .ledger import StoredWorkload
from .order import VISIBILITY, ahead_of, line_up
from .placement import Placement
from .truth import (
    HOLDING,
    PENDING,
    QueueFacts,
    Stop,
    Waiting,
    WorkloadFacts,
    explain_pending,
)

HISTORY_DAYS = 14


def history_since(now: dt.datetime, days: int = HISTORY_DAYS) -> dt.datetime:
    """The start of a queue page's one window, "the last 14 days": today and the 13 days
    before it, from midnight UTC — the days its history table lists. Every count of the
    page (admissions, seams, the estimates' track record) is over this window."""
    return dt.datetime.combine((now - dt.timedelta(days=days - 1)).date(), dt.time(),
                               tzinfo=dt.UTC)


# A position written before Kueue's visibility API was asked (a new waiting workload, in
# Kueue's order): the same reading replaces it, it is never kept as an answer, and it is
# shown as what it is, computed.
INTERIM = "ordered"


def row_facts(row: QueueWorkload) -> WorkloadFacts:
    """A stored workload as the pure functions see it."""
    stop = Stop(row.stopped_at, row.stop_reason, row.stop_preemption, row.stop_detail) \
        if row.stop_reason else None
    return WorkloadFacts(
        uid=row.uid, namespace=row.namespace, name=row.name, job=row.job,
        local_queue=row.local_queue, cluster_queue=row.cluster_queue, priority=row.priority,
        submitted_at=row.submitted_at, devices=row.devices, state=row.state,
        admitted_at=row.admitted_at, finished_at=row.finished_at, max_seconds=row.max_seconds,
        pending_reason=row.pending_reason, pending_raw=row.pending_detail, stop=stop,
        requeued_at=row.requeued_at, resource_version=row.resource_version,
        ran_on=row.ran_on, nominated=tuple(row.nominated or ()),
        dispatch_state=row.dispatch_state, dispatch_message=row.dispatch_message,
        worker_views=tuple(sorted((row.worker_views or {}).items())))


def stored_workload(row: QueueWorkload) -> StoredWorkload:
    """A ledger row as the ledger's decision sees it."""
    return StoredWorkload(
        pk=row.pk, allocation_id=row.allocation_id, facts=row_facts(row),
        placement=Placement(pods_at=row.pods_at, scheduled_at=row.scheduled_at, node=row.node,
                            claimed_at=row.claimed_at,
                            devices=tuple(d for d in row.devices_allocated.split("\n") if d),
                            running_at=row.running_at),
        position=row.position, position_source=row.position_source)


def recorded_steps(uids: set[str]) -> dict[str, dict[tuple[str, dt.datetime],
                                                    tuple[dt.datetime, float | None]]]:
    """uid → (step, the stamp it was recorded for) → (its time, bound): what a workload's
    next seams are measured from (fleet.queues.timing)."""
    out: dict[str, dict] = defaultdict(dict)
    if not uids:
        return out
    for uid, kind, kube_at, at, bound in QueueEvent.objects.filter(
            workload_uid__any=list(uids), kube_at__isnull=False).values_list(
            "workload_uid", "kind", "kube_at", "at", "at_bound_seconds"):
        out[uid][(kind, kube_at)] = (at, bound)
    return out


def queue_facts_of(state: ClusterQueueState) -> QueueFacts:
    return QueueFacts(name=state.name, cohort=state.cohort, resource=state.resource,
                      nominal=state.nominal, borrowing_limit=state.borrowing_limit,
                      usage=state.usage, borrowed=state.borrowed, pending=state.pending,
                      admitted=state.admitted, active=state.active,
                      inactive_reason=state.inactive_reason)


@dataclass
class PendingLine:
    facts: WorkloadFacts
    position: int | None
    position_source: str
    waited_seconds: float
    waiting: Waiting
    estimate: Estimate


def cohort_room(state: ClusterQueueState, peers: list[ClusterQueueState]
                ) -> tuple[Decimal, Decimal]:
    """What the rest of the cohort could lend `state` now, and how much of its unused quota
    others borrow meanwhile (numbers, never who). `peers`: the other queues of its cohort."""
    if not state.cohort:
        return Decimal(0), Decimal(0)
    return room_in_cohort(state, sum((s.nominal for s in peers), state.nominal),
                          sum((s.usage for s in peers), state.usage))


def room_in_cohort(state: ClusterQueueState, nominal: Decimal, usage: Decimal
                   ) -> tuple[Decimal, Decimal]:
    """cohort_room from the whole cohort's nominal quota and usage (`state` included)."""
    if not state.cohort:
        return Decimal(0), Decimal(0)
    total_free = max(Decimal(0), nominal - usage)
    own_free = max(Decimal(0), state.nominal - state.usage)
    return max(Decimal(0), total_free - own_free), max(Decimal(0), own_free - total_free)


def _history_waits(allocation_ids, since: dt.datetime
                   ) -> dict[int, dict[tuple[str, int], list[float]]]:
    """allocation → (LocalQueue, priority) → waits of its admissions since `since`."""
    out: dict[int, dict[tuple[str, int], list[float]]] = defaultdict(lambda: defaultdict(list))
    for alloc_id, lq, prio, wait in QueueEvent.objects.filter(
            allocation_id__any=allocation_ids, kind=QueueEvent.Kind.ADMITTED, at__gte=since,
            wait_seconds__isnull=False).values_list("allocation_id", "local_queue", "priority",
                                                    "wait_seconds"):
        out[alloc_id][(lq, prio)].append(wait)
    return out


def recent_admissions(allocation_ids, now: dt.datetime) -> dict[int, list[dt.datetime]]:
    """allocation → when its ClusterQueue admitted work within the drain window (any
    priority): the pace its line moves at (fleet.queues.estimates)."""
    since = now - dt.timedelta(seconds=settings.PORTAL_ESTIMATE_DRAIN_WINDOW_SECONDS)
    out: dict[int, list[dt.datetime]] = defaultdict(list)
    for alloc_id, at in QueueEvent.objects.filter(
            allocation_id__any=allocation_ids, kind=QueueEvent.Kind.ADMITTED,
            at__gte=since).values_list("allocation_id", "at"):
        out[alloc_id].append(at)
    return out


def _pending_lines(queue: QueueFacts, rows: list[QueueWorkload], cohort_free: Decimal,
                   lent: Decimal, waits: dict[tuple[str, int], list[float]],
                   now: dt.datetime, admitted: list[dt.datetime] = ()) -> list[PendingLine]:
    facts = [row_facts(r) for r in rows]
    running = [f for f in facts if f.state in HOLDING]  # what holds the quota
    # One order for the position, the rows and "ahead of it" (fleet.queues.order): Kueue's
    # visibility answer as stored, then Kueue's rule for the rest.
    lined = line_up([f for f in facts if f.state == PENDING],
                    {r.uid: r.position for r in rows if r.state == PENDING
                     and r.position is not None and r.position_source == VISIBILITY})
    ahead = ahead_of(lined, lambda f: f.devices <= queue.ceiling)
    lines = []
    for i, p in enumerate(lined):
        f = p.facts
        why = explain_pending(f, queue, own_running=running, ahead=ahead[f.uid],
                              cohort_free=cohort_free, now=now, lent=lent)
        est = estimate_start(f, why, own_running=running,
                             history_waits=waits.get((f.local_queue, f.priority), []), now=now,
                             ahead=i, admitted_recently=admitted,
                             window_seconds=settings.PORTAL_ESTIMATE_DRAIN_WINDOW_SECONDS)
        since = f.requeued_at or f.submitted_at or now
        lines.append(PendingLine(f, p.position, p.source, (now - since).total_seconds(),
                                 why, est))
    return lines


def first_estimates(now: dt.datetime) -> int:
    """Record the first start-time estimate of each new pending workload, so the estimates'
    track record can be shown later (an estimate is only worth what its errors were).
    A handful of queries whatever the number of queues (it runs in every queue sync)."""
    new_uids = set(QueueWorkload.objects.filter(
        state=PENDING, first_estimate_at__isnull=True, first_estimate_basis="")
        .values_list("uid", flat=True))
    if not new_uids:
        return 0
    alloc_ids = set(QueueWorkload.objects.filter(uid__any=new_uids)
                    .values_list("allocation_id", flat=True))
    states = {s.allocation_id: s for s in ClusterQueueState.objects.filter(
        allocation_id__any=alloc_ids)}
    # Each cohort summed once: a queue's peers are the cohort less itself (summing the peers
    # per queue was quadratic in a cohort of hundreds of queues).
    cohorts: dict[str, tuple[Decimal, Decimal]] = {}
    for peer in ClusterQueueState.objects.filter(
            cohort__in={s.cohort for s in states.values() if s.cohort}):
        nominal, usage = cohorts.get(peer.cohort, (Decimal(0), Decimal(0)))
        cohorts[peer.cohort] = (nominal + peer.nominal, usage + peer.usage)
    rows: dict[int, list[QueueWorkload]] = defaultdict(list)
    for row in QueueWorkload.objects.filter(allocation_id__any=list(states),
                                            state__in=(*HOLDING, PENDING)):
        rows[row.allocation_id].append(row)
    waits = _history_waits(list(states), history_since(now))
    admitted = recent_admissions(list(states), now)
    done = []
    for alloc_id, state in states.items():
        cohort_free, lent = room_in_cohort(
            state, *cohorts.get(state.cohort, (state.nominal, state.usage)))
        by_uid = {r.uid: r for r in rows[alloc_id]}
        for line in _pending_lines(queue_facts_of(state), rows[alloc_id], cohort_free, lent,
                                   waits[alloc_id], now, admitted[alloc_id]):
            if line.facts.uid in new_uids:
                row = by_uid[line.facts.uid]
                row.first_estimate_at, row.first_estimate_basis = line.estimate.at, \
                    line.estimate.basis
                done.append(row)
    # Only the first estimate counts: rows that have one are never selected again.
    update_rows(QueueWorkload, done, ["first_estimate_at", "first_estimate_basis"])
    return len(done)
