"""Reads of the fleet: clusters, pool capacity and what allocations hold of it, and the fleet
page's picture of every pool (counts, capacity, who an overcommitted pool affects)."""

from __future__ import annotations

import pickle
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.core.paginator import Paginator
from django.db.models import Count, F, Max, OuterRef, Subquery, Sum
from django.db.models.functions import Coalesce

from tenants.compiled import compiled_per_arguments
from tenants.kept_reads import kept_across_requests
from tenants.models import Tenant

from ..models import Allocation, Cluster, GpuNode, Pool, home_cluster_id
from .capacity import (
    FleetCounts,
    NodeFacts,
    PromisableCapacity,
    capacity_from_counts,
    choose_dedicated_nodes,
    grouped_fleet_counts,
)


def mig_weights() -> dict[str, Decimal]:
    """PORTAL_MIG_WEIGHTS as numbers: the platform's share of a device per MIG profile, for
    allocated (intake) and used (billing) device-hours alike."""
    return {k: Decimal(v) for k, v in settings.PORTAL_MIG_WEIGHTS.items()}


FACT_COLUMNS = ("name", "pool_id", "pool_label", "gpu_model", "gpu_count", "gpu_memory_mib",
                "mig_capable", "mig_config", "validated", "bios_profile", "burn_in_date",
                "validation_failure", "ready", "health_problems", "cordoned", "retiring",
                "present", "dra_whole_gpus", "mig_devices")


def facts_by_cluster(nodes, *, by_cluster: bool = True) -> dict:
    """Cluster id → pool id → NodeFacts, in one read of plain rows (`by_cluster` False: all
    under None)."""
    columns = (*FACT_COLUMNS, "cluster_id")
    out: dict = {None: {}} if not by_cluster else {}
    for row in nodes.values_list(*columns):
        d = dict(zip(columns, row, strict=True))
        cluster_id, pool_id = d.pop("cluster_id"), d.pop("pool_id")
        d["pool"] = d.pop("pool_label")
        d["health_problems"] = tuple(d["health_problems"] or ())
        d["mig_devices"] = tuple(sorted((k, int(v)) for k, v in (d["mig_devices"] or {}).items()))
        per = out.setdefault(cluster_id if by_cluster else None, {})
        per.setdefault(pool_id, []).append(NodeFacts(**d))
    return out


def pool_capacity(pool: Pool) -> PromisableCapacity:
    """Promisable capacity of a pool and what allocations already hold of it: from its
    validated fleet only (a pool with no nodes promises nothing)."""
    return pools_capacity([pool])[pool.pk]


# What fleet_counts reads of a node: nodes alike in these are counted as one group.
COUNTED_COLUMNS = ("gpu_count", "validated", "ready", "health_problems", "cordoned",
                   "retiring", "present", "mig_devices")


def _counted_facts(row: dict) -> NodeFacts:
    return NodeFacts(
        name="", gpu_count=row["gpu_count"], validated=row["validated"], ready=row["ready"],
        health_problems=tuple(row["health_problems"] or ()), cordoned=row["cordoned"],
        retiring=row["retiring"], present=row["present"],
        mig_devices=tuple(sorted((k, int(v)) for k, v in (row["mig_devices"] or {}).items())))


def grouped_facts(nodes, *, by_cluster: bool = True) -> dict:
    """Cluster id → pool id → [(NodeFacts with no name, how many of these nodes have exactly
    those counted facts)], grouped by the database: a few rows per pool, not one per node, for
    pages that count the fleet on each view (`by_cluster` False: all under None). The property
    test holds their counts equal to fleet_counts over every node."""
    keys = ("cluster_id", "pool_id") if by_cluster else ("pool_id",)
    out: dict = {None: {}} if not by_cluster else {}
    for row in nodes.values(*keys, *COUNTED_COLUMNS).annotate(n=Count("pk")).order_by():
        per = out.setdefault(row["cluster_id"] if by_cluster else None, {})
        per.setdefault(row["pool_id"], []).append((_counted_facts(row), row["n"]))
    return out


# pools_capacity's reads, compiled once per set of pools (tenants.compiled): the pages that
# promise capacity ask about the same active pools on every view.

@compiled_per_arguments()
def _node_groups(pool_ids: tuple[int, ...]):
    return (GpuNode.objects.filter(pool_id__in=pool_ids).values("pool_id", *COUNTED_COLUMNS)
            .annotate(n=Count("pk")).order_by())


