"""Stranded capacity's detectors as pure functions: every kind, every edge, and properties
over generated series (no finding on a busy hold, thresholds monotone, a finding's price is
what billing charges for those hours)."""

import datetime as dt
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from billing.domain import HOUR, allocation_hour
from billing.stranded import (
    Action,
    Hold,
    IdleCapacity,
    Kind,
    MigOffer,
    QueueFacts,
    Run,
    Sample,
    cost_per_day,
    idle_hold,
    idle_part,
    oversized,
    quota_blocked,
    stalled_run,
    summarise,
)
from billing.stranded_thresholds import (
    Thresholds,
    parse_pool_thresholds,
    thresholds_for,
    with_overrides,
)
from fleet.domain import Route
from fleet.inventory.pricing import money

UTC = dt.UTC
NOW = dt.datetime(2026, 12, 4, 6, 0, tzinfo=UTC)
TH = Thresholds()
START = NOW - TH.window
MIG = (MigOffer("mig-a100", 80, ("1g.10gb", "2g.20gb", "3g.40gb"), Decimal("0.80")),)


def hold(route=Route.SHARED_POOL, devices=8, **kw) -> Hold:
    base = {"allocation_id": 1, "tenant": "acme", "pool": "shared-h100", "route": route,
            "held_devices": Decimal(devices), "held_since": START - dt.timedelta(days=1),
            "rate_per_device_hour": Decimal("2.50"), "whole_devices": devices}
    base.update(kw)
    return Hold(**base)


def series(busy: float, top: float, memory: float | None = 8.0, active: int = 8,
           n: int = 12) -> list[Sample]:
    step = TH.window / n
    return [Sample(START + step * (i + 1), Decimal(str(busy)), top, memory, active)
            for i in range(n)]


def summary(*args, **kw):
    return summarise(series(*args, **kw), START, NOW)


# -- the summary ------------------------------------------------------------------------------

def test_the_summary_takes_the_peaks_and_the_mean_inside_the_window_only():
    samples = [Sample(START, Decimal(5), 0.9, 70.0, 8),  # on the left edge: before the window
               Sample(START + HOUR, Decimal("0.5"), 0.2, 10.0, 2),
               Sample(START + 2 * HOUR, Decimal("1.5"), 0.6, 20.0, 3),
               Sample(NOW + HOUR, Decimal(7), 1.0, 80.0, 8)]  # after it
    s = summarise(samples, START, NOW)
    assert (s.samples, s.mean_busy_devices, s.peak_busy_devices) == (2, Decimal(1),
                                                                    Decimal("1.5"))
    assert (s.peak_activity, s.peak_memory_gb, s.peak_active_devices) == (0.6, 20.0, 3)
    assert "2 samples" in s.text and "60%" in s.text


def test_no_samples_is_a_namespace_where_nothing_ran():
    s = summarise([], START, NOW)
    assert (s.samples, s.peak_activity, s.peak_memory_gb) == (0, 0.0, None)
    assert "nothing ran" in s.text


def test_activity_outside_zero_to_one_is_clamped():
    s = summarise([Sample(NOW, Decimal(-1), 3.0, None, 1)], START, NOW)
    assert (s.peak_activity, s.peak_busy_devices) == (1.0, Decimal(0))


# -- idle hold -----------------------------------------------------------------------------

@pytest.mark.parametrize("route", list(Route))
def test_an_idle_hold_on_every_route_proposes_release_at_its_full_price(route):
    h = hold(route)
    f = idle_hold(h, summary(0.01, 0.03), TH)
    assert f.kind == Kind.IDLE_HOLD and f.proposal.action == Action.RELEASE
    assert f.stranded_devices == Decimal(8)
    assert f.cost_per_day == Decimal("480.00")  # 8 devices × 24 h × 2.50
    assert f.needs_yes is (route in (Route.DEDICATED_BLOCK, Route.CONFIDENTIAL_POOL))
    assert ("lead's yes" in f.proposal.text) is f.needs_yes
    assert f.evidence["series"]["samples"] == 12
    assert f.evidence["thresholds"]["idle_activity"] == 0.05


def test_a_hold_with_no_series_at_all_is_idle():
    assert idle_hold(hold(), summarise([], START, NOW), TH).kind == Kind.IDLE_HOLD


@pytest.mark.parametrize(("top", "idle"), [(0.0, True), (0.049, True), (0.05, False),
                                           (0.9, False)])
