"""Queue truth, the pure part: what Kueue's objects say about a tenant's work, in the
tenant's words.

Everything here works on plain data (the API server's JSON, dataclasses): parsing a Workload,
explaining why it waits or why it was stopped, estimating when it starts, and summarising a
cohort. Two rules hold throughout:

* A tenant's explanation is built from numbers and from the tenant's *own* workload names;
  Kueue's raw messages (which name other queues, e.g. on reclaim) never reach it. Peers are
  "the cohort".
* Amounts are in the allocation's device unit: whole devices, or slices of its MIG profile.

Long on purpose: the parsers of Kueue's objects and the sentences written from what they
parse stay side by side, so a field read and the words that explain it change together.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from ..domain import quantity
from ..vocabulary import MIG_RESOURCE_PREFIX as MIG_PREFIX
from ..vocabulary import WHOLE_GPU, WorkloadState

PENDING, ADMITTED, FINISHED, GONE = (WorkloadState.PENDING, WorkloadState.ADMITTED,
                                     WorkloadState.FINISHED, WorkloadState.GONE)
# Kueue stopped it for good (`spec.active: false`): it is not waiting and will not start
# until someone reactivates it. Never shown as waiting, never given a position.
DEACTIVATED = WorkloadState.DEACTIVATED
# Evicted or preempted, its quota still reserved while its pods stop: never "running".
STOPPING = WorkloadState.STOPPING
HOLDING = WorkloadState.HOLDING
# The portal's own reason code for a workload whose quota the MultiKueue manager reserved
# while no worker has admitted it yet (Kueue leaves QuotaReserved's reason at its admitted
# value there).
DISPATCHING = "Dispatching"


def is_device_resource(name: str) -> bool:
    return name == WHOLE_GPU or name.startswith(MIG_PREFIX)


def _d(value) -> dict:
    return value if isinstance(value, dict) else {}


def _l(value) -> list:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _s(value) -> str:
    return value if isinstance(value, str) else ""


def parse_time(value) -> dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    # Kubernetes writes UTC with a Z; a time without an offset is read as UTC too, never
    # in the portal's own time zone.
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def _conditions(obj: dict) -> dict[str, dict]:
    return {_s(c.get("type")): c for c in _l(_d(obj.get("status")).get("conditions"))}


@dataclass(frozen=True)
class Stop:
    """One eviction of a workload: Kueue's reason codes and when."""

    at: dt.datetime | None
    reason: str  # the Evicted condition's reason: Preempted, PodsReadyTimeout, ...
    preemption: str = ""  # the Preempted condition's reason: InCohortReclamation, ...
    raw: str = ""  # Kueue's message, for platform admins only

    @property
    def preempted(self) -> bool:
        return self.reason == "Preempted" or bool(self.preemption)


@dataclass(frozen=True)
class WorkloadFacts:
    uid: str
    namespace: str
    name: str
    job: str  # the owning Job's name, what the tenant knows it by
    local_queue: str
    cluster_queue: str
    priority: int
    submitted_at: dt.datetime | None
    devices: Decimal
    state: str
    admitted_at: dt.datetime | None = None
    finished_at: dt.datetime | None = None
    max_seconds: int | None = None
    pending_reason: str = ""  # QuotaReserved=False reason code
    pending_raw: str = ""  # its message (admins only)
    stop: Stop | None = None  # the latest eviction still in force
    requeued_at: dt.datetime | None = None
    resource_version: str = ""
    # MultiKueue, on the manager: where a worker admitted it, the workers tried, and the
    # admission check's state, message and time.
    ran_on: str = ""
    nominated: tuple[str, ...] = ()
    dispatch_state: str = ""
    dispatch_message: str = ""
    dispatched_at: dt.datetime | None = None
    worker_views: tuple[tuple[str, str], ...] = ()  # (worker, why it waits there)

    @property
    def display_name(self) -> str:
        return self.job or self.name


