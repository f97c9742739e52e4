"""Which clock each ledger step's time comes from (fleet.queues.timing), and the seams measured
between those times."""

import datetime as dt
import itertools
from dataclasses import replace
from decimal import Decimal

import pytest

from fleet.queues.afterwards import marks
from fleet.queues.ledger import StoredWorkload, ledger_changes
from fleet.queues.placement import Placement, placement_clues, step_reason
from fleet.queues.timing import (
    CLOCK_SKEW,
    EVENT,
    MICRO,
    NO_CLUE,
    OBJECT,
    PORTAL,
    WATCH,
    Clue,
    best_time,
    timed_steps,
    watch_lag,
)
from fleet.queues.truth import WorkloadFacts
from fleet.queues.watch import Mirror, event_time
from fleet.vocabulary import LedgerEvent as K

pytestmark = pytest.mark.unit

T = dt.datetime(2026, 12, 4, 12, 0, 0, tzinfo=dt.UTC)  # a whole-second stamp
NOW = T + dt.timedelta(seconds=30)


def ms(n: float) -> dt.datetime:
    return T + dt.timedelta(milliseconds=n)


# Every combination of what a step may have: a stamp or none; an Event before the stamp's
# second (beyond and within the skew), inside it, after it (within and beyond the skew); a
# watch arrival before, inside and after the second; a measured lag or none.
STAMPS = (None, T)
EVENTS = ((), (ms(-400),), (ms(-100),), (ms(250),), (ms(1100),), (ms(1400),),
          (ms(1400), ms(600)))
SEEN = (None, ms(-50), ms(20), ms(999), ms(1000), ms(5000))
LAGS = (None, 0.0, 0.004, 5.0)


def expected(stamp, events, seen, lag):
    """The rule, written out once more case by case."""
    if stamp is None:
        return (seen, WATCH, lag) if seen else (NOW, PORTAL, None)
    fits = sorted(t for t in events if T - CLOCK_SKEW <= t < T + dt.timedelta(seconds=1)
                  + CLOCK_SKEW)
    if fits:
        t = fits[0]
        outside = max(0.0, (T - t).total_seconds(), (t - T).total_seconds() - 1)
        return t, EVENT, MICRO + outside
    if seen and T <= seen < T + dt.timedelta(seconds=1):
        since = max(MICRO, (seen - T).total_seconds())
        return seen, WATCH, since if lag is None else min(max(lag, MICRO), since)
    return T, OBJECT, 1.0


@pytest.mark.parametrize("stamp,events,seen,lag",
                         list(itertools.product(STAMPS, EVENTS, SEEN, LAGS)))
def test_every_combination_of_clocks_has_one_time(stamp, events, seen, lag):
    got = best_time(stamp, Clue(seen, events), lag=lag, now=NOW)
    at, source, bound = expected(stamp, events, seen, lag)
    assert (got.at, got.source, got.kube_at) == (at, source, stamp)
    assert got.bound == (None if bound is None else pytest.approx(bound))
    if stamp is not None and source != EVENT:
        # What the watch or the stamp gives lies in the stamp's own second.
        assert T <= got.at < T + dt.timedelta(seconds=1)
        assert got.bound <= 1.0


def test_the_earliest_fitting_event_wins_and_its_time_is_kept_to_the_microsecond():
    t = best_time(T, Clue(ms(900), (ms(700.123), ms(300.456))), lag=0.002, now=NOW)
    assert (t.at, t.source, t.bound) == (ms(300.456), EVENT, MICRO)


def test_a_watch_error_bar_is_its_lag_never_more_than_the_time_since_the_stamp():
    assert best_time(T, Clue(ms(30)), lag=0.004, now=NOW).bound == pytest.approx(0.004)
    assert best_time(T, Clue(ms(3)), lag=0.5, now=NOW).bound == pytest.approx(0.003)
    assert best_time(T, Clue(ms(3)), lag=None, now=NOW).bound == pytest.approx(0.003)


