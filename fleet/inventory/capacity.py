"""Fleet and capacity as pure functions: what a node is, and what a pool can promise.

"A fleet count and a validated fleet count are two different numbers, and only one of them
can be scheduled." Only devices on nodes that are present, validated, healthy, uncordoned
and not retiring can be promised.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal

from ..vocabulary import (  # noqa: F401 - the names this module's readers use
    BIOS_PROFILE_LABEL,
    BURN_IN_ANNOTATION,
    DEFAULT_GPU_CONDITIONS,
    DRA_DRIVER,
    FAILURE_ANNOTATION,
    GFD_COUNT,
    GFD_MEMORY,
    GFD_MIG_CAPABLE,
    GFD_MIG_CONFIG,
    GFD_PRODUCT,
    VALIDATED_LABEL,
    WHOLE_GPU,
    NodeState,
)
from ..vocabulary import LABEL_POOL as POOL_LABEL


@dataclass(frozen=True)
class NodeFacts:
    name: str
    pool: str = ""
    gpu_model: str = ""
    gpu_count: int = 0
    gpu_memory_mib: int = 0
    mig_capable: bool = False
    mig_config: str = ""
    validated: bool = False
    bios_profile: str = ""
    burn_in_date: str = ""
    validation_failure: str = ""
    ready: bool = False
    health_problems: tuple[str, ...] = ()
    cordoned: bool = False
    retiring: bool = False
    present: bool = True
    # From DRA ResourceSlices, when the driver publishes them.
    dra_whole_gpus: int | None = None
    mig_devices: tuple[tuple[str, int], ...] = ()  # (profile, count), sorted

    @property
    def healthy(self) -> bool:
        return self.ready and not self.health_problems

    @property
    def schedulable(self) -> bool:
        return (self.present and self.validated and self.healthy and not self.cordoned
                and not self.retiring)

    @property
    def devices(self) -> int:
        """Whole devices the node holds (MIG-partitioned GPUs still count as devices)."""
        return self.gpu_count

    @property
    def state(self) -> str:
        if not self.present:
            return NodeState.GONE
        if self.retiring:
            return NodeState.RETIRING
        if not self.validated:
            return NodeState.UNVALIDATED
        if not self.healthy:
            return NodeState.UNHEALTHY
        if self.cordoned:
            return NodeState.CORDONED
        return NodeState.SCHEDULABLE

    @property
    def reason(self) -> str:
        """Why the node can or cannot be promised, in words."""
        if not self.present:
            return "The node is no longer in the cluster."
        parts = []
        if self.retiring:
            parts.append("marked for retirement")
        if not self.validated:
            parts.append("not validated by burn-in"
                         + (f" ({self.validation_failure})" if self.validation_failure else ""))
        if not self.ready:
            parts.append("kubelet not Ready")
        parts += [f"{p}" for p in self.health_problems]
        if self.cordoned:
            parts.append("cordoned")
        if not parts:
            burn = f", burn-in {self.burn_in_date}" if self.burn_in_date else ""
            bios = self.bios_profile or "baseline"
            return f"Validated ({bios} BIOS{burn}), healthy, schedulable."
        return "Not promisable: " + "; ".join(parts) + "."


def _int(value, default: int = 0) -> int:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return default


def parse_node(node: dict, *, slices: Iterable[dict] = (),
               condition_types: Iterable[str] = DEFAULT_GPU_CONDITIONS,
               retiring: bool = False) -> NodeFacts:
    """A Node (and its ResourceSlices) from the API as plain facts."""
    meta = node.get("metadata", {})
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    status = node.get("status") or {}
    spec = node.get("spec") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    ready = conditions.get("Ready", {}).get("status") == "True"
    problems = []
    for ctype in condition_types:
        c = conditions.get(ctype)
        if c and c.get("status") == "True":
            detail = c.get("message") or c.get("reason") or ""
            problems.append(f"{ctype}" + (f": {detail}" if detail else ""))
    capacity = _int((status.get("capacity") or {}).get(WHOLE_GPU), -1)
    count = capacity if capacity >= 0 else _int(labels.get(GFD_COUNT))

    whole, mig = None, Counter()
    for s in slices:
        sspec = s.get("spec", {})
        if sspec.get("driver") != DRA_DRIVER:
            continue
        whole = whole or 0
        for device in sspec.get("devices") or []:
            attrs = device.get("attributes") or {}
            kind = (attrs.get("type") or {}).get("string")
            if kind == "gpu":
                whole += 1
            elif kind == "mig":
                mig[(attrs.get("profile") or {}).get("string", "?")] += 1
    return NodeFacts(
        name=meta.get("name", ""),
        pool=labels.get(POOL_LABEL, ""),
        gpu_model=labels.get(GFD_PRODUCT, ""),
        gpu_count=count,
        gpu_memory_mib=_int(labels.get(GFD_MEMORY)),
        mig_capable=labels.get(GFD_MIG_CAPABLE) == "true",
        mig_config=labels.get(GFD_MIG_CONFIG, ""),
        validated=labels.get(VALIDATED_LABEL) == "true",
        bios_profile=labels.get(BIOS_PROFILE_LABEL, ""),
        burn_in_date=annotations.get(BURN_IN_ANNOTATION, ""),
        validation_failure=annotations.get(FAILURE_ANNOTATION, ""),
        ready=ready,
        health_problems=tuple(problems),
        cordoned=bool(spec.get("unschedulable")),
        retiring=retiring,
        dra_whole_gpus=whole,
        mig_devices=tuple(sorted(mig.items())),
    )


def node_changes(old: NodeFacts | None, new: NodeFacts) -> dict[str, tuple]:
    """The state fields that changed, for the node's history."""
    tracked = ("pool", "gpu_model", "gpu_count", "mig_config", "validated", "bios_profile",
               "burn_in_date", "validation_failure", "ready", "health_problems", "cordoned",
               "present", "mig_devices")
    if old is None:
        return {"state": ("", new.state)}
    return {f: (getattr(old, f), getattr(new, f)) for f in tracked
            if getattr(old, f) != getattr(new, f)}


