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
from billing.models import Adjustment, ClusterUsageHour, Statement, StatementLine, UsageHour
from billing.services import ratecard_create, rollup_usage, statement_close, statement_reopen
from fleet.inventory.pricing import pool_rate
from fleet.models import (
    Allocation,
    AllocationResize,
    Cluster,
    GpuNode,
    Pool,
    QueueUsageHour,
    Route,
)
from intake import services
from tenants.models import Tenant
from tests.factories import ClusterFactory, make_request

pytestmark = pytest.mark.django_db

EXAMPLES = int(os.environ.get("PORTAL_PROPERTY_EXAMPLES", "8"))
MONTH = month_start(month_start(timezone.now()) - dt.timedelta(days=1))  # last month
START = dt.datetime.combine(MONTH, dt.time(), tzinfo=dt.UTC)
HOURS = 6  # the generated world lives in the month's first hours (a rollup per example)

# What the usage source answers, per (hour, namespace): the generated world's DCGM.
MEASURED: dict[dt.datetime, dict[str, Decimal]] = {}
# A dispatched allocation's namespace → its use's split over the workers (weights).
SPREAD: dict[str, dict[str, int]] = {}
# Allocation → its size per minute of the world (0: not held), worked out apart from billing.
HELD: dict[int, list[int]] = {}


def generated_usage(hour: dt.datetime, *, base_url=None, weights=None, by_cluster=False):
    """PORTAL_USAGE_SOURCE for these tests; `by_cluster` as one Prometheus with a cluster
    label answers (a dispatched allocation's use on each worker, others in one cluster)."""
    measured = dict(MEASURED.get(hour, {}))
    if not by_cluster:
        return measured
    out = {}
    for ns, used in measured.items():
        split = SPREAD.get(ns, {"": 1})
        whole = sum(split.values())
        out[ns] = {c: used * n / whole for c, n in split.items()}
    return out


allocation_st = st.fixed_dictionaries({
    "devices": st.integers(1, 3),
    "start_min": st.integers(0, HOURS * 60 - 30),  # minutes after the month began
    "length_min": st.one_of(st.none(), st.integers(15, HOURS * 60)),  # None: open-ended
    "override": st.booleans(),
    "use": st.lists(st.integers(0, 3 * 4000), min_size=HOURS, max_size=HOURS),
    "borrow": st.lists(st.integers(0, 2 * 3600), min_size=HOURS, max_size=HOURS),
    # Resized in place: (minutes after its start, new size); billed at each size in turn.
    "resize": st.one_of(st.none(), st.tuples(st.integers(1, HOURS * 60), st.integers(1, 3))),
})
world_st = st.fixed_dictionaries({
    "allocations": st.lists(allocation_st, min_size=1, max_size=3),
    "rate_change_min": st.one_of(st.none(), st.integers(1, HOURS * 60 - 1)),
    "new_rate": st.decimals("0.50", "9.99", places=2),
    "close": st.booleans(),
    # A closed month reopened and closed again (its kept totals follow it both ways).
    "reopen": st.booleans(),
    # Two clusters: the confidential pool (where overrides land) in a cluster of its own.
    "clusters": st.integers(1, 2),
    # Shared allocations dispatched by MultiKueue over two workers (shares 1 : 2), their use
    # measured per cluster (a Prometheus cluster label) or not.
    "dispatched": st.booleans(),
    "cluster_label": st.booleans(),
    "adjustment": st.one_of(st.none(), st.decimals("-50", "50", places=2).filter(
        lambda d: d != 0)),
})


