"""Queue truth, the side effects: read Kueue's Workloads, ClusterQueues, LocalQueues and
Cohorts back from the API server, record each workload's transitions (append-only) and each
queue's use per hour.

A bounded periodic list (every PORTAL_QUEUE_SYNC_SECONDS), not a watch: listing every kind
took about 1 s at 5,000 workloads, a re-read about 2 s (tests/k8s/test_queue_benchmark.py),
restarts need no resourceVersion bookkeeping, and a missed event cannot leave the portal wrong
for longer than one period. Pending positions come from Kueue's visibility API when it is
registered, else from Kueue's own ordering (priority, then time queued).
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field, replace
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from ..allocations import lifecycle
from ..kube import MANAGED_BY, MANAGER, DryRunBackend, KubeBackend, KubeError, get_backend
from ..models import Allocation, ClusterQueueState, QueueEvent, QueueUsageHour, QueueWorkload
from ..vocabulary import KUEUE, KUEUE_VISIBILITY
from .placement import (
    JOB_LABELS,
    NOTHING,
    Placement,
    claims_by_pod,
    placement_events,
    placement_of,
    pods_by_job,
)
from .reading import first_estimates, row_facts
from .truth import (
    ADMITTED,
    DEACTIVATED,
    FINISHED,
    PENDING,
    QueueFacts,
    WorkloadFacts,
    explain_stop,
    parse_cluster_queue,
    parse_workload,
    queue_order,
)

log = logging.getLogger(__name__)
VISIBILITY = KUEUE_VISIBILITY

FOLLOWED = tuple(sorted(lifecycle.FOLLOWED))


@dataclass
class QueueSyncReport:
    workloads: int = 0
    queues: int = 0
    cohorts: int = 0
    changed: int = 0
    events: int = 0
    positions: str = ""  # visibility | computed | ""
    seconds: float = 0.0
    skipped: str = ""
    timings: dict[str, float] = field(default_factory=dict)

    def summary(self) -> str:
        if self.skipped:
            return f"queue sync skipped: {self.skipped}"
        return (f"{self.workloads} workload(s) in {self.queues} queue(s), {self.changed} "
                f"changed, {self.events} event(s), positions from {self.positions or 'none'}, "
                f"{self.seconds:.2f}s")


APPLIED = ("devices", "state", "admitted_at", "finished_at", "requeued_at", "max_seconds",
           "pending_reason", "pending_detail", "stop_reason", "stop_preemption", "stopped_at",
           "stop_detail", "local_queue", "cluster_queue", "priority", "resource_version",
           "job")


def _values(f: WorkloadFacts) -> dict:
    stop = f.stop
    return {"devices": f.devices, "state": f.state, "admitted_at": f.admitted_at,
            "finished_at": f.finished_at, "requeued_at": f.requeued_at,
            "max_seconds": f.max_seconds if f.max_seconds and f.max_seconds > 0 else None,
            "pending_reason": f.pending_reason[:80], "pending_detail": f.pending_raw,
            "stop_reason": stop.reason[:80] if stop else "",
            "stop_preemption": stop.preemption[:80] if stop else "",
            "stopped_at": stop.at if stop else None, "stop_detail": stop.raw if stop else "",
            "local_queue": f.local_queue, "cluster_queue": f.cluster_queue,
            "priority": f.priority, "resource_version": f.resource_version, "job": f.job}


def transition_events(old: WorkloadFacts | None, new: WorkloadFacts, *, now: dt.datetime,
                      borrowed: Decimal) -> list[dict]:
    """The events that take a workload from what was stored (None: never seen) to what is
    read now. Pure; times come from Kueue's conditions where it gives them."""
    events: list[dict] = []
    base = {"workload_uid": new.uid, "workload": new.display_name,
            "local_queue": new.local_queue, "priority": new.priority, "devices": new.devices}
    if old is None:
        events.append({**base, "kind": QueueEvent.Kind.SUBMITTED,
                       "at": new.submitted_at or now, "reason": "Submitted to the queue."})
    new_stop = new.stop if new.stop and new.stop.at else None
    old_stop_at = old.stop.at if old and old.stop else None
    if new_stop and new_stop.at != old_stop_at and (old is None or old.state == ADMITTED
                                                    or new_stop.at > (old.admitted_at or now)):
        kind = QueueEvent.Kind.PREEMPTED if new_stop.reason == "Preempted" or \
            new_stop.preemption else QueueEvent.Kind.EVICTED
        if old is not None or new.state in (PENDING, DEACTIVATED):
            events.append({**base, "kind": kind, "at": new_stop.at,
                           "reason": explain_stop(new_stop), "detail": new_stop.raw})
    was_admitted = old is not None and old.state == ADMITTED and \
        old.admitted_at == new.admitted_at
    if new.state in (ADMITTED, FINISHED) and new.admitted_at and not was_admitted:
        since = new.requeued_at if new.requeued_at and new.requeued_at < new.admitted_at \
            else new.submitted_at
        wait = (new.admitted_at - since).total_seconds() if since else None
        reason = "Admitted: its devices were reserved and its pods released."
        if borrowed > 0:
            reason = (f"Admitted while the queue borrows {borrowed.normalize():f} device(s) "
                      "from the cohort beyond its quota.")
        events.append({**base, "kind": QueueEvent.Kind.ADMITTED, "at": new.admitted_at,
                       "wait_seconds": max(0.0, wait) if wait is not None else None,
                       "seam_seconds": max(0.0, wait) if wait is not None else None,
                       "borrowed": borrowed, "reason": reason})
    if new.state == FINISHED and (old is None or old.state != FINISHED):
        events.append({**base, "kind": QueueEvent.Kind.FINISHED,
                       "at": new.finished_at or now, "reason": "Finished; its devices were "
                       "given back to the queue."})
    return events


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
        if f.state == ADMITTED:
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