def workload_devices(obj: dict) -> Decimal:
    """Devices (or MIG slices) a Workload holds if admitted, else what it asks for."""
    status = _d(obj.get("status"))
    admission = _d(status.get("admission"))
    if admission:
        return sum((quantity(v) for ps in _l(admission.get("podSetAssignments"))
                    for k, v in _d(ps.get("resourceUsage")).items()
                    if is_device_resource(k)), Decimal(0))
    requested = _l(status.get("resourceRequests"))
    if requested:
        return sum((quantity(v) for ps in requested
                    for k, v in _d(ps.get("resources")).items()
                    if is_device_resource(k)), Decimal(0))
    total = Decimal(0)
    for ps in _l(_d(obj.get("spec")).get("podSets")):
        count = quantity(ps.get("count")) or Decimal(1)
        pod = _d(_d(ps.get("template")).get("spec"))
        per_pod = Decimal(0)
        for container in _l(pod.get("containers")):
            requests = _d(_d(container.get("resources")).get("requests"))
            per_pod += sum((quantity(v) for k, v in requests.items()
                            if is_device_resource(k)), Decimal(0))
        # A MIG claim (one device of the profile per claim, as the portal renders templates).
        per_pod += len([c for c in _l(pod.get("resourceClaims"))
                        if c.get("resourceClaimTemplateName")])
        total += count * per_pod
    return total


def is_deactivation(reason: str) -> bool:
    """Kueue's eviction reasons for a deactivated workload: `Deactivated` (set inactive by
    someone), `DeactivatedDueTo<Cause>` (by Kueue itself), `InactiveWorkload` (older)."""
    return reason in ("Deactivated", "InactiveWorkload") or reason.startswith("DeactivatedDueTo")


def workload_state(cond: dict[str, dict], *, active: bool, admission: bool,
                   checks: bool = False) -> str:
    """The state of a Workload, decided from Kueue's conditions (by type), `spec.active`,
    whether `status.admission` is set and whether it has admission checks. Pure; the table
    in docs/ledger.md:

    1. `Finished` True: finished.
    2. `spec.active` false, or `Evicted` True for a deactivation: deactivated (Seen from
       Kueue v0.17: QuotaReserved and Admitted stay True while its pods stop; it is already
       not running work, and never will again unless reactivated).
    3. `QuotaReserved` True with an admission, and `Admitted` True or no admission checks
       (behind a check — MultiKueue's, on a manager — reserved quota is not yet admission:
       it waits for a worker): `Evicted` or `Preempted` True — stopping (Kueue evicted it;
       the quota stays reserved until its job is no longer active, so its pods may still
       run); else admitted.
    4. Otherwise pending (waiting, dispatching, or back in the queue after a stop).
    """
    def true(kind: str) -> bool:
        return (cond.get(kind) or {}).get("status") == "True"

    if true("Finished"):
        return FINISHED
    if not active or (true("Evicted") and is_deactivation(
            _s((cond.get("Evicted") or {}).get("reason")))):
        return DEACTIVATED
    if true("QuotaReserved") and admission and (true("Admitted") or not checks):
        return STOPPING if true("Evicted") or true("Preempted") else ADMITTED
    return PENDING


