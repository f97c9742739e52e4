"""The spans of an allocation's trace (intake.trace.trace_plan), from plain facts."""

import datetime as dt

import pytest

from intake.trace import Mark, TraceFacts, trace_plan

pytestmark = pytest.mark.unit
T0 = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.UTC)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def facts(ledger, **kw) -> TraceFacts:
    base = dict(request_id=12, allocation_id=7, tenant="acme", namespace="acme-r12",
                route="shared_pool", pool="shared-h100", size="2 devices",
                submitted_at=at(0), approved_at=at(600), approval_reason="Fits now.",
                provisioning=(Mark("Provisioning", at(601)), Mark("Active", at(603))),
                active_at=at(603), workload="train", local_queue="gpu", priority=0,
                devices="2", ledger=tuple(ledger))
    return TraceFacts(**(base | kw))


def walk(span, depth=0):
    yield depth, span
    for c in span.children:
        yield from walk(c, depth + 1)


def test_one_root_from_filing_to_running_with_a_child_per_stage():
    plan = trace_plan(facts([Mark("Submitted", at(700)), Mark("Admitted", at(730)),
                             Mark("Pods created", at(731)), Mark("Scheduled", at(731.5)),
                             Mark("Running", at(735))]))
    assert (plan.name, plan.start, plan.end) == ("allocation acme-r12", at(0), at(735))
    assert plan.attributes["portal.tenant"] == "acme"
    stages = [(c.name, c.start, c.end) for c in plan.children]
    assert stages == [("review", at(0), at(600)), ("provisioning", at(600), at(603)),
                      ("until the first workload", at(603), at(700)),
                      ("queue wait", at(700), at(730)), ("placement", at(730), at(735))]
    # Stages follow each other without gaps: together they are the root.
    assert all(a.end == b.start for a, b in zip(plan.children[:-1], plan.children[1:], strict=True))
    placement = plan.children[-1]
    assert [m.name for m in placement.events] == ["Pods created", "Scheduled", "Running"]
    assert [d for d, _ in walk(plan)] == [0, 1, 1, 1, 1, 1]


def test_a_preempted_first_admission_stays_in_the_queue_wait():
    """The placement span starts at the admission that led to running; an earlier admission
    and its preemption are events of the wait."""
    plan = trace_plan(facts([Mark("Submitted", at(700)), Mark("Admitted", at(710)),
                             Mark("Preempted", at(720)), Mark("Admitted", at(800)),
                             Mark("Running", at(805))]))
    wait, placement = plan.children[3], plan.children[4]
    assert [m.name for m in wait.events] == ["Submitted", "Admitted", "Preempted", "Admitted"]
    assert (placement.start, placement.end) == (at(800), at(805))
    assert [m.name for m in placement.events] == ["Running"]


def test_clocks_that_disagree_never_make_a_span_end_before_it_starts():
    """Kubernetes' times have whole seconds, the audit trail's microseconds: a workload may
    appear 'submitted' a moment before the allocation was recorded active."""
    plan = trace_plan(facts([Mark("Submitted", at(602.5)), Mark("Admitted", at(602.5)),
                             Mark("Running", at(604))]))
    assert all(s.end >= s.start for _, s in walk(plan))
    assert plan.end == at(604)
