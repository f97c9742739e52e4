"""A workload's state as a pure decision over Kueue's conditions (fleet.queues.truth.
workload_state), every combination of them; what a preemption or eviction records as it
happens — being preempted (its pods stopping), requeued, admitted again, running again —
and what stops cost a workload (fleet.queues.placement.preemption_tally)."""

from __future__ import annotations

import datetime as dt
import itertools
from decimal import Decimal

import pytest

from fleet.queues.ledger import transition_events
from fleet.queues.placement import Preemptions, preemption_tally
from fleet.queues.truth import (
    ADMITTED,
    DEACTIVATED,
    FINISHED,
    PENDING,
    STOPPING,
    QueueFacts,
    Stop,
    WorkloadFacts,
    explain_pending,
    explain_stop,
    explain_stopping,
    parse_workload,
    workload_state,
)

pytestmark = pytest.mark.unit
T = "2026-12-01T{}Z"
T0 = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.UTC)


def at(hms: str) -> dt.datetime:
    return dt.datetime.fromisoformat(T.format(hms).replace("Z", "+00:00"))


# Each condition absent, False or True (with the reasons that change the decision).
FINISHED_C = [None, ("False", ""), ("True", "Succeeded")]
EVICTED_C = [None, ("False", "QuotaReserved"), ("True", "Preempted"),
             ("True", "PodsReadyTimeout"), ("True", "DeactivatedDueToRequeuingLimitExceeded"),
             ("True", "InactiveWorkload")]
PREEMPTED_C = [None, ("False", "QuotaReserved"), ("True", "InClusterQueue")]
RESERVED_C = [None, ("False", "Pending"), ("True", "QuotaReserved")]


def conds(**kinds) -> dict[str, dict]:
    return {k: {"type": k, "status": v[0], "reason": v[1]} for k, v in kinds.items() if v}


COMBINATIONS = list(itertools.product(FINISHED_C, EVICTED_C, PREEMPTED_C, RESERVED_C,
                                      [True, False], [True, False]))


@pytest.mark.parametrize(("finished", "evicted", "preempted", "reserved", "active",
                          "admission"), COMBINATIONS)
def test_every_combination_of_conditions_has_one_state(finished, evicted, preempted,
                                                       reserved, active, admission):
    state = workload_state(conds(Finished=finished, Evicted=evicted, Preempted=preempted,
                                 QuotaReserved=reserved), active=active, admission=admission)
    is_true = {k: bool(v) and v[0] == "True" for k, v in (
        ("Finished", finished), ("Evicted", evicted), ("Preempted", preempted),
        ("QuotaReserved", reserved))}
    deactivation = is_true["Evicted"] and evicted[1] in (
        "DeactivatedDueToRequeuingLimitExceeded", "InactiveWorkload")
    holds = is_true["QuotaReserved"] and admission
    # Each rule of docs/ledger.md, stated on its own:
    assert (state == FINISHED) == is_true["Finished"]
    if not is_true["Finished"]:
        assert (state == DEACTIVATED) == (not active or deactivation)
    # Never "running" while Kueue has evicted or preempted it.
    if is_true["Evicted"] or is_true["Preempted"]:
        assert state != ADMITTED
    # Stopping exactly when it still holds quota and Kueue stopped it (not for good).
    if state not in (FINISHED, DEACTIVATED):
        assert (state == STOPPING) == (holds and (is_true["Evicted"] or is_true["Preempted"]))
        assert (state == ADMITTED) == (holds and not (is_true["Evicted"]
                                                      or is_true["Preempted"]))
        assert (state == PENDING) == (not holds)