def parse_workload(obj: dict, *, cluster_queue_of: dict[tuple[str, str], str]) -> WorkloadFacts:
    """Read one Workload. `cluster_queue_of` maps (namespace, LocalQueue) to its ClusterQueue,
    for workloads not yet admitted."""
    meta = _d(obj.get("metadata"))
    spec = _d(obj.get("spec"))
    status = _d(obj.get("status"))
    cond = _conditions(obj)
    namespace = _s(meta.get("namespace"))
    local_queue = _s(spec.get("queueName"))
    admission = _d(status.get("admission"))
    cluster_queue = _s(admission.get("clusterQueue")) or cluster_queue_of.get(
        (namespace, local_queue), "")
    owners = _l(meta.get("ownerReferences"))
    job = next((_s(o.get("name")) for o in owners if o.get("controller")), "") or \
        next((_s(o.get("name")) for o in owners), "")

    def true(kind: str) -> bool:
        return (cond.get(kind) or {}).get("status") == "True"

    checks = [_d(c) for c in _l(status.get("admissionChecks"))]
    waiting_check = next((c for c in checks if c.get("state") != "Ready"), None)
    dispatch = waiting_check or (checks[0] if checks else {})
    # `spec.active` is the truth Kueue acts on; the eviction reason says why.
    state = workload_state(cond, active=spec.get("active") is not False,
                           admission=bool(admission), checks=bool(checks))
    reserved_waiting = state == PENDING and true("QuotaReserved") and waiting_check
    stop = None
    evicted = cond.get("Evicted")
    preempted = cond.get("Preempted") or {}
    if evicted and evicted.get("status") == "True" or \
            (evicted and state in (PENDING, DEACTIVATED) and evicted.get("reason")):
        stop = Stop(at=parse_time(evicted.get("lastTransitionTime")),
                    reason=_s(evicted.get("reason")),
                    preemption=_s(preempted.get("reason")) if preempted.get("status") == "True"
                    or evicted.get("reason") == "Preempted" else "",
                    raw=_s(evicted.get("message")) or _s(preempted.get("message")))
    elif state == STOPPING:  # Preempted set before Evicted (Kueue writes both at once)
        stop = Stop(at=parse_time(preempted.get("lastTransitionTime")), reason="Preempted",
                    preemption=_s(preempted.get("reason")), raw=_s(preempted.get("message")))
    reserved = cond.get("QuotaReserved") or {}
    admitted_cond = cond.get("Admitted") or {}
    admitted_at = parse_time(admitted_cond.get("lastTransitionTime")) if \
        admitted_cond.get("status") == "True" else None
    if state in HOLDING and admitted_at is None:
        admitted_at = parse_time(reserved.get("lastTransitionTime"))
    requeued = cond.get("Requeued") or {}
    requeued_at = parse_time(requeued.get("lastTransitionTime")) \
        if requeued.get("status") == "True" else None
    released = parse_time(reserved.get("lastTransitionTime")) \
        if reserved.get("status") == "False" else None
    if state == PENDING and stop and stop.at and released and released >= stop.at:
        # Back in the queue after this stop: when its quota was released (Kueue keeps the
        # Requeued condition True from an earlier requeue without a new time).
        requeued_at = max(requeued_at or released, released)
    priority = spec.get("priority")
    max_seconds = spec.get("maximumExecutionTimeSeconds")
    return WorkloadFacts(
        uid=_s(meta.get("uid")), namespace=namespace, name=_s(meta.get("name")), job=job,
        local_queue=local_queue, cluster_queue=cluster_queue,
        priority=priority if isinstance(priority, int) and not isinstance(priority, bool)
        else 0,
        submitted_at=parse_time(meta.get("creationTimestamp")),
        devices=workload_devices(obj), state=state,
        admitted_at=admitted_at if state in (*HOLDING, FINISHED) else None,
        finished_at=parse_time((cond.get("Finished") or {}).get("lastTransitionTime"))
        if state == FINISHED else None,
        max_seconds=max_seconds if isinstance(max_seconds, int) and max_seconds > 0 else None,
        pending_reason=(DISPATCHING if reserved_waiting else _s(reserved.get("reason")))
        if state == PENDING else "",
        pending_raw=(_s(waiting_check.get("message")) if reserved_waiting
                     else _s(reserved.get("message"))) if state == PENDING else "",
        stop=stop,
        requeued_at=requeued_at,
        resource_version=_s(meta.get("resourceVersion")),
        ran_on=_s(status.get("clusterName")),
        nominated=tuple(sorted(n for n in status.get("nominatedClusterNames") or ()
                               if isinstance(n, str))) if isinstance(
            status.get("nominatedClusterNames"), list) else (),
        dispatch_state=_s(dispatch.get("state")), dispatch_message=_s(dispatch.get("message")),
        dispatched_at=parse_time(dispatch.get("lastTransitionTime"))
        if status.get("clusterName") else None)


