"""Fleet sync: read GPU nodes from Kubernetes, keep their history, flag what lost capacity."""

from __future__ import annotations

import hashlib
import time
from collections import defaultdict
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from tenants.audit import audit_bulk, audit_record
from tenants.bulk import update_rows
from tenants.notifications import Kind, notify, tenant_leads

from ..kube import DryRunBackend, KubeBackend, KubeError
from ..models import Allocation, Cluster, GpuNode, NodeOutage, Pool
from ..vocabulary import NodeState
from .capacity import NodeFacts, node_changes, parse_node
from .connections import backend_of, each_live_cluster, home_cluster
from .selectors import node_facts

NODE_FIELDS = (
    "pool_label", "gpu_model", "gpu_count", "gpu_memory_mib", "mig_capable", "mig_config",
    "validated", "bios_profile", "burn_in_date", "validation_failure", "ready",
    "health_problems", "cordoned", "present", "dra_whole_gpus", "mig_devices", "state",
    "reason", "last_synced_at", "pool",
)


@dataclass
class SyncReport:
    nodes: int = 0
    created: int = 0
    changed: int = 0
    gone: int = 0
    flagged_allocations: list[int] = field(default_factory=list)
    slices_read: bool = False
    seconds: float = 0.0
    skipped: str = ""
    resource_version: str = ""  # of the node list read: where a watch resumes

    def summary(self) -> str:
        if self.skipped:
            return f"Fleet left as it is: {self.skipped}"
        return (f"Read {self.nodes} GPU node(s) in {self.seconds:.2f}s: {self.created} new, "
                f"{self.changed} changed, {self.gone} gone, "
                f"{len(self.flagged_allocations)} allocation(s) flagged"
                + ("" if self.slices_read else "; no DRA ResourceSlices readable") + ".")


def _apply_facts(row: GpuNode, facts: NodeFacts, pools: dict[str, Pool], now) -> None:
    row.pool_label = facts.pool
    row.pool = pools.get(facts.pool)
    for name in ("gpu_model", "gpu_count", "gpu_memory_mib", "mig_capable", "mig_config",
                 "validated", "bios_profile", "burn_in_date", "validation_failure", "ready",
                 "cordoned", "present", "dra_whole_gpus"):
        setattr(row, name, getattr(facts, name))
    row.health_problems = list(facts.health_problems)
    row.mig_devices = dict(facts.mig_devices)
    row.state = facts.state
    row.reason = facts.reason
    row.last_synced_at = now


def _describe(changes: dict[str, tuple]) -> str:
    words = []
    for name, (old, new) in changes.items():
        label = name.replace("_", " ")
        if isinstance(new, bool):
            words.append(f"{label}: {'yes' if new else 'no'} (was {'yes' if old else 'no'})")
        else:
            words.append(f"{label}: {new or '—'} (was {old or '—'})")
    return "; ".join(words)


@dataclass(frozen=True)
class NodeDiff:
    """What one sync says about one node, decided from facts alone."""

    facts: NodeFacts
    changes: dict[str, tuple]
    new: bool = False
    lost: bool = False       # was schedulable, is not now: an outage starts
    recovered: bool = False  # was not schedulable, is now: the outage ends


def diff_fleet(known: dict[str, NodeFacts], live: list[NodeFacts]
               ) -> tuple[list[NodeDiff], list[str]]:
    """The pure core of a sync: each live node against what the portal knew of it, and the
    names of known nodes that are no longer in the cluster (gone)."""
    diffs = []
    for facts in live:
        old = known.get(facts.name)
        changes = node_changes(old, facts)
        if old is None:
            diffs.append(NodeDiff(facts, changes, new=True))
            continue
        diffs.append(NodeDiff(facts, changes,
                              lost=bool(changes) and old.schedulable and not facts.schedulable,
                              recovered=bool(changes) and facts.schedulable
                              and not old.schedulable))
    seen = {f.name for f in live}
    gone = sorted(name for name, old in known.items() if name not in seen and old.present)
    return diffs, gone


GPU_NODES = "nvidia.com/gpu.present=true"


def _list(backend: KubeBackend, api_version: str, kind: str, path: str, selector: str = ""
          ) -> list[dict]:
    """A whole collection: from the API server in pages straight from JSON (the dynamic
    client's object conversion costs ~1 ms per object: seconds at 10,000 nodes); from the
    dry-run backend's record otherwise."""
    if isinstance(backend, DryRunBackend):
        return backend.list(api_version, kind, label_selector=selector)
    return backend.list_path(path, label_selector=selector)


def facts_digest(facts: NodeFacts, pool_id: int | None) -> str:
    """What a node's row is derived from, as a short digest: equal digests, nothing to do."""
    return hashlib.sha1(repr((facts, pool_id)).encode(), usedforsecurity=False).hexdigest()


