"""The fast reads of the fleet agree with the model's own view of a node."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from fleet.inventory.selectors import (
    facts_by_cluster,
    node_facts,
    node_list,
    pool_capacity,
    pools_capacity,
)
from fleet.models import Allocation, GpuNode, Route
from tenants.models import Tenant

pytestmark = pytest.mark.django_db


def test_facts_from_rows_equal_the_model_facts(bare_pools):
    shared = bare_pools["shared_pool"]
    GpuNode.objects.create(name="a", pool=shared, pool_label="shared", gpu_count=8,
                           validated=True, ready=True, health_problems=["GpuXidError: 79"],
                           mig_devices={"3g.40gb": 2, "1g.10gb": 7}, dra_whole_gpus=None)
    GpuNode.objects.create(name="b", pool=None, pool_label="", cordoned=True, retiring=True)
    rows = facts_by_cluster(GpuNode.objects.all(), by_cluster=False)[None]
    assert rows[shared.pk] == [node_facts(GpuNode.objects.get(name="a"))]
    assert rows[None] == [node_facts(GpuNode.objects.get(name="b"))]


def test_many_pools_at_once_equal_one_at_a_time(bare_pools):
    pools = bare_pools
    for i, pool in enumerate(pools.values()):
        for n in range(i + 1):
            GpuNode.objects.create(name=f"{pool.slug}-{n}", pool=pool, pool_label=pool.slug,
                                   gpu_count=8, validated=True, ready=True,
                                   state="schedulable")
    from decimal import Decimal

    from fleet.inventory.capacity import promisable_capacity

    together = pools_capacity(pools.values())
    for pool in pools.values():
        alone = promisable_capacity([node_facts(n) for n in GpuNode.objects.filter(pool=pool)],
                                    allocated_devices=Decimal(0), reserved_nodes=[],
                                    allocated_mig={}, ceiling=pool.capacity_devices)
        assert together[pool.pk] == alone == pool_capacity(pool)


def test_the_node_list_counts_each_nodes_allocations_of_every_status(bare_pools):
    shared = bare_pools["shared_pool"]
    tenant = Tenant.objects.create(slug="t", name="T")
    busy, idle = (GpuNode.objects.create(name=n, pool=shared, gpu_count=8) for n in "ab")
    for status in ("active", "retired", "provisioning"):
        a = Allocation.objects.create(tenant=tenant, pool=shared, route=Route.SHARED_POOL,
                                      whole_devices=1, device_equivalents=1,
                                      starts_at=timezone.now(),
                                      namespace=f"t-{status}", status=status)
        a.nodes.add(busy)
    # Every allocation ever placed on the node, as the per-node count always said, on a
    # page of the list (the count comes after the page's LIMIT) and on the whole list.
    assert {n.name: n.n_alloc for n in node_list()} == {"a": 3, "b": 0}
    assert [(n.name, n.n_alloc) for n in node_list()[:1]] == [("a", 3)]
    assert [n.n_alloc for n in node_list(state=idle.state, pool=shared.slug)] == [3, 0]


def test_the_fleet_page_reads_a_fixed_number_of_queries_whatever_its_nodes(client, bare_pools,
                                                                           admin_user):
    """The node table reads only what its rows show: a column left out would be read node
    by node."""
    shared = bare_pools["shared_pool"]
    client.force_login(admin_user)

    def queries() -> int:
        client.get("/fleet/")
        with CaptureQueriesContext(connection) as captured:
            assert b"gpu-0" in client.get("/fleet/").content
        return len(captured)

    GpuNode.objects.create(name="gpu-0", pool=shared, gpu_count=8, mig_devices={"1g.10gb": 7})
    one = queries()
    for i in range(1, 6):
        GpuNode.objects.create(name=f"gpu-{i}", pool=shared, gpu_count=8, reason="cordoned",
                               last_synced_at=timezone.now())
    assert queries() == one