@dataclass(frozen=True)
class QueueFacts:
    """One ClusterQueue as the portal renders it: one per allocation."""

    name: str
    cohort: str
    resource: str
    nominal: Decimal
    borrowing_limit: Decimal | None  # None: no limit stated (only with a cohort)
    usage: Decimal  # devices admitted now, borrowed ones included
    borrowed: Decimal
    pending: int = 0
    admitted: int = 0
    active: bool = True
    inactive_reason: str = ""

    @property
    def free(self) -> Decimal:
        return max(Decimal(0), self.nominal - self.usage)

    @property
    def in_whole_devices(self) -> bool:
        """Counted in whole devices (else in slices of a MIG profile)."""
        return self.resource == WHOLE_GPU

    @property
    def ceiling(self) -> Decimal:
        if not self.cohort:
            return self.nominal
        if self.borrowing_limit is None:
            return Decimal("Infinity")
        return self.nominal + self.borrowing_limit


def parse_cluster_queue(obj: dict) -> QueueFacts:
    spec = _d(obj.get("spec"))
    status = _d(obj.get("status"))
    resource, nominal, limit = "", Decimal(0), None
    for group in _l(spec.get("resourceGroups")):
        for flavor in _l(group.get("flavors")):
            for r in _l(flavor.get("resources")):
                if is_device_resource(_s(r.get("name"))):
                    resource = r["name"]
                    nominal += quantity(r.get("nominalQuota"))
                    if r.get("borrowingLimit") is not None:
                        limit = (limit or Decimal(0)) + quantity(r.get("borrowingLimit"))
    usage = borrowed = Decimal(0)
    for flavor in _l(status.get("flavorsReservation")) or _l(status.get("flavorsUsage")):
        for r in _l(flavor.get("resources")):
            if r.get("name") == resource:
                usage += quantity(r.get("total"))
                borrowed += quantity(r.get("borrowed"))
    active = _conditions(obj).get("Active") or {}
    return QueueFacts(
        name=_s(_d(obj.get("metadata")).get("name")), cohort=_s(spec.get("cohortName")),
        resource=resource, nominal=nominal, borrowing_limit=limit, usage=usage,
        borrowed=borrowed, pending=int(status.get("pendingWorkloads") or 0),
        admitted=int(status.get("admittedWorkloads") or 0),
        active=active.get("status", "True") != "False",
        inactive_reason=_s(active.get("reason")) if active.get("status") == "False" else "")


# -- words ---------------------------------------------------------------------------------

def amount(n: Decimal | int, unit: str) -> str:
    """'1 device', '3 devices', '2 × 1g.10gb slices'."""
    n = Decimal(n)
    if n == n.to_integral_value():
        text = str(int(n))
    else:
        text = f"{n.normalize():f}"
    if unit.startswith(MIG_PREFIX):
        profile = unit[len(MIG_PREFIX):]
        return f"{text} × {profile} slice{'' if n == 1 else 's'}"
    return f"{text} device{'' if n == 1 else 's'}"


def more(n: Decimal | int, unit: str) -> str:
    """'2 more devices', '1 more 2g.20gb slice'."""
    text = amount(n, unit).split(" ", 1)[0]
    one = Decimal(n) == 1
    if unit.startswith(MIG_PREFIX):
        return f"{text} more {unit[len(MIG_PREFIX):]} slice{'' if one else 's'}"
    return f"{text} more device{'' if one else 's'}"


def _clock(t: dt.datetime | None, now: dt.datetime) -> str:
    if t is None:
        return "an unknown time"
    if t.date() == now.date():
        return t.strftime("%H:%M")
    return t.strftime("%Y-%m-%d %H:%M")


def duration(seconds: float) -> str:
    if 0 < seconds < 0.9995:  # seams are often sub-second, timed to the millisecond
        return f"{max(1, round(seconds * 1000))} ms"
    if 0 < seconds < 10 and seconds != int(seconds):
        return f"{seconds:.1f} s"
    seconds = max(0, int(seconds))
    if seconds < 90:
        return f"{seconds} s"
    minutes = round(seconds / 60)
    if minutes < 90:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