def _build(world, tenant, lead, admin_user, capture) -> list[Allocation]:
    if world.get("clusters", 1) > 1:
        elsewhere = ClusterFactory(slug="cluster-b", name="Cluster B", region="eu-b")
        pool = Pool.objects.get(route=Route.CONFIDENTIAL_POOL)
        Pool.objects.filter(pk=pool.pk).update(cluster=elsewhere)
        GpuNode.objects.filter(pool=pool).update(cluster=elsewhere)
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
        end_min = HOURS * 60 if a["length_min"] is None else a["start_min"] + a["length_min"]
        sizes = [a["devices"] if a["start_min"] <= m < end_min else 0
                 for m in range(HOURS * 60)]
        if a.get("resize"):
            after_min, size = a["resize"]
            at = starts + dt.timedelta(minutes=after_min)
            AllocationResize.objects.create(
                allocation=alloc, at=at, whole_devices_before=a["devices"],
                whole_devices_after=size, mig_count_before=0, mig_count_after=0,
                devices_before=a["devices"], devices_after=size, reason="generated")
            Allocation.objects.filter(pk=alloc.pk).update(whole_devices=size,
                                                          device_equivalents=size)
            sizes = [size if held and m >= a["start_min"] + after_min else held
                     for m, held in enumerate(sizes)]
        HELD[alloc.pk] = sizes
        if world.get("dispatched") and alloc.route == Route.SHARED_POOL:
            Allocation.objects.filter(pk=alloc.pk).update(
                cluster_shares={"w1": 1, "w2": 2})
            SPREAD[alloc.namespace] = {"w1": 1, "w2": 3}  # use need not follow the shares
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
            ratecard_create(pool=Pool.objects.get(pk=pool_id), rate=world["new_rate"],
                            effective_from=START + dt.timedelta(
                                minutes=world["rate_change_min"]), by=admin_user,
                            reprice_confirmed=True)
    return allocs


def _in_window(alloc: Allocation, hour: dt.datetime) -> bool:
    return alloc.starts_at < hour + dt.timedelta(hours=1) and (
        alloc.ends_at is None or alloc.ends_at > hour)


def check_invariants(allocs, tenant, finance_user) -> None:
    hours = list(UsageHour.objects.filter(allocation__in=allocs))
    assert hours, "the world billed nothing"
    check_hours(allocs)
    check_month_totals([MONTH])
    figures = check_tenant_month(tenant, MONTH, finance_user)
    check_where_it_ran(allocs, tenant, MONTH, finance_user)
    check_metrics(tenant, finance_user, Decimal(figures["final"]))
    check_request_tally()
    # the statement's hours are the API's
    allocated = sum((Decimal(h.allocated_s) for h in hours), Decimal(0)) / SECONDS_PER_HOUR
    assert abs(Decimal(figures["allocated_device_hours"]) - allocated) < Decimal("0.001")


def check_hours(allocs) -> None:
    """Per allocation and hour: used ≤ allocated, the rate in force, borrowing as measured."""
    from billing.domain import floor_hour
    from fleet.inventory.pricing import borrowing_is_billed

    finished = floor_hour(timezone.now())
    hours = list(UsageHour.objects.filter(allocation__in=allocs))
    for h in hours:
        # held for each second at the size in force then (resizes split the hour)
        minute = int((h.hour - START).total_seconds()) // 60
        held = HELD.get(h.allocation_id)
        assert held is None or h.allocated_s == 60 * sum(held[minute:minute + 60]), (
            h.hour, h.allocated_s)
        # per allocation and hour: used ≤ allocated, idle = allocated − used ≥ 0
        assert h.used_s is not None and 0 <= h.used_s <= h.allocated_s, (h.hour, h.used_s,
                                                                          h.allocated_s)
        # the rate billed is the pool's rate at that instant (override included)
        assert h.rate == pool_rate(h.pool_id, h.hour), (h.hour, h.rate)
    for alloc in allocs:
        # borrowed hours billed = borrowed queue-hours measured (where borrowing is billed)
        billed = sum((h.borrowed_s for h in hours if h.allocation_id == alloc.pk), Decimal(0))
        measured = sum((q.borrowed_s for q in QueueUsageHour.objects.filter(allocation=alloc)
                        if _in_window(alloc, q.hour) and q.hour < finished), Decimal(0))
        expected = measured if borrowing_is_billed(alloc.route) else Decimal(0)
        assert billed == expected, (alloc.route, billed, expected)