def test_idle_is_below_the_threshold_for_every_device(top, idle):
    assert (idle_hold(hold(), summary(top / 2, top), TH) is not None) is idle


def test_a_hold_younger_than_the_window_is_not_judged():
    young = hold(held_since=START + dt.timedelta(minutes=1))
    assert idle_hold(young, summary(0, 0), TH) is None
    assert oversized(young, summary(0.5, 0.5), TH) is None


def test_a_window_shorter_than_the_threshold_is_not_judged():
    short = summarise([], NOW - dt.timedelta(hours=1), NOW)
    assert idle_hold(hold(held_since=NOW - dt.timedelta(days=9)), short, TH) is None


def test_nothing_held_is_nothing_stranded():
    assert idle_hold(hold(devices=0), summary(0, 0), TH) is None


# -- stalled run ---------------------------------------------------------------------------

def run(name="train", devices=8, minutes=45, peak: float | None = 0.0) -> Run:
    return Run(name, Decimal(devices), NOW - dt.timedelta(minutes=minutes), peak)


def test_a_run_near_zero_for_the_stall_window_is_stalled():
    f = stalled_run(hold(), [run(), run("eval", 2, peak=0.5)], NOW, TH)
    assert f.kind == Kind.STALLED_RUN and f.stranded_devices == Decimal(8)
    assert f.proposal.action == Action.CHECK_RUN
    assert [r["workload"] for r in f.evidence["runs"]] == ["train"]
    assert f.cost_per_day == cost_per_day(Decimal(8), Decimal("2.50"))


@pytest.mark.parametrize(("r", "stalled"), [
    (run(peak=0.019), True), (run(peak=0.02), False),  # the threshold is exclusive
    (run(minutes=29), False), (run(minutes=30), True),  # the window is inclusive
    (run(peak=None), False),  # no series for its pods yet: not judged
    (run(devices=0), False),  # holds nothing
])
def test_stall_edges(r, stalled):
    assert (stalled_run(hold(), [r], NOW, TH) is not None) is stalled


def test_stalled_devices_never_exceed_the_hold():
    f = stalled_run(hold(devices=4), [run("a", 4), run("b", 4)], NOW, TH)
    assert f.stranded_devices == Decimal(4) and "these runs" in f.proposal.text


# -- oversized -------------------------------------------------------------------------------

def test_eight_devices_busy_as_two_shrink_to_three():
    # peak 2 devices busy at once, 25% headroom → 2.5 → 3 devices
    f = oversized(hold(), summary(2, 0.9, memory=60.0, active=3), TH)
    assert f.kind == Kind.OVERSIZED and f.proposal.action == Action.SHRINK
    assert (f.proposal.whole_devices_after, f.stranded_devices) == (3, Decimal(5))
    assert f.proposal.cost_per_day_after == Decimal("180.00")
    assert f.cost_per_day == Decimal("300.00")


def test_a_whole_device_hold_doing_a_slice_of_work_moves_to_mig_when_cheaper():
    # one device active, 20% busy, 8 GB: 2g.20gb (2/7 ≥ 0.25 and 20 GB ≥ 10) in the MIG pool
    f = oversized(hold(devices=1), summary(0.2, 0.2, memory=8.0, active=1), TH, MIG)
    assert f.proposal.action == Action.MOVE_TO_MIG
    assert (f.proposal.mig_profile_after, f.proposal.mig_count_after,
            f.proposal.pool_after) == ("2g.20gb", 1, "mig-a100")
    assert f.proposal.cost_per_day_after == cost_per_day(Decimal("0.2857"), Decimal("0.80"))
    assert {a["action"] for a in f.evidence["alternatives"]} == {"move_to_mig"}


def test_a_mig_pool_dearer_than_the_hold_proposes_nothing():
    dear = (MigOffer("mig-dear", 80, ("3g.40gb",), Decimal("100")),)
    assert oversized(hold(devices=1), summary(0.2, 0.2, active=1), TH, dear) is None


def test_memory_no_slice_holds_keeps_whole_devices():
    f = oversized(hold(devices=4), summary(0.3, 0.3, memory=75.0, active=1), TH, MIG)
    assert f.proposal.action == Action.SHRINK and f.proposal.whole_devices_after == 1