# Kueue's reasons for a ClusterQueue's `Active` condition being False (v0.17), in a tenant's
# words; any other reason is quoted as Kueue gave it.
INACTIVE_QUEUE_WORDS = {
    "Stopped": "the platform team has stopped it",
    "Terminating": "it is being deleted",
    "FlavorNotFound": "Kueue has not found its resource flavor yet (usual for the first "
                      "seconds after a queue is made)",
    "AdmissionCheckNotFound": "a check it needs before admitting (the dispatch to worker "
                              "clusters) does not exist yet",
    "AdmissionCheckInactive": "a check it needs before admitting (the dispatch to worker "
                              "clusters) is not active yet",
}


def inactive_queue_words(reason: str) -> str:
    """Why nothing is admitted from a queue Kueue reports inactive: Kueue's reason in words,
    and the reason itself (nobody is told by the portal; the page says what Kueue says)."""
    why = INACTIVE_QUEUE_WORDS.get(reason, "Kueue reports it inactive")
    return (f"The queue of this allocation is not accepting work right now: {why} (Kueue: "
            f"{reason or 'no reason given'}). Nothing is admitted until Kueue reports it "
            "active again.")


# Before any work reached a queue: what a tenant who just submitted its first Job sees
# nothing of. The wait Kueue's own rate limit makes leaves no reason anywhere the portal
# reads (measured: docs/deploy.md).
FIRST_WORK_WORDS = (
    "No work has reached this queue yet. A Job submitted to its LocalQueue shows here once "
    "Kueue has made a Workload for it: within a second or two on a quiet platform. Right "
    "after many allocations are provisioned together Kueue can take tens of seconds, as it "
    "paces its own calls to the cluster, and it records no reason while it does "
    "(kubectl get workloads in the namespace shows what Kueue has made so far).")


@dataclass(frozen=True)
class Waiting:
    """Why one pending workload waits, in the tenant's words, and a code for filters."""

    code: str  # never | queue-stopped | behind | quota | cohort | deactivated | starting
    text: str
    short: Decimal = Decimal(0)  # devices still missing