def check_month_totals(months: list[dt.date]) -> None:
    """The overview's month totals, summed by the database, are the sum of every tenant's
    month figures (all routes and each one)."""
    from billing.figures import (
        figure_sums,
        metric_sums,
        month_figures,
        month_totals,
        sum_figures,
    )

    for route in ["", *Route.values]:
        want = sum_figures(month_figures(months=months, route=route), ("month",))
        got = month_totals(months=months, route=route)
        assert got == {m: want.get((m,), {"allocated_h": 0, "used_h": 0, "amount": 0})
                       for m in months}, route
        # the overview page's rows: each tenant's months (apply_sums_to_overview)
        by = ("tenant_id", "month")
        assert figure_sums(by, months=months, route=route) == sum_figures(
            month_figures(months=months, route=route), by), route
        # a page's own tenants (the rows of the overview, a budget's tenant)
        some = sorted({f.tenant_id for f in month_figures(months=months)})[:1] + [10**9]
        for by in (("tenant_id", "month"), ("tenant_id",)):
            assert figure_sums(by, tenant_ids=some, months=months, route=route) == sum_figures(
                month_figures(tenant_ids=some, months=months, route=route), by), route
    for by in (("tenant",), ("tenant", "pool")):  # what /metrics reads
        assert figure_sums(by) == sum_figures(month_figures(), by), by
    assert metric_sums() == (figure_sums(("tenant", "pool")), figure_sums(("tenant",)))
    check_month_spend(months)
    check_kept_totals()


def check_month_spend(months: list[dt.date]) -> None:
    """Finance's month so far (billing.figures.month_spend, ranked and summed by the
    database) is every tenant's final amount of month_figures: its total, its leaders by
    spend then name, and the spend of any tenant asked for."""
    from billing.figures import month_figures, month_spend

    for month in months:
        finals = {f.tenant_id: f.final for f in month_figures(months=[month])}
        names = dict(Tenant.objects.values_list("pk", "name"))
        ranked = sorted(finals, key=lambda t: (-finals[t], names[t], t))
        for ids in (None, list(finals)[:1]):
            mine = finals if ids is None else {t: finals[t] for t in ids}
            got = month_spend(ids, month, top=3, of=list(names))
            assert got.total == sum(mine.values(), Decimal(0)), month
            assert got.leaders == [(t, finals[t], names[t]) for t in ranked
                                   if t in mine][:3], month
            assert got.of == mine, month


def check_kept_totals() -> None:
    """The totals kept at write time (TenantMonthTotal and TenantPoolTotal, billing.totals)
    are, row for row, the sums they replace: month_figures per tenant, pool and month (line
    roundings, frozen lines for a closed month, adjustments apart), and per tenant and pool
    over every month; no row missing and none left over."""
    from billing.figures import month_figures, sum_figures
    from billing.models import TenantMonthTotal

    want = {key: sums for key, sums in sum_figures(
        month_figures(), ("tenant_id", "month", "pool")).items()}
    kept = {(t.tenant_id, t.month, t.pool.slug): {
        "allocated_h": t.allocated_h, "used_h": t.used_h, "amount": t.amount}
        for t in TenantMonthTotal.objects.select_related("pool")}
    assert kept == want
    # The all-time totals per tenant and pool (TenantPoolTotal, what /metrics reads): the
    # same sum over every month, no row missing and none left over.
    from billing.models import TenantPoolTotal

    every_month = {key: sums for key, sums in sum_figures(
        month_figures(), ("tenant_id", "pool")).items()}
    kept_all = {(t.tenant_id, t.pool.slug): {
        "allocated_h": t.allocated_h, "used_h": t.used_h, "amount": t.amount}
        for t in TenantPoolTotal.objects.select_related("pool")}
    assert kept_all == every_month


def check_request_tally() -> None:
    """The request counts the pages and /metrics read (the database's tally) are the count of
    the requests, per tenant and status — before and after its rows are folded."""
    from django.db.models import Count

    from intake.models import CapacityRequest
    from intake.tally import compact_request_tally, request_counts_by_tenant

    counted = sorted(CapacityRequest.objects.values_list("tenant__slug", "status")
                     .annotate(n=Count("id")).values_list("tenant__slug", "status", "n"))
    assert sorted(request_counts_by_tenant()) == counted
    compact_request_tally()
    assert sorted(request_counts_by_tenant()) == counted