@compiled_per_arguments()
def _held(pool_ids: tuple[int, ...]):
    return (Allocation.objects.filter(pool_id__in=pool_ids, status__in=Allocation.HOLDING)
            .values("pool_id", "mig_profile")
            .annotate(devices=Sum("device_equivalents"), slices=Sum("mig_count")).order_by())


@compiled_per_arguments()
def _reserved(pool_ids: tuple[int, ...]):
    return (GpuNode.objects.filter(pool_id__in=pool_ids,
                                   allocations__status__in=Allocation.HOLDING,
                                   allocations__pool_id=F("pool_id"))
            .values("pool_id", "name").distinct().order_by())


def counts_by_pool(pool_ids: Iterable[int]) -> dict[int, FleetCounts]:
    """Pool id → fleet_counts of the pools' nodes, from their grouped facts."""
    groups: dict[int, list] = {}
    for row in _node_groups(tuple(pool_ids)):
        groups.setdefault(row["pool_id"], []).append((_counted_facts(row), row["n"]))
    return {pool_id: grouped_fleet_counts(found) for pool_id, found in groups.items()}


def pools_capacity(pools, *, counts: dict | None = None) -> dict[int, PromisableCapacity]:
    """pool_capacity of many pools in three queries, whatever their number (pages that show
    every pool). `counts` (pool id → FleetCounts) reuses nodes a page has counted already."""
    pools = list(pools)
    ids = tuple(p.pk for p in pools)
    held: dict[int, Decimal] = {}
    mig_used: dict[int, Counter] = {}
    for row in _held(ids):
        pool_id = row["pool_id"]
        held[pool_id] = held.get(pool_id, Decimal(0)) + Decimal(row["devices"] or 0)
        if row["mig_profile"]:
            mig_used.setdefault(pool_id, Counter())[row["mig_profile"]] += row["slices"] or 0
    if counts is None:
        counts = counts_by_pool(ids)
    reserved: dict[int, list[str]] = {}
    for row in _reserved(ids):
        reserved.setdefault(row["pool_id"], []).append(row["name"])
    return {pool.pk: capacity_from_counts(
        counts.get(pool.pk) or FleetCounts(), allocated_devices=held.get(pool.pk, Decimal(0)),
        reserved_nodes=reserved.get(pool.pk, []), allocated_mig=dict(mig_used.get(pool.pk, {})),
        ceiling=pool.capacity_devices) for pool in pools}


@kept_across_requests(Allocation)
def pool_endings(pool_id: int) -> tuple[tuple, ...]:
    """(ends_at, devices) of the allocations holding the pool that do end (kept: "not yet")."""
    return tuple(Allocation.objects.filter(pool_id=pool_id, status__in=Allocation.HOLDING,
                                           ends_at__isnull=False)
                 .values_list("ends_at", "device_equivalents"))


def free_dedicated_nodes(pool: Pool, count: int) -> tuple[str, ...]:
    """The validated nodes a dedicated block of `count` nodes would get, freshest burn-in
    first (fewer than `count` when the pool has fewer free); kept across reading requests
    (the review page) until a node or an allocation is written."""
    return _free_dedicated(pool.pk, count)


@kept_across_requests(GpuNode, Allocation, Allocation.nodes.through)
def _free_dedicated(pool_id: int, count: int) -> tuple[str, ...]:
    pool_nodes = list(GpuNode.objects.filter(pool_id=pool_id))
    reserved = GpuNode.objects.filter(pool_id=pool_id, allocations__status__in=Allocation.HOLDING)
    return tuple(choose_dedicated_nodes([node_facts(n) for n in pool_nodes], count=count,
                                        reserved_nodes=reserved.values_list("name", flat=True)))


def node_facts(node) -> NodeFacts:
    """A stored node as the pure capacity functions see it."""
    return NodeFacts(
        name=node.name, pool=node.pool_label, gpu_model=node.gpu_model,
        gpu_count=node.gpu_count, gpu_memory_mib=node.gpu_memory_mib,
        mig_capable=node.mig_capable, mig_config=node.mig_config,
        validated=node.validated, bios_profile=node.bios_profile,
        burn_in_date=node.burn_in_date, validation_failure=node.validation_failure,
        ready=node.ready, health_problems=tuple(node.health_problems),
        cordoned=node.cordoned, retiring=node.retiring, present=node.present,
        dra_whole_gpus=node.dra_whole_gpus,
        mig_devices=tuple(sorted((k, int(v)) for k, v in node.mig_devices.items())),
    )


