"""One number, one truth (docs/invariants.md), checked over generated worlds on PostgreSQL.

Hypothesis generates a month: requests approved through the real services (some with a
route override), allocations starting and ending mid-hour, use per hour (above what an
allocation held, too), borrowing measured by the queue, a rate change mid-month, and
sometimes the month closed with an adjustment. The real rollup bills it; then every place a
person reads a number is read (the statement page, the API, the finance CSV, /metrics) and
every invariant is asserted. Failing examples shrink to a minimal world.

A bounded number of examples by default; PORTAL_PROPERTY_EXAMPLES=200 for a longer hunt.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import os
from decimal import Decimal

import pytest
from django.db import transaction
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from billing.domain import SECONDS_PER_HOUR, month_start
from billing.models import Adjustment, Statement, UsageHour
from billing.services import ratecard_create, rollup_usage, statement_close
from fleet.inventory.pricing import pool_rate
from fleet.models import Allocation, QueueUsageHour, Route
from intake import services
from tests.factories import make_request

pytestmark = pytest.mark.django_db

EXAMPLES = int(os.environ.get("PORTAL_PROPERTY_EXAMPLES", "8"))
MONTH = month_start(month_start(timezone.now()) - dt.timedelta(days=1))  # last month
START = dt.datetime.combine(MONTH, dt.time(), tzinfo=dt.UTC)
HOURS = 6  # the generated world lives in the month's first hours (a rollup per example)

# What the usage source answers, per (hour, namespace): the generated world's DCGM.
MEASURED: dict[dt.datetime, dict[str, Decimal]] = {}


def generated_usage(hour: dt.datetime, *, base_url=None, weights=None) -> dict[str, Decimal]:
    """PORTAL_USAGE_SOURCE for these tests."""
    return dict(MEASURED.get(hour, {}))


allocation_st = st.fixed_dictionaries({
    "devices": st.integers(1, 3),
    "start_min": st.integers(0, HOURS * 60 - 30),  # minutes after the month began
    "length_min": st.one_of(st.none(), st.integers(15, HOURS * 60)),  # None: open-ended
    "override": st.booleans(),
    "use": st.lists(st.integers(0, 3 * 4000), min_size=HOURS, max_size=HOURS),
    "borrow": st.lists(st.integers(0, 2 * 3600), min_size=HOURS, max_size=HOURS),
})
world_st = st.fixed_dictionaries({
    "allocations": st.lists(allocation_st, min_size=1, max_size=3),
    "rate_change_min": st.one_of(st.none(), st.integers(1, HOURS * 60 - 1)),
    "new_rate": st.decimals("0.50", "9.99", places=2),
    "close": st.booleans(),
    "adjustment": st.one_of(st.none(), st.decimals("-50", "50", places=2).filter(
        lambda d: d != 0)),
})


def _build(world, tenant, lead, admin_user, capture) -> list[Allocation]:
    allocs = []
    for a in world["allocations"]:
        req = make_request(tenant, lead, submit=True, whole_devices=a["devices"])
        extra = {"override_route": Route.CONFIDENTIAL_POOL,
                 "override_reason": "generated override"} if a["override"] else {}
        with capture(execute=True):
            services.request_approve(request=req, by=admin_user, reason="generated", **extra)
        req.refresh_from_db()
        alloc = req.allocation
        starts = START + dt.timedelta(minutes=a["start_min"])
        ends = None if a["length_min"] is None else starts + dt.timedelta(
            minutes=a["length_min"])
        Allocation.objects.filter(pk=alloc.pk).update(starts_at=starts, ends_at=ends)
        alloc.refresh_from_db()
        for h in range(HOURS):
            hour = START + dt.timedelta(hours=h)
            MEASURED.setdefault(hour, {})[alloc.namespace] = Decimal(a["use"][h])
            if a["borrow"][h]:
                QueueUsageHour.objects.create(allocation=alloc, hour=hour,
                                              used_s=Decimal(a["borrow"][h]),
                                              borrowed_s=Decimal(a["borrow"][h]))
        allocs.append(alloc)
    if world["rate_change_min"] is not None:
        for pool_id in {a.pool_id for a in allocs}:
            from fleet.models import Pool

            ratecard_create(pool=Pool.objects.get(pk=pool_id), rate=world["new_rate"],
                            effective_from=START + dt.timedelta(
                                minutes=world["rate_change_min"]), by=admin_user)
    return allocs


def _in_window(alloc: Allocation, hour: dt.datetime) -> bool:
    return alloc.starts_at < hour + dt.timedelta(hours=1) and (
        alloc.ends_at is None or alloc.ends_at > hour)


def check_invariants(allocs, tenant, finance_user) -> None:
    month = f"{MONTH:%Y-%m}"
    hours = list(UsageHour.objects.filter(allocation__in=allocs))
    assert hours, "the world billed nothing"
    for h in hours:
        # per allocation and hour: used ≤ allocated, idle = allocated − used ≥ 0
        assert h.used_s is not None and 0 <= h.used_s <= h.allocated_s, (h.hour, h.used_s,
                                                                          h.allocated_s)
        # the rate billed is the pool's rate at that instant (override included)
        assert h.rate == pool_rate(h.pool_id, h.hour), (h.hour, h.rate)
    for alloc in allocs:
        # borrowed hours billed = borrowed queue-hours measured (where borrowing is billed)
        from fleet.inventory.pricing import borrowing_is_billed

        billed = sum((h.borrowed_s for h in hours if h.allocation_id == alloc.pk), Decimal(0))
        measured = sum((q.borrowed_s for q in QueueUsageHour.objects.filter(allocation=alloc)
                        if _in_window(alloc, q.hour)), Decimal(0))
        expected = measured if borrowing_is_billed(alloc.route) else Decimal(0)
        assert billed == expected, (alloc.route, billed, expected)
    # per tenant and month: statement = API = CSV = /metrics
    api = APIClient()
    api.force_authenticate(finance_user)
    figures = api.get(f"/api/billing/{tenant.slug}:{month}/").json()["figures"]
    listed = [f for f in api.get(f"/api/billing/?tenant={tenant.slug}").json()
              if f["month"] == str(MONTH)]
    assert listed == [figures]
    client = Client()
    client.force_login(finance_user)
    page = client.get(reverse("billing:statement", args=[tenant.slug, month]))
    final = Decimal(figures["final"])
    assert page.context["final"] == final
    assert page.context["total"] == Decimal(figures["usage_amount"])
    rows = [r for r in csv.DictReader(io.StringIO(client.get(
        reverse("billing:overview") + "?format=csv&months=3").content.decode()))
        if r["tenant"] == tenant.slug and r["month"] == month]
    assert [Decimal(r["amount"]) for r in rows] == [final]
    assert Decimal(rows[0]["idle_device_hours"]) == (
        Decimal(rows[0]["allocated_device_hours"]) - Decimal(rows[0]["used_device_hours"]))
    metrics = client.get("/metrics").content.decode()
    assert f'aifactory_statement_amount{{tenant="{tenant.slug}"}} {final:.2f}' in metrics
    # the statement's hours are the API's
    allocated = sum((Decimal(h.allocated_s) for h in hours), Decimal(0)) / SECONDS_PER_HOUR
    assert abs(Decimal(figures["allocated_device_hours"]) - allocated) < Decimal("0.001")


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow, HealthCheck.data_too_large])
@given(world=world_st)
def test_every_number_agrees_in_generated_worlds(world, tenant, lead, admin_user,
                                                 finance_user, pools, django_settings,
                                                 django_capture_on_commit_callbacks):
    MEASURED.clear()
    with transaction.atomic():  # every example starts from the same empty world
        allocs = _build(world, tenant, lead, admin_user, django_capture_on_commit_callbacks)
        rollup_usage(start=START, end=START + dt.timedelta(hours=HOURS))
        if world["close"]:
            statement_close(tenant=tenant, month=MONTH, by=finance_user)
            if world["adjustment"] is not None:
                Adjustment.objects.create(
                    statement=Statement.objects.get(tenant=tenant, month=MONTH),
                    amount=world["adjustment"], reason="generated", by=finance_user)
        if UsageHour.objects.filter(allocation__in=allocs).exists():
            check_invariants(allocs, tenant, finance_user)
        transaction.set_rollback(True)


@pytest.fixture
def django_settings(settings):
    settings.PORTAL_USAGE_SOURCE = f"{__name__}.generated_usage"
    return settings


# Worlds the generator found; kept as regression tests (see docs/invariants.md).
REGRESSIONS = [
    # An allocation starting at :45 with a full hour of use measured in its namespace.
    {"allocations": [{"devices": 1, "start_min": 45, "length_min": None, "override": False,
                      "use": [3000] * HOURS, "borrow": [0] * HOURS}],
     "rate_change_min": None, "new_rate": Decimal("1.00"), "close": False,
     "adjustment": None},
    # A closed month with a credit, an override and a rate change at :30.
    {"allocations": [{"devices": 2, "start_min": 10, "length_min": 200, "override": True,
                      "use": [7000] * HOURS, "borrow": [600] * HOURS},
                     {"devices": 1, "start_min": 0, "length_min": None, "override": False,
                      "use": [100] * HOURS, "borrow": [1800] * HOURS}],
     "rate_change_min": 90, "new_rate": Decimal("3.33"), "close": True,
     "adjustment": Decimal("-10.00")},
]


@pytest.mark.parametrize("world", REGRESSIONS, ids=["mid-hour-start", "closed-with-credit"])
def test_regression_worlds(world, tenant, lead, admin_user, finance_user, pools,
                           django_settings, django_capture_on_commit_callbacks):
    MEASURED.clear()
    allocs = _build(world, tenant, lead, admin_user, django_capture_on_commit_callbacks)
    rollup_usage(start=START, end=START + dt.timedelta(hours=HOURS))
    if world["close"]:
        statement_close(tenant=tenant, month=MONTH, by=finance_user)
        Adjustment.objects.create(statement=Statement.objects.get(tenant=tenant, month=MONTH),
                                  amount=world["adjustment"], reason="kept", by=finance_user)
    check_invariants(allocs, tenant, finance_user)