def check_tenant_month(tenant, month: dt.date, finance_user) -> dict:
    """Per tenant and month: statement page = API (detail and list) = finance CSV = FOCUS
    rows summed = the budget in force. Returns the API's figures."""
    from billing.budgets import budgets_in_force

    ym = f"{month:%Y-%m}"
    api = APIClient()
    api.force_authenticate(finance_user)
    body = api.get(f"/api/billing/{tenant.slug}:{ym}/").json()
    figures = body["figures"]
    listed = [f for f in api.get(f"/api/billing/?tenant={tenant.slug}").json()
              if f["month"] == str(month)]
    assert listed == [figures]
    client = Client()
    client.force_login(finance_user)
    page = client.get(reverse("billing:statement", args=[tenant.slug, ym]))
    final = Decimal(figures["final"])
    assert page.context["final"] == final
    assert page.context["total"] == Decimal(figures["usage_amount"])
    budget = budgets_in_force([tenant.pk], month).get(tenant.pk)
    shown = page.context["budget"]
    assert (shown.budget if shown else None) == budget, (ym, shown, budget)
    months = (month_start(timezone.now()).year - month.year) * 12 + (
        month_start(timezone.now()).month - month.month) + 1
    overview = reverse("billing:overview") + f"?months={months}&q={tenant.slug}"
    rows = [r for r in csv.DictReader(io.StringIO(client.get(
        overview + "&format=csv").content.decode()))
        if r["tenant"] == tenant.slug and r["month"] == ym]
    assert [Decimal(r["amount"]) for r in rows] == [final]
    assert Decimal(rows[0]["idle_device_hours"]) == (
        Decimal(rows[0]["allocated_device_hours"]) - Decimal(rows[0]["used_device_hours"]))
    assert Decimal(rows[0]["allocated_device_hours"]) == Decimal(
        figures["allocated_device_hours"])
    focus = [r for r in csv.DictReader(io.StringIO(client.get(
        overview + "&format=focus").content.decode()))
        if r["SubAccountId"] == tenant.slug and r["BillingPeriodStart"].startswith(ym)]
    assert sum((Decimal(r["BilledCost"]) for r in focus), Decimal(0)) == final, ym
    check_clusters(tenant, month, focus, body["where_it_ran"])
    return figures


def check_clusters(tenant, month: dt.date, focus: list[dict], where_it_ran: list[dict]
                   ) -> None:
    """The sum over clusters is the statement: FOCUS's usage rows of each cluster (its
    region) add up to the statement lines of the allocations whose pool is there — a line
    that ran in several clusters, measured in each, by the parts the statement shows under
    it (exactly, cluster by cluster); with the adjustments (which belong to no cluster) they
    make the month's final."""
    parts: dict[int, list[dict]] = {}
    for p in where_it_ran:
        parts.setdefault(p["allocation"], []).append(p)
    split = {a for a, ps in parts.items() if all(p["used_device_hours"] is not None
                                                 for p in ps)}
    for alloc_id, ps in parts.items():
        rows = [r for r in focus if r["ResourceId"] == f"allocation/{alloc_id}"]
        exported: dict[str, Decimal] = {}
        for r in rows:
            exported[r["RegionName"]] = exported.get(r["RegionName"], Decimal(0)) + \
                Decimal(r["BilledCost"])
        if alloc_id in split:
            assert {k: v for k, v in exported.items() if v} == {
                p["cluster"]: Decimal(p["amount"]) for p in ps if Decimal(p["amount"])}, (
                exported, ps)
        else:  # use not measured per cluster: not split, where the quota is held
            assert len(exported) <= 1, exported
    statement = Statement.objects.filter(tenant=tenant, month=month,
                                         closed_at__isnull=False).first()
    if statement is None:
        return  # an open month's lines are live: the per-allocation sum is checked above
    region_of = {c.name: c.region or c.slug for c in Cluster.objects.all()}
    by_cluster: dict[str, Decimal] = {}
    for line in StatementLine.objects.filter(statement=statement).select_related(
            "allocation__pool__cluster"):
        c = line.allocation.pool.cluster
        here = [(region_of.get(p["cluster"], p["cluster"]), Decimal(p["amount"]))
                for p in parts[line.allocation_id]] if line.allocation_id in split else \
            [(c.region or c.slug, line.amount)]
        for region, amount in here:
            by_cluster[region] = by_cluster.get(region, Decimal(0)) + amount
    exported: dict[str, Decimal] = {}
    for r in focus:
        if r["ChargeCategory"] == "Usage":
            exported[r["RegionId"]] = exported.get(r["RegionId"], Decimal(0)) + \
                Decimal(r["BilledCost"])
    assert {k: v for k, v in exported.items() if v} == {k: v for k, v in by_cluster.items()
                                                        if v}, (exported, by_cluster)