def test_watch_lag_is_a_high_quantile_of_the_delays_measured():
    assert watch_lag([]) is None
    assert watch_lag([0.001] * 95 + [0.5] * 5) == 0.5
    assert watch_lag([0.001] * 96 + [0.5] * 4) == 0.001
    assert watch_lag([-0.002]) == 0.0  # a clock a hair behind is no negative lag


BASE = {"workload_uid": "u1", "workload": "train"}


def test_steps_are_timed_and_their_seams_measured_between_those_times():
    pods, sched, run = T + dt.timedelta(seconds=1), T + dt.timedelta(seconds=1), \
        T + dt.timedelta(seconds=2)
    placed = Placement(pods_at=pods, scheduled_at=sched, node="n1", running_at=run)
    events = [{**BASE, "kind": K.PODS, "at": pods, "seam_seconds": 1.0, "reason": "x"},
              {**BASE, "kind": K.SCHEDULED, "at": sched, "seam_seconds": 0.0, "reason": "x"},
              {**BASE, "kind": K.RUNNING, "at": run, "seam_seconds": 2.0, "reason": "x"}]
    clues = {K.PODS: Clue(pods + dt.timedelta(milliseconds=12)),
             K.SCHEDULED: Clue(pods + dt.timedelta(milliseconds=80),
                               (pods + dt.timedelta(milliseconds=41.5),)),
             K.RUNNING: Clue(run + dt.timedelta(milliseconds=310))}
    # The admission was recorded before, seen by the watch at .600.
    recorded = {(K.ADMITTED, T): (ms(600), 0.003)}
    got = {e["kind"]: e for e in timed_steps(
        events, stamps={K.ADMITTED: T, K.PODS: pods, K.SCHEDULED: sched, K.RUNNING: run},
        clues=clues, recorded=recorded, lag=0.003, now=NOW,
        retell=lambda e: step_reason(e["kind"], e["seam_seconds"], placed))}
    assert [(got[k]["at_source"], got[k]["kube_at"]) for k in (K.PODS, K.SCHEDULED, K.RUNNING)] \
        == [(WATCH, pods), (EVENT, sched), (WATCH, run)]
    assert got[K.PODS]["seam_seconds"] == pytest.approx(0.412)  # .600 → 1.012
    assert got[K.SCHEDULED]["seam_seconds"] == pytest.approx(0.0295)  # 1.012 → 1.0415
    assert got[K.RUNNING]["seam_seconds"] == pytest.approx(1.71)  # .600 → 2.310
    assert got[K.PODS]["reason"] == "Pods created, 412 ms after admission."
    assert "30 ms after its pods were created" in got[K.SCHEDULED]["reason"]


def test_a_step_never_comes_before_the_one_it_follows():
    # Pods seen by the watch late in the second; running known only by its stamp, the same
    # second: it is moved to the pods' time, its error bar widened by as much.
    events = [{**BASE, "kind": K.PODS, "at": T, "seam_seconds": 0.0, "reason": "x"},
              {**BASE, "kind": K.RUNNING, "at": T, "seam_seconds": 0.0, "reason": "x"}]
    got = {e["kind"]: e for e in timed_steps(
        events, stamps={K.ADMITTED: T - dt.timedelta(seconds=1), K.PODS: T, K.RUNNING: T},
        clues={K.PODS: Clue(ms(700))}, recorded={}, lag=None, now=NOW)}
    assert got[K.RUNNING]["at"] == ms(700) and got[K.RUNNING]["at_source"] == OBJECT
    assert got[K.RUNNING]["at_bound_seconds"] == pytest.approx(1.7)
    assert got[K.RUNNING]["kube_at"] == T


