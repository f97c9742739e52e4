"""Queue truth, the side effects: read Kueue's Workloads, ClusterQueues, LocalQueues and
Cohorts back from the API server, record each workload's transitions (append-only) and each
queue's use per hour.

Two ways in, one way to record. The periodic list (`queue_sync`, every
PORTAL_QUEUE_SYNC_SECONDS) reads everything; the watch (`fleet/queues/watch.py`,
`manage.py watch_queues`) keeps the same objects in memory from the list's resourceVersion on
and records only the workloads an event touched (`record_view(..., only=...)`), so a change
reaches the page in well under a second. Both may run at once: a workload's row only moves
forward in resourceVersion, a row is marked gone only by a list that began after it was last
seen (or by the watch's DELETED event), and a queue's observed time only moves forward — so
whichever reader is older cannot undo what the newer one recorded. Pending positions come
from Kueue's visibility API when it is registered, else from Kueue's own ordering rule, in the
one order of fleet/queues/order.py.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from django.db import transaction
from django.utils import timezone

from tenants.bulk import insert_values, update_rows

from ..allocations import lifecycle
from ..inventory.connections import backend_of, each_live_cluster, home_cluster
from ..kube import MANAGED_BY, MANAGER, DryRunBackend, KubeBackend, KubeError
from ..models import Allocation, Cluster, ClusterQueueState, QueueEvent, QueueWorkload
from ..vocabulary import KUEUE
from .afterwards import (
    Clues,
    KueueView,
    placements_read,
    workload_clues,
)
from .ledger import UPDATED, LedgerChanges, StoredWorkload, ledger_changes
from .placement import (
    Placement,
)
from .positions import positions_kept, positions_source, store_positions, visibility_positions
from .queue_hours import held_by_admissions, integrate_usage, integration_due, store_queues
from .reading import first_estimates, recorded_steps, stored_workload
from .truth import (
    PENDING,
    QueueFacts,
    WorkloadFacts,
    parse_cluster_queue,
    parse_workload,
)
from .workers import with_worker_views

log = logging.getLogger(__name__)

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


KUEUE_BASE = f"/apis/{KUEUE}"
SELECTOR = f"{MANAGED_BY}={MANAGER}"
# What the reader lists: path → label selector (the portal's own queues; every Workload).
KUEUE_LISTS = {"clusterqueues": SELECTOR, "localqueues": SELECTOR, "workloads": ""}


def list_at_once(backend: KubeBackend, paths: dict[str, tuple[str, str]], *,
                 optional: frozenset[str] = frozenset()
                 ) -> tuple[dict[str, list[dict]], dict[str, str], int]:
    """Each kind's (path, label selector) listed, all at once — the API server answers one
    while this process reads another — with the versions a watch resumes from, and the
    number of Cohorts. An optional kind the server refuses is left out; any other error is
    raised. The periodic list and the watch both read through here."""
    with ThreadPoolExecutor(max_workers=len(paths) + 1) as pool:
        lists = {kind: pool.submit(backend.list_path_versioned, path, label_selector=selector)
                 for kind, (path, selector) in paths.items()}
        cohorts = pool.submit(backend.list_path, f"{KUEUE_BASE}/cohorts")
        items, versions = {}, {}
        for kind, future in lists.items():
            try:
                items[kind], versions[kind] = future.result()
            except KubeError as exc:
                if kind not in optional:
                    raise
                log.info("queue reader: %s not followed (%s)", kind, exc.message)
        return items, versions, len(cohorts.result())


def read_kueue(backend: KubeBackend) -> KueueView:
    """One list of each kind the queue truth reads, with the versions a watch resumes from."""
    listed_at = timezone.now()
    items, versions, cohorts = list_at_once(backend, {
        kind: (f"{KUEUE_BASE}/{kind}", selector) for kind, selector in KUEUE_LISTS.items()})
    return KueueView(cluster_queues=items["clusterqueues"], local_queues=items["localqueues"],
                     workloads=items["workloads"], cohorts=cohorts, listed_at=listed_at,
                     versions=versions)


def queue_sync(backend: KubeBackend | None = None, *, now: dt.datetime | None = None,
               cluster: Cluster | None = None) -> QueueSyncReport:
    """Read one cluster's Kueue (the home cluster unless named) for every followed
    allocation in it and record what changed."""
    cluster = cluster or home_cluster()
    backend = backend or backend_of(cluster)
    if isinstance(backend, DryRunBackend):
        # Nothing runs behind a dry run: reading it would only erase what is known.
        return QueueSyncReport(skipped="the dry-run backend runs no workloads")
    started = time.monotonic()
    view = read_kueue(backend)
    listed = time.monotonic() - started
    report = record_view(backend, view, now=now, cluster=cluster)
    report.timings = {k: v + listed for k, v in report.timings.items()}
    report.timings["list"] = listed
    report.seconds += listed
    return report


def queue_sync_all() -> list[tuple[Cluster, str]]:
    """Every live cluster's Kueue read in turn; one that fails does not stop the others."""
    return each_live_cluster(lambda cluster: queue_sync(cluster=cluster).summary())


