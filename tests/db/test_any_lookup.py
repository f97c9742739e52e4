"""`__any` (tenants/lookups.py) finds what `__in` finds, with one parameter for the list."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from fleet.models import Allocation, QueueUsageHour, QueueWorkload, Route

pytestmark = pytest.mark.django_db
NOW = timezone.now().replace(minute=0, second=0, microsecond=0)


@pytest.fixture
def world(tenant, pools):
    allocs = Allocation.objects.bulk_create([Allocation(
        tenant=tenant, pool=pools[Route.SHARED_POOL], route=Route.SHARED_POOL,
        whole_devices=1, device_equivalents=Decimal(1), namespace=f"acme-r{i}",
        status="active", starts_at=NOW) for i in range(3)])
    QueueWorkload.objects.bulk_create(
        QueueWorkload(allocation=allocs[i % 3], uid=("u" * 63 + str(i % 10)) if i < 3 else f"u{i}",
                      namespace="acme", name=f"w{i}", state="pending", observed_at=NOW,
                      position=i if i % 4 else None,
                      devices=Decimal("1.0001") if i % 5 == 0 else Decimal(1))
        for i in range(40))
    QueueUsageHour.objects.bulk_create(
        QueueUsageHour(allocation=allocs[i % 3], hour=NOW - dt.timedelta(hours=i))
        for i in range(12))
    return allocs


def test_the_same_rows_as_in(world):
    uids = [f"u{i}" for i in range(0, 60, 3)] + ["nobody", "u" * 63 + "1"]
    ids = [a.pk for a in world[:2]]
    hours = [NOW - dt.timedelta(hours=h) for h in (0, 5, 11, 40)]
    cases = [
        (QueueWorkload, {"uid": uids}), (QueueWorkload, {"allocation_id": ids}),
        (QueueUsageHour, {"hour": hours}), (QueueUsageHour, {"allocation_id": ids}),
        (QueueWorkload, {"allocation": world[1:]}),
        (QueueWorkload, {"uid": []}), (QueueWorkload, {"uid": set(uids)}),
        (QueueWorkload, {"uid": [None, "u4", "u5"]}), (QueueWorkload, {"position": [None, 3]}),
        (QueueWorkload, {"devices": [Decimal("1.00005"), Decimal(10**9)]}),
    ]
    for model, ((field, values),) in ((m, c.items()) for m, c in cases):
        want = set(model.objects.filter(**{f"{field}__in": values}).values_list("pk", flat=True))
        got = set(model.objects.filter(**{f"{field}__any": values}).values_list("pk", flat=True))
        assert got == want, field
        outside = set(model.objects.exclude(**{f"{field}__any": values})
                      .values_list("pk", flat=True))
        assert outside == set(model.objects.values_list("pk", flat=True)) - want, field
    assert QueueWorkload.objects.filter(uid__any=uids).count() == 14


def test_a_value_longer_than_the_column_matches_nothing(world):
    """A 65-character value is not cut to the column's 64 and matched to another row."""
    stored = "u" * 63 + "1"
    assert QueueWorkload.objects.filter(uid__any=[stored]).count() == 1
    assert QueueWorkload.objects.filter(uid__any=[stored + "x"]).count() == 0


def test_one_parameter_for_the_whole_list(world):
    uids = [f"u{i}" for i in range(5000)]
    with CaptureQueriesContext(connection) as ctx:
        assert QueueWorkload.objects.filter(uid__any=uids).count() == 37
    sql = ctx.captured_queries[0]["sql"]
    # One array literal, not 5,000 quoted literals in an IN list.
    assert "= ANY('{u0,u1,u2," in sql and "u4999}'::varchar[])" in sql and " IN (" not in sql
