"""After admission: what Kubernetes itself recorded about a workload's pods and device claims,
read as plain data (pure, no database).

Kueue's Workload stops at admission. The rest of the way — the Job's pods created, a
ResourceClaim allocated a device by the scheduler, the pod bound to a node, its container
started — is in the Pods and ResourceClaims, with the times Kubernetes wrote:
- pods created: the Pod's `metadata.creationTimestamp`;
- scheduled: the Pod's `PodScheduled` condition (`lastTransitionTime`) and `spec.nodeName`;
- devices allocated: the claim's `status.allocation` and the time of the status write that
  set it (its `managedFields` entry; Kubernetes keeps no other allocation timestamp);
- running: the container's `startedAt` (running or, for a pod already done, terminated).

A workload may be admitted more than once (evicted, requeued, readmitted): only pods created
at or after the current admission count, so each admission has its own steps.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from ..vocabulary import LedgerEvent
from .timing import RECORDED_BY, Clue
from .truth import _d, _l, _s, parse_time

JOB_LABELS = ("batch.kubernetes.io/job-name", "job-name")
# Pods are created after their admission; a clock a little apart between Kueue and the
# controllers must not drop the first pod of an admission.
SKEW = dt.timedelta(seconds=2)


@dataclass(frozen=True)
class Placement:
    """The steps of one admission, from the first pod's point of view (None: not yet)."""

    pods_at: dt.datetime | None = None
    scheduled_at: dt.datetime | None = None
    node: str = ""
    claimed_at: dt.datetime | None = None
    devices: tuple[str, ...] = ()
    running_at: dt.datetime | None = None


NOTHING = Placement()


def job_of(pod: dict) -> str:
    labels = _d(_d(pod.get("metadata")).get("labels"))
    return next((_s(labels.get(k)) for k in JOB_LABELS if _s(labels.get(k))), "")


def _started(pod: dict) -> dt.datetime | None:
    times = []
    for c in _l(_d(pod.get("status")).get("containerStatuses")):
        state = _d(c.get("state"))
        t = parse_time(_d(state.get("running")).get("startedAt")) or \
            parse_time(_d(state.get("terminated")).get("startedAt"))
        if t:
            times.append(t)
    return min(times) if times else None


def _scheduled(pod: dict) -> dt.datetime | None:
    for c in _l(_d(pod.get("status")).get("conditions")):
        if c.get("type") == "PodScheduled" and c.get("status") == "True":
            return parse_time(c.get("lastTransitionTime"))
    return None


def claim_allocation(claim: dict) -> tuple[dt.datetime | None, tuple[str, ...]]:
    """When a claim was allocated (its status write) and which devices ('driver: device on
    pool'); (None, ()) if it is not allocated."""
    status = _d(claim.get("status"))
    results = _l(_d(_d(status.get("allocation")).get("devices")).get("results"))
    if not results:
        return None, ()
    devices = tuple(sorted(f"{_s(r.get('driver'))}: {_s(r.get('device'))} on "
                           f"{_s(r.get('pool'))}" for r in results))
    writes = [parse_time(m.get("time")) for m in _l(_d(claim.get("metadata")).get(
        "managedFields")) if m.get("subresource") == "status" and
        "f:allocation" in _d(_d(m.get("fieldsV1")).get("f:status"))]
    writes = [t for t in writes if t]
    return (min(writes) if writes else None), devices