def _parsed(obj: dict, cluster_queue_of: dict[tuple[str, str], str], memo: dict | None
            ) -> WorkloadFacts:
    """parse_workload, remembered by the watch per (uid, resourceVersion, ClusterQueue of
    its LocalQueue): reading 5,000 Workloads on every event would cost more than the
    event."""
    if memo is None:
        return parse_workload(obj, cluster_queue_of=cluster_queue_of)
    meta = obj.get("metadata") or {}
    key = (meta.get("uid"), meta.get("resourceVersion"), cluster_queue_of.get(
        (meta.get("namespace", ""), (obj.get("spec") or {}).get("queueName", ""))))
    found = memo.get(key)
    if found is None:
        found = memo[key] = parse_workload(obj, cluster_queue_of=cluster_queue_of)
    return found


def record_view(backend: KubeBackend, view: KueueView, *, now: dt.datetime | None = None,
                only: set[str] | None = None, gone: set[str] | None = None,
                cluster: Cluster | None = None) -> QueueSyncReport:
    """Record what `view` says of every followed allocation: all of its workloads (a list),
    or only the uids in `only`, with the uids in `gone` deleted (the watch's events). Queue
    use and positions are always computed from the whole view."""
    started = time.monotonic()
    report = QueueSyncReport(cohorts=view.cohorts)
    now = now or timezone.now()
    # The allocations provisioned in this cluster: another cluster's work is not in `view`,
    # so nothing of it is read as vanished here.
    allocations = {a.namespace: a for a in Allocation.objects.filter(
        status__in=FOLLOWED, pool__cluster=cluster or home_cluster())}
    cluster_queue_of = {((o["metadata"].get("namespace", "")), o["metadata"]["name"]):
                        (o.get("spec") or {}).get("clusterQueue", "")
                        for o in view.local_queues}
    facts = [_parsed(o, cluster_queue_of, view.parsed) for o in view.workloads
             if (o.get("metadata") or {}).get("namespace") in allocations]
    if cluster is not None and cluster.is_manager:
        facts = with_worker_views(facts)
    queues = held_by_admissions({q.name: q for q in (parse_cluster_queue(o)
                                                     for o in view.cluster_queues)},
                                facts, followed=set(allocations))
    report.workloads, report.queues = len(facts), len(queues)

    pending: dict[str, list[WorkloadFacts]] = defaultdict(list)
    for f in facts:
        if f.state == PENDING and f.cluster_queue:
            pending[f.cluster_queue].append(f)
    known = {r[0]: (r[1], r[2], r[3]) for r in QueueWorkload.objects.filter(
        state=QueueWorkload.State.PENDING).values_list("uid", "cluster_queue", "position",
                                                       "position_source")}
    positions, ask = positions_kept(pending, known)
    if only is not None:
        # Positions move for every waiting workload of a queue whose waiting set changed.
        moved = {uid for uid, (pos, _src) in positions.items()
                 if known.get(uid, (None, None, None))[1] != pos}
        facts = [f for f in facts if f.uid in only or f.uid in moved]
    placements, clues = placements_read(backend, facts, view)
    clues = workload_clues(facts, view, clues)
    report.timings["read"] = time.monotonic() - started

    with transaction.atomic():
        states = {s.name: s for s in ClusterQueueState.objects.select_for_update()}
        due = integration_due(queues, states, now, everything=only is None)
        integrate_usage({n: states[n] for n in due if n in states}, now)
        store_queues(queues, states, allocations, now, due=due)
        written, report.events = record_workloads(
            facts, queues=queues, positions=positions, allocations=allocations, now=now,
            placements=placements, listed_at=view.listed_at if only is None else None,
            gone=gone, clues=clues, lag=view.lag)
    report.timings["store"] = time.monotonic() - started  # every workload on the pages
    # Kueue's own positions after the rows are on the page (at hundreds of changed queues the
    # visibility calls take seconds), then the first estimates, which read the positions.
    asked = visibility_positions(backend, pending, ask)
    positions.update(asked)
    report.positions = positions_source(positions)
    with transaction.atomic():
        list(ClusterQueueState.objects.select_for_update())  # one sync at a time, as above
        if asked:
            written |= store_positions(asked, {cq: {w.uid for w in pending[cq]}
                                                for cq in ask})
        report.timings["positions"] = time.monotonic() - started
        first_estimates(now)
    report.changed = len(written)
    report.seconds = time.monotonic() - started
    return report


