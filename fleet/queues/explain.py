"""What the pages and the API show about an allocation's queue: running and pending work with
reasons and estimates, borrowing and its price, preemptions, history, and (for platform
admins) the cohort. One builder per view, used by the page and the API alike."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal

from django.db.models import Count, Max
from django.utils import timezone

from ..domain import in_devices
from ..inventory.pricing import borrowing_is_billed, money, pool_rate, rate_at, rate_history
from ..inventory.selectors import mig_weights
from ..models import (
    Allocation,
    Cluster,
    ClusterQueueState,
    QueueEvent,
    QueueUsageHour,
    QueueWorkload,
)
from .estimates import track_record_by_basis
from .placement import SEAMS, STOPS, preemption_tally, recoveries
from .reading import (
    HISTORY_DAYS,
    PendingLine,
    _history_waits,
    _pending_lines,
    cohort_room,
    history_since,
    queue_facts_of,
    recent_admissions,
    row_facts,
)
from .timing import clock_words, is_fine
from .truth import (
    ADMITTED,
    DEACTIVATED,
    FIRST_WORK_WORDS,
    PENDING,
    STOPPING,
    DayFigures,
    QueueFacts,
    WorkloadFacts,
    amount,
    duration,
    explain_deactivated,
    explain_stopping,
    history_by_day,
    inactive_queue_words,
    percentile,
    queue_policy_words,
    stopping_entry,
)


@dataclass
class QueueView:
    """One allocation's queue as its tenant may see it."""

    allocation: Allocation
    observed_at: dt.datetime | None
    queue: QueueFacts | None
    running: list[WorkloadFacts] = field(default_factory=list)
    pending: list[PendingLine] = field(default_factory=list)
    deactivated: list[tuple[WorkloadFacts, str]] = field(default_factory=list)
    stopping: list[tuple[WorkloadFacts, str]] = field(default_factory=list)  # never running
    stops: list[QueueEvent] = field(default_factory=list)
    borrowed_price_per_hour: Decimal = Decimal(0)
    estimate_error_p50: float | None = None
    estimate_error_p90: float | None = None
    estimate_count: int = 0
    # basis → (count, median error s, p90 error s): each basis scored on its own
    estimate_by_basis: dict = field(default_factory=dict)
    admission_count: int = 0  # admissions in the window (a job's re-admissions too)
    history: list[DayFigures] = field(default_factory=list)
    history_groups: list[dict] = field(default_factory=list)
    seams: list[dict] = field(default_factory=list)
    jobs: list[dict] = field(default_factory=list)
    worker_names: dict[str, str] = field(default_factory=dict)  # MultiKueue name → cluster's
    first_work: str = ""  # words while no workload ever reached the queue

    @property
    def running_where(self) -> list[tuple[WorkloadFacts, str]]:
        """Each running workload with the cluster it runs on by the name admins gave it
        (empty: here, on the allocation's own cluster)."""
        return [(w, self.worker_names.get(w.ran_on, w.ran_on)) for w in self.running]

    @property
    def quota_catching_up(self) -> str:
        """A resize Kueue has not reported yet: the queue as last read still has the quota
        from before it (the figures below are Kueue's, as read)."""
        q = self.queue
        size = self.allocation.size
        if q is None or not size or Decimal(size) == Decimal(q.nominal):
            return ""
        return (f"It holds {self.words(size)} now; Kueue's quota as last read is still "
                f"{self.words(q.nominal)}. It follows as the cluster applies the change, and "
                "this page with it.")

    @property
    def inactive(self) -> str:
        """Kueue's reason its queue admits nothing, in words (empty while it is active)."""
        q = self.queue
        return "" if q is None or q.active else inactive_queue_words(q.inactive_reason)

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
                "active": q.active, "inactive_reason": self.inactive, "policy": self.policy,
                "resize_pending": self.quota_catching_up},
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
                         "estimate_range": [p.estimate.low, p.estimate.high]
                         if p.estimate.low else None,
                         "estimate": p.estimate.text} for p in self.pending],
            "stopping": [stopping_entry(w, text) for w, text in self.stopping],
            "deactivated": [{"name": w.display_name, "devices": w.devices,
                             "stopped_at": w.stop.at if w.stop else None,
                             "reason_code": w.stop.reason if w.stop else "Deactivated",
                             "reason": text} for w, text in self.deactivated],
            "preemptions": [{"name": e.workload, "at": e.at, "kind": e.kind,
                             "reason": e.reason} for e in self.stops],
            "estimates_track_record": {"median_error_seconds": self.estimate_error_p50,
                                       "p90_error_seconds": self.estimate_error_p90,
                                       "by_basis": {b: {"count": n, "median_error_seconds": m,
                                                        "p90_error_seconds": p}
                                                    for b, (n, m, p) in
                                                    self.estimate_by_basis.items()},
                                       "count": self.estimate_count,
                                       "of_admissions": self.admission_count},
            "history_groups": self.history_groups,
            "seams": self.seams,
            "jobs": self.jobs,
            "first_work": self.first_work,
        }


