"""A dispatched allocation-hour split over its clusters (billing.clusters): the parts add up
to the hour exactly, follow the shares, and use follows what each cluster measured."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from billing.clusters import PLACES, cluster_parts, split_exactly
from billing.focus import ChargeDay, ClusterDay, by_cluster

names = st.sampled_from(["w1", "w2", "w3", "eu-a", "us-b"])
weights_st = st.dictionaries(names, st.integers(0, 64), min_size=1).filter(
    lambda w: sum(w.values()) > 0)
amounts = st.decimals("0", "999999", places=4)


@given(total=amounts, weights=weights_st)
def test_a_split_adds_up_exactly_and_stays_within_a_unit_of_its_proportion(total, weights):
    parts = split_exactly(total, weights)
    assert sum(parts.values()) == total
    whole = sum(weights.values())
    for name, part in parts.items():
        assert abs(part - total * weights[name] / whole) < PLACES
        assert part >= 0


@given(total=amounts, weights=weights_st)
def test_a_cluster_without_a_share_gets_nothing(total, weights):
    parts = split_exactly(total, weights)
    assert all(parts[n] == 0 for n, w in weights.items() if w == 0)


def test_the_remainder_goes_to_the_largest_fractions():
    assert split_exactly(Decimal("0.0001"), {"w1": 1, "w2": 2}) == {
        "w1": Decimal("0"), "w2": Decimal("0.0001")}
    assert split_exactly(Decimal("1.00"), {"a": 1, "b": 1, "c": 1},
                         places=Decimal("0.01")) == {
        "a": Decimal("0.34"), "b": Decimal("0.33"), "c": Decimal("0.33")}


@given(allocated=amounts, amount=amounts, shares=weights_st,
       measured=st.dictionaries(names, st.decimals("0", "99999", places=3)))
def test_an_hours_parts_add_up_to_the_hour(allocated, amount, shares, measured):
    used = sum(measured.values(), Decimal(0)).quantize(PLACES)
    parts = cluster_parts(allocated_s=allocated, used_s=used, amount=amount, shares=shares,
                          measured=measured)
    assert sum(p.allocated_s for p in parts) == allocated
    assert sum(p.amount for p in parts) == amount
    assert sum(p.used_s for p in parts) == used
    # use is counted where it was measured, even in a cluster holding no share any more
    assert {p.cluster for p in parts} == set(shares) | {n for n, v in measured.items() if v}


def test_without_a_measurement_per_cluster_use_is_not_split():
    parts = cluster_parts(allocated_s=Decimal(14400), used_s=Decimal(5000),
                          amount=Decimal("10.0000"), shares={"w1": 3, "w2": 1}, measured=None)
    assert [(p.cluster, p.allocated_s, p.used_s, p.amount) for p in parts] == [
        ("w1", Decimal("10800.0000"), None, Decimal("7.5000")),
        ("w2", Decimal("3600.0000"), None, Decimal("2.5000"))]


def _day(**kw):
    t = dt.datetime(2026, 11, 3, tzinfo=dt.UTC)
    base = dict(tenant_slug="acme", tenant_name="Acme", cost_centre="", allocation_id=1,
                namespace="acme-r1", route="shared_pool", route_label="Shared pool",
                policy="allocated hours", pool_slug="shared", pool_name="Shared",
                gpu_model="H100", period_start=t, period_end=t, billing_start=t,
                billing_end=t, used_seconds=Decimal(0), charged_seconds=Decimal(0),
                rate=Decimal("2.5"), amount=Decimal(0), cluster_slug="mgr",
                cluster_name="Manager", cluster_region="eu")
    base.update(kw)
    return ChargeDay(**base)


@given(held=st.dictionaries(names, st.integers(0, 86400), min_size=1),
       used=st.lists(st.integers(0, 86400), min_size=5, max_size=5),
       measured=st.booleans(), charged=st.integers(0, 10**6))
def test_a_charge_day_in_several_clusters_adds_up_to_the_day(held, used, measured, charged):
    """FOCUS's rows of a dispatched allocation's day (billing.focus.by_cluster): one per
    cluster where use was measured per cluster, adding up to the day in money, use and priced
    quantity; otherwise the day stays whole, in the cluster that holds the quota."""
    parts = [ClusterDay(cluster_slug=n, cluster_name=n.upper(), cluster_region="",
                        allocated_seconds=Decimal(s),
                        used_seconds=Decimal(used[i]) if measured else None,
                        amount=Decimal(s) / 1000) for i, (n, s) in enumerate(held.items())]
    day = _day(used_seconds=sum((p.used_seconds or 0 for p in parts), Decimal(0)),
               amount=sum((p.amount for p in parts), Decimal(0)),
               charged_seconds=Decimal(charged))
    rows = by_cluster(day, parts)
    if not measured:
        assert rows == [day]
        return
    assert [r.cluster_slug for r in rows] == sorted(held)
    assert sum(r.amount for r in rows) == day.amount
    assert sum(r.used_seconds for r in rows) == day.used_seconds
    assert sum(r.charged_seconds for r in rows) == day.charged_seconds or not any(
        held.values()) and not day.amount
    assert {r.cluster_name for r in rows} == {n.upper() for n in held}