def claims_by_pod(claims: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """(namespace, pod name) → the claims made for it from a template (owned by the pod)."""
    out: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for c in claims:
        meta = _d(c.get("metadata"))
        for o in _l(meta.get("ownerReferences")):
            if o.get("kind") == "Pod":
                out[(_s(meta.get("namespace")), _s(o.get("name")))].append(c)
    return out


def pods_by_job(pods: list[dict]) -> dict[tuple[str, str], list[dict]]:
    out: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for p in pods:
        job = job_of(p)
        if job:
            out[(_s(_d(p.get("metadata")).get("namespace")), job)].append(p)
    return out


def placement_of(pods: list[dict], claims: dict[tuple[str, str], list[dict]],
                 admitted_at: dt.datetime | None) -> Placement:
    """The steps of the admission that began at `admitted_at`, from its pods and claims."""
    if admitted_at is None:
        return NOTHING
    current = [p for p in pods
               if (parse_time(_d(p.get("metadata")).get("creationTimestamp")) or admitted_at)
               >= admitted_at - SKEW]
    if not current:
        return NOTHING
    created = [parse_time(_d(p.get("metadata")).get("creationTimestamp")) for p in current]
    scheduled = sorted((t, _s(_d(p.get("spec")).get("nodeName")))
                       for p in current if (t := _scheduled(p)))
    started = [t for p in current if (t := _started(p))]
    allocated, devices = [], set()
    for p in current:
        meta = _d(p.get("metadata"))
        for c in claims.get((_s(meta.get("namespace")), _s(meta.get("name"))), []):
            at, found = claim_allocation(c)
            if found:
                devices.update(found)
                if at:
                    allocated.append(at)
    return Placement(
        pods_at=min((t for t in created if t), default=None),
        scheduled_at=scheduled[0][0] if scheduled else None,
        node=scheduled[0][1] if scheduled else "",
        claimed_at=min(allocated) if allocated else None,
        devices=tuple(sorted(devices)),
        running_at=min(started) if started else None)


def _secs(later: dt.datetime | None, earlier: dt.datetime | None) -> float | None:
    if later is None or earlier is None:
        return None
    return max(0.0, (later - earlier).total_seconds())


def placement_events(old: Placement, new: Placement, *, admitted_at: dt.datetime,
                     base: dict) -> list[dict]:
    """The ledger rows for the steps `new` has that `old` (what was stored for the same
    admission) had not, each with the seam it closes in seconds. Pure."""
    events = []
    for kind, at, since, present in (
            (LedgerEvent.PODS, new.pods_at, admitted_at, old.pods_at),
            (LedgerEvent.CLAIMED, new.claimed_at, new.pods_at, old.claimed_at),
            (LedgerEvent.SCHEDULED, new.scheduled_at, new.pods_at, old.scheduled_at),
            (LedgerEvent.RUNNING, new.running_at, admitted_at, old.running_at)):
        if at and not present:
            s = _secs(at, since)
            events.append({**base, "kind": kind, "at": at, "seam_seconds": s,
                           "reason": step_reason(kind, s, new),
                           **({"detail": new.node} if kind == LedgerEvent.SCHEDULED else {})})
    return events


def step_reason(kind: str, seconds: float | None, p: Placement) -> str:
    """A step after admission in words, with the seam it closes."""
    if kind == LedgerEvent.PODS:
        return f"Pods created, {_words(seconds)} after admission."
    if kind == LedgerEvent.CLAIMED:
        return (f"Devices allocated to its claim ({'; '.join(p.devices)}), "
                f"{_words(seconds)} after its pods were created.")
    if kind == LedgerEvent.SCHEDULED:
        return (f"Placed on node {p.node or 'unknown'} by the scheduler, "
                f"{_words(seconds)} after its pods were created.")
    return f"Running, {_words(seconds)} after admission."


def _words(seconds: float | None) -> str:
    if seconds is None:
        return "an unknown time"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


# The seams a ledger measures, in the order a workload meets them: (code, label, what).
# Two of the seven the platform's brief lists need real hardware and are not measured here:
# all-reduce latency and inference cold start (docs/ledger.md).
SEAMS: tuple[tuple[str, str, str], ...] = (
    ("admitted", "Queue wait", "queued (or requeued) → admitted by Kueue"),
    ("pods", "Pods created", "admitted → its pods created"),
    ("claimed", "Device allocation", "pods created → claim allocated a device"),
    ("scheduled", "Scheduling", "pods created → bound to a node"),
    ("running", "Pod start", "admitted → container running"),
    ("recovery", "Preemption recovery", "preempted or evicted → running again"),
)
STOPS = ("preempted", "evicted")


def recoveries(steps: list[tuple[str, str, dt.datetime]]) -> list[tuple[dt.datetime, float]]:
    """(when running again, seconds since it was stopped) from (workload uid, kind, at)
    rows, for every stop followed by a run of the same workload. Pure."""
    stopped: dict[str, dt.datetime] = {}
    out = []
    for uid, kind, at in sorted(steps, key=lambda r: (r[0], r[2])):
        if kind in STOPS:
            stopped.setdefault(uid, at)
        elif kind == "running" and uid in stopped:
            out.append((at, max(0.0, (at - stopped.pop(uid)).total_seconds())))
    return out


@dataclass(frozen=True)
class Preemptions:
    """What stops cost one workload, from its ledger."""

    preempted: int = 0  # times Kueue preempted it
    evicted: int = 0  # other stops (time limit, pods-ready timeout, node failure, …)
    lost_seconds: float = 0.0  # run time lost: from its start to each stop

    @property
    def stops(self) -> int:
        return self.preempted + self.evicted

    def fields(self) -> dict:
        """As a job's ledger carries it in the API."""
        return {"preemptions": self.preempted, "stops": self.stops,
                "lost_run_seconds": self.lost_seconds}


def preemption_tally(steps: list[tuple[str, dt.datetime]]) -> Preemptions:
    """Preemptions, other stops and the run time they cost one workload, from its ledger
    steps (kind, at) in time order. Pure. A stop loses the time the workload had run since
    its latest start ("running") in the admission it ends — work not checkpointed is
    redone; a stop before it ran, or while its start was never seen, loses none."""
    preempted = evicted = 0
    lost = 0.0
    started: dt.datetime | None = None
    for kind, at in steps:
        if kind == LedgerEvent.ADMITTED:
            started = None
        elif kind == LedgerEvent.RUNNING and started is None:
            started = at
        elif kind in STOPS:
            preempted += kind == LedgerEvent.PREEMPTED
            evicted += kind == LedgerEvent.EVICTED
            if started is not None:
                lost += max(0.0, (at - started).total_seconds())
            started = None
    return Preemptions(preempted, evicted, lost)


Seen = Callable[[str, dict, str], dt.datetime | None]
EventTimes = Callable[[str, str, str, tuple[str, ...]], tuple[dt.datetime, ...]]


def placement_clues(pods: list[dict], claims: dict[tuple[str, str], list[dict]],
                    admitted_at: dt.datetime | None, *, seen: Seen, events: EventTimes
                    ) -> dict[str, Clue]:
    """What the watch saw of the steps `placement_of` reads from the same pods and claims:
    for each step, the earliest arrival of a version showing it (of any of the admission's
    pods: each is later than the first pod's step) and the Events recording it
    (fleet.queues.timing.RECORDED_BY). `seen(kind, obj, mark)`: when the watch received the
    first version of `obj` showing `mark` (None: never, or read by a list);
    `events(namespace, kind, name, reasons)`: eventTimes. Pure."""
    if admitted_at is None:
        return {}
    current = [p for p in pods
               if (parse_time(_d(p.get("metadata")).get("creationTimestamp")) or admitted_at)
               >= admitted_at - SKEW]
    if not current:
        return {}

    def earliest(objs, kind: str, mark: str) -> dt.datetime | None:
        return min((t for o in objs if (t := seen(kind, o, mark)) is not None), default=None)

    def recorded(step: str, objs) -> tuple[dt.datetime, ...]:
        about, reasons = RECORDED_BY[step]
        return tuple(t for o in objs for t in events(
            _s(_d(o.get("metadata")).get("namespace")), about,
            _s(_d(o.get("metadata")).get("name")) if about == "Pod" else job_of(o), reasons))

    placed = [p for p in current if _scheduled(p)]
    started = [p for p in current if _started(p)]
    allocated = [c for p in current for c in claims.get(
        (_s(_d(p.get("metadata")).get("namespace")), _s(_d(p.get("metadata")).get("name"))), [])
        if claim_allocation(c)[1]]
    return {LedgerEvent.PODS: Clue(earliest(current, "pods", "created"),
                                   recorded(LedgerEvent.PODS, current[:1])),
            LedgerEvent.SCHEDULED: Clue(earliest(placed, "pods", "PodScheduled=True"),
                                        recorded(LedgerEvent.SCHEDULED, placed)),
            LedgerEvent.RUNNING: Clue(earliest(started, "pods", "started"),
                                      recorded(LedgerEvent.RUNNING, started)),
            LedgerEvent.CLAIMED: Clue(earliest(allocated, "claims", "allocated"))}