def explain_pending(w: WorkloadFacts, queue: QueueFacts, *, own_running:
                    Sequence[WorkloadFacts], ahead: Sequence[WorkloadFacts],
                    cohort_free: Decimal, now: dt.datetime,
                    lent: Decimal = Decimal(0)) -> Waiting:
    """Why `w` waits. `cohort_free` is what the rest of the cohort could lend right now
    (its unused nominal quota), `lent` how much of this queue's unused quota others borrow
    meanwhile (Kueue reclaims it for work that fits the quota); never who holds what."""
    unit = queue.resource
    if not queue.active:
        return Waiting("queue-stopped", inactive_queue_words(queue.inactive_reason))
    if w.state == DEACTIVATED or w.pending_reason in ("Inactive", "Deactivated") or (
            w.stop and is_deactivation(w.stop.reason)):
        return Waiting("deactivated", explain_deactivated(w))
    if w.pending_reason == DISPATCHING:
        return Waiting("dispatching", explain_dispatching(w))
    if w.devices > queue.ceiling:
        if queue.cohort:
            limit = "" if queue.borrowing_limit is None else \
                f" and may borrow up to {amount(queue.borrowing_limit, unit)}"
            can = f"a quota of {amount(queue.nominal, unit)}{limit}"
        else:
            can = f"a quota of {amount(queue.nominal, unit)}"
        return Waiting("never", f"It asks for {amount(w.devices, unit)}, more than this "
                       f"allocation can ever hold ({can}): it will not start. Make the job "
                       "smaller or request more capacity.", w.devices - queue.ceiling)
    lendable = Decimal(0)
    if queue.cohort:
        room = queue.ceiling - max(queue.usage, queue.nominal)
        lendable = max(Decimal(0), min(cohort_free, room))
    needed = w.devices + sum((a.devices for a in ahead), Decimal(0))
    available = queue.free + lendable
    if needed <= available:
        if ahead:
            return Waiting("behind", f"{len(ahead)} of your workload(s) ahead of it in the "
                           "queue are being admitted first; the devices for it are free.")
        return Waiting("starting", "The devices it needs are free; it should be admitted "
                       "within seconds.")
    short = needed - available
    parts = [f"Waiting for {more(short, unit)}"]
    if ahead:
        ahead_devices = sum((a.devices for a in ahead), Decimal(0))
        parts.append(f" ({len(ahead)} of your workload(s) ahead of it need "
                     f"{amount(ahead_devices, unit)} first)")
    running = sorted(own_running, key=lambda r: r.admitted_at or now)
    if running:
        held = ", ".join(f"{r.display_name} ({amount(r.devices, unit)}"
                         f"{', being stopped' if r.state == STOPPING else ''}) since "
                         f"{_clock(r.admitted_at, now)}" for r in running[:3])
        held += f" and {len(running) - 3} more" if len(running) > 3 else ""
        if queue.free > 0:
            unused = f"{amount(queue.free, unit)} unused"
            if lent >= queue.free:
                unused += " (lent to the cohort meanwhile)"
            elif lent > 0:
                unused += f" ({amount(lent, unit)} of it lent to the cohort meanwhile)"
            parts.append(f": your quota of {amount(queue.nominal, unit)} has {unused}, the "
                         f"rest is in use by {held}")
        else:
            parts.append(f": your quota of {amount(queue.nominal, unit)} is in use by {held}")
    else:
        parts.append(f": your quota is {amount(queue.nominal, unit)}")
    if queue.cohort and queue.borrowing_limit == 0:
        parts.append("; this allocation does not borrow from the cohort")
        code = "quota"
    elif queue.cohort:
        if lendable > 0:
            parts.append(f"; the cohort can lend {amount(lendable, unit)} now, not enough")
        elif queue.usage >= queue.ceiling:
            parts.append("; you are already borrowing as much as this allocation may")
        elif lent > 0:
            # Who it waits for, in the tenant's terms: the cohort's other queues borrow this
            # queue's own unused quota; Kueue takes it back (reclaimWithinCohort) for work of
            # this queue that fits in its quota, preempting what borrows it.
            parts.append("; the cohort has none to lend now: its other queues use all of "
                         "their own quota and borrow yours")
            if needed <= queue.nominal:
                parts.append(", and that borrowed work is reclaimed (preempted) for this "
                             "one once it fits in your quota")
        else:
            parts.append("; the cohort has none to lend now")
        code = "cohort"
    else:
        code = "quota"
    return Waiting(code, "".join(parts) + ".", short)


# The Preempted condition's reasons (Kueue's InClusterQueue, InCohort… constants) in the
# tenant's words: who took the devices, never naming a peer.
PREEMPTION_WORDS = {
    "InCohortReclamation": "the cohort reclaimed its lent devices: a queue that owns them "
                           "had work to run",
    "InCohortReclaimWhileBorrowing": "the cohort reclaimed the devices you had borrowed, for "
                                     "higher-priority work of another borrowing queue",
    "InCohortFairSharing": "the cohort rebalanced its devices to restore fair sharing",
    "InClusterQueue": "a higher-priority job of yours needed its devices",
}
EVICTION_WORDS = {
    "PodsReadyTimeout": "its pods did not all start in time",
    "MaximumExecutionTimeExceeded": "it ran past the time limit it declared",
    "ClusterQueueStopped": "the platform team stopped the queue",
    "LocalQueueStopped": "the queue was stopped",
    "InactiveWorkload": "it was deactivated",
    "Deactivated": "it was deactivated (spec.active set to false)",
    "DeactivatedDueToMaximumExecutionTimeExceeded": "it ran past the time limit it declared, "
                                                    "so the queue system deactivated it",
    "DeactivatedDueToRequeuingLimitExceeded": "it was evicted and put back in the queue more "
                                              "times than the platform allows, so the queue "
                                              "system deactivated it",
    "DeactivatedDueToAdmissionCheck": "an admission check rejected it, so the queue system "
                                      "deactivated it",
    "AdmissionCheck": "an admission check withdrew its admission",
    "NodeFailures": "a node it ran on failed",
}


