"""The tests' one waiting helper: what it returns, what it retries, how it says it failed."""

import pytest

from tests.harness.waiting import eventually

pytestmark = pytest.mark.unit


def test_it_returns_what_the_check_returned_once_it_holds():
    answers = iter([False, False, "ready"])
    assert eventually(lambda: next(answers), timeout=5, interval=0) == "ready"


def test_a_retried_error_is_raised_at_the_deadline_with_the_detail_added():
    def check():
        raise AssertionError("not yet")

    with pytest.raises(AssertionError, match="not yet") as raised:
        eventually(check, timeout=0, interval=0, detail=lambda: "--- log ---")
    assert raised.value.__notes__ == ["--- log ---"]


def test_a_condition_never_met_names_what_did_not_happen():
    with pytest.raises(TimeoutError) as raised:
        eventually(lambda: False, timeout=0, interval=0, what="the thing",
                   detail=lambda: "the log")
    assert str(raised.value) == "the thing not reached after 0s\nthe log"


def test_between_runs_after_each_miss_and_may_end_the_wait():
    misses = []

    def between():
        misses.append(1)
        if len(misses) == 2:
            raise RuntimeError("the process died")

    with pytest.raises(RuntimeError, match="died"):
        eventually(lambda: False, timeout=5, interval=0, between=between)
    assert len(misses) == 2
