"""What the pages and the API show about an allocation's queue: running and pending work with
reasons and estimates, borrowing and its price, preemptions, history, and (for platform
admins) the cohort. One builder per view, used by the page and the API alike."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal

from django.db.models import Count
from django.utils import timezone

from .domain import mig_share
from .models import Allocation, ClusterQueueState, QueueEvent, QueueUsageHour, QueueWorkload
from .pricing import borrowing_is_billed, money, pool_rate
from .queues import (
    ADMITTED,
    DEACTIVATED,
    PENDING,
    CohortRow,
    DayFigures,
    Estimate,
    QueueFacts,
    Stop,
    Waiting,
    WorkloadFacts,
    amount,
    cohort_board,
    duration,
    estimate_start,
    explain_deactivated,
    explain_pending,
    history_by_day,
    percentile,
    queue_order,
    queue_policy_words,
)
from .selectors import mig_weights

HISTORY_DAYS = 14


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
        requeued_at=row.requeued_at, resource_version=row.resource_version)


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


@dataclass
class QueueView:
    """One allocation's queue as its tenant may see it."""

    allocation: Allocation
    observed_at: dt.datetime | None
    queue: QueueFacts | None
    running: list[WorkloadFacts] = field(default_factory=list)
    pending: list[PendingLine] = field(default_factory=list)
    deactivated: list[tuple[WorkloadFacts, str]] = field(default_factory=list)
    stops: list[QueueEvent] = field(default_factory=list)
    borrowed_price_per_hour: Decimal = Decimal(0)
    estimate_error_p50: float | None = None
    estimate_count: int = 0
    history: list[DayFigures] = field(default_factory=list)
    history_groups: list[dict] = field(default_factory=list)

    @property
    def policy(self) -> str:
        return queue_policy_words(self.queue) if self.queue else ""

    @property
    def unit(self) -> str:
        return self.queue.resource if self.queue else ""

    def words(self, n) -> str:
        return amount(n, self.unit)

    def as_dict(self) -> dict:
        q = self.queue
        return {
            "observed_at": self.observed_at,
            "queue": None if q is None else {
                "resource": q.resource, "nominal": q.nominal,
                "borrowing_limit": q.borrowing_limit if q.cohort else None,
                "in_use": q.usage, "borrowed": q.borrowed, "in_cohort": bool(q.cohort),
                "active": q.active, "policy": self.policy},
            "borrowed_price_per_hour": self.borrowed_price_per_hour,
            "running": [{"name": w.display_name, "devices": w.devices, "since": w.admitted_at,
                         "time_limit_seconds": w.max_seconds, "priority": w.priority}
                        for w in self.running],
            "pending": [{"name": p.facts.display_name, "devices": p.facts.devices,
                         "priority": p.facts.priority, "submitted_at": p.facts.submitted_at,
                         "position": p.position, "position_source": p.position_source,
                         "waited_seconds": round(p.waited_seconds),
                         "reason_code": p.waiting.code, "reason": p.waiting.text,
                         "estimated_start": p.estimate.at, "estimate_basis": p.estimate.basis,
                         "estimate": p.estimate.text} for p in self.pending],
            "deactivated": [{"name": w.display_name, "devices": w.devices,
                             "stopped_at": w.stop.at if w.stop else None,
                             "reason_code": w.stop.reason if w.stop else "Deactivated",
                             "reason": text} for w, text in self.deactivated],
            "preemptions": [{"name": e.workload, "at": e.at, "kind": e.kind,
                             "reason": e.reason} for e in self.stops],
            "estimates_track_record": {"median_error_seconds": self.estimate_error_p50,
                                       "count": self.estimate_count},
            "history_groups": self.history_groups,
        }