def _integrate_usage(states: dict[str, ClusterQueueState], now: dt.datetime) -> None:
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
        allocation_id__in={k[0] for k in adds}, hour__in={k[1] for k in adds})}
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
    QueueUsageHour.objects.bulk_update(update, ["used_s", "borrowed_s"])


def _positions(backend: KubeBackend, pending: dict[str, list[WorkloadFacts]],
               known: dict[str, tuple[str, int | None, str]]
               ) -> tuple[dict[str, tuple[int, str]], str]:
    """uid → (position, source): 0 is next in its ClusterQueue, from Kueue's visibility API
    where it answers, else from Kueue's ordering. A queue whose waiting set is unchanged
    keeps the positions read before (one visibility call per changed queue, not per queue);
    after three failed calls in a row the API is not asked again in this pass."""
    out: dict[str, tuple[int, str]] = {}
    failures = 0
    for cq, workloads in pending.items():
        uids = {w.uid for w in workloads}
        before = {uid: pos for uid, (q, pos, _src) in known.items() if q == cq}
        if set(before) == uids and all(p is not None for p in before.values()):
            out.update({uid: (known[uid][1], known[uid][2]) for uid in uids})
            continue
        answer = None
        if failures < 3:
            answer = backend.get_path(VISIBILITY.format(cq))
            failures = 0 if answer is not None else failures + 1
        by_key = {(w.namespace, w.name): w.uid for w in workloads}
        for item in (answer or {}).get("items") or []:
            meta = item.get("metadata") or {}
            uid = by_key.get((meta.get("namespace"), meta.get("name")))
            if uid is not None and isinstance(item.get("positionInClusterQueue"), int):
                out[uid] = (item["positionInClusterQueue"], "visibility")
        for i, w in enumerate(sorted(workloads, key=queue_order)):
            out.setdefault(w.uid, (i, "computed"))
    sources = {src for _pos, src in out.values()}
    return out, "+".join(sorted(sources))