def check_where_it_ran(allocs, tenant, month: dt.date, finance_user) -> None:
    """The sum over clusters is the statement for a dispatched allocation too: its hours'
    parts add up to each hour, and the page's and the API's parts per cluster add up to its
    line (allocated and used hours, amount); use per cluster only where it was measured."""
    dispatched = [a for a in allocs if a.cluster_shares]
    for alloc in dispatched:
        for hour in UsageHour.objects.filter(allocation=alloc):
            parts = list(ClusterUsageHour.objects.filter(allocation=alloc, hour=hour.hour))
            assert {p.cluster for p in parts} >= {"w1", "w2"}
            assert sum(p.allocated_s for p in parts) == hour.allocated_s
            assert sum(p.amount for p in parts) == hour.amount
            if all(p.used_s is not None for p in parts):
                assert sum(p.used_s for p in parts) == hour.used_s
    api = APIClient()
    api.force_authenticate(finance_user)
    body = api.get(f"/api/billing/{tenant.slug}:{month:%Y-%m}/").json()
    client = Client()
    client.force_login(finance_user)
    page = client.get(reverse("billing:statement", args=[tenant.slug, f"{month:%Y-%m}"]))
    for line in body["lines"]:
        parts = [p for p in body["where_it_ran"] if p["allocation"] == line["allocation"]]
        shown = page.context["where_it_ran"].get(line["allocation"], [])
        assert len(parts) == len(shown)
        if not any(a.pk == line["allocation"] for a in dispatched):
            assert parts == []
            continue
        assert sum(Decimal(p["amount"]) for p in parts) == Decimal(line["amount"])
        assert sum(Decimal(p["allocated_device_hours"]) for p in parts) == Decimal(
            line["allocated_device_hours"])
        assert sum(p.amount for p in shown) == Decimal(line["amount"])
        if all(p["used_device_hours"] is not None for p in parts):
            assert sum(Decimal(p["used_device_hours"]) for p in parts) == Decimal(
                line["used_device_hours"])


def check_metrics(tenant, finance_user, finals: Decimal) -> None:
    """/metrics: a tenant's statements added up (every month, adjustments included)."""
    client = Client()
    client.force_login(finance_user)
    metrics = client.get("/metrics").content.decode()
    assert f'aifactory_statement_amount{{tenant="{tenant.slug}"}} {finals:.2f}' in metrics


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow, HealthCheck.data_too_large])
@given(world=world_st)
def test_every_number_agrees_in_generated_worlds(world, tenant, lead, admin_user,
                                                 finance_user, pools, django_settings,
                                                 django_capture_on_commit_callbacks):
    MEASURED.clear()
    SPREAD.clear()
    HELD.clear()
    django_settings.PORTAL_PROMETHEUS_CLUSTER_LABEL = "cluster" if world["cluster_label"] else ""
    with transaction.atomic():  # every example starts from the same empty world
        allocs = _build(world, tenant, lead, admin_user, django_capture_on_commit_callbacks)
        rollup_usage(start=START, end=START + dt.timedelta(hours=HOURS))
        check_kept_totals()  # as the rollup left them
        if world["close"]:
            statement_close(tenant=tenant, month=MONTH, by=finance_user)
            if world["reopen"]:
                check_kept_totals()  # the frozen lines
                statement_reopen(statement=Statement.objects.get(tenant=tenant, month=MONTH),
                                 by=finance_user, reason="generated reopen")
                check_kept_totals()  # the live usage again
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
     "adjustment": None, "clusters": 1},
    # A closed month with a credit, an override and a rate change at :30.
    {"allocations": [{"devices": 2, "start_min": 10, "length_min": 200, "override": True,
                      "use": [7000] * HOURS, "borrow": [600] * HOURS},
                     {"devices": 1, "start_min": 0, "length_min": None, "override": False,
                      "use": [100] * HOURS, "borrow": [1800] * HOURS}],
     "rate_change_min": 90, "new_rate": Decimal("3.33"), "close": True,
     "adjustment": Decimal("-10.00"), "clusters": 2},
    # A closed month with two shared allocations dispatched over two workers, their use
    # measured per cluster, and a rate change mid-hour.
    {"allocations": [{"devices": 3, "start_min": 20, "length_min": None, "override": False,
                      "use": [5000] * HOURS, "borrow": [900] * HOURS},
                     {"devices": 1, "start_min": 0, "length_min": 95, "override": False,
                      "use": [777] * HOURS, "borrow": [0] * HOURS}],
     "rate_change_min": 50, "new_rate": Decimal("1.11"), "close": True,
     "adjustment": Decimal("5.00"), "clusters": 1, "dispatched": True,
     "cluster_label": True},
    # Resized mid-hour, 3 → 1 at :50 of its second hour, and grown 1 → 3 at :05 of another's.
    {"allocations": [{"devices": 3, "start_min": 0, "length_min": None, "override": False,
                      "use": [9000] * HOURS, "borrow": [0] * HOURS, "resize": (110, 1)},
                     {"devices": 1, "start_min": 30, "length_min": 240, "override": True,
                      "use": [2000] * HOURS, "borrow": [0] * HOURS, "resize": (35, 3)}],
     "rate_change_min": 100, "new_rate": Decimal("2.22"), "close": True,
     "adjustment": Decimal("-1.00"), "clusters": 1},
]


