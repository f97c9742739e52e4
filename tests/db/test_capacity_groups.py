"""The capacity pages promise and the counts the fleet page shows, counted from nodes grouped
by the database (grouped_facts), are exactly what the pure functions make of every node one
by one — over generated fleets on PostgreSQL: nodes alike but for their names, burn-in dates,
health problems and MIG devices in any order, nodes gone, cordoned, retiring, unpooled (in a
second cluster too), dedicated blocks holding some of them (present or not) and MIG slices
held."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet.inventory.capacity import fleet_counts, promisable_capacity
from fleet.inventory.selectors import (
    clusters_overview,
    counts_by_pool,
    facts_by_cluster,
    fleet_picture,
    node_facts,
    pools_capacity,
    read_fleet,
)
from fleet.models import Allocation, Cluster, GpuNode, Route
from tests.factories import ClusterFactory

pytestmark = pytest.mark.django_db

node_st = st.fixed_dictionaries({
    "pool": st.sampled_from([Route.SHARED_POOL, Route.DEDICATED_BLOCK, None]),
    "gpu_count": st.sampled_from([0, 4, 8]),
    "validated": st.booleans(),
    "ready": st.booleans(),
    "health_problems": st.sampled_from([[], ["GpuXidError: 79"], ["A", "B"]]),
    "cordoned": st.booleans(),
    "retiring": st.booleans(),
    "present": st.booleans(),
    "mig_devices": st.sampled_from([{}, {"1g.10gb": 7}, {"3g.40gb": 2, "1g.10gb": 1},
                                    {"1g.10gb": 1, "3g.40gb": 2}]),
    "burn_in_date": st.sampled_from(["", "2026-01-02", "2026-03-04"]),
    "held": st.booleans(),  # a dedicated block holds it
    "elsewhere": st.booleans(),  # unpooled, in a second cluster
})


@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fleet=st.lists(node_st, max_size=14), ceiling=st.sampled_from([0, 8, 1000]),
       slices=st.sampled_from([0, 1, 3]))
def test_grouped_counts_equal_every_node_counted(fleet, ceiling, slices, bare_pools, tenant):
    GpuNode.objects.all().delete()
    Allocation.objects.all().delete()
    second = ClusterFactory(slug="second")
    pools = bare_pools
    for pool in pools.values():
        pool.capacity_devices = ceiling
        pool.save(update_fields=["capacity_devices"])
    block = Allocation.objects.create(
        tenant=tenant, pool=pools[Route.DEDICATED_BLOCK], route=Route.DEDICATED_BLOCK,
        whole_devices=8, device_equivalents=Decimal(8), namespace="acme-r1", status="active",
        starts_at=timezone.now())
    if slices:
        Allocation.objects.create(
            tenant=tenant, pool=pools[Route.SHARED_POOL], route=Route.SHARED_POOL,
            mig_profile="1g.10gb", mig_count=slices, device_equivalents=Decimal("0.25") * slices,
            namespace="acme-r2", status="active", starts_at=timezone.now())
    held = []
    for i, n in enumerate(fleet):
        pool = pools[n["pool"]] if n["pool"] else None
        cluster = second if n["elsewhere"] and pool is None else (
            pool.cluster if pool else pools[Route.SHARED_POOL].cluster)
        node = GpuNode.objects.create(
            name=f"n{i}", pool=pool, pool_label=pool.slug if pool else "", cluster=cluster,
            **{k: v for k, v in n.items() if k not in ("pool", "held", "elsewhere")})
        if n["held"] and n["pool"] == Route.DEDICATED_BLOCK:
            held.append(node)
    block.nodes.set(held)

    by_pool = facts_by_cluster(GpuNode.objects.all(), by_cluster=False)[None]
    grouped = counts_by_pool(p.pk for p in pools.values())
    assert set(grouped) == set(by_pool) - {None}
    for pool_id, facts in by_pool.items():
        if pool_id is not None:
            assert grouped[pool_id] == fleet_counts(facts)

    together = pools_capacity(pools.values())
    reading = read_fleet()
    for pool in pools.values():
        reserved = [n.name for n in held] if pool.route == Route.DEDICATED_BLOCK else []
        shared = pool.route == Route.SHARED_POOL
        one_by_one = promisable_capacity(
            [node_facts(n) for n in GpuNode.objects.filter(pool=pool)],
            allocated_devices=Decimal(8 if pool.route == Route.DEDICATED_BLOCK else 0)
            + (Decimal("0.25") * slices if shared else 0),
            reserved_nodes=reserved,
            allocated_mig={"1g.10gb": slices} if shared and slices else {}, ceiling=ceiling)
        assert together[pool.pk] == one_by_one
        assert reading.capacity[pool.pk] == one_by_one

    # The fleet page's counts: per cluster (read apart and from the page's reading), per
    # pool, unpooled, and the whole fleet.
    every = list(GpuNode.objects.all())
    for views in (clusters_overview(), clusters_overview(reading=reading)):
        for view in views:
            assert view.counts == fleet_counts(
                node_facts(n) for n in every if n.cluster_id == view.cluster.pk)
    picture = fleet_picture(reading)
    for row in picture.pools:
        assert row.counts == fleet_counts(node_facts(n) for n in every if n.pool_id == row.pool.pk)
        assert row.synced == any(n.pool_id == row.pool.pk for n in every)
    unpooled = [node_facts(n) for n in every if n.pool_id is None]
    assert picture.unpooled == (fleet_counts(unpooled) if unpooled else None)
    assert picture.total == fleet_counts(node_facts(n) for n in every)
    assert Cluster.objects.filter(slug="second").exists()