@dataclass
class ClusterView:
    """One cluster as the admin pages show it: its fleet counts, what its pools can promise
    and hold, and how many allocations live there."""

    cluster: Cluster
    counts: FleetCounts
    pools: list[tuple[Pool, PromisableCapacity]]
    allocations: int

    @property
    def promisable_devices(self) -> Decimal:
        return sum((cap.capacity_devices for _p, cap in self.pools), Decimal(0))

    @property
    def allocated_devices(self) -> Decimal:
        return sum((cap.allocated_devices for _p, cap in self.pools), Decimal(0))


@dataclass(frozen=True)
class FleetReading:
    """Every node (as grouped facts) and every pool with its capacity, read once for a page
    that shows the fleet several ways (the fleet page: its clusters and its pools)."""

    by_cluster: dict  # cluster id → pool id → [(NodeFacts, nodes)] (grouped_facts)
    pools: list[Pool]  # every pool, its cluster joined
    capacity: dict[int, PromisableCapacity]  # pool id → capacity

    def by_pool(self) -> dict[int | None, list[tuple[NodeFacts, int]]]:
        out: dict[int | None, list] = {}
        for per in self.by_cluster.values():
            for pool_id, groups in per.items():
                out.setdefault(pool_id, []).extend(groups)
        return out


def read_fleet() -> FleetReading:
    """The fleet in pools_capacity's few queries and one grouped read of the nodes."""
    reading = FleetReading(grouped_facts(GpuNode.objects.all()),
                           list(Pool.objects.select_related("cluster")), {})
    counts = {k: grouped_fleet_counts(v) for k, v in reading.by_pool().items() if k is not None}
    reading.capacity.update(pools_capacity(reading.pools, counts=counts))
    return reading


def clusters_overview(clusters=None, *, reading: FleetReading | None = None
                      ) -> list[ClusterView]:
    """Every cluster (live first) with its figures: the nodes read once, grouped, the pools'
    capacity and the allocations held in a fixed number of queries more (none more for
    nodes and pools when the page has read the fleet already: `reading`)."""
    if clusters is None:
        home_cluster_id()  # registered before it is listed, even before any pool names it
        clusters = Cluster.objects.all()
    clusters = list(clusters)
    ids = [c.pk for c in clusters]
    if reading is not None:
        pools = [p for p in reading.pools if p.cluster_id in set(ids)]
        found, capacity = reading.by_cluster, reading.capacity
    else:
        pools = list(Pool.objects.filter(cluster_id__in=ids))
        found = grouped_facts(GpuNode.objects.filter(cluster_id__in=ids))
    groups = {c.pk: found.get(c.pk, {}) for c in clusters}
    if reading is None:
        by_pool: dict = {}
        for per in groups.values():
            for pool_id, g in per.items():
                by_pool.setdefault(pool_id, []).extend(g)
        capacity = pools_capacity(pools, counts={
            pool_id: grouped_fleet_counts(g) for pool_id, g in by_pool.items()
            if pool_id is not None})
    held = dict(Allocation.objects.filter(pool__cluster_id__in=ids,
                                          status__in=Allocation.HOLDING)
                .values("pool__cluster_id").annotate(n=Count("pk"))
                .values_list("pool__cluster_id", "n"))
    return [ClusterView(c, grouped_fleet_counts(g for per in groups[c.pk].values() for g in per),
                        [(p, capacity[p.pk]) for p in pools if p.cluster_id == c.pk],
                        held.get(c.pk, 0)) for c in clusters]


def across_clusters(views: list[ClusterView]) -> dict[str, Decimal]:
    """What the clusters promise and hold together: the sum over clusters is the fleet's."""
    return {"promisable": sum((v.promisable_devices for v in views), Decimal(0)),
            "allocated": sum((v.allocated_devices for v in views), Decimal(0))}


def cluster_view(cluster: Cluster) -> ClusterView:
    return clusters_overview([cluster])[0]


# -- the fleet page and the pool list ------------------------------------------------------

AFFECTED_SHOWN = 8  # tenants named beside an overcommitted pool; the rest are counted


def tenants_holding(pool: Pool, shown: int = AFFECTED_SHOWN) -> tuple[list[str], int]:
    """The first `shown` tenants by name that hold capacity in the pool, and how many more
    (a pool may hold thousands: the page stays the same size)."""
    holding = (Allocation.objects.filter(pool=pool, status__in=Allocation.HOLDING)
               .values_list("tenant__name", flat=True).distinct().order_by("tenant__name"))
    names = list(holding[:shown])
    return names, holding.count() - shown if len(names) == shown else 0


