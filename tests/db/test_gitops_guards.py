"""In GitOps mode a cluster's admission guards are one directory: the shared policies once and
one params object holding every guarded allocation's keys, made from the database when it
is committed (the GitOps tool applies it under one field manager, so the keys cannot sit in
each allocation's own directory). A retiring allocation's keys leave it; with none left the
params stay, empty."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from fleet.allocations.admission import is_guard_params, params_entries
from fleet.allocations.git_sink import cluster_guards
from fleet.allocations.guard_check import is_guard_check
from fleet.models import Allocation, GpuNode, Route
from tests.factories import TenantFactory

pytestmark = pytest.mark.django_db
NOW = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)


def _block(tenant, pool, namespace, node):
    alloc = Allocation.objects.create(
        tenant=tenant, pool=pool, route=Route.DEDICATED_BLOCK, whole_devices=8,
        device_equivalents=Decimal(8), namespace=namespace, status="active", starts_at=NOW)
    alloc.nodes.add(GpuNode.objects.create(name=node, pool=pool, cluster=pool.cluster,
                                           gpu_count=8, gpu_model="H100"))
    return alloc


def test_one_directory_holds_every_blocks_check_entry_and_the_shared_guards_once(tenant,
                                                                                  pools):
    pool = pools[Route.DEDICATED_BLOCK]
    other = TenantFactory(slug="globex", name="Globex")
    one = _block(tenant, pool, "acme-r1", "gpu-a")
    two = _block(other, pool, "globex-r1", "gpu-b")
    objects = cluster_guards(pool.cluster.slug)
    (params,) = [m for m in objects if is_guard_params(m)]
    entries = params_entries(params)
    assert set(entries) == {f"check.{one.pk}", f"check.{two.pk}"}
    names = [(m["kind"], m["metadata"]["name"]) for m in objects if not is_guard_params(m)]
    assert len(names) == len(set(names)) == 10  # 4 policies, 4 bindings, the check's pair
    # The guards name neither block's tenant nor its nodes: nothing in them grows.
    assert not any(word in str(objects) for word in ("gpu-a", "gpu-b", "acme", "globex"))
    assert objects[0] is params and all(is_guard_check(m) for m in objects[-2:])
    # A retiring block's entry leaves; the other's stays.
    left = params_entries(cluster_guards(pool.cluster.slug, excluding=one.pk)[0])
    assert set(left) == {f"check.{two.pk}"}
    Allocation.objects.filter(pk=two.pk).update(status="retired")
    (empty,) = cluster_guards(pool.cluster.slug, excluding=one.pk)
    assert is_guard_params(empty) and params_entries(empty) == {}
