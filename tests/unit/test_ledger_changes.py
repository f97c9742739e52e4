"""The workload ledger's decision on plain values: what a list or a watch's reading creates,
updates, marks gone and records, with the rules that keep two readers from undoing each
other. The same decision runs against the real Kueue in tests/k8s/test_queue_truth.py."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleet.queues.ledger import (
    UPDATED,
    StoredWorkload,
    ledger_changes,
    older,
    stale,
)
from fleet.queues.placement import NOTHING, Placement
from fleet.queues.truth import ADMITTED, FINISHED, GONE, PENDING, Stop, WorkloadFacts

pytestmark = pytest.mark.unit

T0 = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.UTC)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def read(uid="wl-1", state=ADMITTED, rv="1", **kw) -> WorkloadFacts:
    return WorkloadFacts(uid=uid, namespace="acme-r7", name=f"job-{uid}", job=f"train-{uid}",
                         local_queue="gpu", cluster_queue="acme-r7", priority=0,
                         submitted_at=at(0), devices=Decimal(2), state=state,
                         admitted_at=kw.pop("admitted_at", at(30) if state != PENDING
                                            else None),
                         resource_version=rv, **kw)


def stored(f: WorkloadFacts, pk=1, placement=NOTHING, position=None, source=""
           ) -> StoredWorkload:
    return StoredWorkload(pk=pk, allocation_id=7, facts=f, placement=placement,
                          position=position, position_source=source)


NOW = at(60)


def decide(stored_rows=(), reads=(), vanished=(), *, positions=None, placements=None,
           borrowed=None, now=NOW):
    return ledger_changes({s.facts.uid: s for s in stored_rows}, list(reads), set(vanished),
                          positions=positions or {}, placements=placements or {},
                          allocation_of={"acme-r7": 7}, borrowed=borrowed or {}, now=now)


def kinds(changes) -> list[str]:
    return [e["kind"] for e in changes.events]


def test_a_new_workload_is_created_with_its_events():
    changes = decide(reads=[read()], borrowed={"acme-r7": Decimal(1)})
    assert [r["uid"] for r in changes.create] == ["wl-1"] and not changes.update
    assert kinds(changes) == ["submitted", "admitted"]
    assert "borrows 1 device(s)" in changes.events[1]["reason"]
    assert changes.events[1]["wait_seconds"] == 30.0
    assert all(e["allocation_id"] == 7 for e in changes.events)
    assert changes.written == {"wl-1"}


def test_the_same_version_read_again_writes_nothing():
    f = read()
    assert decide([stored(f)], [f]) == decide()


def test_a_newer_version_updates_the_row_by_its_key():
    changes = decide([stored(read(state=PENDING, rv="3"), pk=42)],
                     [read(rv="4", admitted_at=at(50))])
    assert [pk for pk, _ in changes.update] == [42] and not changes.create
    (_, values), = changes.update
    assert set(values) == set(UPDATED) and values["state"] == ADMITTED
    assert values["observed_at"] == at(60)
    assert kinds(changes) == ["admitted"]


def test_an_older_reader_cannot_take_a_workload_back():
    """The beat's list read at version 11 still says pending; the watch stored 12."""
    changes = decide([stored(read(rv="12"))], [read(state=PENDING, rv="11")])
    assert changes == decide()


def test_a_workload_seen_deleted_is_not_brought_back_at_the_version_read():
    gone = stored(replace(read(rv="12"), state=GONE))
    assert decide([gone], [read(rv="12")]) == decide()
    # ...but a later version of it (recreated under the same uid) is recorded
    assert decide([gone], [read(rv="13")]).update


def test_what_vanished_is_marked_gone_once_with_an_event_unless_it_had_finished():
    running, done = stored(read("a"), pk=1), stored(read("b", state=FINISHED), pk=2)
    already = stored(replace(read("c"), state=GONE), pk=3)
    changes = decide([running, done, already], [], {"a", "b", "c", "never-stored"})
    assert sorted(changes.gone) == [1, 2]
    assert [(e["kind"], e["workload_uid"]) for e in changes.events] == [("gone", "a")]
    assert changes.events[0]["workload"] == "train-a" and changes.events[0]["at"] == at(60)
    assert changes.written == {"a", "b"}


def test_a_waiting_workload_moves_when_its_position_does():
    f = read(state=PENDING)
    row = stored(f, position=3, source="visibility")
    assert decide([row], [f], positions={"wl-1": (3, "visibility")}) == decide()
    changes = decide([row], [f], positions={"wl-1": (1, "visibility")})
    (_, values), = changes.update
    assert (values["position"], values["position_source"]) == (1, "visibility")
    assert changes.events == []
    # admitted: no position kept
    (_, values), = decide([row], [read(rv="2")], positions={"wl-1": (1, "x")}).update
    assert (values["position"], values["position_source"]) == (None, "")


def test_steps_after_admission_are_recorded_once_and_kept_when_pods_go():
    f = read()
    first = decide([stored(f)], [f], placements={"wl-1": Placement(pods_at=at(31))})
    assert kinds(first) == ["pods"]
    was = Placement(pods_at=at(31), scheduled_at=at(32), node="n1", running_at=at(35))
    again = decide([stored(f, placement=was)], [f], placements={"wl-1": NOTHING})
    assert again == decide()  # its pods are gone: what was recorded stays, nothing new
    # A new admission starts its steps afresh.
    readmitted = read(rv="2", admitted_at=at(100))
    changes = decide([stored(f, placement=was)], [readmitted],
                     placements={"wl-1": Placement(pods_at=at(101))})
    (_, values), = changes.update
    assert values["pods_at"] == at(101) and values["running_at"] is None
    assert "pods" in kinds(changes)


def test_a_preemption_is_recorded_with_its_reason():
    stop = Stop(at(40), "Preempted", "InCohortReclamation", "raw")
    changes = decide([stored(read())], [read(state=PENDING, rv="2", admitted_at=None,
                                             stop=stop, requeued_at=at(42))])
    assert kinds(changes) == ["preempted", "requeued"]
    assert [e["at"] for e in changes.events] == [at(40), at(42)]


def test_versions_compare_as_numbers_and_never_otherwise():
    assert older("9", "10") and not older("10", "9") and not older("10", "10")
    assert not older("abc", "10") and not older("9", "")
    assert not stale(read(rv="1"), None)


@given(st.lists(st.sampled_from(["1", "2", "3", "10", "x"]), min_size=1, max_size=6))
def test_the_row_only_moves_forward_in_version(versions):
    """Whatever order readers bring versions in, the stored one never goes back."""
    row = None
    for v in versions:
        changes = decide([row] if row else [], [read(rv=v)])
        if changes.create:
            row = stored(read(rv=v))
        elif changes.update:
            assert not older(v, row.facts.resource_version)
            row = stored(read(rv=v))
        elif v != row.facts.resource_version:  # the same version again: nothing to do
            assert older(v, row.facts.resource_version)