@pytest.mark.parametrize("route", [Route.DEDICATED_BLOCK, Route.CONFIDENTIAL_POOL])
def test_a_binding_hold_is_never_moved_to_mig_and_needs_the_leads_yes(route):
    f = oversized(hold(route, devices=16, devices_per_node=8), summary(0.5, 0.5, active=1),
                  TH, MIG)
    assert f.proposal.action == Action.SHRINK and f.needs_yes
    assert f.proposal.whole_devices_after == (8 if route == Route.DEDICATED_BLOCK else 1)


def test_a_dedicated_block_shrinks_by_whole_nodes_only():
    # 9 devices busy → 12 with headroom → two nodes of 8 = 16 of 24
    f = oversized(hold(Route.DEDICATED_BLOCK, devices=24), summary(9, 1.0, active=12), TH)
    assert f.proposal.whole_devices_after == 16 and "(2 node(s))" in f.proposal.text
    assert oversized(hold(Route.DEDICATED_BLOCK, devices=16), summary(9, 1.0), TH) is None


def test_a_mig_hold_shrinks_to_a_smaller_profile_and_fewer_slices():
    h = hold(Route.MIG_VCLUSTER, devices=0, held_devices=Decimal("1.7143"), whole_devices=0,
             mig_profile="3g.40gb", mig_count=4, pool="mig-a100",
             mig_profiles_offered=("1g.10gb", "3g.40gb"))
    f = oversized(h, summary(0.2, 0.1, memory=6.0, active=2), TH)
    assert (f.proposal.mig_profile_after, f.proposal.mig_count_after) == ("1g.10gb", 2)
    assert f.proposal.devices_after == Decimal("0.2857")
    assert "4 × 3g.40gb → 2 × 1g.10gb" in f.proposal.text


def test_a_mig_hold_without_memory_series_is_not_resized():
    h = hold(Route.MIG_VCLUSTER, held_devices=Decimal("1.7143"), mig_profile="3g.40gb",
             mig_count=4)
    assert oversized(h, summary(0.2, 0.1, memory=None, active=2), TH) is None


def test_an_idle_hold_is_idle_not_oversized():
    assert oversized(hold(), summary(0.01, 0.01), TH, MIG) is None


def test_a_hold_busy_to_its_size_is_not_oversized():
    assert oversized(hold(), summary(7, 1.0, memory=79.0), TH, MIG) is None


# -- quota says no -------------------------------------------------------------------------

def queue(**kw) -> QueueFacts:
    base = {"hold": hold(devices=4), "gpu_model": "H100", "cohort": "", "nominal": Decimal(4),
            "borrowing_limit": None, "usage": Decimal(4), "pending_workloads": 2,
            "pending_devices": Decimal(3), "oldest_pending_since": NOW - dt.timedelta(hours=1)}
    base.update(kw)
    return QueueFacts(**base)


IDLE = [IdleCapacity("dedicated-h100", "H100", "", Decimal(2), Decimal(6)),
        IdleCapacity("shared-a100", "A100", "", Decimal(8))]


def test_pending_work_at_a_full_quota_while_devices_idle_elsewhere():
    f = quota_blocked(queue(), IDLE, NOW, TH)
    assert f.kind == Kind.QUOTA_BLOCKED and f.proposal.action == Action.RAISE_QUOTA
    assert f.stranded_devices == Decimal(3)  # what the work needs, of the 8 idle
    assert "in a cohort" in f.proposal.text and "dedicated-h100 (8)" in f.reason
    assert [c["pool"] for c in f.evidence["idle"]] == ["dedicated-h100"]  # same model only


def test_in_a_cohort_the_fix_is_lending():
    f = quota_blocked(queue(cohort="research"), IDLE, NOW, TH)
    assert "cohort research borrow" in f.proposal.text


@pytest.mark.parametrize("kw", [
    {"pending_workloads": 0}, {"pending_devices": Decimal(0)},
    {"oldest_pending_since": None},
    {"oldest_pending_since": NOW - dt.timedelta(minutes=5)},  # not waiting long yet
    {"usage": Decimal(0)},  # the quota has room: it is not the quota
    {"gpu_model": "B200"},  # nothing of its model idles
])
def test_quota_edges_with_no_finding(kw):
    assert quota_blocked(queue(**kw), IDLE, NOW, TH) is None


def test_idle_devices_its_own_cohort_lends_are_not_out_of_reach():
    lent = [IdleCapacity("shared-h100", "H100", "research", Decimal(8))]
    assert quota_blocked(queue(cohort="research"), lent, NOW, TH) is None
    assert quota_blocked(queue(cohort="other"), lent, NOW, TH) is not None