@dataclass(frozen=True)
class PoolRow:
    """One active pool on the fleet page: its fleet counts, what it promises and holds, and
    who is affected when it holds more than it can promise."""

    pool: Pool
    counts: FleetCounts
    cap: PromisableCapacity
    affected: list[str]  # the first few tenants by name (tenants_holding), when overcommitted
    affected_more: int
    synced: bool  # any node of the pool was read from the cluster

    @property
    def overcommitted(self) -> bool:
        return self.cap.overcommitted


@dataclass(frozen=True)
class FleetPicture:
    pools: list[PoolRow]
    unpooled: FleetCounts | None  # nodes with no known pool label (None: there are none)
    total: FleetCounts  # every node


def fleet_picture(reading: FleetReading | None = None) -> FleetPicture:
    """Every active pool's row and the fleet's counts, from the nodes read once, grouped
    (read_fleet) and pools_capacity's few queries, plus two per overcommitted pool."""
    reading = reading or read_fleet()
    nodes_by_pool = reading.by_pool()
    pools = [p for p in reading.pools if p.active]
    capacities = reading.capacity
    rows = []
    for pool in pools:
        cap = capacities[pool.pk]
        affected, more = tenants_holding(pool) if cap.overcommitted else ([], 0)
        rows.append(PoolRow(pool, grouped_fleet_counts(nodes_by_pool.get(pool.pk, [])), cap,
                            affected, more, pool.pk in nodes_by_pool))
    unpooled = nodes_by_pool.get(None, [])
    return FleetPicture(rows, grouped_fleet_counts(unpooled) if unpooled else None,
                        grouped_fleet_counts(g for groups in nodes_by_pool.values()
                                             for g in groups))


def last_sightings() -> dict[str, object]:
    """Per live cluster with nodes: when a sync last saw any of its present nodes."""
    return dict(_last_sightings())


@kept_across_requests(GpuNode, Cluster)
def _last_sightings() -> tuple[tuple[str, object], ...]:
    rows = (GpuNode.objects.filter(present=True, cluster__retired_at__isnull=True)
            .values("cluster__name").annotate(seen=Max("last_synced_at")).order_by())
    return tuple((r["cluster__name"], r["seen"]) for r in rows)


# What a row of the node table shows (fleet.renderers.node_rows), not every column of the
# node, its pool and its cluster; tests/db/test_fleet_reads.py holds the page's queries fixed.
LISTED_NODE_COLUMNS = ("name", "pool_label", "gpu_model", "gpu_count", "mig_devices",
                       "mig_config", "state", "reason", "present", "last_synced_at",
                       "cluster__slug", "pool__name")


def node_list(*, state: str = "", pool: str = ""):
    """The GPU nodes by name, each with its number of allocations; of one state and one pool
    (slug) when given."""
    # Counted per node by a subquery, not a GROUP BY over every node's columns: the page's
    # LIMIT then applies first, so only its 50 rows are counted (a thousand nodes grouped
    # was most of the fleet page's SQL).
    held = (Allocation.nodes.through.objects.filter(gpunode_id=OuterRef("pk")).order_by()
            .values("gpunode_id").annotate(n=Count("*")).values("n"))
    nodes = (GpuNode.objects.select_related("pool", "cluster").only(*LISTED_NODE_COLUMNS)
             .annotate(n_alloc=Coalesce(Subquery(held), 0)).order_by("name"))
    if state:
        nodes = nodes.filter(state=state)
    if pool:
        nodes = nodes.filter(pool__slug=pool)
    return nodes


@kept_across_requests(GpuNode, Pool, Cluster, Allocation, Allocation.nodes.through, Tenant,
                      freeze=pickle.dumps, thaw=pickle.loads)
def fleet_summary() -> tuple[FleetReading, FleetPicture, list[ClusterView]]:
    """The fleet page's reading, its pools' picture and its live clusters' figures, kept
    across reading requests until a node, pool, cluster or allocation is written."""
    reading = read_fleet()
    return (reading, fleet_picture(reading),
            clusters_overview(Cluster.objects.live(), reading=reading))


NODES_PER_PAGE = 50


@kept_across_requests(GpuNode, Pool, Cluster, Allocation.nodes.through, freeze=pickle.dumps,
                      thaw=pickle.loads)
def node_page(state: str, pool: str, number) -> tuple[list, int, int]:
    """The fleet page's node table: page `number` of node_list (as Paginator.get_page reads
    it) as (its rows, how many nodes, the page's number), kept across reading requests until
    a node or what it shows is written; staleness is reckoned from it per view."""
    page = Paginator(node_list(state=state, pool=pool), NODES_PER_PAGE).get_page(number)
    return list(page.object_list), page.paginator.count, page.number
