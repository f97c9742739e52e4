"""intake.selectors.comes_round: "next" in the review queue came round past its end."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

import pytest

from intake.selectors import ReviewQueueFilter, comes_round

pytestmark = pytest.mark.unit

T = dt.datetime(2026, 11, 30, 9, tzinfo=dt.UTC)


def at(minutes: int, pk: int):
    return SimpleNamespace(updated_at=T + dt.timedelta(minutes=minutes), pk=pk)


@pytest.mark.parametrize(("newest_first", "following", "wraps"), [
    (False, at(5, 2), False), (False, at(-5, 2), True), (False, at(0, 9), False),
    (False, at(0, 1), True), (True, at(-5, 2), False), (True, at(5, 2), True),
    (False, None, False), (True, None, False)])
def test_next_comes_round_only_when_it_lies_before_in_the_queues_order(newest_first, following,
                                                                         wraps):
    current = at(0, 3)
    assert comes_round(ReviewQueueFilter(newest_first=newest_first), current, following) is wraps