@pytest.mark.parametrize("lag", [None, 0.003, 0.012, 5.0])
@pytest.mark.parametrize("placed_ms", [342, 349, 351, 400])
def test_a_watch_time_later_than_the_next_steps_event_is_brought_back_to_it(lag, placed_ms):
    # Pods seen by the watch at .350 (a few ms late); the scheduler's Event placed them at
    # `placed_ms`. The Event's time stays; pods never come after it, nor before their stamp.
    events = [{**BASE, "kind": K.PODS, "at": T, "seam_seconds": 0.0, "reason": "x"},
              {**BASE, "kind": K.SCHEDULED, "at": T, "seam_seconds": 0.0, "reason": "x"}]
    got = {e["kind"]: e for e in timed_steps(
        events, stamps={K.ADMITTED: T - dt.timedelta(seconds=1), K.PODS: T, K.SCHEDULED: T},
        clues={K.PODS: Clue(ms(350)), K.SCHEDULED: Clue(None, (ms(placed_ms),))},
        recorded={}, lag=lag, now=NOW)}
    pods, sched = got[K.PODS], got[K.SCHEDULED]
    assert sched["at"] == ms(placed_ms) and sched["at_source"] == EVENT
    assert pods["at_source"] == WATCH and T <= pods["at"] <= sched["at"]
    assert pods["at"] == min(ms(350), ms(placed_ms))
    assert sched["seam_seconds"] == pytest.approx((sched["at"] - pods["at"]).total_seconds())
    # The error bar covers every moment the pods may have been created in, and no more
    # than the stamp's second allows.
    low = T if lag is None else max(T, ms(350) - dt.timedelta(seconds=lag))
    if low > pods["at"]:  # the lag measured was too short for this one
        low = T
    reach = pods["at"] - dt.timedelta(seconds=pods["at_bound_seconds"])
    assert reach <= low + dt.timedelta(microseconds=1) and reach >= T - dt.timedelta(
        microseconds=1), (reach, low)


def test_an_event_earlier_than_its_step_recorded_before_is_moved_to_it_within_its_bound():
    # The pods were recorded in an earlier reading, at the watch's .350 (the ledger is
    # append-only: that row stays); the scheduler's Event, read later, says .342. The step
    # keeps the order and says by how much it was moved: the Event lies within its bound.
    events = [{**BASE, "kind": K.SCHEDULED, "at": T, "seam_seconds": 0.0, "reason": "x"}]
    got = timed_steps(events, stamps={K.ADMITTED: T - dt.timedelta(seconds=1), K.PODS: T,
                                      K.SCHEDULED: T},
                      clues={K.SCHEDULED: Clue(None, (ms(342),))},
                      recorded={(K.PODS, T): (ms(350), 0.003)}, lag=0.003, now=NOW)[0]
    assert got["at"] == ms(350) and got["at_source"] == EVENT and got["seam_seconds"] == 0.0
    reach = got["at"] - dt.timedelta(seconds=got["at_bound_seconds"])
    assert reach <= ms(342) <= got["at"]
    assert got["at_bound_seconds"] < 0.01


def test_a_seam_from_a_step_not_recorded_with_a_time_is_measured_from_its_stamp():
    events = [{**BASE, "kind": K.PODS, "at": T, "seam_seconds": 1.0, "reason": "x"}]
    (e,) = timed_steps(events, stamps={K.ADMITTED: T - dt.timedelta(seconds=1), K.PODS: T},
                       clues={K.PODS: Clue(ms(250))}, recorded={}, lag=0.001, now=NOW)
    assert e["seam_seconds"] == pytest.approx(1.25) and e["at_bound_seconds"] == 0.001


def test_a_step_without_a_stamp_is_the_portals_or_the_watchs():
    events = [{**BASE, "kind": K.REQUEUED, "at": NOW, "reason": "x"}]
    (e,) = timed_steps(events, stamps={}, clues={}, recorded={}, lag=None, now=NOW)
    assert (e["at"], e["at_source"], e["kube_at"], e["at_bound_seconds"]) == \
        (NOW, PORTAL, None, None)
    (e,) = timed_steps(events, stamps={}, clues={K.REQUEUED: Clue(ms(3))}, recorded={},
                       lag=0.002, now=NOW)
    assert (e["at"], e["at_source"], e["at_bound_seconds"]) == (ms(3), WATCH, 0.002)