@pytest.mark.parametrize("world", REGRESSIONS,
                         ids=["mid-hour-start", "closed-with-credit", "dispatched-closed",
                              "resized-mid-hour"])
def test_regression_worlds(world, tenant, lead, admin_user, finance_user, pools,
                           django_settings, django_capture_on_commit_callbacks):
    MEASURED.clear()
    SPREAD.clear()
    HELD.clear()
    django_settings.PORTAL_PROMETHEUS_CLUSTER_LABEL = (
        "cluster" if world.get("cluster_label") else "")
    allocs = _build(world, tenant, lead, admin_user, django_capture_on_commit_callbacks)
    assert bool(world.get("dispatched")) == any(a.cluster_shares for a in allocs)
    rollup_usage(start=START, end=START + dt.timedelta(hours=HOURS))
    if world["close"]:
        statement_close(tenant=tenant, month=MONTH, by=finance_user)
        Adjustment.objects.create(statement=Statement.objects.get(tenant=tenant, month=MONTH),
                                  amount=world["adjustment"], reason="kept", by=finance_user)
    check_invariants(allocs, tenant, finance_user)


def test_the_seeded_demo_keeps_every_invariant(finance_user):
    """`make run`'s world, made by the services in time order: every number agrees."""
    from django.core.management import call_command

    from billing.figures import month_figures
    from tenants.models import Tenant

    call_command("seed_demo", stdout=io.StringIO())
    allocs = list(Allocation.objects.all())
    assert len(allocs) >= 4 and UsageHour.objects.exists()
    check_hours(allocs)
    months = month_figures()
    assert any(f.closed and f.adjustments for f in months)  # a closed month with a credit
    check_month_totals(sorted({f.month for f in months}))
    assert any(f.borrowed_h for f in months)  # borrowing billed
    for tenant in Tenant.objects.all():
        finals = Decimal(0)
        for f in [f for f in months if f.tenant_id == tenant.pk]:
            figures = check_tenant_month(tenant, f.month, finance_user)
            finals += Decimal(figures["final"])
        check_metrics(tenant, finance_user, finals)
    from fleet.models import ClusterQueueState

    # a retired allocation has no queue on the cohort board
    assert not ClusterQueueState.objects.filter(allocation__status="retired").exists()
    for alloc in allocs:
        # the allocation's window is its request's: from the day asked (or the approval,
        # if later) through the last day asked
        req = alloc.request
        assert alloc.starts_at.date() == req.starts_on, alloc
        assert alloc.ends_at == dt.datetime.combine(
            req.ends_on + dt.timedelta(days=1), dt.time(), tzinfo=dt.UTC), alloc
    # No demo node hosted work before its burn-in validated it, and the fleet is as current
    # as a running sync keeps it (nothing on the fleet page is stale).
    from django.conf import settings as django_settings

    from fleet.inventory.capacity import stale_before
    from fleet.models import GpuNode

    first = min(a.starts_at for a in allocs).date()
    for node in GpuNode.objects.exclude(burn_in_date=""):
        assert dt.date.fromisoformat(node.burn_in_date) < first, node
    now = timezone.now()
    assert not GpuNode.objects.filter(
        present=True,
        last_synced_at__lt=stale_before(now, django_settings.PORTAL_FLEET_SYNC_SECONDS))