@pytest.mark.parametrize(("kinds", "active", "admission", "state"), [
    ({}, True, False, PENDING),
    ({"QuotaReserved": ("False", "Pending")}, True, False, PENDING),
    ({"QuotaReserved": ("True", "QuotaReserved")}, True, True, ADMITTED),
    # Reserved but no admission written yet: not running.
    ({"QuotaReserved": ("True", "QuotaReserved")}, True, False, PENDING),
    # Kueue preempted it: Evicted and Preempted True, its quota still reserved.
    ({"QuotaReserved": ("True", "QuotaReserved"), "Evicted": ("True", "Preempted"),
      "Preempted": ("True", "InClusterQueue")}, True, True, STOPPING),
    ({"QuotaReserved": ("True", "QuotaReserved"), "Evicted": ("True", "PodsReadyTimeout")},
     True, True, STOPPING),
    # Its pods stopped: quota released, back in the queue (Evicted stays True until then).
    ({"QuotaReserved": ("False", "Pending"), "Evicted": ("True", "Preempted"),
      "Preempted": ("True", "InClusterQueue")}, True, False, PENDING),
    # Admitted again: Kueue resets Evicted and Preempted to False.
    ({"QuotaReserved": ("True", "QuotaReserved"), "Evicted": ("False", "QuotaReserved"),
      "Preempted": ("False", "QuotaReserved")}, True, True, ADMITTED),
    ({"QuotaReserved": ("True", "QuotaReserved"),
      "Evicted": ("True", "DeactivatedDueToMaximumExecutionTimeExceeded")}, True, True,
     DEACTIVATED),
    ({"QuotaReserved": ("True", "QuotaReserved")}, False, True, DEACTIVATED),
    ({"Finished": ("True", "Succeeded"), "Evicted": ("True", "Preempted")}, False, True,
     FINISHED),
])
def test_the_named_cases(kinds, active, admission, state):
    assert workload_state(conds(**kinds), active=active, admission=admission) == state


def workload(*, reserved=None, evicted=None, preempted=None, requeued=None,
             admitted=None, name="batch") -> dict:
    """A Workload as Kueue v0.17 writes it at each moment of a preemption."""
    cs = []
    for kind, value in (("QuotaReserved", reserved), ("Evicted", evicted),
                        ("Preempted", preempted), ("Requeued", requeued),
                        ("Admitted", admitted)):
        if value:
            status, reason, when = value
            cs.append({"type": kind, "status": status, "reason": reason,
                       "message": "preempted by acme/urgent", "lastTransitionTime":
                       T.format(when)})
    obj = {"metadata": {"name": f"job-{name}-x", "namespace": "acme", "uid": f"uid-{name}",
                        "creationTimestamp": T.format("09:00:00"), "resourceVersion": "1",
                        "ownerReferences": [{"kind": "Job", "name": name,
                                             "controller": True}]},
           "spec": {"queueName": "gpu", "priority": 10, "podSets": [{"name": "main",
                    "count": 1, "template": {"spec": {"containers": [{"name": "m",
                    "resources": {"requests": {"nvidia.com/gpu": "4"}}}]}}}]},
           "status": {"conditions": cs}}
    if reserved and reserved[0] == "True":
        obj["status"]["admission"] = {"clusterQueue": "acme", "podSetAssignments": [
            {"name": "main", "count": 1, "resourceUsage": {"nvidia.com/gpu": "4"}}]}
    return obj


# One preemption as Kueue writes it, moment by moment.
RUNNING = workload(reserved=("True", "QuotaReserved", "09:01:00"),
                   admitted=("True", "Admitted", "09:01:00"))
BEING_PREEMPTED = workload(reserved=("True", "QuotaReserved", "09:01:00"),
                           admitted=("True", "Admitted", "09:01:00"),
                           evicted=("True", "Preempted", "09:10:00"),
                           preempted=("True", "InClusterQueue", "09:10:00"))
REQUEUED = workload(reserved=("False", "Pending", "09:10:02"),
                    admitted=("False", "NoReservation", "09:10:02"),
                    evicted=("True", "Preempted", "09:10:00"),
                    preempted=("True", "InClusterQueue", "09:10:00"),
                    requeued=("True", "Preempted", "09:10:02"))
