"""What the ledger reads besides Kueue's Workloads: the Pods and ResourceClaims of admitted
work (the steps after admission, `fleet/queues/placement.py`), and what the watch saw of every
step — when each object's version arrived, the events.k8s.io Events about it — for
`fleet/queues/timing.py` to time them. `KueueView` is one reader's whole reading."""

from __future__ import annotations

import datetime as dt
import logging
from collections import defaultdict
from dataclasses import dataclass, field

from ..inventory.connections import backend_of
from ..kube import KubeBackend, KubeError
from ..models import Cluster, QueueWorkload
from ..vocabulary import LedgerEvent
from .placement import (
    JOB_LABELS,
    Placement,
    claims_by_pod,
    placement_clues,
    placement_of,
    pods_by_job,
)
from .timing import RECORDED_BY, Clue
from .truth import WorkloadFacts, parse_time

log = logging.getLogger(__name__)

PODS_PATH, CLAIMS_PATH = "/api/v1/pods", "/apis/resource.k8s.io/v1/resourceclaims"


@dataclass
class KueueView:
    """Kueue's objects as one reader sees them (from a list, or kept by the watch), with
    the moment the read began: a row seen after it is not judged gone by this view."""
    cluster_queues: list[dict]
    local_queues: list[dict]
    workloads: list[dict]
    cohorts: int = 0
    listed_at: dt.datetime | None = None
    pods: list[dict] | None = None  # None: list them when the ledger needs them
    claims: list[dict] | None = None
    versions: dict[str, str] = field(default_factory=dict)
    parsed: dict | None = None  # the watch's memo of parsed Workloads
    # What the watch saw (a list sees none of it): kind → (namespace, name) → mark (`marks`)
    # → when the first version showing it arrived (None: it was listed); (namespace, kind,
    # name) → [(reason, eventTime)] of events.k8s.io Events about it; the watch's lag, s.
    arrivals: dict[str, dict[tuple[str, str], dict[tuple[str, str], dt.datetime | None]]] = \
        field(default_factory=dict)
    events: dict[tuple[str, str, str], list[tuple[str, dt.datetime]]] = field(
        default_factory=dict)
    lag: float | None = None

    def arrival(self, kind: str, obj: dict, mark: str, stamp: dt.datetime | None = None
                ) -> dt.datetime | None:
        """When the watch received the first version of `obj` showing `mark` (with the
        value `stamp`, if given); None if it never did or the fact was there when listed."""
        meta = obj.get("metadata") or {}
        found = self.arrivals.get(kind, {}).get((meta.get("namespace", ""),
                                                 meta.get("name", "")), {})
        times = [t for (name, value), t in found.items() if name == mark and (
            stamp is None or parse_time(value) == stamp)]
        if not times or None in times:
            return None
        return min(times)

    def event_times(self, namespace: str, kind: str, name: str, reasons: tuple[str, ...]
                    ) -> tuple[dt.datetime, ...]:
        return tuple(t for reason, t in self.events.get((namespace, kind, name), ())
                     if reason in reasons)


Clues = dict[str, dict[str, Clue]]  # uid → step → what the watch saw of it


def marks(kind: str, obj: dict) -> set[tuple[str, str]]:
    """The facts a version of an object shows that a ledger step is read from, as (mark,
    value): created; each condition as "Type=Status" with its transition time; for a pod
    each container start; for a claim its allocation. The watch keeps when each first
    arrived: a later version's arrival is no time for a step an earlier one showed."""
    meta, status = obj.get("metadata") or {}, obj.get("status") or {}
    out = {("created", str(meta.get("creationTimestamp") or ""))}
    for c in status.get("conditions") or []:
        if isinstance(c, dict):
            out.add((f"{c.get('type')}={c.get('status')}", str(c.get("lastTransitionTime")
                                                                 or "")))
    if kind == "pods":
        for container in status.get("containerStatuses") or []:
            state = (container.get("state") or {}) if isinstance(container, dict) else {}
            for phase in ("running", "terminated"):
                if started := (state.get(phase) or {}).get("startedAt"):
                    out.add(("started", str(started)))
    if kind == "claims" and status.get("allocation"):
        out.add(("allocated", ""))
    return out


# The condition each of the Workload's steps is stamped from, in the order parse_workload
# prefers them (fleet.queues.truth), and "created" for the submission.
WORKLOAD_MARKS = {LedgerEvent.SUBMITTED: ("created",),
                  LedgerEvent.ADMITTED: ("Admitted=True", "QuotaReserved=True"),
                  LedgerEvent.PREEMPTED: ("Evicted=True", "Preempted=True"),
                  LedgerEvent.EVICTED: ("Evicted=True",),
                  LedgerEvent.REQUEUED: ("QuotaReserved=False", "Requeued=True"),
                  LedgerEvent.FINISHED: ("Finished=True",)}


