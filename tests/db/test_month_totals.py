"""billing.figures.month_totals (the database sums the finance overview's month totals) is
the sum of month_figures (Python, line by line), on worlds made to hit every rounding edge:
hours that are exact ties at the fourth place, amounts at half a cent, closed months read
from their frozen lines, adjustments, route filters, a tenant subset."""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.figures import figure_sums, hours, month_figures, month_totals, sum_figures
from billing.models import Adjustment, Statement, StatementLine, UsageMonth
from billing.totals import refresh_totals
from fleet.models import Allocation, Route
from tests.factories import TenantFactory

pytestmark = pytest.mark.django_db
MONTHS = [dt.date(2026, m, 1) for m in (9, 10, 11)]
# 10⁴·s ≡ 1800 (mod 3600): an exact tie at the fourth place of s / 3600 (0.00005 → 0.0000,
# 0.00015 → 0.0002 half-even; half-up would make both larger).
TIES = [Decimal("0.18"), Decimal("0.54"), Decimal("3600.18"), Decimal("7199.82")]


def test_the_roundings_are_exercised():
    assert hours(Decimal("0.18")) == Decimal("0.0000")
    assert hours(Decimal("0.54")) == Decimal("0.0002")


@pytest.fixture
def world(pools, finance_user):
    rng = random.Random(7)
    tenants = [TenantFactory(slug=f"t{i}") for i in range(6)]
    for t in tenants:
        for route in (Route.SHARED_POOL, Route.DEDICATED_BLOCK, Route.MIG_VCLUSTER):
            alloc = Allocation.objects.create(
                tenant=t, pool=pools[route], route=route, whole_devices=1,
                device_equivalents=Decimal(1), namespace=f"{t.slug}-{route}", status="active",
                starts_at=timezone.now())
            for month in MONTHS:
                def seconds():
                    return rng.choice(TIES) if rng.random() < 0.5 else \
                        Decimal(rng.randrange(0, 10**9)) / 10000
                UsageMonth.objects.create(
                    allocation=alloc, tenant=t, pool=alloc.pool, month=month,
                    allocated_s=seconds(), used_s=seconds(), borrowed_s=seconds(),
                    amount=Decimal(rng.randrange(0, 10**7)) / 10000 + Decimal("0.005")
                    * rng.randrange(2))
        # The tenant's September closed: its frozen lines count, not its usage rows.
        if t.slug in ("t0", "t3"):
            st = Statement.objects.create(tenant=t, month=MONTHS[0], closed_at=timezone.now(),
                                          closed_by=finance_user)
            for alloc in t.allocations.all():
                StatementLine.objects.create(
                    statement=st, allocation=alloc, description="line", route=alloc.route,
                    policy="p", allocated_h=Decimal("12.3456"), used_h=Decimal("1.0001"),
                    idle_h=Decimal("11.3455"), credit_h=0, charged_h=Decimal("12.3456"),
                    amount=Decimal("30.86"))
            Adjustment.objects.create(statement=st, amount=Decimal("-4.33"), reason="credit",
                                      by=finance_user)
    # The rows above are written directly; the rollup and closing would keep the totals.
    refresh_totals({(t.pk, m) for t in tenants for m in MONTHS})
    return tenants


def monthly(figures) -> dict:
    sums = sum_figures(figures, ("month",))
    return {m: sums.get((m,), {"allocated_h": 0, "used_h": 0, "amount": 0}) for m in MONTHS}


@pytest.mark.parametrize("route", ["", *Route.values])
def test_the_database_sums_what_the_figures_sum(world, route):
    want = monthly(month_figures(months=MONTHS, route=route))
    assert month_totals(months=MONTHS, route=route) == want
    some = [world[0].pk, world[4].pk]
    want = monthly(month_figures(tenant_ids=some, months=MONTHS, route=route))
    assert month_totals(tenant_ids=some, months=MONTHS, route=route) == want
    assert any(v["amount"] for v in want.values()) == (route != Route.CONFIDENTIAL_POOL)


@pytest.mark.parametrize("by", [("tenant",), ("tenant", "pool"), ("month", "tenant", "pool"),
                                ("month",)])
def test_every_grouping_sums_what_the_figures_sum(world, by):
    for adjustments in (True, False):
        want = sum_figures(month_figures(), by, adjustments=adjustments)
        assert figure_sums(by, adjustments=adjustments) == want, (by, adjustments)
        assert len(want) > 1


def test_the_overview_page_shows_the_totals_of_every_tenant(world, client, finance_user):
    """The page reads figures for its own rows only; its month totals are every tenant's."""
    client.force_login(finance_user)
    response = client.get("/billing/?months=6")
    totals = {t["month"]: t for t in response.context["report"].totals}
    want = monthly(month_figures(months=MONTHS))
    for month in MONTHS:
        assert totals[month]["amount"] == want[month]["amount"]
        assert totals[month]["allocated_h"] == want[month]["allocated_h"]


@pytest.mark.django_db(transaction=True)
def test_refreshes_of_one_tenants_months_at_once_all_commit_and_add_up(pools):
    """The rollup refreshing this month while finance closes an earlier one: both rebuild
    the tenant's all-time totals. Eight refreshes of one tenant's months at once all commit,
    and every kept total is the sum it replaces."""
    import threading

    from django.db import connection

    from billing.models import TenantMonthTotal, TenantPoolTotal

    tenant = TenantFactory(slug="racer")
    alloc = Allocation.objects.create(
        tenant=tenant, pool=pools[Route.SHARED_POOL], route=Route.SHARED_POOL,
        whole_devices=1, device_equivalents=Decimal(1), namespace="racer-1", status="active",
        starts_at=timezone.now())
    months = [dt.date(2026, m, 1) for m in range(1, 9)]
    for i, month in enumerate(months):
        UsageMonth.objects.create(allocation=alloc, tenant=tenant, pool=alloc.pool,
                                  month=month, allocated_s=3600 * (i + 1), used_s=1800,
                                  borrowed_s=0, amount=Decimal("2.50") * (i + 1))
    barrier = threading.Barrier(len(months))
    errors: list[Exception] = []

    def refresh(month) -> None:
        try:
            barrier.wait()
            refresh_totals({(tenant.pk, month)})
        except Exception as exc:  # collected and asserted below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=refresh, args=(m,)) for m in months]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert TenantMonthTotal.objects.filter(tenant=tenant).count() == len(months)
    kept, = TenantPoolTotal.objects.filter(tenant=tenant)
    want = sum_figures(month_figures(tenant_ids=[tenant.pk]), ("tenant_id",))[(tenant.pk,)]
    assert (kept.allocated_h, kept.used_h, kept.amount) == (
        want["allocated_h"], want["used_h"], want["amount"])
    assert kept.amount == Decimal("2.50") * sum(range(1, 9))