def queue_sync(backend: KubeBackend | None = None, *, now: dt.datetime | None = None
               ) -> QueueSyncReport:
    """Read Kueue's view of every followed allocation and record what changed."""
    backend = backend or get_backend()
    report = QueueSyncReport()
    if isinstance(backend, DryRunBackend):
        # Nothing runs behind a dry run: reading it would only erase what is known.
        report.skipped = "the dry-run backend runs no workloads"
        return report
    started = time.monotonic()
    selector = f"{MANAGED_BY}={MANAGER}"
    base = f"/apis/{KUEUE}"
    cq_objs = backend.list_path(f"{base}/clusterqueues", label_selector=selector)
    lq_objs = backend.list_path(f"{base}/localqueues", label_selector=selector)
    report.cohorts = len(backend.list_path(f"{base}/cohorts"))
    wl_objs = backend.list_path(f"{base}/workloads")
    report.timings["list"] = time.monotonic() - started
    now = now or timezone.now()

    allocations = {a.namespace: a for a in Allocation.objects.filter(status__in=FOLLOWED)}
    cluster_queue_of = {((o["metadata"].get("namespace", "")), o["metadata"]["name"]):
                        (o.get("spec") or {}).get("clusterQueue", "") for o in lq_objs}
    facts = [parse_workload(o, cluster_queue_of=cluster_queue_of) for o in wl_objs
             if (o.get("metadata") or {}).get("namespace") in allocations]
    queues = held_by_admissions({q.name: q for q in (parse_cluster_queue(o) for o in cq_objs)},
                                facts, followed=set(allocations))
    report.workloads, report.queues = len(facts), len(queues)

    pending: dict[str, list[WorkloadFacts]] = defaultdict(list)
    for f in facts:
        if f.state == PENDING and f.cluster_queue:
            pending[f.cluster_queue].append(f)
    known = {r[0]: (r[1], r[2], r[3]) for r in QueueWorkload.objects.filter(
        state=QueueWorkload.State.PENDING).values_list("uid", "cluster_queue", "position",
                                                       "position_source")}
    positions, report.positions = _positions(backend, pending, known)
    placements = _placements(backend, facts)
    report.timings["read"] = time.monotonic() - started

    with transaction.atomic():
        states = {s.name: s for s in ClusterQueueState.objects.select_for_update()}
        _integrate_usage(states, now)
        _store_queues(queues, states, allocations, now)
        report.changed, report.events = _store_workloads(facts, queues, positions,
                                                         allocations, now, placements)
        report.timings["store"] = time.monotonic() - started
        first_estimates(now)
    report.seconds = time.monotonic() - started
    return report


def _placements(backend: KubeBackend, facts: list[WorkloadFacts]) -> dict[str, Placement]:
    """Workload uid → the steps its current admission took after Kueue (pods, claims,
    node, start), read from the Pods and ResourceClaims of the followed namespaces."""
    admitted = [f for f in facts if f.admitted_at and f.job]
    # Admissions whose steps are all recorded need no pods read (a finished history costs
    # nothing on each sync).
    done = set(QueueWorkload.objects.filter(
        uid__in=[f.uid for f in admitted], scheduled_at__isnull=False,
        running_at__isnull=False).values_list("uid", "admitted_at"))
    admitted = [f for f in admitted if (f.uid, f.admitted_at) not in done]
    if not admitted:
        return {}
    namespaces = {f.namespace for f in admitted}
    try:
        pods = {key: found for key, found in pods_by_job(
            [p for label in JOB_LABELS[:1] for p in backend.list_path(
                "/api/v1/pods", label_selector=label)]).items() if key[0] in namespaces}
    except KubeError as exc:  # e.g. an older ClusterRole without pods: Kueue's view stands
        log.warning("workload ledger: pods not readable (%s); steps after admission skipped",
                    exc)
        return {}
    try:
        claims = claims_by_pod([c for c in backend.list_path(
            "/apis/resource.k8s.io/v1/resourceclaims")
            if (c.get("metadata") or {}).get("namespace") in namespaces])
    except KubeError:  # a cluster without DRA's v1 API: no claims to follow
        claims = {}
    return {f.uid: placement_of(pods.get((f.namespace, f.job), []), claims, f.admitted_at)
            for f in admitted}


def _stored_placement(row: QueueWorkload | None, f: WorkloadFacts) -> Placement:
    """What the row holds for the same admission (a new admission starts from nothing)."""
    if row is None or row.admitted_at != f.admitted_at:
        return NOTHING
    return Placement(pods_at=row.pods_at, scheduled_at=row.scheduled_at, node=row.node,
                     claimed_at=row.claimed_at,
                     devices=tuple(d for d in row.devices_allocated.split("\n") if d),
                     running_at=row.running_at)