def workload_clues(facts: list[WorkloadFacts], view: KueueView, clues: Clues) -> Clues:
    """The steps Kueue's Workload shows: when the first version showing each (its condition
    with the step's stamp) arrived, and the Events about it (its Job's, for the
    submission)."""
    if not view.arrivals and not view.events:
        return clues
    for f in facts:
        obj = {"metadata": {"namespace": f.namespace, "name": f.name}}
        stamps = {LedgerEvent.SUBMITTED: f.submitted_at, LedgerEvent.ADMITTED: f.admitted_at,
                  LedgerEvent.PREEMPTED: f.stop.at if f.stop else None,
                  LedgerEvent.EVICTED: f.stop.at if f.stop else None,
                  LedgerEvent.REQUEUED: f.requeued_at, LedgerEvent.FINISHED: f.finished_at}
        steps = clues.setdefault(f.uid, {})
        for step, names in WORKLOAD_MARKS.items():
            stamp = None if step == LedgerEvent.SUBMITTED else stamps[step]
            seen = next((t for name in names if (t := view.arrival(
                "workloads", obj, name, stamp)) is not None), None)
            about, reasons = RECORDED_BY.get(step, ("", ()))
            steps[step] = Clue(seen, view.event_times(
                f.namespace, about, f.job if about == "Job" else f.name, reasons)
                if reasons else ())
    return clues


def placements_read(backend: KubeBackend, facts: list[WorkloadFacts], view: KueueView
                ) -> tuple[dict[str, Placement], Clues]:
    """Workload uid → the steps its current admission took after Kueue (pods, claims,
    node, start), read from the Pods and ResourceClaims of the followed namespaces; and
    what the watch saw of those steps."""
    admitted = [f for f in facts if f.admitted_at and f.job]
    # Admissions whose steps are all recorded need no pods read (a finished history costs
    # nothing on each sync).
    done = set(QueueWorkload.objects.filter(
        uid__any=[f.uid for f in admitted], scheduled_at__isnull=False,
        running_at__isnull=False).values_list("uid", "admitted_at"))
    admitted = [f for f in admitted if (f.uid, f.admitted_at) not in done]
    here = [f for f in admitted if not f.ran_on]
    out, clues = _placements_in(backend, here, view) if here else ({}, {})
    # Dispatched work (MultiKueue): its pods are on the worker that admitted it.
    by_worker: dict[str, list[WorkloadFacts]] = defaultdict(list)
    for f in admitted:
        if f.ran_on:
            by_worker[f.ran_on].append(f)
    workers = {c.multikueue_cluster: c for c in Cluster.objects.live().filter(
        role=Cluster.Role.WORKER)} if by_worker else {}
    for name, found in by_worker.items():
        if name not in workers:
            continue
        try:
            out |= _placements_in(backend_of(workers[name]), found, None)[0]
        except KubeError as exc:  # the worker away: its steps are read when it answers
            log.info("workload ledger: worker %s not read (%s)", name, exc.message)
    return out, clues


def _placements_in(backend: KubeBackend, admitted: list[WorkloadFacts],
                   view: KueueView | None) -> tuple[dict[str, Placement], Clues]:
    """The steps after admission of `admitted`, from one cluster's Pods and claims, with
    what the watch (`view`'s) saw of them."""
    namespaces = {f.namespace for f in admitted}
    try:
        pod_objs = view.pods if view is not None and view.pods is not None else \
            backend.list_path(PODS_PATH, label_selector=JOB_LABELS[0])
        pods = {key: found for key, found in pods_by_job(pod_objs).items()
                if key[0] in namespaces}
    except KubeError as exc:  # e.g. an older ClusterRole without pods: Kueue's view stands
        log.warning("workload ledger: pods not readable (%s); steps after admission skipped",
                    exc)
        return {}, {}
    try:
        claim_objs = view.claims if view is not None and view.claims is not None else \
            backend.list_path(CLAIMS_PATH)
        claims = claims_by_pod([c for c in claim_objs
                                if (c.get("metadata") or {}).get("namespace") in namespaces])
    except KubeError:  # a cluster without DRA's v1 API: no claims to follow
        claims = {}
    placements = {f.uid: placement_of(pods.get((f.namespace, f.job), []), claims,
                                      f.admitted_at) for f in admitted}
    if view is None or not view.arrivals and not view.events:
        return placements, {}
    return placements, {f.uid: placement_clues(
        pods.get((f.namespace, f.job), []), claims, f.admitted_at, seen=view.arrival,
        events=view.event_times) for f in admitted}