READMITTED = workload(reserved=("True", "QuotaReserved", "09:20:00"),
                      admitted=("True", "Admitted", "09:20:00"),
                      evicted=("False", "QuotaReserved", "09:20:00"),
                      preempted=("False", "QuotaReserved", "09:20:00"),
                      requeued=("True", "Preempted", "09:10:02"))
# Preempted a second time: Requeued stays True with the first requeue's time.
REQUEUED_AGAIN = workload(reserved=("False", "Pending", "09:30:05"),
                          admitted=("False", "NoReservation", "09:30:05"),
                          evicted=("True", "Preempted", "09:30:00"),
                          preempted=("True", "InCohortReclamation", "09:30:00"),
                          requeued=("True", "Preempted", "09:10:02"))


def parse(obj):
    return parse_workload(obj, cluster_queue_of={("acme", "gpu"): "acme"})


def test_a_preempted_workload_whose_pods_stop_is_stopping_with_its_cause():
    f = parse(BEING_PREEMPTED)
    assert f.state == STOPPING and f.admitted_at == at("09:01:00")
    assert f.stop == Stop(at("09:10:00"), "Preempted", "InClusterQueue",
                          "preempted by acme/urgent")
    text = explain_stopping(f, "nvidia.com/gpu")
    assert text.startswith("Being preempted: a higher-priority job of yours")
    assert "still holds 4 devices" in text and "acme/urgent" not in text
    # Waiting work behind it is told it holds the quota, being stopped.
    queue = QueueFacts("acme", "", "nvidia.com/gpu", Decimal(4), None, Decimal(4),
                       Decimal(0))
    waiting = WorkloadFacts("u2", "acme", "w2", "next", "gpu", "acme", 0, T0, Decimal(2),
                            PENDING)
    why = explain_pending(waiting, queue, own_running=[f], ahead=[], cohort_free=Decimal(0),
                          now=at("09:11:00"))
    assert "batch (4 devices, being stopped) since 09:01" in why.text


@pytest.mark.parametrize(("preemption", "words"), [
    ("InClusterQueue", "a higher-priority job of yours"),
    ("InCohortReclamation", "the cohort reclaimed its lent devices"),
    ("InCohortReclaimWhileBorrowing", "reclaimed the devices you had borrowed"),
    ("InCohortFairSharing", "fair sharing"),
])
def test_each_preemption_cause_in_the_tenants_words(preemption, words):
    stop = Stop(T0, "Preempted", preemption, "names queue globex/gpu")
    f = WorkloadFacts("u", "acme", "w", "batch", "gpu", "acme", 0, T0, Decimal(1), STOPPING,
                      admitted_at=T0, stop=stop)
    for text in (explain_stopping(f, "nvidia.com/gpu"), explain_stop(stop)):
        assert words in text and "globex" not in text


def test_an_eviction_other_than_preemption_is_stopping_too():
    stop = Stop(T0, "PodsReadyTimeout")
    f = WorkloadFacts("u", "acme", "w", "batch", "gpu", "acme", 0, T0, Decimal(1), STOPPING,
                      admitted_at=T0, stop=stop)
    assert explain_stopping(f, "nvidia.com/gpu").startswith(
        "Stopping: its pods did not all start in time")


def kinds_at(events):
    return [(e["kind"], e["at"]) for e in events]


