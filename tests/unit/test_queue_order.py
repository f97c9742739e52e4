"""One order for a queue (fleet.queues.order): the position, the order of the rows and
"ahead of it" in a reason come from the same line-up — Kueue's visibility answer where it
placed a workload, Kueue's own rule for the rest."""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal

import pytest

from fleet.queues.order import (
    COMPUTED,
    VISIBILITY,
    ahead_of,
    kueue_order,
    line_up,
    queue_order_time,
)
from fleet.queues.positions import answered_positions, positions_kept, visibility_positions
from fleet.queues.reading import INTERIM
from fleet.queues.truth import PENDING, Stop, WorkloadFacts

T0 = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.UTC)


def w(name, *, minute=0, priority=0, devices=1, stop=None, requeued=None):
    return WorkloadFacts(uid=f"uid-{name}", namespace="acme", name=f"job-{name}-x", job=name,
                         local_queue="gpu", cluster_queue="acme", priority=priority,
                         submitted_at=T0 + dt.timedelta(minutes=minute),
                         devices=Decimal(devices), state=PENDING, stop=stop,
                         requeued_at=requeued)


def names(lined):
    return [p.facts.job for p in lined]


def test_kueue_order_is_priority_then_creation_then_uid():
    ws = [w("late", minute=10), w("early"), w("urgent", minute=20, priority=100),
          w("b-tie", minute=5), w("a-tie", minute=5)]
    assert [x.job for x in sorted(ws, key=kueue_order)] == [
        "urgent", "early", "a-tie", "b-tie", "late"]


def test_a_preempted_workload_keeps_its_place_by_creation_not_its_requeue():
    """Kueue orders a preempted workload by its creation time (GetQueueOrderTimestamp), so
    it goes back to where it stood; the requeue time is not its place."""
    preempted = w("old", minute=0, stop=Stop(T0 + dt.timedelta(hours=1), "Preempted",
                                             "InClusterQueue"),
                  requeued=T0 + dt.timedelta(hours=1))
    newer = w("newer", minute=30)
    assert queue_order_time(preempted) == T0
    assert names(line_up([newer, preempted], {})) == ["old", "newer"]


@pytest.mark.parametrize("reason", ["AdmissionCheck", "PodsReadyTimeout"])
def test_evicted_by_a_check_or_its_pods_ready_timeout_is_ordered_by_the_eviction(reason):
    evicted = w("evicted", minute=0, stop=Stop(T0 + dt.timedelta(hours=1), reason))
    newer = w("newer", minute=30)
    assert queue_order_time(evicted) == T0 + dt.timedelta(hours=1)
    assert names(line_up([evicted, newer], {})) == ["newer", "evicted"]


def test_kueues_answer_wins_over_the_rule_and_positions_are_its_ranks():
    """Kueue may place a lower-priority workload first (e.g. the high one is in back-off);
    its answer is the order, and a stored answer older than the waiting set still gives
    contiguous positions."""
    a, b, c = w("a", minute=0), w("b", minute=1, priority=5), w("c", minute=2)
    lined = line_up([a, b, c], {a.uid: 1, c.uid: 3})  # b not in Kueue's snapshot
    assert names(lined) == ["a", "c", "b"]
    assert [(p.position, p.source) for p in lined] == [
        (0, VISIBILITY), (1, VISIBILITY), (2, COMPUTED)]


def test_without_any_answer_the_line_up_is_the_rule():
    ws = [w(f"j{i}", minute=random.Random(i).randint(0, 50), priority=i % 3)
          for i in range(12)]
    lined = line_up(ws, {})
    assert [p.facts for p in lined] == sorted(ws, key=kueue_order)
    assert [p.position for p in lined] == list(range(12))
    assert {p.source for p in lined} == {COMPUTED}


def test_rows_positions_and_ahead_agree_for_any_answer():
    """Property: whatever Kueue answered, position i is row i and exactly the rows before it
    (that can fit) are "ahead of it"."""
    rng = random.Random(43)
    for _ in range(200):
        ws = [w(f"j{i}", minute=rng.randint(0, 9), priority=rng.choice([0, 0, 10]),
                devices=rng.choice([1, 2, 9])) for i in range(rng.randint(1, 8))]
        listed = rng.sample(ws, rng.randint(0, len(ws)))
        answered = {x.uid: p for p, x in enumerate(listed)}
        lined = line_up(ws, answered)
        assert [p.position for p in lined] == list(range(len(ws)))
        assert sorted(p.facts.uid for p in lined) == sorted(x.uid for x in ws)
        ahead = ahead_of(lined, lambda f: f.devices <= 4)
        for i, p in enumerate(lined):
            assert ahead[p.facts.uid] == [q.facts for q in lined[:i] if q.facts.devices <= 4]


def test_the_demo_case_two_above_one_cannot_happen():
    """The issue's demo: #2 job-0011 listed above #1 job-0007, and #1's reason counting the
    other ahead of it. In one line-up the first row is #1 and has nothing ahead."""
    j7, j11 = w("job-0007", minute=0, devices=6), w("job-0011", minute=5, devices=2)
    lined = line_up([j11, j7], {j7.uid: 0, j11.uid: 1})
    assert [(p.position, p.facts.job) for p in lined] == [(0, "job-0007"), (1, "job-0011")]
    ahead = ahead_of(lined, lambda f: True)
    assert ahead[j7.uid] == [] and ahead[j11.uid] == [j7]


def test_a_workload_that_never_fits_holds_no_one_back():
    big, small = w("big", minute=0, devices=99), w("small", minute=1)
    lined = line_up([big, small], {})
    assert ahead_of(lined, lambda f: f.devices <= 4)[small.uid] == []


class _Visibility:
    def __init__(self, answers):
        self.answers = answers

    def get_path(self, path):
        return self.answers.get(path.split("/")[-2])


def test_the_stored_positions_are_the_same_line_up():
    a, b, c = w("a", minute=0), w("b", minute=1), w("c", minute=2)
    answer = {"items": [
        {"metadata": {"namespace": "acme", "name": c.name}, "positionInClusterQueue": 0},
        {"metadata": {"namespace": "acme", "name": a.name}, "positionInClusterQueue": 1},
        {"metadata": {"namespace": "other", "name": b.name}, "positionInClusterQueue": 2}]}
    assert answered_positions(answer, [a, b, c]) == {c.uid: 0, a.uid: 1}
    got = visibility_positions(_Visibility({"acme": answer}), {"acme": [a, b, c]}, ["acme"])
    assert got == {c.uid: (0, VISIBILITY), a.uid: (1, VISIBILITY), b.uid: (2, COMPUTED)}
    # No visibility API: the rule, as ranks.
    got = visibility_positions(_Visibility({}), {"acme": [c, a, b]}, ["acme"])
    assert got == {a.uid: (0, COMPUTED), b.uid: (1, COMPUTED), c.uid: (2, COMPUTED)}


def test_a_new_waiting_workload_is_placed_by_the_rule_until_kueue_answers():
    a, b = w("a", minute=0), w("b", minute=1)
    kept, ask = positions_kept({"acme": [a, b]}, {a.uid: ("acme", 0, VISIBILITY)})
    assert ask == ["acme"]
    assert kept == {a.uid: (0, VISIBILITY), b.uid: (1, INTERIM)}