def _facts(**kw) -> WorkloadFacts:
    base = {"uid": "u1", "name": "job-train-1", "namespace": "ns", "local_queue": "lq",
            "cluster_queue": "cq", "priority": 0, "devices": Decimal(1), "state": "pending",
            "submitted_at": T, "resource_version": "1", "job": "train"}
    return WorkloadFacts(**{**base, **kw})


def test_the_ledger_decision_times_every_step_it_records():
    read = _facts(state="admitted", admitted_at=T + dt.timedelta(seconds=2),
                  resource_version="2")
    changes = ledger_changes(
        {}, [read], [], positions={}, placements={}, allocation_of={"ns": 7},
        borrowed={}, now=NOW, lag=0.005,
        clues={"u1": {K.SUBMITTED: Clue(ms(2400)), K.ADMITTED: Clue(ms(2400))}})
    by = {e["kind"]: e for e in changes.events}
    # Submitted at 12:00:00 (seen only at :02.4, outside its second: the stamp stands);
    # admitted at :02 seen at :02.4, ± the watch's lag.
    assert (by[K.SUBMITTED]["at"], by[K.SUBMITTED]["at_source"]) == (T, OBJECT)
    assert (by[K.ADMITTED]["at"], by[K.ADMITTED]["at_source"],
            by[K.ADMITTED]["at_bound_seconds"]) == (ms(2400), WATCH, 0.005)
    assert by[K.ADMITTED]["wait_seconds"] == by[K.ADMITTED]["seam_seconds"] == \
        pytest.approx(2.4)
    assert by[K.ADMITTED]["kube_at"] == T + dt.timedelta(seconds=2)


def test_a_readmission_measures_from_the_time_its_earlier_steps_were_recorded_at():
    admitted = T + dt.timedelta(seconds=5)
    pods = admitted + dt.timedelta(seconds=1)
    read = _facts(state="admitted", admitted_at=admitted, resource_version="3")
    stored = StoredWorkload(pk=1, allocation_id=7, facts=replace(read, resource_version="2"),
                            placement=Placement())
    changes = ledger_changes(
        {"u1": stored}, [read], [], positions={}, placements={"u1": Placement(pods_at=pods)},
        allocation_of={"ns": 7}, borrowed={}, now=NOW,
        clues={"u1": {K.PODS: Clue(pods + dt.timedelta(milliseconds=40))}},
        recorded={"u1": {(K.ADMITTED, admitted): (admitted + dt.timedelta(
            milliseconds=990), 0.002)}})
    assert [e["kind"] for e in changes.events] == [K.PODS]
    (p,) = changes.events
    assert p["seam_seconds"] == pytest.approx(0.05)  # 5.990 → 6.040


def test_placement_clues_take_the_earliest_arrival_and_the_scheduler_events():
    pod = {"metadata": {"name": "train-abcde", "namespace": "ns",
                        "creationTimestamp": "2026-12-04T12:00:01Z",
                        "labels": {"batch.kubernetes.io/job-name": "train"}},
           "spec": {"nodeName": "n1"},
           "status": {"conditions": [{"type": "PodScheduled", "status": "True",
                                      "lastTransitionTime": "2026-12-04T12:00:01Z"}]}}
    other = {**pod, "metadata": {**pod["metadata"], "name": "train-fghij"}}
    seen = {"train-abcde": ms(1300), "train-fghij": ms(1100)}
    got = placement_clues(
        [pod, other], {}, T, seen=lambda kind, o, mark: seen[o["metadata"]["name"]],
        events=lambda ns, kind, name, reasons: (ms(1050),) if (kind, name) == (
            "Pod", "train-abcde") and "Scheduled" in reasons else ())
    assert got[K.PODS] == Clue(ms(1100), ())
    assert got[K.SCHEDULED] == Clue(ms(1100), (ms(1050),))
    assert got[K.RUNNING] == Clue(None, ())  # not started
    assert placement_clues([pod], {}, None, seen=lambda *a: None,
                           events=lambda *a: ()) == {}


