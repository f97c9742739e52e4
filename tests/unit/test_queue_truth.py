"""The pure part of queue truth: reading Kueue's objects, explaining waits and stops in the
tenant's words (never naming peers), estimating start times, history and the cohort board."""

from __future__ import annotations

import copy
import datetime as dt
import random
from dataclasses import replace
from decimal import Decimal

import pytest

from fleet.queues.cohorts import CohortView, cohort_lines
from fleet.queues.estimates import estimate_start
from fleet.queues.ledger import transition_events
from fleet.queues.truth import (
    ADMITTED,
    FINISHED,
    PENDING,
    CohortRow,
    QueueFacts,
    Stop,
    WorkloadFacts,
    amount,
    cohort_board,
    duration,
    explain_pending,
    explain_stop,
    history_by_day,
    inactive_queue_words,
    parse_cluster_queue,
    parse_workload,
    percentile,
)

NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
T = "2026-11-30T{}:00Z"


def workload(name="train-7", *, ns="acme-shared", gpus=2, admitted_at=None, pending_msg=None,
             evicted=None, finished=False, priority=0, created="09:00", max_seconds=None,
             claims=0, queue="gpu"):
    container = {"name": "main", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}
    if gpus:
        container["resources"]["requests"]["nvidia.com/gpu"] = str(gpus)
    pod = {"containers": [container]}
    if claims:
        pod["resourceClaims"] = [{"name": f"c{i}", "resourceClaimTemplateName": "mig-2g-20gb"}
                                 for i in range(claims)]
    obj = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
           "metadata": {"name": f"job-{name}-abcde", "namespace": ns, "uid": f"uid-{name}",
                        "creationTimestamp": T.format(created), "resourceVersion": "7",
                        "ownerReferences": [{"kind": "Job", "name": name, "controller": True}]},
           "spec": {"queueName": queue, "priority": priority,
                    "podSets": [{"name": "main", "count": 1, "template": {"spec": pod}}]},
           "status": {"conditions": []}}
    if max_seconds:
        obj["spec"]["maximumExecutionTimeSeconds"] = max_seconds
    conds = obj["status"]["conditions"]
    if admitted_at:
        conds += [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                   "lastTransitionTime": T.format(admitted_at)},
                  {"type": "Admitted", "status": "True", "reason": "Admitted",
                   "lastTransitionTime": T.format(admitted_at)}]
        obj["status"]["admission"] = {"clusterQueue": ns, "podSetAssignments": [
            {"name": "main", "count": 1, "resourceUsage": {"cpu": "1", "memory": "1Gi",
                                                           "nvidia.com/gpu": str(gpus)}}]}
    elif pending_msg is not None:
        conds.append({"type": "QuotaReserved", "status": "False", "reason": "Pending",
                      "message": pending_msg, "lastTransitionTime": T.format(created)})
    if evicted:
        at, reason, why, msg = evicted
        conds += [{"type": "Evicted", "status": "True", "reason": reason, "message": msg,
                   "lastTransitionTime": T.format(at)},
                  {"type": "Preempted", "status": "True", "reason": why, "message": msg,
                   "lastTransitionTime": T.format(at)},
                  {"type": "Requeued", "status": "True", "reason": "Preempted",
                   "lastTransitionTime": T.format(at)}]
    if finished:
        conds.append({"type": "Finished", "status": "True", "reason": "Succeeded",
                      "lastTransitionTime": T.format("11:00")})
    return obj