def _placement_values(p: Placement) -> dict:
    return {"pods_at": p.pods_at, "scheduled_at": p.scheduled_at, "node": p.node[:253],
            "claimed_at": p.claimed_at, "devices_allocated": "\n".join(p.devices),
            "running_at": p.running_at}


PLACED = ("pods_at", "scheduled_at", "node", "claimed_at", "devices_allocated", "running_at")


def _store_queues(queues: dict[str, QueueFacts], states: dict[str, ClusterQueueState],
                  allocations: dict[str, Allocation], now: dt.datetime) -> None:
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
        ClusterQueueState.objects.exclude(name__in=list(queues)).update(allocation=None)
    ClusterQueueState.objects.bulk_create(create)
    ClusterQueueState.objects.bulk_update(update, fields, batch_size=200)
    # Every queue read now (the queue-hours integrate from this moment on).
    ClusterQueueState.objects.filter(name__in=list(queues)).update(observed_at=now)


def _store_workloads(facts: list[WorkloadFacts], queues: dict[str, QueueFacts],
                     positions: dict[str, tuple[int, str]],
                     allocations: dict[str, Allocation], now: dt.datetime,
                     placements: dict[str, Placement] | None = None) -> tuple[int, int]:
    seen = {f.uid for f in facts}
    rows = {r.uid: r for r in QueueWorkload.objects.filter(
        allocation__status__in=FOLLOWED).exclude(state=QueueWorkload.State.GONE)}
    rows |= {r.uid: r for r in QueueWorkload.objects.filter(uid__in=seen)}
    create, update, events = [], [], []
    changed = 0
    for f in facts:
        alloc = allocations[f.namespace]
        row = rows.get(f.uid)
        q = queues.get(f.cluster_queue)
        borrowed = q.borrowed if q else Decimal(0)
        old = row_facts(row) if row else None
        for e in transition_events(old, f, now=now, borrowed=borrowed):
            events.append(QueueEvent(allocation=alloc, **e))
        stored = _stored_placement(row, f)
        placed = (placements or {}).get(f.uid, stored)
        # A step once recorded for this admission stays (its pods may be gone by now).
        placed = Placement(*(getattr(placed, k) or getattr(stored, k)
                             for k in Placement.__dataclass_fields__))
        if f.admitted_at:
            for e in placement_events(stored, placed, admitted_at=f.admitted_at, base={
                    "workload_uid": f.uid, "workload": f.display_name,
                    "local_queue": f.local_queue, "priority": f.priority,
                    "devices": f.devices}):
                events.append(QueueEvent(allocation=alloc, **e))
        position, source = positions.get(f.uid, (None, "")) if f.state == PENDING else \
            (None, "")
        if row is None:
            changed += 1
            create.append(QueueWorkload(
                allocation=alloc, uid=f.uid, namespace=f.namespace, name=f.name,
                submitted_at=f.submitted_at, observed_at=now, position=position,
                position_source=source, **_values(f), **_placement_values(placed)))
            continue
        values = {**_values(f), **_placement_values(placed)}
        dirty = row.resource_version != f.resource_version or row.position != position or \
            row.position_source != source or placed != stored
        if dirty:
            changed += 1
            for k, v in values.items():
                setattr(row, k, v)
            row.position = position
            row.position_source = source
            row.observed_at = now
            update.append(row)
    for uid, row in rows.items():
        if uid not in seen and row.state != QueueWorkload.State.GONE:
            changed += 1
            if row.state != QueueWorkload.State.FINISHED:
                events.append(QueueEvent(
                    allocation_id=row.allocation_id, workload_uid=row.uid,
                    workload=row.job or row.name, local_queue=row.local_queue,
                    priority=row.priority, kind=QueueEvent.Kind.GONE, at=now,
                    devices=row.devices, reason="Deleted (its job was removed)."))
            row.state, row.position, row.observed_at = QueueWorkload.State.GONE, None, now
            update.append(row)
    QueueWorkload.objects.bulk_create(create)
    QueueWorkload.objects.bulk_update(
        update, [*APPLIED, *PLACED, "position", "position_source", "observed_at"],
        batch_size=500)
    QueueEvent.objects.bulk_create(events, batch_size=500)
    return changed, len(events)