@dataclass(frozen=True)
class FleetCounts:
    """The numbers an admin compares: fleet ≥ validated ≥ healthy ≥ schedulable."""

    nodes: int = 0
    fleet_devices: int = 0
    validated_devices: int = 0
    healthy_devices: int = 0
    schedulable_devices: int = 0
    schedulable_nodes: int = 0
    mig_slices: dict[str, int] = field(default_factory=dict)  # on schedulable nodes

    @property
    def unpromisable_devices(self) -> int:
        return self.fleet_devices - self.schedulable_devices


def fleet_counts(nodes: Iterable[NodeFacts]) -> FleetCounts:
    return grouped_fleet_counts((node, 1) for node in nodes)


def grouped_fleet_counts(groups: Iterable[tuple[NodeFacts, int]]) -> FleetCounts:
    """fleet_counts of nodes given as (facts, how many nodes have exactly these facts but
    their names): a page can count a fleet from its distinct facts, grouped by the database,
    instead of from every node."""
    n = fleet = validated = healthy = sched = sched_nodes = 0
    mig: Counter = Counter()
    for node, count in groups:
        if not node.present or count <= 0:
            continue
        n += count
        fleet += node.devices * count
        if node.validated:
            validated += node.devices * count
            if node.healthy:
                healthy += node.devices * count
        if node.schedulable:
            sched += node.devices * count
            sched_nodes += count
            for profile, slices in node.mig_devices:
                mig[profile] += slices * count
    return FleetCounts(n, fleet, validated, healthy, sched, sched_nodes, dict(sorted(mig.items())))


@dataclass(frozen=True)
class PromisableCapacity:
    """What a pool can promise, from its schedulable nodes minus what is allocated."""

    capacity_devices: Decimal
    allocated_devices: Decimal
    free_whole_nodes: int  # schedulable nodes not held by a dedicated block nor owed to one
    free_mig_slices: dict[str, int] | None  # per profile, when the driver reports MIG devices
    source: str
    # False while no node of the pool is present: nothing can be promised, and the admin is
    # told what to do (a configured size is a ceiling, never a source).
    has_fleet: bool = True

    @property
    def free_devices(self) -> Decimal:
        return max(Decimal(0), self.capacity_devices - self.allocated_devices)

    @property
    def overcommitted(self) -> bool:
        """More is allocated than the pool can promise now (nodes lost, retiring or failed)."""
        return self.allocated_devices > self.capacity_devices


NO_FLEET = "no nodes synced into the pool yet, so it promises nothing"