def test_the_idle_part_of_a_hold():
    assert idle_part(hold(), summary(1.5, 0.5)) == Decimal("6.5")
    assert idle_part(hold(devices=1), summary(3, 1.0)) == Decimal(0)


# -- thresholds --------------------------------------------------------------------------

def test_pool_thresholds_parse_and_override():
    per_pool = parse_pool_thresholds(["dedicated-h100.window_hours=72",
                                      "dedicated-h100.idle_percent=10", "mig.headroom_percent=0"])
    th = thresholds_for("dedicated-h100", TH, per_pool)
    assert (th.window, th.idle_activity, th.stall_window) == (
        dt.timedelta(hours=72), 0.1, TH.stall_window)
    assert thresholds_for("mig", TH, per_pool).headroom == Decimal(0)
    assert thresholds_for("other", TH, per_pool) == TH


@pytest.mark.parametrize("item", ["nodot=5", "pool.nokey=5", "pool.window_hours=",
                                  "pool.window_hours=0", "pool.idle_percent=101",
                                  "pool.stall_minutes=x", "pool.headroom_percent=-1"])
def test_bad_pool_thresholds_are_refused_with_a_message(item):
    with pytest.raises(ValueError, match="pool|key|value"):
        parse_pool_thresholds([item])


def test_an_unknown_key_names_the_keys():
    with pytest.raises(ValueError, match="window_hours"):
        with_overrides(TH, {"nope": "1"})


# -- properties over generated series ------------------------------------------------------

activity = st.floats(0, 1, allow_nan=False)
samples = st.lists(st.tuples(st.integers(1, 288), activity, st.integers(0, 8),
                             st.one_of(st.none(), st.floats(0, 80, allow_nan=False))),
                   max_size=40)


def generated(rows) -> list[Sample]:
    return [Sample(START + dt.timedelta(minutes=5 * i), Decimal(str(round(top * n, 4))),
                   top, mem, n) for i, top, n, mem in rows]


@settings(max_examples=150, deadline=None)
@given(samples, st.floats(0.001, 1))
def test_a_busy_hold_is_never_idle(rows, threshold):
    rows = [*rows, (288, max(threshold, 0.5), 1, None)]  # one device busy once
    th = Thresholds(idle_activity=min(threshold, 0.5))
    assert idle_hold(hold(), summarise(generated(rows), START, NOW), th) is None


@settings(max_examples=150, deadline=None)
@given(samples, activity, activity)
def test_a_higher_idle_threshold_finds_at_least_as_much(rows, a, b):
    s = summarise(generated(rows), START, NOW)
    low, high = sorted((a, b))
    found_low = idle_hold(hold(), s, Thresholds(idle_activity=low)) is not None
    found_high = idle_hold(hold(), s, Thresholds(idle_activity=high)) is not None
    assert found_high or not found_low


@settings(max_examples=150, deadline=None)
@given(samples, st.integers(0, 100), st.integers(0, 100))
def test_less_headroom_proposes_no_costlier_hold(rows, a, b):
    # The cheaper option is proposed, across pools with their own rates: with less headroom
    # a MIG pool's slices may hold more device-equivalents than one whole device elsewhere
    # (Hypothesis found 9/7 against 1), but never cost more. Each option's need only grows
    # with the headroom, so the cheapest can only get dearer.
    s = summarise(generated(rows), START, NOW)
    tight, loose = sorted((a, b))
    held = hold(devices=8)

    def cost_after(headroom):
        f = oversized(held, s, Thresholds(headroom=Decimal(headroom) / 100), MIG)
        return cost_per_day(held.held_devices, held.rate_per_device_hour) if f is None \
            else f.proposal.cost_per_day_after

    if s.peak_activity >= TH.idle_activity:
        assert cost_after(tight) <= cost_after(loose)


@settings(max_examples=150, deadline=None)
@given(samples, st.integers(1, 64), st.decimals("0.01", "50", places=2))
def test_a_findings_price_is_what_billing_charges_for_those_hours(rows, devices, rate):
    h = hold(devices=devices, rate_per_device_hour=rate)
    s = summarise(generated(rows), START, NOW)
    for f in (idle_hold(h, s, TH), oversized(h, s, TH, MIG)):
        if f is None:
            continue
        assert Decimal(0) < f.stranded_devices <= h.held_devices
        # what the rollup charges for the stranded devices, hour by hour over a day
        day = sum((allocation_hour(route=h.route, starts_at=START, ends_at=None,
                                   devices=f.stranded_devices, hour=START + HOUR * i,
                                   used=Decimal(0), outages=(), rate=rate).amount
                   for i in range(24)), Decimal(0))
        assert f.cost_per_day == money(day)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 8), st.integers(0, 120),
                          st.one_of(st.none(), activity)), max_size=6), activity)