def cohort_room(state: ClusterQueueState, peers: list[ClusterQueueState]
                ) -> tuple[Decimal, Decimal]:
    """What the rest of the cohort could lend `state` now, and how much of its unused quota
    others borrow meanwhile (numbers, never who). `peers`: the other queues of its cohort."""
    if not state.cohort:
        return Decimal(0), Decimal(0)
    nominal = sum((s.nominal for s in peers), state.nominal)
    usage = sum((s.usage for s in peers), state.usage)
    total_free = max(Decimal(0), nominal - usage)
    own_free = max(Decimal(0), state.nominal - state.usage)
    return max(Decimal(0), total_free - own_free), max(Decimal(0), own_free - total_free)


def _queue_and_cohort(alloc: Allocation) -> tuple[ClusterQueueState | None, Decimal,
                                                   Decimal]:
    state = ClusterQueueState.objects.filter(allocation=alloc).first()
    if state is None or not state.cohort:
        return state, Decimal(0), Decimal(0)
    peers = list(ClusterQueueState.objects.filter(cohort=state.cohort).exclude(pk=state.pk))
    return (state, *cohort_room(state, peers))


def _history_waits(allocation_ids, since: dt.datetime
                   ) -> dict[int, dict[tuple[str, int], list[float]]]:
    """allocation → (LocalQueue, priority) → waits of its admissions since `since`."""
    out: dict[int, dict[tuple[str, int], list[float]]] = defaultdict(lambda: defaultdict(list))
    for alloc_id, lq, prio, wait in QueueEvent.objects.filter(
            allocation_id__in=allocation_ids, kind=QueueEvent.Kind.ADMITTED, at__gte=since,
            wait_seconds__isnull=False).values_list("allocation_id", "local_queue", "priority",
                                                    "wait_seconds"):
        out[alloc_id][(lq, prio)].append(wait)
    return out


def _pending_lines(queue: QueueFacts, rows: list[QueueWorkload], cohort_free: Decimal,
                   lent: Decimal, waits: dict[tuple[str, int], list[float]],
                   now: dt.datetime) -> list[PendingLine]:
    facts = [row_facts(r) for r in rows]
    running = [f for f in facts if f.state == ADMITTED]
    waiting = sorted((f for f in facts if f.state == PENDING), key=queue_order)
    by_uid = {r.uid: r for r in rows}
    lines = []
    # BestEffortFIFO: a workload that can never fit does not hold back the ones behind it.
    can_fit = [f for f in waiting if f.devices <= queue.ceiling]
    for i, f in enumerate(waiting):
        ahead = [a for a in can_fit if queue_order(a) < queue_order(f)]
        why = explain_pending(f, queue, own_running=running, ahead=ahead,
                              cohort_free=cohort_free, now=now, lent=lent)
        est = estimate_start(f, why, own_running=running,
                             history_waits=waits.get((f.local_queue, f.priority), []), now=now)
        row = by_uid[f.uid]
        since = f.requeued_at or f.submitted_at or now
        lines.append(PendingLine(f, row.position if row.position is not None else i,
                                 row.position_source or "computed",
                                 (now - since).total_seconds(), why, est))
    return lines


def history_groups(alloc: Allocation, now: dt.datetime) -> list[dict]:
    """The LocalQueues and priorities this allocation's history can be narrowed to."""
    since = now - dt.timedelta(days=HISTORY_DAYS)
    return list(QueueEvent.objects.filter(allocation=alloc, kind=QueueEvent.Kind.ADMITTED,
                                          at__gte=since)
                .values("local_queue", "priority").annotate(admitted=Count("id"))
                .order_by("local_queue", "-priority"))