def promisable_capacity(nodes: Iterable[NodeFacts], *, allocated_devices: Decimal,
                        reserved_nodes: Iterable[str] = (),
                        allocated_mig: dict[str, int] | None = None,
                        ceiling: int = 0) -> PromisableCapacity:
    """Only schedulable devices are promised; `ceiling` (the pool's configured size, 0 for
    none) caps them and never adds any."""
    return capacity_from_counts(fleet_counts(nodes), allocated_devices=allocated_devices,
                                reserved_nodes=reserved_nodes, allocated_mig=allocated_mig,
                                ceiling=ceiling)


def capacity_from_counts(counts: FleetCounts, *, allocated_devices: Decimal,
                         reserved_nodes: Iterable[str] = (),
                         allocated_mig: dict[str, int] | None = None,
                         ceiling: int = 0) -> PromisableCapacity:
    """promisable_capacity from the pool's fleet counts. `reserved_nodes`: the pool's nodes
    (present or not) a dedicated block holds."""
    if not counts.nodes:
        return PromisableCapacity(Decimal(0), allocated_devices, 0, None, NO_FLEET,
                                  has_fleet=False)
    # A block held on a node that can no longer serve it (retiring, unhealthy, gone) needs
    # one of the free nodes: counting it free too would promise its devices twice. So the
    # free nodes are the schedulable ones not held, less the held ones that cannot serve:
    # |S − R| − |R − S| = |S| − |R|, names not needed.
    free_nodes = max(0, counts.schedulable_nodes - len(set(reserved_nodes)))
    mig = None
    if counts.mig_slices:
        used = allocated_mig or {}
        mig = {p: max(0, c - used.get(p, 0)) for p, c in counts.mig_slices.items()}
    capacity = counts.schedulable_devices
    source = (f"validated fleet: {capacity} schedulable of "
              f"{counts.fleet_devices} devices on {counts.nodes} node(s)")
    if ceiling and capacity > ceiling:
        capacity = ceiling
        source += f", capped at the pool's configured {ceiling}"
    return PromisableCapacity(Decimal(capacity), allocated_devices, free_nodes, mig, source)


def choose_dedicated_nodes(nodes: Iterable[NodeFacts], *, count: int,
                           reserved_nodes: Iterable[str] = ()) -> list[str]:
    """Pick whole schedulable nodes for a dedicated block: stable order, most recent burn-in
    first (freshest validation), then by name."""
    reserved = set(reserved_nodes)
    free = [n for n in nodes if n.schedulable and n.name not in reserved]
    free.sort(key=lambda n: (n.burn_in_date or "", n.name))
    free.sort(key=lambda n: n.burn_in_date or "", reverse=True)
    return [n.name for n in free[:count]]


def earliest_free(*, needed: Decimal, free_now: Decimal,
                  endings: Iterable[tuple[dt.datetime, Decimal]]) -> dt.datetime | None:
    """When enough promised capacity has ended for `needed` devices to fit, or None if the
    allocations that end are not enough (open-ended ones never free anything)."""
    if needed <= free_now:
        return None
    free = free_now
    for ends_at, devices in sorted(endings):
        free += devices
        if free >= needed:
            return ends_at
    return None


MISSED_SYNCS = 3  # syncs missed in a row before the fleet page calls a cluster's nodes stale


def stale_before(now: dt.datetime, every_seconds: int) -> dt.datetime:
    """Nodes last seen before this were missed by the last MISSED_SYNCS syncs."""
    return now - dt.timedelta(seconds=MISSED_SYNCS * every_seconds)


def node_is_stale(present: bool, last_synced_at: dt.datetime | None,
                  limit: dt.datetime) -> bool:
    """A present node no sync has seen since `limit` (`stale_before`); a node gone from the
    cluster is gone, not stale."""
    return bool(present and last_synced_at and last_synced_at < limit)


def stale_clusters(last_seen: dict[str, dt.datetime | None], *, now: dt.datetime,
                   every_seconds: int) -> dict[str, dt.datetime | None]:
    """Clusters whose nodes no recent sync has seen (by the newest sighting of any of their
    present nodes): their counts may be out of date, and the page says so."""
    limit = stale_before(now, every_seconds)
    return {name: seen for name, seen in sorted(last_seen.items())
            if seen is None or seen < limit}