def test_a_stall_threshold_raised_never_finds_fewer_stalled_devices(runs, extra):
    rs = [Run(f"w{i}", Decimal(d), NOW - dt.timedelta(minutes=m), p)
          for i, (d, m, p) in enumerate(runs)]

    def stranded(th):
        f = stalled_run(hold(devices=64), rs, NOW, th)
        return Decimal(0) if f is None else f.stranded_devices

    assert stranded(Thresholds(stall_activity=0.02 + extra)) >= stranded(TH)


def test_range_query_matrices_become_samples_per_namespace():
    from billing.stranded_reading import samples_from

    t0, t1 = NOW.timestamp() - 300, NOW.timestamp()
    results = {
        "busy": [{"metric": {"namespace": "acme-a", "GPU_I_PROFILE": ""},
                  "values": [[t0, "0.5"], [t1, "1.5"]]},
                 {"metric": {"namespace": "acme-a", "GPU_I_PROFILE": "1g.10gb"},
                  "values": [[t1, "0.7"]]},
                 {"metric": {"namespace": "globex-b"}, "values": [[t1, "NaN"]]}],
        "top": [{"metric": {"namespace": "acme-a"}, "values": [[t0, "0.5"], [t1, "0.9"]]}],
        "memory": [{"metric": {"namespace": "acme-a"}, "values": [[t1, "10240"]]}],
        "active": [{"metric": {"namespace": "acme-a"}, "values": [[t1, "3"]]}],
    }
    got = samples_from(results)
    assert list(got) == ["acme-a"]  # NaN is no value: globex-b has no sample
    first, second = got["acme-a"]
    assert (first.busy_devices, first.top_activity, first.memory_gb,
            first.active_devices) == (Decimal("0.5"), 0.5, None, 0)
    assert second.busy_devices == Decimal("1.6")  # 1.5 + 0.7 × 1/7
    assert (second.top_activity, second.memory_gb, second.active_devices) == (0.9, 10.74, 3)
    assert second.at == NOW


def test_device_hours_fall_on_the_days_they_were_stranded():
    from billing.stranded_board import day_hours

    d = dt.date(2026, 12, 1)
    start = dt.datetime(2026, 11, 30, 18, tzinfo=UTC)  # before the board's first day
    end = dt.datetime(2026, 12, 2, 6, tzinfo=UTC)
    got = day_hours([(start, end, Decimal(2)),
                     (dt.datetime(2026, 12, 3, 1, tzinfo=UTC),
                      dt.datetime(2026, 12, 3, 1, 30, tzinfo=UTC), Decimal("0.5"))],
                    d, dt.date(2026, 12, 4))
    assert got == {d: Decimal(48), dt.date(2026, 12, 2): Decimal(12),
                   dt.date(2026, 12, 3): Decimal("0.25"), dt.date(2026, 12, 4): Decimal(0)}


# -- the grace period --------------------------------------------------------------------

@pytest.mark.parametrize(("policy", "action", "needs_yes", "accept"), [
    ("notify", "release", False, False), ("notify", "shrink", False, False),
    ("shrink", "shrink", False, True), ("shrink", "release", False, False),
    ("release", "release", False, True), ("release", "shrink", False, True),
    ("release", "move_to_mig", False, False), ("release", "check_run", False, False),
    ("release", "raise_quota", False, False),
    ("release", "release", True, False), ("shrink", "shrink", True, False),
])
def test_the_policy_accepts_only_what_it_names_and_never_a_binding_hold(policy, action,
                                                                        needs_yes, accept):
    from billing.stranded import Unanswered, grace_action

    grace = dt.timedelta(days=7)
    before = grace_action(policy=Unanswered(policy), action=Action(action),
                          needs_yes=needs_yes, found_at=NOW - grace + dt.timedelta(seconds=1),
                          grace=grace, now=NOW)
    assert (before.due, before.accept) == (False, False)
    after = grace_action(policy=Unanswered(policy), action=Action(action), needs_yes=needs_yes,
                         found_at=NOW - grace, grace=grace, now=NOW)
    assert after.due and after.accept is accept
    assert ("lead's yes" in after.reason) is needs_yes