def _queue_and_cohort(alloc: Allocation) -> tuple[ClusterQueueState | None, Decimal,
                                                   Decimal]:
    state = ClusterQueueState.objects.filter(allocation=alloc).first()
    if state is None or not state.cohort:
        return state, Decimal(0), Decimal(0)
    peers = list(ClusterQueueState.objects.filter(cohort=state.cohort).exclude(pk=state.pk))
    return (state, *cohort_room(state, peers))


def history_groups(alloc: Allocation, now: dt.datetime) -> list[dict]:
    """The LocalQueues and priorities this allocation's history can be narrowed to."""
    return list(QueueEvent.objects.filter(allocation=alloc, kind=QueueEvent.Kind.ADMITTED,
                                          at__gte=history_since(now))
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
        allocation=alloc, state__in=(ADMITTED, STOPPING, PENDING, DEACTIVATED)))
    view.deactivated = [(f, explain_deactivated(f)) for f in sorted(
        (row_facts(r) for r in rows if r.state == DEACTIVATED),
        key=lambda w: (w.stop.at if w.stop and w.stop.at else now), reverse=True)]
    rows = [r for r in rows if r.state != DEACTIVATED]
    # The history is append-only: no event ever recorded means no work ever reached it.
    if not rows and not view.deactivated and \
            not QueueEvent.objects.filter(allocation=alloc).exists():
        view.first_work = FIRST_WORK_WORDS
    view.stopping = [(f, explain_stopping(f, view.unit)) for f in sorted(
        (row_facts(r) for r in rows if r.state == STOPPING), key=lambda w: w.stop.at or now)]
    view.running = sorted((row_facts(r) for r in rows if r.state == ADMITTED),
                          key=lambda w: w.admitted_at or now)
    if workers := {w.ran_on for w in view.running if w.ran_on}:
        view.worker_names = dict(Cluster.objects.filter(slug__in=workers)
                                 .values_list("slug", "name"))
    since = history_since(now)  # the page's one window
    waits = _history_waits([alloc.pk], since)[alloc.pk]
    view.pending = _pending_lines(view.queue, rows, cohort_free, lent, waits, now,
                                  recent_admissions([alloc.pk], now)[alloc.pk])
    view.stops = list(QueueEvent.objects.filter(
        allocation=alloc, kind__in=(QueueEvent.Kind.PREEMPTED, QueueEvent.Kind.EVICTED))
        .order_by("-at", "-id")[:20])
    # Priced only where billing charges borrowing, at the rate billing will use.
    borrowed = in_devices(state.borrowed, alloc.mig_profile, mig_weights())
    view.borrowed_price_per_hour = money(borrowed * pool_rate(alloc.pool_id, now)) \
        if borrowing_is_billed(alloc.route) else Decimal(0)
    scored = [(r.first_estimate_basis, abs((r.admitted_at - r.first_estimate_at)
                                           .total_seconds()))
              for r in QueueWorkload.objects.filter(
                  allocation=alloc, admitted_at__isnull=False, first_estimate_at__isnull=False,
                  admitted_at__gte=since)
              .only("admitted_at", "first_estimate_at", "first_estimate_basis")]
    errors = [e for _b, e in scored]
    view.estimate_error_p50, view.estimate_count = percentile(errors, 50), len(errors)
    view.estimate_error_p90 = percentile(errors, 90)
    view.estimate_by_basis = track_record_by_basis(scored)
    # what the estimates are out of: every admission the history table counts
    view.admission_count = QueueEvent.objects.filter(
        allocation=alloc, kind=QueueEvent.Kind.ADMITTED, at__gte=since,
        wait_seconds__isnull=False).count()
    if history:
        view.history = queue_history([alloc], now=now, local_queue=local_queue,
                                     priority=priority)
        view.history_groups = history_groups(alloc, now)
        view.seams = seam_figures([alloc], now=now, local_queue=local_queue,
                                  priority=priority)
        view.jobs = job_ledgers(alloc)
    return view


