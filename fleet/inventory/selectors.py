"""Reads of the fleet: clusters, pool capacity and what allocations hold of it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.db.models import Count, F, Sum

from ..models import Allocation, Cluster, GpuNode, Pool
from .capacity import (
    FleetCounts,
    NodeFacts,
    PromisableCapacity,
    choose_dedicated_nodes,
    fleet_counts,
    promisable_capacity,
)


def mig_weights() -> dict[str, Decimal]:
    """PORTAL_MIG_WEIGHTS as numbers: the platform's share of a device per MIG profile, for
    allocated (intake) and used (billing) device-hours alike."""
    return {k: Decimal(v) for k, v in settings.PORTAL_MIG_WEIGHTS.items()}


FACT_COLUMNS = ("name", "pool_id", "pool_label", "gpu_model", "gpu_count", "gpu_memory_mib",
                "mig_capable", "mig_config", "validated", "bios_profile", "burn_in_date",
                "validation_failure", "ready", "health_problems", "cordoned", "retiring",
                "present", "dra_whole_gpus", "mig_devices")


def facts_by_pool(nodes) -> dict[int | None, list]:
    """Pool id → NodeFacts of these nodes, read as plain rows (no model objects: pages that
    show capacity read every node of a pool on each view)."""
    out: dict[int | None, list] = {}
    for row in nodes.values_list(*FACT_COLUMNS):
        d = dict(zip(FACT_COLUMNS, row, strict=True))
        pool_id = d.pop("pool_id")
        d["pool"] = d.pop("pool_label")
        d["health_problems"] = tuple(d["health_problems"] or ())
        d["mig_devices"] = tuple(sorted((k, int(v)) for k, v in (d["mig_devices"] or {}).items()))
        out.setdefault(pool_id, []).append(NodeFacts(**d))
    return out


def pool_capacity(pool: Pool) -> PromisableCapacity:
    """Promisable capacity of a pool and what allocations already hold of it: from its
    validated fleet only (a pool with no nodes promises nothing)."""
    return pools_capacity([pool])[pool.pk]


def pools_capacity(pools, *, node_facts: dict | None = None) -> dict[int, PromisableCapacity]:
    """pool_capacity of many pools in four queries, whatever their number (pages that show
    every pool). `node_facts` (pool id → facts) reuses nodes a page has read already."""
    pools = list(pools)
    ids = [p.pk for p in pools]
    holding = Allocation.objects.filter(pool_id__in=ids, status__in=Allocation.HOLDING)
    held = dict(holding.values("pool_id").annotate(total=Sum("device_equivalents"))
                .values_list("pool_id", "total"))
    if node_facts is None:
        node_facts = facts_by_pool(GpuNode.objects.filter(pool_id__in=ids))
    reserved: dict[int, list[str]] = {}
    for pool_id, name in GpuNode.objects.filter(
            pool_id__in=ids, allocations__status__in=Allocation.HOLDING,
            allocations__pool_id=F("pool_id")).values_list("pool_id", "name").distinct():
        reserved.setdefault(pool_id, []).append(name)
    mig_used: dict[int, Counter] = {}
    for pool_id, profile, count in holding.exclude(mig_profile="").values_list(
            "pool_id", "mig_profile", "mig_count"):
        mig_used.setdefault(pool_id, Counter())[profile] += count
    return {pool.pk: promisable_capacity(
        node_facts.get(pool.pk, []), allocated_devices=Decimal(held.get(pool.pk) or 0),
        reserved_nodes=reserved.get(pool.pk, []), allocated_mig=dict(mig_used.get(pool.pk, {})),
        ceiling=pool.capacity_devices) for pool in pools}


def pools_for_route(route: str, gpu_model: str = ""):
    pools = Pool.objects.filter(route=route, active=True)
    if gpu_model:
        pools = pools.filter(gpu_model=gpu_model)
    return pools.order_by("name")


def pool_endings(pool: Pool) -> list[tuple]:
    """(ends_at, devices) of the allocations holding capacity in the pool that do end."""
    return list(Allocation.objects.filter(pool=pool, status__in=Allocation.HOLDING,
                                          ends_at__isnull=False)
                .values_list("ends_at", "device_equivalents"))


def free_dedicated_nodes(pool: Pool, count: int) -> tuple[str, ...]:
    """The validated nodes a dedicated block of `count` nodes would get, freshest burn-in
    first (fewer than `count` when the pool has fewer free)."""
    pool_nodes = list(GpuNode.objects.filter(pool=pool))
    reserved = GpuNode.objects.filter(pool=pool, allocations__status__in=Allocation.HOLDING)
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


def clusters_overview(clusters=None) -> list[ClusterView]:
    """Every cluster (live first) with its figures: a node read per cluster (a handful),
    the pools' capacity and the allocations held in three queries more."""
    clusters = list(clusters if clusters is not None else Cluster.objects.all())
    ids = [c.pk for c in clusters]
    pools = list(Pool.objects.filter(cluster_id__in=ids))
    facts = {c.pk: facts_by_pool(GpuNode.objects.filter(cluster_id=c.pk)) for c in clusters}
    capacity = pools_capacity(pools, node_facts={
        pool_id: found for per in facts.values() for pool_id, found in per.items()
        if pool_id is not None})
    held = dict(Allocation.objects.filter(pool__cluster_id__in=ids,
                                          status__in=Allocation.HOLDING)
                .values("pool__cluster_id").annotate(n=Count("pk"))
                .values_list("pool__cluster_id", "n"))
    return [ClusterView(c, fleet_counts([f for found in facts[c.pk].values() for f in found]),
                        [(p, capacity[p.pk]) for p in pools if p.cluster_id == c.pk],
                        held.get(c.pk, 0)) for c in clusters]


def cluster_view(cluster: Cluster) -> ClusterView:
    return clusters_overview([cluster])[0]