def test_each_moment_of_a_preemption_is_a_ledger_step_with_its_time():
    running, stopping, requeued, again, twice = (
        parse(o) for o in (RUNNING, BEING_PREEMPTED, REQUEUED, READMITTED, REQUEUED_AGAIN))
    ev = {"now": at("12:00:00"), "borrowed": Decimal(0)}
    assert kinds_at(transition_events(running, stopping, **ev)) == [
        ("preempted", at("09:10:00"))]
    assert kinds_at(transition_events(stopping, stopping, **ev)) == []
    back = transition_events(stopping, requeued, **ev)
    assert kinds_at(back) == [("requeued", at("09:10:02"))]
    assert back[0]["reason"].startswith("Requeued: its pods stopped")
    readmitted = transition_events(requeued, again, **ev)
    assert kinds_at(readmitted) == [("admitted", at("09:20:00"))]
    assert readmitted[0]["reason"].startswith("Admitted again")
    assert readmitted[0]["wait_seconds"] == 598  # from its requeue, not its submission
    # The second preemption is read after its pods stopped: both steps, each at its time,
    # the requeue at its quota's release (Kueue's Requeued still says 09:10:02).
    assert twice.requeued_at == at("09:30:05")
    assert kinds_at(transition_events(again, twice, **ev)) == [
        ("preempted", at("09:30:00")), ("requeued", at("09:30:05"))]


def test_a_readmission_seen_straight_after_stopping_was_requeued_in_between():
    stopping, again = parse(BEING_PREEMPTED), parse(READMITTED)
    got = transition_events(stopping, again, now=at("12:00:00"), borrowed=Decimal(0))
    assert kinds_at(got) == [("requeued", at("09:10:02")), ("admitted", at("09:20:00"))]


def test_first_seen_while_stopping_records_the_preemption():
    got = transition_events(None, parse(BEING_PREEMPTED), now=at("12:00:00"),
                            borrowed=Decimal(0))
    assert [e["kind"] for e in got] == ["submitted", "preempted", "admitted"]


S = dt.timedelta(seconds=1)


@pytest.mark.parametrize(("steps", "tally"), [
    ([], Preemptions()),
    # Ran 100 s, preempted, requeued, admitted again, ran, finished.
    ([("admitted", 0), ("running", 10), ("preempted", 110), ("requeued", 112),
      ("admitted", 200), ("running", 205), ("finished", 300)], Preemptions(1, 0, 100.0)),
    # Preempted twice; the second time before it ran again: only the first run is lost.
    ([("admitted", 0), ("running", 10), ("preempted", 70), ("requeued", 71),
      ("admitted", 80), ("preempted", 90), ("requeued", 91)], Preemptions(2, 0, 60.0)),
    # Preempted, then evicted past its pods-ready timeout: two stops, both runs counted.
    ([("admitted", 0), ("running", 1), ("preempted", 31), ("admitted", 40),
      ("running", 41), ("evicted", 61)], Preemptions(1, 1, 50.0)),
    # A start never seen (no pods read): nothing counted as lost.
    ([("admitted", 0), ("preempted", 50)], Preemptions(1, 0, 0.0)),
    # Several pods: the first start counts.
    ([("admitted", 0), ("running", 5), ("running", 8), ("preempted", 25)],
     Preemptions(1, 0, 20.0)),
])
def test_what_stops_cost_a_workload(steps, tally):
    got = preemption_tally([(k, T0 + s * S) for k, s in steps])
    assert got == tally and got.stops == tally.preempted + tally.evicted


ADMITTED_C = [None, ("False", "NoReservation"), ("True", "Admitted")]


def test_behind_an_admission_check_reserved_quota_is_admission_only_once_admitted():
    """MultiKueue's manager: quota reserved behind a check waits for a worker (pending);
    once Kueue says Admitted it runs — or, evicted, stops — as anywhere else."""
    for finished, evicted, preempted, reserved, admitted in itertools.product(
            FINISHED_C, EVICTED_C, PREEMPTED_C, RESERVED_C, ADMITTED_C):
        kinds = conds(Finished=finished, Evicted=evicted, Preempted=preempted,
                      QuotaReserved=reserved, Admitted=admitted)
        without = workload_state(kinds, active=True, admission=True)
        behind = workload_state(kinds, active=True, admission=True, checks=True)
        if admitted and admitted[0] == "True":
            assert behind == without, kinds
        else:
            assert behind not in (ADMITTED, STOPPING), kinds
            assert behind == (PENDING if without in (ADMITTED, STOPPING) else without), kinds
