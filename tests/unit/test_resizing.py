"""A resize's decision over generated holds and facts, and billing's hours across a resize."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from billing.domain import allocation_hour, held_device_seconds, sizes_held
from fleet.allocations.resizing import Held, ResizeFacts, resize_plan
from fleet.domain import Route, mig_device_equivalents

HOUR = dt.datetime(2026, 12, 1, 10, tzinfo=dt.UTC)


def _held(route=Route.SHARED_POOL, size=8, status="active", nodes=(), per_node=8,
          profile="3g.40gb"):
    mig = route == Route.MIG_VCLUSTER
    return Held(route=route, status=status, whole_devices=0 if mig else size,
                mig_profile=profile if mig else "", mig_count=size if mig else 0,
                device_equivalents=(mig_device_equivalents(profile, size) if mig
                                    else Decimal(size)),
                nodes=tuple(nodes), devices_per_node=per_node)


def _facts(in_use=0, free=Decimal(100), free_slices=None, free_nodes=()):
    return ResizeFacts(in_use=Decimal(in_use), running=("train-a",) if in_use else (),
                       free_devices=Decimal(free), free_slices=free_slices,
                       free_nodes=tuple(free_nodes))


routes = st.sampled_from([Route.SHARED_POOL, Route.CONFIDENTIAL_POOL, Route.MIG_VCLUSTER])


@given(route=routes, size=st.integers(1, 64), target=st.integers(-3, 80),
       in_use=st.integers(0, 64), free=st.integers(0, 64), admin=st.booleans())
def test_a_resize_never_takes_running_work_nor_promises_more_than_is_free(
        route, size, target, in_use, free, admin):
    held = _held(route, size)
    plan = resize_plan(held, target, _facts(in_use, free), may_grow=admin)
    if not plan.ok:
        assert plan.reason  # every refusal says why
        return
    assert 1 <= target != size
    assert plan.size == target
    assert target >= in_use or target > size  # a shrink never takes what runs
    if target > size:
        assert admin  # a grow is a new promise: a platform admin's
        assert plan.device_equivalents - held.device_equivalents <= free
    unit = plan.mig_count if route == Route.MIG_VCLUSTER else plan.whole_devices
    assert unit == target


@given(route=routes, size=st.integers(1, 64), in_use=st.integers(0, 64))
def test_a_shrink_down_to_what_runs_is_always_allowed_to_a_lead(route, size, in_use):
    target = max(1, in_use)
    plan = resize_plan(_held(route, size), target, _facts(in_use, free=0), may_grow=False)
    assert plan.ok is (target < size)


def test_refusals_say_what_would_fit():
    held = _held(size=8)
    running = resize_plan(held, 4, _facts(in_use=6), may_grow=True)
    assert not running.ok and "6 devices are admitted now" in running.reason \
        and "at least 6 devices" in running.reason and "train-a" in running.reason
    lead_grow = resize_plan(held, 10, _facts(), may_grow=False)
    assert not lead_grow.ok and "only a platform admin" in lead_grow.reason
    short = resize_plan(held, 12, _facts(free=2), may_grow=True)
    assert not short.ok and "needs 4 more device(s)" in short.reason and "2 free" in short.reason
    for bad in (0, -1, True, "4", 4.0):
        assert not resize_plan(held, bad, _facts(), may_grow=True).ok
    same = resize_plan(held, 8, _facts(), may_grow=True)
    assert not same.ok and "already" in same.reason
    retired = resize_plan(_held(status="retired"), 4, _facts(), may_grow=True)
    assert not retired.ok and "retired" in retired.reason


def test_a_dedicated_block_changes_by_whole_nodes_and_only_with_its_queue_empty():
    held = _held(Route.DEDICATED_BLOCK, 16, nodes=("gpu-a", "gpu-b"))
    odd = resize_plan(held, 12, _facts(), may_grow=True)
    assert not odd.ok and "of 8 devices: 8 devices, not 12" in odd.reason
    assert "24 or 32 devices, not 28" in resize_plan(held, 28, _facts(), may_grow=True).reason
    busy = resize_plan(held, 8, _facts(in_use=2), may_grow=True)
    assert not busy.ok and "queue is empty" in busy.reason
    shrink = resize_plan(held, 8, _facts(), may_grow=False)
    assert shrink.ok and shrink.release_nodes == ("gpu-b",) and shrink.add_nodes == ()
    grow = resize_plan(held, 32, _facts(free_nodes=("gpu-c", "gpu-d", "gpu-e")), may_grow=True)
    assert grow.ok and grow.add_nodes == ("gpu-c", "gpu-d")
    short = resize_plan(held, 32, _facts(free_nodes=("gpu-c",)), may_grow=True)
    assert not short.ok and "1 free validated node" in short.reason


def test_a_mig_hold_resizes_in_slices_of_its_profile():
    held = _held(Route.MIG_VCLUSTER, 4)
    plan = resize_plan(held, 2, _facts(in_use=1), may_grow=False)
    assert plan.ok and plan.mig_count == 2 and plan.whole_devices == 0
    assert plan.device_equivalents == mig_device_equivalents("3g.40gb", 2)
    few = resize_plan(held, 7, _facts(free_slices=1), may_grow=True)
    assert not few.ok and "1 free" in few.reason


instants = st.integers(0, 3599).map(lambda s: HOUR + dt.timedelta(seconds=s))


@given(at=instants, before=st.integers(1, 16), after=st.integers(1, 16))
def test_an_hour_with_a_resize_is_held_at_each_size_for_its_own_seconds(at, before, after):
    start = HOUR - dt.timedelta(hours=3)
    held = held_device_seconds(starts_at=start, ends_at=None, devices=Decimal(after),
                               hour=HOUR, resizes=[(at, Decimal(before), Decimal(after))])
    first = int((at - HOUR).total_seconds())
    assert held == first * before + (3600 - first) * after
    # hours wholly before or after take one size only
    assert held_device_seconds(starts_at=start, ends_at=None, devices=Decimal(after),
                               hour=HOUR - dt.timedelta(hours=1),
                               resizes=[(at, Decimal(before), Decimal(after))]) == 3600 * before


def test_a_resized_hour_is_priced_on_what_was_held():
    at = HOUR + dt.timedelta(minutes=15)
    row = allocation_hour(route="shared_pool", starts_at=HOUR - dt.timedelta(days=1),
                          ends_at=HOUR + dt.timedelta(minutes=45), devices=Decimal(2), hour=HOUR,
                          used=Decimal(10 ** 6), outages=[], rate=Decimal("2.00"),
                          resizes=[(at, Decimal(8), Decimal(2))])
    # 15 min at 8 devices, 30 min at 2, nothing after the end
    assert row.allocated == Decimal(900 * 8 + 1800 * 2)
    assert row.used == row.allocated  # use is capped at what was held


def test_a_month_names_every_size_it_held_in_order():
    start, end = HOUR, HOUR + dt.timedelta(days=30)
    before, during, after = (start - dt.timedelta(days=1), start + dt.timedelta(days=3),
                             end + dt.timedelta(days=2))
    assert sizes_held(3, [], start, end) == [3]
    assert sizes_held(3, [(during, 4, 3)], start, end) == [4, 3]
    assert sizes_held(5, [(during, 4, 3), (after, 3, 5)], start, end) == [4, 3]
    assert sizes_held(3, [(before, 8, 3)], start, end) == [3]  # resized before the month
    assert sizes_held(4, [(during, 4, 2), (during, 2, 4)], start, end) == [4, 2, 4]


def test_a_shrink_needs_a_current_read_of_the_queue():
    held, now = _held(size=8), HOUR
    stale = ResizeFacts(in_use=Decimal(0), running=(), free_devices=Decimal(0),
                        queue_read_at=now - dt.timedelta(minutes=5), now=now,
                        read_every_seconds=15)
    refused = resize_plan(held, 4, stale, may_grow=False)
    assert not refused.ok and "has not been read lately" in refused.reason
    never = ResizeFacts(in_use=Decimal(0), running=(), free_devices=Decimal(0), now=now,
                        read_every_seconds=15)
    assert not resize_plan(held, 4, never, may_grow=False).ok
    fresh = ResizeFacts(in_use=Decimal(0), running=(), free_devices=Decimal(0),
                        queue_read_at=now - dt.timedelta(seconds=20), now=now,
                        read_every_seconds=15)
    assert resize_plan(held, 4, fresh, may_grow=False).ok
    # a grow takes nothing from running work: no read needed
    assert resize_plan(held, 9, stale.__class__(**{**stale.__dict__,
                                                   "free_devices": Decimal(1)}),
                       may_grow=True).ok


def test_a_dispatched_shrink_leaves_every_worker_what_runs_there():
    held = _held(size=8)

    def shares(n):  # two workers, the second with three times the devices
        return {"w1": n // 4, "w2": n - n // 4}

    facts = ResizeFacts(in_use=Decimal(3), running=("a",), free_devices=Decimal(0),
                        worker_use={"w1": Decimal(2), "w2": Decimal(1)},
                        worker_names={"w1": "GPU east"}, shares_after=shares)
    refused = resize_plan(held, 4, facts, may_grow=False)  # w1 would get 1, 2 run there
    assert not refused.ok and "GPU east a share of 1 device" in refused.reason
    assert resize_plan(held, 7, facts, may_grow=False).ok is False  # 7 // 4 = 1 still
    assert resize_plan(_held(size=12), 8, facts, may_grow=False).ok  # w1 gets 2


def test_an_allocation_past_its_end_is_not_resized():
    ended = Held(route=Route.SHARED_POOL, status="active", whole_devices=8, mig_profile="",
                 mig_count=0, device_equivalents=Decimal(8), ended=True)
    plan = resize_plan(ended, 4, _facts(), may_grow=True)
    assert not plan.ok and "end has passed" in plan.reason