def allocation_queue(alloc: Allocation, *, now: dt.datetime | None = None,
                     history: bool = True, local_queue: str | None = None,
                     priority: int | None = None) -> QueueView:
    now = now or timezone.now()
    state, cohort_free, lent = _queue_and_cohort(alloc)
    view = QueueView(alloc, state.observed_at if state else None,
                     queue_facts_of(state) if state else None)
    if state is None:
        return view
    rows = list(QueueWorkload.objects.filter(
        allocation=alloc, state__in=(ADMITTED, PENDING, DEACTIVATED)))
    view.deactivated = [(f, explain_deactivated(f)) for f in sorted(
        (row_facts(r) for r in rows if r.state == DEACTIVATED),
        key=lambda w: (w.stop.at if w.stop and w.stop.at else now), reverse=True)]
    rows = [r for r in rows if r.state != DEACTIVATED]
    view.running = sorted((row_facts(r) for r in rows if r.state == ADMITTED),
                          key=lambda w: w.admitted_at or now)
    waits = _history_waits([alloc.pk], now - dt.timedelta(days=HISTORY_DAYS))[alloc.pk]
    view.pending = _pending_lines(view.queue, rows, cohort_free, lent, waits, now)
    view.stops = list(QueueEvent.objects.filter(
        allocation=alloc, kind__in=(QueueEvent.Kind.PREEMPTED, QueueEvent.Kind.EVICTED))
        .order_by("-at", "-id")[:20])
    share = mig_share(alloc.mig_profile, mig_weights()) if alloc.mig_profile else Decimal(1)
    # Priced only where billing charges borrowing, at the rate billing will use.
    view.borrowed_price_per_hour = money(state.borrowed * share * pool_rate(alloc.pool_id, now)) \
        if borrowing_is_billed(alloc.route) else Decimal(0)
    errors = [abs((r.admitted_at - r.first_estimate_at).total_seconds())
              for r in QueueWorkload.objects.filter(
                  allocation=alloc, admitted_at__isnull=False, first_estimate_at__isnull=False,
                  admitted_at__gte=now - dt.timedelta(days=HISTORY_DAYS))
              .only("admitted_at", "first_estimate_at")]
    view.estimate_error_p50, view.estimate_count = percentile(errors, 50), len(errors)
    if history:
        view.history = queue_history([alloc], now=now, local_queue=local_queue,
                                     priority=priority)
        view.history_groups = history_groups(alloc, now)
    return view


def queue_history(allocations, *, now: dt.datetime | None = None, days: int = HISTORY_DAYS,
                  local_queue: str | None = None, priority: int | None = None
                  ) -> list[DayFigures]:
    """Per day: wait p50/p95 of admissions, preemptions, borrowed device-hours (slices
    counted as device-equivalents), over the given allocations' queues; optionally of one
    LocalQueue and priority (borrowing is the ClusterQueue's, so it is counted only when
    the history is not narrowed)."""
    now = now or timezone.now()
    since = (now - dt.timedelta(days=days - 1)).date()
    start = dt.datetime.combine(since, dt.time(), tzinfo=dt.UTC)
    events = QueueEvent.objects.filter(allocation__in=allocations, at__gte=start)
    narrowed = local_queue is not None or priority is not None
    if local_queue is not None:
        events = events.filter(local_queue=local_queue)
    if priority is not None:
        events = events.filter(priority=priority)
    admissions = events.filter(kind=QueueEvent.Kind.ADMITTED, wait_seconds__isnull=False
                               ).values_list("at", "wait_seconds")
    preemptions = events.filter(kind=QueueEvent.Kind.PREEMPTED).values_list("at", flat=True)
    weights = mig_weights()
    borrowed = [(h.hour, h.borrowed_s * (mig_share(h.allocation.mig_profile, weights)
                                         if h.allocation.mig_profile else 1))
                for h in QueueUsageHour.objects.filter(
                    allocation__in=allocations, hour__gte=start, borrowed_s__gt=0)
                .select_related("allocation")] if not narrowed else []
    return history_by_day(admissions, preemptions, borrowed, since=since, until=now.date())