def _event(name: str, reason: str, at: str | None, about="Pod") -> dict:
    return {"metadata": {"name": name, "namespace": "ns"}, "reason": reason,
            "eventTime": at, "regarding": {"kind": about, "name": "train-abcde",
                                           "namespace": "ns"}}


def test_the_mirror_keeps_only_events_that_time_a_step_and_measures_the_watch_lag():
    mirror = Mirror(objects={"events": {}, "workloads": {}})
    assert event_time(_event("e0", "Scheduled", None)) is None  # a core/v1 recorder's
    assert event_time(_event("e1", "Pulled", "2026-12-04T12:00:01.000000Z")) is None
    mirror.apply("events", "ADDED", _event("e2", "Scheduled", "2026-12-04T12:00:01.250000Z"),
                 ms(1254))
    mirror.apply("events", "ADDED", _event("e3", "Scheduled", "2026-12-04T12:00:02.000000Z"))
    view = mirror.view()
    assert view.event_times("ns", "Pod", "train-abcde", ("Scheduled",)) == (ms(1250), ms(2000))
    assert view.lag == pytest.approx(0.004)  # only an arrival the watch saw is a lag
    mirror.apply("events", "DELETED", _event("e2", "Scheduled", "2026-12-04T12:00:01.25Z"))
    mirror.apply("events", "DELETED", _event("e3", "Scheduled", "2026-12-04T12:00:02Z"))
    assert mirror.timed == {}
    assert best_time(T, NO_CLUE, lag=None, now=NOW).source == OBJECT


def _wl(*conditions) -> dict:
    return {"metadata": {"name": "w", "namespace": "ns",
                         "creationTimestamp": "2026-12-04T12:00:00Z"},
            "status": {"conditions": [{"type": t, "status": st, "lastTransitionTime": at}
                                      for t, st, at in conditions]}}


def test_a_step_is_seen_when_the_first_version_showing_it_arrived():
    mirror = Mirror(objects={"workloads": {}})
    mirror.apply("workloads", "ADDED", _wl(), ms(5))
    admitted = ("Admitted", "True", "2026-12-04T12:00:02Z")
    mirror.apply("workloads", "MODIFIED", _wl(("QuotaReserved", "True",
                                                "2026-12-04T12:00:02Z"), admitted), ms(2010))
    # Later versions (a status write of its own) do not move what was seen.
    mirror.apply("workloads", "MODIFIED", _wl(admitted, ("Finished", "True",
                                                          "2026-12-04T12:00:09Z")), ms(9020))
    view = mirror.view()
    wl = _wl()
    assert view.arrival("workloads", wl, "created") == ms(5)
    assert view.arrival("workloads", wl, "Admitted=True", T + dt.timedelta(seconds=2)) == \
        ms(2010)
    assert view.arrival("workloads", wl, "Admitted=True", T) is None  # another stamp
    assert view.arrival("workloads", wl, "Finished=True") == ms(9020)
    assert view.arrival("workloads", wl, "Evicted=True") is None
    # What a list shows was there before: no arrival times it, not even a later one's.
    listed = Mirror(objects={"workloads": {}})
    listed.apply("workloads", "ADDED", _wl(admitted))
    listed.apply("workloads", "MODIFIED", _wl(admitted), ms(3000))
    assert listed.view().arrival("workloads", wl, "Admitted=True") is None
    mirror.apply("workloads", "DELETED", wl, ms(9999))
    assert mirror.view().arrival("workloads", wl, "created") is None


def test_marks_read_what_the_steps_are_read_from_and_never_fail():
    pod = {"metadata": {"creationTimestamp": "t0"},
           "status": {"conditions": [{"type": "PodScheduled", "status": "True",
                                      "lastTransitionTime": "t1"}, "junk"],
                      "containerStatuses": [{"state": {"terminated": {"startedAt": "t2"}}},
                                            "junk"]}}
    assert marks("pods", pod) == {("created", "t0"), ("PodScheduled=True", "t1"),
                                  ("started", "t2")}
    assert ("allocated", "") in marks("claims", {"status": {"allocation": {"devices": {}}}})
    assert marks("workloads", {}) == {("created", "")}