def _seam_values(allocations, *, now: dt.datetime, days: int, local_queue: str | None,
                 priority: int | None) -> dict[str, list[tuple[dt.datetime, float]]]:
    """(when, seconds) of each seam over the last `days`, from the ledger."""
    events = QueueEvent.objects.filter(allocation__in=allocations,
                                       at__gte=history_since(now, days))
    if local_queue is not None:
        events = events.filter(local_queue=local_queue)
    if priority is not None:
        events = events.filter(priority=priority)
    values: dict[str, list[tuple[dt.datetime, float]]] = defaultdict(list)
    for kind, seconds, at in events.filter(seam_seconds__isnull=False).values_list(
            "kind", "seam_seconds", "at"):
        values[kind].append((at, seconds))
    values["recovery"] = recoveries(list(events.filter(
        kind__in=(*STOPS, "running")).values_list("workload_uid", "kind", "at")))
    return values


def seam_figures(allocations, *, now: dt.datetime | None = None, days: int = HISTORY_DAYS,
                 local_queue: str | None = None, priority: int | None = None) -> list[dict]:
    """p50/p95 of each seam (fleet.queues.placement.SEAMS) over the last `days`, from the
    ledger: the tenant's own allocations, or (admins) all; each with its p95 per day."""
    now = now or timezone.now()
    values = _seam_values(allocations, now=now, days=days, local_queue=local_queue,
                          priority=priority)
    first = now.date() - dt.timedelta(days=days - 1)
    day_list = [first + dt.timedelta(days=i) for i in range(days)]
    out = []
    for code, label, what in SEAMS:
        seconds = [v for _, v in values[code]]
        by_day: dict[dt.date, list[float]] = defaultdict(list)
        for at, v in values[code]:
            by_day[timezone.localdate(at)].append(v)
        out.append({"code": code, "label": label, "what": what, "count": len(seconds),
                    "p50_seconds": percentile(seconds, 50),
                    "p95_seconds": percentile(seconds, 95),
                    "p95_by_day": [percentile(by_day.get(d, []), 95) for d in day_list],
                    "days": day_list})
    return out


def seam_chart(seams: list[dict]) -> dict:
    """The seams' p95 per day as Chart.js draws them (seconds, log scale: sub-second steps
    beside waits of hours; a day without a measurement is a gap) and the table under it."""
    measured = [m for m in seams if m["count"]]
    days = seams[0]["days"] if seams else []
    return {"any": bool(measured),
            "series": {"labels": [f"{d:%-d %b}" for d in days],
                       "lines": [{"label": m["label"], "p95": [
                           None if v is None else round(v, 3) for v in m["p95_by_day"]]}
                           for m in measured]},
            "rows": [{"day": d, "p95": ["—" if m["p95_by_day"][i] is None
                                        else duration(m["p95_by_day"][i]) for m in measured]}
                     for i, d in enumerate(days)],
            "labels": [m["label"] for m in measured]}