def first_estimates(now: dt.datetime) -> int:
    """Record the first start-time estimate of each new pending workload, so the estimates'
    track record can be shown later (an estimate is only worth what its errors were).
    A handful of queries whatever the number of queues (it runs in every queue sync)."""
    new_uids = set(QueueWorkload.objects.filter(
        state=PENDING, first_estimate_at__isnull=True, first_estimate_basis="")
        .values_list("uid", flat=True))
    if not new_uids:
        return 0
    alloc_ids = set(QueueWorkload.objects.filter(uid__in=new_uids)
                    .values_list("allocation_id", flat=True))
    states = {s.allocation_id: s for s in ClusterQueueState.objects.filter(
        allocation_id__in=alloc_ids)}
    cohorts: dict[str, list[ClusterQueueState]] = defaultdict(list)
    for peer in ClusterQueueState.objects.filter(
            cohort__in={s.cohort for s in states.values() if s.cohort}):
        cohorts[peer.cohort].append(peer)
    rows: dict[int, list[QueueWorkload]] = defaultdict(list)
    for row in QueueWorkload.objects.filter(allocation_id__in=list(states),
                                            state__in=(ADMITTED, PENDING)):
        rows[row.allocation_id].append(row)
    waits = _history_waits(list(states), now - dt.timedelta(days=HISTORY_DAYS))
    done = []
    for alloc_id, state in states.items():
        peers = [p for p in cohorts.get(state.cohort, []) if p.pk != state.pk]
        cohort_free, lent = cohort_room(state, peers)
        by_uid = {r.uid: r for r in rows[alloc_id]}
        for line in _pending_lines(queue_facts_of(state), rows[alloc_id], cohort_free, lent,
                                   waits[alloc_id], now):
            if line.facts.uid in new_uids:
                row = by_uid[line.facts.uid]
                row.first_estimate_at, row.first_estimate_basis = line.estimate.at, \
                    line.estimate.basis
                done.append(row)
    # Only the first estimate counts: rows that have one are never selected again.
    QueueWorkload.objects.bulk_update(done, ["first_estimate_at", "first_estimate_basis"],
                                      batch_size=500)
    return len(done)


@dataclass
class CohortView:
    name: str
    rows: list[CohortRow]
    tenants: dict[str, str]  # queue → tenant slug (admins see who)


def cohort_views(*, now: dt.datetime | None = None) -> list[CohortView]:
    """Every cohort (and every stand-alone queue, as its own group) for platform admins."""
    now = now or timezone.now()
    states = list(ClusterQueueState.objects.filter(allocation__isnull=False)
                  .select_related("allocation__tenant"))
    pending = [row_facts(r) for r in QueueWorkload.objects.filter(
        state=PENDING, allocation__in=[s.allocation_id for s in states])]
    groups: dict[str, list[ClusterQueueState]] = defaultdict(list)
    for s in states:
        groups[s.cohort or ""].append(s)
    out = []
    for cohort in sorted(groups, key=lambda c: (c == "", c)):
        members = groups[cohort]
        names = {s.name for s in members}
        rows = cohort_board([queue_facts_of(s) for s in members],
                            [w for w in pending if w.cluster_queue in names], now)
        out.append(CohortView(cohort or "(stand-alone queues)", rows,
                              {s.name: s.allocation.tenant.slug for s in members}))
    return out


def oldest_wait_text(seconds: float | None) -> str:
    return "—" if seconds is None else duration(seconds)


def history_chart(days: list[DayFigures]) -> dict:
    """The wait history as the page shows it: a row per day for the table, and the series
    Chart.js draws (minutes; a missing day is a gap, not zero)."""
    return {"bars": [{"day": d.day,
                      "p50": "—" if d.p50 is None else duration(d.p50),
                      "p95": "—" if d.p95 is None else duration(d.p95),
                      "admitted": d.admissions, "preemptions": d.preemptions,
                      "borrowed_h": d.borrowed_device_hours} for d in days],
            "any": any(d.admissions or d.preemptions for d in days),
            "series": {"labels": [f"{d.day:%-d %b}" for d in days],
                       "p50_min": [None if d.p50 is None else round(d.p50 / 60, 1)
                                   for d in days],
                       "p95_min": [None if d.p95 is None else round(d.p95 / 60, 1)
                                   for d in days],
                       "admitted": [d.admissions for d in days]}}
