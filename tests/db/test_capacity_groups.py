"""The capacity pages promise, counted from nodes grouped by the database (counts_by_pool), is
exactly what the pure functions make of every node one by one — over generated fleets on
PostgreSQL: nodes alike but for their names, burn-in dates, health problems and MIG devices
in any order, nodes gone, cordoned, retiring, unpooled, and dedicated blocks holding some of
them (present or not)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet.inventory.capacity import fleet_counts, promisable_capacity
from fleet.inventory.selectors import (
    counts_by_pool,
    facts_by_cluster,
    node_facts,
    pools_capacity,
)
from fleet.models import Allocation, GpuNode, Route

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
})


@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fleet=st.lists(node_st, max_size=14), ceiling=st.sampled_from([0, 8, 1000]))
def test_grouped_counts_equal_every_node_counted(fleet, ceiling, bare_pools, tenant):
    GpuNode.objects.all().delete()
    Allocation.objects.all().delete()
    pools = bare_pools
    for pool in pools.values():
        pool.capacity_devices = ceiling
        pool.save(update_fields=["capacity_devices"])
    block = Allocation.objects.create(
        tenant=tenant, pool=pools[Route.DEDICATED_BLOCK], route=Route.DEDICATED_BLOCK,
        whole_devices=8, device_equivalents=Decimal(8), namespace="acme-r1", status="active",
        starts_at=timezone.now())
    held = []
    for i, n in enumerate(fleet):
        pool = pools[n["pool"]] if n["pool"] else None
        node = GpuNode.objects.create(
            name=f"n{i}", pool=pool, pool_label=pool.slug if pool else "",
            **{k: v for k, v in n.items() if k not in ("pool", "held")})
        if n["held"] and n["pool"] == Route.DEDICATED_BLOCK:
            held.append(node)
    block.nodes.set(held)

    by_pool = facts_by_cluster(GpuNode.objects.all(), by_cluster=False)[None]
    grouped = counts_by_pool(GpuNode.objects.all())
    assert set(grouped) == set(by_pool)
    for pool_id, facts in by_pool.items():
        assert grouped[pool_id] == fleet_counts(facts)

    together = pools_capacity(pools.values())
    for pool in pools.values():
        reserved = [n.name for n in held] if pool.route == Route.DEDICATED_BLOCK else []
        one_by_one = promisable_capacity(
            [node_facts(n) for n in GpuNode.objects.filter(pool=pool)],
            allocated_devices=Decimal(8 if pool.route == Route.DEDICATED_BLOCK else 0),
            reserved_nodes=reserved, allocated_mig={}, ceiling=ceiling)
        assert together[pool.pk] == one_by_one