def fleet_sync(cluster: Cluster | None = None, *, backend: KubeBackend | None = None,
               by=None) -> SyncReport:
    """Read every GPU node (and ResourceSlices) of one cluster (the home cluster unless
    named) and bring that cluster's part of the fleet table up to date.

    The API is read first, with no transaction open; the rows are then written in one.
    Safe to run twice: unchanged nodes write nothing but their sync time.
    """
    started = time.monotonic()
    cluster = cluster or home_cluster()
    backend = backend or backend_of(cluster)
    report = SyncReport()
    if isinstance(backend, DryRunBackend):
        nodes = backend.list("v1", "Node", label_selector=GPU_NODES)
    else:
        nodes, report.resource_version = backend.list_path_versioned("/api/v1/nodes",
                                                                     label_selector=GPU_NODES)
    if not nodes and isinstance(backend, DryRunBackend):
        # The embedded run's dry-run backend has no cluster behind it: reading "no nodes"
        # from it would mark the whole (demo) fleet gone and every pool empty.
        report.skipped = ("the dry-run Kubernetes backend has no cluster to read; connect "
                          "one (PORTAL_KUBE_BACKEND) to sync the fleet.")
        return report
    slices_by_node: dict[str, list[dict]] = defaultdict(list)
    try:
        for s in _list(backend, "resource.k8s.io/v1", "ResourceSlice",
                       "/apis/resource.k8s.io/v1/resourceslices"):
            slices_by_node[s.get("spec", {}).get("nodeName", "")].append(s)
        report.slices_read = True
    except KubeError as exc:
        if exc.retriable:
            raise
    _record_fleet(cluster, nodes, slices_by_node, report=report, by=by)
    report.seconds = time.monotonic() - started
    return report


def fleet_sync_all(*, by=None) -> list[tuple[Cluster, str]]:
    """Every live cluster synced in turn; one that fails does not stop the others."""
    return each_live_cluster(lambda cluster: fleet_sync(cluster, by=by).summary())


@transaction.atomic
def _record_fleet(cluster: Cluster, nodes: list[dict], slices_by_node: dict[str, list[dict]],
                  *, report: SyncReport, by, gone: list[str] | None = None) -> None:
    """Bring the cluster's rows up to date with `nodes`. A full read (gone=None) also marks
    every known node it lacks as gone; a partial one (a watch's events) marks only `gone`.
    Nothing of another cluster is read or touched: a node label names a pool of this one
    (or, on a MultiKueue worker, a shared pool of the manager: its work runs here)."""
    now = timezone.now()
    pools = {p.slug: p for p in Pool.objects.taking_nodes_of(cluster)}
    in_cluster = GpuNode.objects.filter(cluster=cluster)
    # (digest, retiring, present) of every known node: a few bytes each, no model objects.
    known = {name: (digest, retiring, present) for name, digest, retiring, present in
             in_cluster.values_list("name", "facts_digest", "retiring", "present")}
    conditions = settings.PORTAL_GPU_CONDITION_TYPES
    live, digests, seen = [], {}, set()
    for node in nodes:
        name = node["metadata"]["name"]
        seen.add(name)
        facts = parse_node(node, slices=slices_by_node.get(name, ()),
                           condition_types=conditions,
                           retiring=known.get(name, ("", False, False))[1])
        pool = pools.get(facts.pool)
        digest = facts_digest(facts, pool.pk if pool else None)
        if name in known and known[name][0] == digest:
            continue  # unchanged since the last read: only its sync time moves (below)
        live.append(facts)
        digests[name] = digest
    gone_names = [n for n, (_, _, present) in known.items() if present and (
        n not in seen if gone is None else n in gone)]
    # Only what changed is loaded and locked.
    existing = {n.name: n for n in in_cluster.select_for_update().filter(
        name__in=[f.name for f in live] + gone_names)}
    diffs, gone = diff_fleet({name: node_facts(row) for name, row in existing.items()}, live)
    to_create, to_update, lost = [], [], []
    for diff in diffs:
        facts = diff.facts
        if diff.new:
            row = GpuNode(cluster=cluster, name=facts.name, facts_digest=digests[facts.name])
            _apply_facts(row, facts, pools, now)
            to_create.append(row)
            continue
        row = existing[facts.name]
        _apply_facts(row, facts, pools, now)
        row.facts_digest = digests[facts.name]
        to_update.append(row)
        if diff.changes:
            report.changed += 1
            audit_record(actor=by, subject=row, action="node.changed", reason=(
                f"{facts.name}: {_describe(diff.changes)}. {facts.reason}"), data={
                "changes": {k: [str(a), str(b)] for k, (a, b) in diff.changes.items()}})
        if diff.lost:
            lost.append(row)
            NodeOutage.objects.create(node=row, started_at=now, reason=facts.reason)
        elif diff.recovered:
            NodeOutage.objects.filter(node=row, ended_at__isnull=True).update(ended_at=now)
    for name in gone:
        row = existing[name]
        row.present, row.state = False, NodeState.GONE
        row.facts_digest = ""  # if it comes back, it is read afresh
        row.reason = "The node is no longer in the cluster."
        to_update.append(row)
        report.gone += 1
        audit_record(actor=by, subject=row, action="node.gone", reason=row.reason)
        if not NodeOutage.objects.filter(node=row, ended_at__isnull=True).exists():
            NodeOutage.objects.create(node=row, started_at=now, reason=row.reason)
        lost.append(row)
    GpuNode.objects.bulk_create(to_create, batch_size=500)
    audit_bulk([dict(actor=by, subject=row, action="node.discovered",
                     reason=f"{row.name} discovered: {row.reason}") for row in to_create])
    update_rows(GpuNode, to_update, (*NODE_FIELDS, "facts_digest"))
    # Unchanged nodes only record that they were seen: one UPDATE, not a row each.
    unchanged = in_cluster.filter(present=True).exclude(
        name__in=[f.name for f in live] + gone_names)
    (unchanged if gone is None else unchanged.filter(name__in=seen)).update(last_synced_at=now)
    report.created = len(to_create)
    report.nodes = len(nodes)
    report.flagged_allocations = flag_allocations_on(lost, by=by)
    clear_recovered_flags(by=by)


