"""The pure cores pulled out of fleet sync and the usage rollup, table-driven."""

import datetime as dt
from decimal import Decimal

import pytest

from billing.domain import allocation_hour
from fleet.inventory.capacity import NodeFacts
from fleet.inventory.sync import diff_fleet

pytestmark = pytest.mark.unit

GOOD = dict(validated=True, ready=True, gpu_count=8)


def node(name: str, **kw) -> NodeFacts:
    return NodeFacts(name=name, **{**GOOD, **kw})


@pytest.mark.parametrize(("old", "new", "expect"), [
    (None, node("n"), dict(new=True, lost=False, recovered=False, changed=True)),
    (node("n"), node("n"), dict(new=False, lost=False, recovered=False, changed=False)),
    (node("n"), node("n", cordoned=True), dict(new=False, lost=True, recovered=False,
                                                changed=True)),
    (node("n", health_problems=("GpuXidError",)), node("n"),
     dict(new=False, lost=False, recovered=True, changed=True)),
    (node("n", validated=False), node("n", validated=False, gpu_count=4),
     dict(new=False, lost=False, recovered=False, changed=True)),  # still unpromisable
])
def test_each_node_is_new_lost_recovered_or_changed(old, new, expect):
    diffs, gone = diff_fleet({} if old is None else {"n": old}, [new])
    (d,) = diffs
    assert (d.new, d.lost, d.recovered, bool(d.changes)) == (
        expect["new"], expect["lost"], expect["recovered"], expect["changed"])
    assert gone == []


def test_nodes_missing_from_the_cluster_are_gone_once():
    known = {"a": node("a"), "b": node("b"), "c": node("c", present=False)}
    diffs, gone = diff_fleet(known, [node("a")])
    assert [d.facts.name for d in diffs] == ["a"]
    assert gone == ["b"]  # "c" was already recorded as gone


UTC = dt.UTC
HOUR = dt.datetime(2026, 11, 2, 10, tzinfo=UTC)


@pytest.mark.parametrize(("kw", "expect"), [
    # a whole hour of 2 devices on the shared pool, used 1.5: charged the quota
    (dict(route="shared_pool", devices=Decimal(2), used=Decimal(5400)),
     dict(allocated=7200, charged=7200, amount=Decimal("4.00"))),
    # busy beyond the quota but nothing admitted above it: the quota
    (dict(route="shared_pool", devices=Decimal(2), used=Decimal(9000)),
     dict(allocated=7200, charged=7200, amount=Decimal("4.00"))),
    # admitted beyond the quota by Kueue: the quota plus what was borrowed
    (dict(route="shared_pool", devices=Decimal(2), used=Decimal(0), borrowed=Decimal(1800)),
     dict(allocated=7200, charged=9000, amount=Decimal("5.00"))),
    # a dedicated block pays idle hours too
    (dict(route="dedicated_block", devices=Decimal(8), used=Decimal(0)),
     dict(allocated=28800, charged=28800, amount=Decimal("16.00"))),
    # an outage over the whole hour on its 8-GPU node credits it all
    (dict(route="dedicated_block", devices=Decimal(8), used=None,
          outages=[(HOUR - dt.timedelta(hours=1), None, 8)]),
     dict(allocated=28800, charged=0, amount=Decimal("0.00"))),
])
def test_an_allocation_hour(kw, expect):
    args = dict(starts_at=HOUR - dt.timedelta(days=1), ends_at=None, hour=HOUR, outages=[],
                rate=Decimal("2.00"))
    figures = allocation_hour(**{**args, **kw})
    assert figures.allocated == expect["allocated"]
    assert figures.charged == expect["charged"]
    assert figures.amount == expect["amount"]
    assert figures.rate == Decimal("2.00")


def test_no_figures_outside_the_allocation_window():
    assert allocation_hour(route="shared_pool", starts_at=HOUR + dt.timedelta(hours=2),
                           ends_at=None, devices=Decimal(1), hour=HOUR, used=None, outages=[],
                           rate=Decimal(1)) is None