def cluster_queue(name="acme-shared", *, nominal=4, borrow=8, cohort="shared-h100", total=0,
                  borrowed=0, pending=0):
    resources = [{"name": "cpu", "nominalQuota": "64"}, {"name": "memory",
                                                         "nominalQuota": "512Gi"},
                 {"name": "nvidia.com/gpu", "nominalQuota": nominal}]
    if cohort:
        resources[2]["borrowingLimit"] = borrow
    spec = {"resourceGroups": [{"coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                                "flavors": [{"name": "shared", "resources": resources}]}]}
    if cohort:
        spec["cohortName"] = cohort
    return {"metadata": {"name": name}, "spec": spec, "status": {
        "pendingWorkloads": pending, "admittedWorkloads": 1,
        "flavorsReservation": [{"name": "shared", "resources": [
            {"name": "cpu", "total": "2"},
            {"name": "nvidia.com/gpu", "total": str(total), "borrowed": str(borrowed)}]}],
        "conditions": [{"type": "Active", "status": "True", "reason": "Ready"}]}}


CQ_OF = {("acme-shared", "gpu"): "acme-shared"}


def test_a_pending_workload_is_read_with_what_it_asks_for():
    w = parse_workload(workload(gpus=3, pending_msg="couldn't assign flavors to pod set main: "
                                "insufficient unused quota for nvidia.com/gpu in flavor shared, "
                                "1 more needed"), cluster_queue_of=CQ_OF)
    assert (w.state, w.devices, w.cluster_queue, w.job) == (PENDING, 3, "acme-shared", "train-7")
    assert w.pending_reason == "Pending" and "1 more needed" in w.pending_raw
    assert w.submitted_at == dt.datetime(2026, 11, 30, 9, 0, tzinfo=dt.UTC)


def test_an_admitted_workload_counts_what_kueue_assigned():
    w = parse_workload(workload(gpus=2, admitted_at="09:12"), cluster_queue_of={})
    assert (w.state, w.devices, w.cluster_queue) == (ADMITTED, 2, "acme-shared")
    assert w.admitted_at == dt.datetime(2026, 11, 30, 9, 12, tzinfo=dt.UTC)


def test_a_mig_claim_counts_one_slice_per_claim():
    w = parse_workload(workload(gpus=0, claims=2), cluster_queue_of=CQ_OF)
    assert w.devices == 2


def test_a_reclaimed_workload_keeps_kueues_message_apart_from_the_tenants_words():
    raw = ("Preempted to accommodate a workload (UID: x, JobUID: y) due to reclamation "
           "within the cohort; preemptor path: /shared-h100/globex-shared; preemptee path: "
           "/shared-h100/acme-shared")
    w = parse_workload(workload(evicted=("10:00", "Preempted", "InCohortReclamation", raw)),
                       cluster_queue_of=CQ_OF)
    assert w.state == PENDING and w.stop.preemption == "InCohortReclamation"
    assert w.stop.raw == raw
    words = explain_stop(w.stop)
    assert "reclaimed" in words and "globex" not in words and "/" not in words


def test_finished_workloads_are_finished():
    w = parse_workload(workload(admitted_at="09:12", finished=True), cluster_queue_of={})
    assert w.state == FINISHED and w.finished_at.hour == 11


@pytest.mark.parametrize("seed", range(40))
def test_reading_never_fails_on_odd_objects(seed):
    """Whatever shape an object arrives in (fields missing, null, of another type), reading
    it gives facts or defaults, never an exception that would stop the whole sync."""
    rng = random.Random(seed)
    base = workload(evicted=("10:00", "Preempted", "InClusterQueue", "m"), admitted_at=None)
    obj = copy.deepcopy(base)
    paths = [("metadata", "creationTimestamp"), ("spec", "priority"), ("spec", "podSets"),
             ("status", "conditions"), ("status", "admission"), ("metadata", "ownerReferences"),
             ("spec", "queueName")]
    for section, key in rng.sample(paths, rng.randint(1, len(paths))):
        obj.setdefault(section, {})[key] = rng.choice([None, "", "garbage", 7, [], {}])
    try:
        parse_workload(obj, cluster_queue_of=CQ_OF)
    except (AttributeError, TypeError):
        pytest.fail(f"reading failed on {obj}")
    parse_cluster_queue({"metadata": {"name": "x"}, "spec": None, "status": {}})


def facts(name, devices, *, state=PENDING, admitted=None, submitted="09:00", priority=0,
          max_seconds=None):
    at = dt.datetime.fromisoformat(T.format(submitted).replace("Z", "+00:00"))
    adm = dt.datetime.fromisoformat(T.format(admitted).replace("Z", "+00:00")) \
        if admitted else None
    return WorkloadFacts(uid=name, namespace="acme-shared", name=name, job=name,
                         local_queue="gpu", cluster_queue="acme-shared", priority=priority,
                         submitted_at=at, devices=Decimal(devices), state=state,
                         admitted_at=adm, max_seconds=max_seconds)


def queue(**kw) -> QueueFacts:
    return parse_cluster_queue(cluster_queue(**kw))


def test_waiting_for_own_quota_names_own_work_and_the_cohort_only():
    running = [facts("train-7", 4, state=ADMITTED, admitted="09:12")]
    w = facts("eval-3", 2, submitted="10:00")
    why = explain_pending(w, queue(nominal=4, total=4), own_running=running, ahead=[],
                          cohort_free=Decimal(0), now=NOW)
    assert why.code == "cohort" and why.short == 2
    assert why.text == ("Waiting for 2 more devices: your quota of 4 devices is in use by "
                        "train-7 (4 devices) since 09:12; the cohort has none to lend now.")


def test_what_the_cohort_can_lend_is_counted_but_not_attributed():
    running = [facts("train-7", 4, state=ADMITTED, admitted="09:12")]
    w = facts("big", 6)
    why = explain_pending(w, queue(nominal=4, total=4), own_running=running, ahead=[],
                          cohort_free=Decimal(3), now=NOW)
    assert why.short == 3 and "the cohort can lend 3 devices now" in why.text
    fits = explain_pending(facts("small", 2), queue(nominal=4, total=4), own_running=running,
                           ahead=[], cohort_free=Decimal(3), now=NOW)
    assert fits.code == "starting"


def test_more_than_the_allocation_can_ever_hold_is_said_plainly():
    why = explain_pending(facts("huge", 13), queue(nominal=4, borrow=8), own_running=[],
                          ahead=[], cohort_free=Decimal(100), now=NOW)
    assert why.code == "never" and "can ever hold" in why.text and "borrow up to 8" in why.text
    standalone = explain_pending(facts("huge", 5), queue(nominal=4, cohort=""), own_running=[],
                                 ahead=[], cohort_free=Decimal(0), now=NOW)
    assert standalone.code == "never" and "borrow" not in standalone.text


def test_work_ahead_in_the_queue_is_counted():
    ahead = [facts("first", 2, submitted="08:00")]
    why = explain_pending(facts("second", 2), queue(nominal=4, total=2, cohort=""),
                          own_running=[facts("r", 2, state=ADMITTED, admitted="08:30")],
                          ahead=ahead, cohort_free=Decimal(0), now=NOW)
    assert why.code == "quota" and why.short == 2 and "1 of your workload(s) ahead" in why.text


def test_mig_queues_speak_of_slices():
    q = QueueFacts("acme-mig", "mig-a100", "mig.aifactory.io/2g.20gb", Decimal(3), Decimal(0),
                   Decimal(2), Decimal(0))
    why = explain_pending(facts("m", 2), q, own_running=[], ahead=[], cohort_free=Decimal(0),
                          now=NOW)
    assert why.text == ("Waiting for 1 more 2g.20gb slice: your quota is 3 × 2g.20gb slices; "
                        "this allocation does not borrow from the cohort.")
    assert amount(3, "mig.aifactory.io/1g.10gb") == "3 × 1g.10gb slices"


@pytest.mark.parametrize("reason,preemption,expect", [
    ("Preempted", "InCohortReclamation", "reclaimed"),
    ("Preempted", "InClusterQueue", "a higher-priority job of yours"),
    ("Preempted", "InCohortReclaimWhileBorrowing", "reclaimed the devices you had borrowed"),
    ("Preempted", "InCohortFairSharing", "fair sharing"),
    ("Preempted", "SomethingNew", "another workload took priority"),
    ("PodsReadyTimeout", "", "did not all start in time"),
    # Kueue's own eviction reasons for a deactivation (from its API and its changelog).
    ("DeactivatedDueToMaximumExecutionTimeExceeded", "", "ran past the time limit"),
    ("DeactivatedDueToRequeuingLimitExceeded", "", "more times than the platform allows"),
    ("DeactivatedDueToAdmissionCheck", "", "admission check"),
    ("DeactivatedDueToSomethingNew", "", "deactivated it (SomethingNew)"),
    ("Deactivated", "", "spec.active"),
    ("Unheard", "", "(Unheard)"),
])
def test_every_stop_has_words(reason, preemption, expect):
    text = explain_stop(Stop(NOW, reason, preemption, "raw message naming /cohort/globex"))
    assert expect in text and "globex" not in text


def test_estimate_from_declared_time_limits():
    running = [facts("a", 2, state=ADMITTED, admitted="09:00", max_seconds=3600),
               facts("b", 2, state=ADMITTED, admitted="11:00", max_seconds=7200)]
    w = facts("w", 3)
    why = explain_pending(w, queue(nominal=4, total=4, cohort=""), own_running=running,
                          ahead=[], cohort_free=Decimal(0), now=NOW)
    est = estimate_start(w, why, own_running=running, history_waits=[], now=NOW)
    # a ends 10:00 (already past: "now" at the earliest), b ends 13:00; 3 needed → 13:00.
    assert est.basis == "limits" and est.at == dt.datetime(2026, 11, 30, 13, 0, tzinfo=dt.UTC)


def test_estimate_from_history_and_none_without_it():
    running = [facts("a", 4, state=ADMITTED, admitted="09:00")]
    w = facts("w", 2, submitted="11:50")
    why = explain_pending(w, queue(nominal=4, total=4, cohort=""), own_running=running,
                          ahead=[], cohort_free=Decimal(0), now=NOW)
    est = estimate_start(w, why, own_running=running, history_waits=[600, 1200, 1800],
                         now=NOW)
    assert est.basis == "history" and est.at == dt.datetime(2026, 11, 30, 12, 10,
                                                             tzinfo=dt.UTC)
    assert "median wait" in est.text and "3 admissions" in est.text
    none = estimate_start(w, why, own_running=running, history_waits=[600], now=NOW)
    assert none.basis == "none" and none.at is None
    overdue = estimate_start(facts("old", 2, submitted="08:00"), why, own_running=running,
                             history_waits=[60, 60, 60], now=NOW)
    assert overdue.at == NOW and overdue.text.startswith("Overdue")


def test_percentiles_and_history_days():
    assert percentile([], 50) is None
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile(list(range(101)), 95) == 95
    day = dt.datetime(2026, 11, 29, 10, tzinfo=dt.UTC)
    days = history_by_day([(day, 60.0), (day, 180.0), (NOW, 30.0)], [day],
                          [(day, Decimal(7200))], since=day.date() - dt.timedelta(days=1),
                          until=NOW.date())
    assert [d.admissions for d in days] == [0, 2, 1]
    assert days[1].p50 == 120 and days[1].preemptions == 1
    assert days[1].borrowed_device_hours == Decimal("2.00")


def test_cohort_board_says_who_borrows_lends_and_blocks():
    queues = [queue(name="a", nominal=4, total=10, borrowed=6),
              queue(name="b", nominal=4, total=0), queue(name="c", nominal=4, total=2)]
    waiting = [facts("w", 3)]
    waiting = [WorkloadFacts(**{**w.__dict__, "cluster_queue": "c"}) for w in waiting]
    rows = {r.queue: r for r in cohort_board(queues, waiting, NOW)}
    assert rows["a"].borrowed == 6 and rows["a"].blocked_by == ()
    # unused: b 4, c 2 → of the 6 borrowed, b lent 4 and c lent 2.
    assert (rows["b"].lent, rows["c"].lent) == (Decimal("4.00"), Decimal("2.00"))
    assert rows["c"].pending == 1 and rows["c"].blocked_by == ("a",)
    assert rows["c"].oldest_wait_seconds == 3 * 3600


def test_cohort_lines_word_quota_waits_and_who_blocks_whom():
    rows = [CohortRow("cq-a", Decimal(8), Decimal(10), Decimal(2), Decimal(0), 0, None, ()),
            CohortRow("cq-m", Decimal(1), Decimal(0), Decimal(0), Decimal("0.50"), 2, 3000.0,
                      ("cq-a", "cq-gone"))]
    view = CohortView("research", rows, {"cq-a": "acme", "cq-m": "beta"},
                      {"cq-a": "nvidia.com/gpu", "cq-m": "mig.aifactory.io/1g.10gb"})
    a, m = cohort_lines(view)
    assert a["r"] is rows[0] and (a["tenant"], a["quota"], a["oldest"], a["blocked_by"]) == (
        "acme", "8 devices", "—", [])
    assert (m["tenant"], m["quota"], m["oldest"]) == ("beta", "1 × 1g.10gb slice", "50 min")
    assert m["blocked_by"] == ["acme (cq-a)", "? (cq-gone)"]  # a queue no longer followed
    # A queue whose unit is unknown counts devices.
    assert cohort_lines(CohortView("x", rows[:1], {}))[0]["quota"] == "8 devices"


def test_transitions_become_events_once():
    pending = parse_workload(workload(pending_msg="m"), cluster_queue_of=CQ_OF)
    first = transition_events(None, pending, now=NOW, borrowed=Decimal(0))
    assert [e["kind"] for e in first] == ["submitted"]
    admitted = parse_workload(workload(admitted_at="09:30"), cluster_queue_of=CQ_OF)
    second = transition_events(pending, admitted, now=NOW, borrowed=Decimal(2))
    assert [e["kind"] for e in second] == ["admitted"]
    assert second[0]["wait_seconds"] == 1800 and "borrows 2 device(s)" in second[0]["reason"]
    assert transition_events(admitted, admitted, now=NOW, borrowed=Decimal(0)) == []
    raw = "preemptor path: /shared-h100/globex-shared"
    evicted = parse_workload(workload(evicted=("10:00", "Preempted", "InCohortReclamation",
                                               raw)), cluster_queue_of=CQ_OF)
    third = transition_events(admitted, evicted, now=NOW, borrowed=Decimal(0))
    # Read after its pods stopped: the preemption and the requeue that followed, each at
    # Kueue's time.
    assert [(e["kind"], e["at"]) for e in third] == [
        ("preempted", evicted.stop.at), ("requeued", evicted.requeued_at)]
    assert "globex" not in third[0]["reason"] and third[0]["detail"] == raw
    done = parse_workload(workload(admitted_at="09:30", finished=True), cluster_queue_of={})
    assert [e["kind"] for e in transition_events(admitted, done, now=NOW,
                                                 borrowed=Decimal(0))] == ["finished"]
    # Kueue may write to a finished Workload again (seen: a status update seconds after
    # "Finished"): read again, it is neither admitted nor finished a second time.
    again = replace(done, resource_version=done.resource_version + "9")
    assert transition_events(done, again, now=NOW, borrowed=Decimal(0)) == []


def test_durations_read_naturally():
    assert [duration(s) for s in (5, 600, 5400, 7260, 200000)] == \
        ["5 s", "10 min", "1 h 30 min", "2 h 1 min", "2 d 7 h"]
    assert duration(0.42) == "420 ms" and duration(0) == "0 s"
    assert [duration(s) for s in (0.0004, 0.0123, 0.9996, 1.25)] == \
        ["1 ms", "12 ms", "1.0 s", "1.2 s"]


def test_unused_quota_borrowed_by_the_cohort_is_said_to_be_lent():
    running = [facts("train-7", 2, state=ADMITTED, admitted="09:12")]
    why = explain_pending(facts("eval-3", 4), queue(nominal=4, total=2), own_running=running,
                          ahead=[], cohort_free=Decimal(0), lent=Decimal(2), now=NOW)
    assert why.text == ("Waiting for 2 more devices: your quota of 4 devices has 2 devices "
                        "unused (lent to the cohort meanwhile), the rest is in use by train-7 "
                        "(2 devices) since 09:12; the cohort has none to lend now: its other "
                        "queues use all of their own quota and borrow yours, and that borrowed "
                        "work is reclaimed (preempted) for this one once it fits in your "
                        "quota.")
    # who it waits for: told in the tenant's terms, and only what Kueue will do (a job
    # larger than the quota is not helped by a reclaim)
    big = explain_pending(facts("eval-4", 6), queue(nominal=4, total=2), own_running=running,
                          ahead=[], cohort_free=Decimal(0), lent=Decimal(2), now=NOW)
    assert big.text.endswith("its other queues use all of their own quota and borrow yours.")


FIXTURES = __import__("pathlib").Path(__file__).parent / "fixtures"


def _real(name: str) -> dict:
    import json

    return json.loads((FIXTURES / name).read_text())


def test_a_workload_the_real_kueue_deactivated_is_not_waiting():
    """Captured from Kueue v0.17.0 in the k8s tier (tests/k8s/test_queue_policy.py): a Job
    past its declared time limit. Kueue set spec.active=false and Evicted=True with reason
    DeactivatedDueToMaximumExecutionTimeExceeded."""
    from fleet.queues.truth import DEACTIVATED, explain_deactivated

    obj = _real("kueue_workload_deactivated.json")
    assert obj["spec"]["active"] is False
    w = parse_workload(obj, cluster_queue_of={})
    assert w.state == DEACTIVATED
    assert w.stop and w.stop.reason.startswith("DeactivatedDueTo")
    text = explain_deactivated(w)
    assert "ran past the time limit" in text and "reactivated" in text
    why = explain_pending(w, queue(nominal=4, total=0, cohort=""), own_running=[], ahead=[],
                          cohort_free=Decimal(0), now=NOW)
    assert why.code == "deactivated" and "Waiting" not in why.text
    assert estimate_start(w, why, own_running=[], history_waits=[60.0] * 5, now=NOW).at is None
    # Without the eviction condition, spec.active alone decides.
    bare = copy.deepcopy(obj)
    bare["status"]["conditions"] = [c for c in bare["status"]["conditions"]
                                    if c["type"] != "Evicted"]
    assert parse_workload(bare, cluster_queue_of={}).state == DEACTIVATED
    # And the same Workload made active again is waiting once more.
    again = copy.deepcopy(bare)
    again["spec"]["active"] = True
    again["status"]["conditions"] = [c for c in again["status"]["conditions"]
                                     if c["type"] not in ("QuotaReserved", "Admitted")]
    assert parse_workload(again, cluster_queue_of={}).state == PENDING


def test_a_deactivation_is_recorded_as_a_stop_once():
    from fleet.queues.truth import DEACTIVATED

    obj = _real("kueue_workload_deactivated.json")
    new = parse_workload(obj, cluster_queue_of={})
    assert new.state == DEACTIVATED
    old = parse_workload(obj, cluster_queue_of={})
    first = transition_events(None, new, now=NOW, borrowed=Decimal(0))
    kinds = [e["kind"] for e in first]
    assert "evicted" in kinds and "admitted" not in kinds[kinds.index("evicted"):]
    stop = next(e for e in first if e["kind"] == "evicted")
    assert "time limit" in stop["reason"]
    assert transition_events(old, new, now=NOW, borrowed=Decimal(0)) == []


@pytest.mark.parametrize("reason", ["Stopped", "FlavorNotFound", "AdmissionCheckInactive",
                                    "SomethingKueueAddsLater", ""])
def test_a_queue_kueue_reports_inactive_is_explained_with_kueues_own_reason(reason):
    body = cluster_queue()
    body["status"]["conditions"] = [{"type": "Active", "status": "False", "reason": reason}]
    q = parse_cluster_queue(body)
    assert not q.active and q.inactive_reason == reason
    why = explain_pending(facts("eval-3", 1), q, own_running=[], ahead=[],
                          cohort_free=Decimal(0), now=NOW)
    assert why.code == "queue-stopped" and why.text == inactive_queue_words(reason)
    assert f"(Kueue: {reason or 'no reason given'})" in why.text
    # nobody is told by the portal, so the words never say so
    assert "told" not in why.text and "platform team has been" not in why.text
    assert ("being deleted" in why.text) is (reason == "Terminating")
    assert ("resource flavor" in why.text) is (reason == "FlavorNotFound")
