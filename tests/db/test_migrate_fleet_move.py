"""Moving pools, nodes, outages and allocations from tenants/ to fleet/ touches no data: a
database filled at the previous schema migrates forward and every row is found, through the
new models, with its relations and its audit trail."""

import datetime as dt
from decimal import Decimal

import pytest
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from fleet.models import Allocation, GpuNode, NodeOutage, Pool, RateCard
from intake.models import CapacityRequest
from tenants.audit import audit_for

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("tenants", "0005_nodeoutage"), ("intake", "0002_renewals"),
          ("billing", "0001_initial"), ("fleet", None)]


def _latest(executor: MigrationExecutor):
    return executor.loader.graph.leaf_nodes()


def test_rows_written_before_the_move_are_all_found_after_it(django_user_model):
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state([t for t in BEFORE if t[1]]).apps
    assert not old.all_models["fleet"]  # before its first migration the app has no model
    user = django_user_model.objects.create(username="lead-before-move")
    tenant = old.get_model("tenants", "Tenant").objects.create(slug="acme", name="Acme")
    pool = old.get_model("tenants", "Pool").objects.create(
        slug="dedicated", name="Dedicated", route="dedicated_block", gpu_model="H100",
        capacity_devices=16, rate_per_device_hour=Decimal("2.5"))
    node = old.get_model("tenants", "GpuNode").objects.create(name="h100-01", pool=pool,
                                                              gpu_count=8, validated=True)
    now = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    old.get_model("tenants", "NodeOutage").objects.create(node=node, started_at=now,
                                                          reason="Xid 79")
    alloc = old.get_model("tenants", "Allocation").objects.create(
        tenant=tenant, pool=pool, route="dedicated_block", whole_devices=8,
        device_equivalents=Decimal(8), namespace="acme-r1", starts_at=now, status="active")
    alloc.nodes.add(node)
    old.get_model("intake", "CapacityRequest").objects.create(
        tenant=tenant, requester_id=user.pk, title="Block", workload_kind="training",
        isolation_origin="contractual", isolation_reference="MSA-1", device_fill="full",
        whole_devices=8, starts_on=now.date(), justification="contract", status="approved",
        route="dedicated_block", pool=pool, allocation=alloc)
    old.get_model("billing", "RateCard").objects.create(
        pool=pool, effective_from=now, rate_per_device_hour=Decimal("2.5"))
    old.get_model("tenants", "AuditEvent").objects.create(
        actor_name="admin", tenant=tenant, subject_type="allocation", subject_id=alloc.pk,
        action="allocation.created", reason="Approved request #1.")
    old_ct = ContentType.objects.get_or_create(app_label="tenants", model="allocation")[0]

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(_latest(executor))

    moved = Allocation.objects.select_related("tenant", "pool").get(pk=alloc.pk)
    assert (moved.tenant.slug, moved.pool.slug, moved.namespace) == ("acme", "dedicated",
                                                                     "acme-r1")
    assert list(moved.nodes.values_list("name", flat=True)) == ["h100-01"]
    assert GpuNode.objects.get(name="h100-01").pool == Pool.objects.get(slug="dedicated")
    assert NodeOutage.objects.get().reason == "Xid 79"
    req = CapacityRequest.objects.get()
    assert req.allocation == moved and req.pool.slug == "dedicated"
    # The card written then, and the pool's own rate as a card from the beginning (fleet
    # 0008: prices live only in cards now).
    cards = list(RateCard.objects.order_by("effective_from"))
    assert [(c.pool.slug, c.rate_per_device_hour) for c in cards] == [
        ("dedicated", Decimal("2.5")), ("dedicated", Decimal("2.5"))]
    from fleet.inventory.pricing import BEGINNING, pool_rate

    assert cards[0].effective_from == BEGINNING
    assert pool_rate(moved.pool_id, now) == Decimal("2.5")
    assert [e.action for e in audit_for(moved)] == ["allocation.created"]
    assert ContentType.objects.get(pk=old_ct.pk).app_label == "fleet"