def _listed_snapshot(facts: list[WorkloadFacts], *, positions: dict[str, tuple[int, str]],
                     placements: dict[str, Placement], listed_at: dt.datetime | None,
                     followed: list[int]
                     ) -> tuple[list[WorkloadFacts], dict[str, StoredWorkload], set[str]]:
    """The list's reading of the ledger: the facts that may change something, the rows they
    and the vanished touch, and what vanished — a followed row the list lacks that was last
    seen before the list began (`listed_at`), so a row the watch wrote since stays."""
    seen = {f.uid for f in facts}
    # What every stored row is, in a few columns; whole rows only for the workloads that may
    # be written (a re-sync of 5,000 with 30 changed built 5,000 model instances).
    brief = ("uid", "resource_version", "position", "position_source", "observed_at")
    known = {r[0]: r[1:] for r in QueueWorkload.objects.filter(
        allocation__in=followed).exclude(
        state=QueueWorkload.State.GONE).values_list(*brief)}
    known |= {r[0]: r[1:] for r in QueueWorkload.objects.filter(
        uid__any=seen).values_list(*brief)}
    vanished = {uid for uid, (_v, _p, _s, observed) in known.items()
                if uid not in seen and (listed_at is None or observed < listed_at)}

    def unchanged(f: WorkloadFacts) -> bool:
        """Nothing the decision could write: the version stored, the same position, no
        step read (ledger_changes would find the same; this spares reading the row)."""
        row = known.get(f.uid)
        if row is None or row[0] != f.resource_version or f.uid in placements:
            return False
        return row[1:3] == (positions.get(f.uid, (None, "")) if f.state == PENDING
                            else (None, ""))

    facts = [f for f in facts if not unchanged(f)]
    rows = QueueWorkload.objects.filter(uid__any={f.uid for f in facts} | vanished)
    return facts, {r.uid: stored_workload(r) for r in rows}, vanished


def _watched_snapshot(facts: list[WorkloadFacts], gone: set[str]
                      ) -> tuple[list[WorkloadFacts], dict[str, StoredWorkload], set[str]]:
    """The watch's reading: the rows of the workloads its events touched; what vanished is
    what it saw deleted."""
    seen = {f.uid for f in facts}
    rows = QueueWorkload.objects.filter(uid__any=seen | gone)
    return facts, {r.uid: stored_workload(r) for r in rows}, gone - seen


def _write_ledger(changes: LedgerChanges, now: dt.datetime) -> None:
    """New rows and events as plain values (building 20,000 model instances cost more than
    writing them); changed rows by primary key; vanished rows marked gone in one statement."""
    insert_values(QueueWorkload, changes.create)
    update_rows(QueueWorkload, [QueueWorkload(pk=pk, **values) for pk, values in changes.update],
                UPDATED)
    if changes.gone:
        QueueWorkload.objects.filter(pk__in=changes.gone).update(
            state=QueueWorkload.State.GONE, position=None, observed_at=now)
    insert_values(QueueEvent, changes.events)


def record_workloads(facts: list[WorkloadFacts], *, queues: dict[str, QueueFacts],
                     positions: dict[str, tuple[int, str]],
                     allocations: dict[str, Allocation], now: dt.datetime,
                     placements: dict[str, Placement] | None = None,
                     listed_at: dt.datetime | None = None, gone: set[str] | None = None,
                     clues: Clues | None = None, lag: float | None = None
                     ) -> tuple[set[str], int]:
    """Record the Workloads read (every followed one: a list, `gone` None; or those a watch's
    events touched, with the uids it saw deleted in `gone`): read the ledger, decide
    (ledger_changes), write. Returns the uids written and the number of events."""
    placements = placements or {}
    if gone is None:
        facts, stored, vanished = _listed_snapshot(
            facts, positions=positions, placements=placements, listed_at=listed_at,
            followed=[a.pk for a in allocations.values()])
    else:
        facts, stored, vanished = _watched_snapshot(facts, gone)
    changes = ledger_changes(
        stored, facts, vanished, positions=positions, placements=placements,
        allocation_of={ns: a.pk for ns, a in allocations.items()},
        borrowed={name: q.borrowed for name, q in queues.items()}, now=now,
        clues=clues, recorded=recorded_steps({f.uid for f in facts}), lag=lag)
    _write_ledger(changes, now)
    return changes.written, len(changes.events)