def record_node_events(nodes: list[dict], *, gone: list[str] = (), backend: KubeBackend,
                       by=None, cluster: Cluster | None = None) -> SyncReport:
    """A watch's events: these nodes as they are now (their ResourceSlices read for them
    alone) and these names deleted; every other node is left as it is."""
    started = time.monotonic()
    report = SyncReport()
    slices_by_node: dict[str, list[dict]] = defaultdict(list)
    for node in nodes:
        name = node["metadata"]["name"]
        try:
            slices_by_node[name] = backend.list_path(
                "/apis/resource.k8s.io/v1/resourceslices", field_selector=f"spec.nodeName={name}")
            report.slices_read = True
        except KubeError as exc:
            if exc.retriable:
                raise
    _record_fleet(cluster or home_cluster(), nodes, slices_by_node, report=report, by=by,
                  gone=list(gone))
    report.seconds = time.monotonic() - started
    return report


@transaction.atomic(savepoint=False)  # each change with its audit row, as one
def clear_recovered_flags(*, by=None) -> list[int]:
    """Lift the flag of allocations whose reserved nodes are all promisable again: a flag
    that outlives its cause tells the tenant and the admins something untrue."""
    cleared = []
    for alloc in (Allocation.objects.exclude(flagged_reason="")
                  .select_related("tenant").prefetch_related("nodes")):
        if any(n.state != NodeState.SCHEDULABLE for n in alloc.nodes.all()):
            continue
        alloc.flagged_reason, alloc.flagged_at = "", None
        alloc.save(update_fields=["flagged_reason", "flagged_at"])
        audit_record(actor=by, subject=alloc, tenant=alloc.tenant,
                     action="allocation.unflagged",
                     reason="Capacity restored: every reserved node is validated, healthy and "
                            "schedulable again.")
        cleared.append(alloc.pk)
    return cleared


def _tell_leads(alloc: Allocation) -> None:
    """The tenant's leads hear it too (an e-mail, after commit), in the tenant's words."""
    notify(tenant_leads(alloc.tenant), Kind.CAPACITY_CHANGED,
           f"{alloc.namespace}: a node under it is changing",
           f"{alloc.flag_words}\n\nYour allocation {alloc.namespace} keeps its quota; the "
           "allocation's page shows its state.")


@transaction.atomic(savepoint=False)  # each change with its audit row, as one
def flag_allocations_on(nodes: list[GpuNode], *, by=None) -> list[int]:
    """Flag holding allocations whose reserved nodes can no longer be promised."""
    flagged = []
    if not nodes:
        return flagged
    allocations = (Allocation.objects.filter(nodes__in=nodes, status__in=Allocation.HOLDING)
                   .select_related("tenant").prefetch_related("nodes").distinct())
    now = timezone.now()
    for alloc in allocations:
        bad = [n for n in alloc.nodes.all() if n in nodes]
        reason = "; ".join(f"{n.name}: {n.reason}" for n in bad)
        alloc.flagged_reason, alloc.flagged_at = reason, now
        alloc.save(update_fields=["flagged_reason", "flagged_at"])
        audit_record(actor=by, subject=alloc, tenant=alloc.tenant, action="allocation.flagged",
                     reason=f"Capacity under this allocation was lost: {reason}")
        _tell_leads(alloc)
        flagged.append(alloc.pk)
    return flagged