def explain_dispatching(w: WorkloadFacts) -> str:
    """A workload the MultiKueue manager reserved quota for, offered to its workers."""
    tried = ", ".join(w.nominated) if w.nominated else "every worker of the pool"
    said = f" Kueue says: {w.dispatch_message}" if w.dispatch_message else ""
    return (f"Within this allocation's quota; offered to {tried}. It runs on the first "
            f"worker that admits it (each holds a share of the quota).{said}")


def _deactivation_words(reason: str) -> str:
    if reason in EVICTION_WORDS:
        return EVICTION_WORDS[reason]
    if reason.startswith("DeactivatedDueTo"):
        cause = reason[len("DeactivatedDueTo"):]
        return f"the queue system deactivated it ({cause})"
    return "it was deactivated"


def explain_deactivated(w: WorkloadFacts) -> str:
    """A deactivated workload in the tenant's words, with what brings it back."""
    why = _deactivation_words(w.stop.reason if w.stop else "Deactivated")
    limit = f" ({duration(w.max_seconds)})" if w.max_seconds and w.stop and \
        w.stop.reason.endswith("MaximumExecutionTimeExceeded") else ""
    return (f"Deactivated: {why}{limit}. It holds no devices and will not start again "
            "until it is reactivated (set the Workload's spec.active to true) or submitted "
            "anew.")


def queue_policy_words(queue: QueueFacts) -> str:
    """The queue policy every route renders (fleet.allocations.manifests.queue_preemption), as the
    tenant reads it on its queue page."""
    own = ("Priority counts: a higher-priority job of yours (a WorkloadPriorityClass) "
           "preempts your own lower-priority ones when your quota is full.")
    if queue.cohort:
        return own + (" This queue shares a cohort: it may borrow idle devices, and the "
                      "cohort may reclaim them (preempting work that runs on borrowed "
                      "devices).")
    return own + " This queue stands alone: it neither borrows nor lends."


def preemption_cause(stop: Stop) -> str:
    """Why Kueue preempted it, from the Preempted condition's reason."""
    return PREEMPTION_WORDS.get(stop.preemption, "another workload took priority")


def stop_cause(stop: Stop) -> str:
    """The cause of a stop in the tenant's words (preemption or eviction)."""
    if stop.preempted:
        return preemption_cause(stop)
    if is_deactivation(stop.reason):
        return _deactivation_words(stop.reason)
    return EVICTION_WORDS.get(
        stop.reason, f"the queue system stopped it ({stop.reason or 'no reason given'})")


def explain_stopping(w: WorkloadFacts, unit: str) -> str:
    """A workload Kueue evicted whose quota is still reserved: its pods are stopping."""
    stop = w.stop or Stop(None, "")
    what = "Being preempted" if stop.preempted else "Stopping"
    return (f"{what}: {stop_cause(stop)}. Its pods are being stopped; it still holds "
            f"{amount(w.devices, unit)} until they have, then goes back in the queue.")


def stopping_entry(w: WorkloadFacts, text: str) -> dict:
    """A stopping workload as the queue API lists it (`stopping`)."""
    stop = w.stop or Stop(None, "")
    return {"name": w.display_name, "devices": w.devices, "admitted_at": w.admitted_at,
            "stopped_at": stop.at, "kind": "preempted" if stop.preempted else "evicted",
            "reason_code": stop.preemption or stop.reason, "reason": text}


def explain_stop(stop: Stop) -> str:
    """Why a workload was stopped, without naming anyone (Kueue's message names the queues
    on both sides; it is kept for platform admins only)."""
    if stop.reason == "Preempted" or stop.preemption:
        return f"Preempted: {preemption_cause(stop)}. Its pods are stopped and it goes back " \
               "in the queue; it resumes when devices are free."
    if is_deactivation(stop.reason):
        return f"Stopped: {_deactivation_words(stop.reason)}; it will not start again until " \
               "it is reactivated."
    why = EVICTION_WORDS.get(
        stop.reason, f"the queue system stopped it ({stop.reason or 'no reason given'})")
    return f"Stopped: {why}."