def job_ledgers(alloc: Allocation, *, limit: int = 8) -> list[dict]:
    """The latest workloads of an allocation, each with its ledger in time order (the
    tenant's own jobs only: peers appear as "the cohort" in the reasons)."""
    latest = list(QueueEvent.objects.filter(allocation=alloc).values("workload_uid")
                  .annotate(last=Max("at")).order_by("-last")[:limit])
    uids = [r["workload_uid"] for r in latest]
    by_uid: dict[str, list[QueueEvent]] = defaultdict(list)
    for e in QueueEvent.objects.filter(allocation=alloc, workload_uid__in=uids).order_by(
            "at", "id"):
        by_uid[e.workload_uid].append(e)
    measured = {r["uid"]: r for r in QueueWorkload.objects.filter(uid__in=uids).values(
        "uid", "state", "gpu_busy", "gpu_memory_gb", "utilisation_at")}
    out = []
    for uid in uids:
        steps = by_uid[uid]
        gpu = measured.get(uid) or {}
        out.append({"name": steps[-1].workload, "state": gpu.get("state", "gone"), "steps": [
            {"kind": e.kind, "label": e.get_kind_display(), "at": e.at,
             "kube_at": e.kube_at, "at_source": e.at_source,
             "at_bound_seconds": e.at_bound_seconds, "fine": is_fine(e.at_source),
             "clock": clock_words(e.at_source, e.at_bound_seconds),
             "seam_seconds": e.seam_seconds, "reason": e.reason} for e in steps],
            **preemption_tally([(e.kind, e.at) for e in steps]).fields(),  # what stops cost
            "gpu_busy": gpu.get("gpu_busy"), "gpu_memory_gb": gpu.get("gpu_memory_gb"),
            "utilisation_at": gpu.get("utilisation_at")})
    return out


def queue_history(allocations, *, now: dt.datetime | None = None, days: int = HISTORY_DAYS,
                  local_queue: str | None = None, priority: int | None = None
                  ) -> list[DayFigures]:
    """Per day: wait p50/p95 of admissions, preemptions, borrowed device-hours (slices
    counted as device-equivalents), over the given allocations' queues; optionally of one
    LocalQueue and priority (borrowing is the ClusterQueue's, so it is counted only when
    the history is not narrowed)."""
    now = now or timezone.now()
    start = history_since(now, days)
    since = start.date()
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
    hours = list(QueueUsageHour.objects.filter(
        allocation__in=allocations, hour__gte=start, borrowed_s__gt=0)
        .select_related("allocation")) if not narrowed else []
    rates = rate_history({h.allocation.pool_id for h in hours})
    borrowed = []
    for h in hours:  # priced as billing prices them: at the pool's rate in that hour
        seconds = in_devices(h.borrowed_s, h.allocation.mig_profile, weights)
        billed = borrowing_is_billed(h.allocation.route)
        borrowed.append((h.hour, seconds, seconds / 3600 * rate_at(
            rates.get(h.allocation.pool_id, []), h.hour) if billed else Decimal(0)))
    return history_by_day(admissions, preemptions, borrowed, since=since, until=now.date())


def history_chart(days: list[DayFigures]) -> dict:
    """The wait history as the page shows it: a row per day for the table, and the series
    Chart.js draws (minutes; a missing day is a gap, not zero)."""
    return {"bars": [{"day": d.day,
                      "p50": "—" if d.p50 is None else duration(d.p50),
                      "p95": "—" if d.p95 is None else duration(d.p95),
                      "admitted": d.admissions, "preemptions": d.preemptions,
                      "borrowed_h": d.borrowed_device_hours,
                      "borrowed_cost": money(d.borrowed_cost)} for d in days],
            "borrowed_cost": money(sum((d.borrowed_cost for d in days), Decimal(0))),
            "borrowed_h": sum((d.borrowed_device_hours for d in days), Decimal(0)),
            "admitted": sum(d.admissions for d in days),
            "preemptions": sum(d.preemptions for d in days),
            "any": any(d.admissions or d.preemptions for d in days),
            "series": {"labels": [f"{d.day:%-d %b}" for d in days],
                       "p50_min": [None if d.p50 is None else round(d.p50 / 60, 1)
                                   for d in days],
                       "p95_min": [None if d.p95 is None else round(d.p95 / 60, 1)
                                   for d in days],
                       "admitted": [d.admissions for d in days]}}


def queue_stamp(alloc) -> str:
    """What changes whenever the queue panel of `alloc` would: the last time any of its
    workloads or its queue was recorded, or its GPU activity measured. The panel polls with
    it every second and is
    answered "nothing new" (204) until it differs — so a change the watch records reaches
    an open page within about a second, for two small indexed reads per poll."""
    last = QueueWorkload.objects.filter(allocation=alloc).aggregate(
        at=Max("observed_at"), measured=Max("utilisation_at"))
    state = ClusterQueueState.objects.filter(allocation=alloc).values_list(
        "observed_at", flat=True).first()
    return "-".join(f"{t.timestamp():.6f}" if t else "0"
                    for t in (last["at"], state, last["measured"]))