# -- percentiles (of waits, seams and estimate errors) ------------------------------------

def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    k = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


# -- history and the cohort ----------------------------------------------------------------

@dataclass
class DayFigures:
    day: dt.date
    waits: list[float] = field(default_factory=list)
    preemptions: int = 0
    borrowed_device_seconds: Decimal = Decimal(0)
    borrowed_cost: Decimal = Decimal(0)  # what billing charges for them (0 where it does not)

    @property
    def admissions(self) -> int:
        return len(self.waits)

    @property
    def p50(self) -> float | None:
        return percentile(self.waits, 50)

    @property
    def p95(self) -> float | None:
        return percentile(self.waits, 95)

    @property
    def borrowed_device_hours(self) -> Decimal:
        return (self.borrowed_device_seconds / 3600).quantize(Decimal("0.01"))


def history_by_day(admissions: Iterable[tuple[dt.datetime, float]],
                   preemptions: Iterable[dt.datetime],
                   borrowed: Iterable[tuple[dt.datetime, Decimal] |
                                  tuple[dt.datetime, Decimal, Decimal]],
                   *, since: dt.date, until: dt.date) -> list[DayFigures]:
    """Per day: the waits of the workloads admitted that day, preemptions, borrowed
    device-seconds (with what they cost, when given). Days without events are kept (a
    chart needs the gaps)."""
    days = {since + dt.timedelta(days=i): DayFigures(since + dt.timedelta(days=i))
            for i in range((until - since).days + 1)}
    for at, wait in admissions:
        if at.date() in days:
            days[at.date()].waits.append(wait)
    for at in preemptions:
        if at.date() in days:
            days[at.date()].preemptions += 1
    for at, seconds, *cost in borrowed:
        if at.date() in days:
            days[at.date()].borrowed_device_seconds += seconds
            days[at.date()].borrowed_cost += sum(cost, Decimal(0))
    return [days[d] for d in sorted(days)]


@dataclass(frozen=True)
class CohortRow:
    queue: str
    nominal: Decimal
    in_use: Decimal
    borrowed: Decimal
    lent: Decimal
    pending: int
    oldest_wait_seconds: float | None
    blocked_by: tuple[str, ...]  # other queues whose borrowing holds this queue's work back


def cohort_board(queues: Sequence[QueueFacts], pending: Sequence[WorkloadFacts],
                 now: dt.datetime) -> list[CohortRow]:
    """The cohort at a glance, for platform admins.

    Kueue does not record who lent to whom; borrowed devices come out of the cohort's unused
    nominal quota, so each queue's *lent* share is its unused quota in proportion to all
    unused quota in the cohort. A queue with pending work is *blocked by* the queues that
    borrow meanwhile: they hold the cohort's spare devices."""
    total_borrowed = sum((q.borrowed for q in queues), Decimal(0))
    unused = {q.name: max(Decimal(0), q.nominal - (q.usage - q.borrowed)) for q in queues}
    total_unused = sum(unused.values(), Decimal(0))
    oldest: dict[str, float] = {}
    count: dict[str, int] = {}
    for w in pending:
        count[w.cluster_queue] = count.get(w.cluster_queue, 0) + 1
        if w.submitted_at:
            oldest[w.cluster_queue] = max(oldest.get(w.cluster_queue, 0.0),
                                          (now - w.submitted_at).total_seconds())
    borrowers = tuple(sorted(q.name for q in queues if q.borrowed > 0))
    rows = []
    for q in sorted(queues, key=lambda q: q.name):
        lent = Decimal(0)
        if total_unused > 0 and total_borrowed > 0:
            lent = (min(total_borrowed, total_unused) * unused[q.name] / total_unused
                    ).quantize(Decimal("0.01"))
        waiting = count.get(q.name, q.pending)
        blocked = tuple(b for b in borrowers if b != q.name) if waiting else ()
        rows.append(CohortRow(q.name, q.nominal, q.usage, q.borrowed, lent, waiting,
                              oldest.get(q.name), blocked))
    return rows
