"""Start estimates (fleet.queues.estimates): the drain basis for a workload with a line ahead
of it, its range, and each basis's track record."""
import datetime as dt
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleet.queues.estimates import (
    drain_rate,
    drain_wait,
    estimate_start,
    track_record_by_basis,
)
from fleet.queues.truth import Waiting, WorkloadFacts

NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
QUOTA = Waiting("quota", "Waiting for 2 more devices.", Decimal(2))


def pending(submitted_min_ago=5) -> WorkloadFacts:
    return WorkloadFacts(uid="w", namespace="acme", name="w", job="w", local_queue="gpu",
                         cluster_queue="acme", priority=0, devices=Decimal(2), state="pending",
                         submitted_at=NOW - dt.timedelta(minutes=submitted_min_ago))


def admissions(per_minute: float, minutes: int = 60) -> list[dt.datetime]:
    n = round(per_minute * minutes)
    return [NOW - dt.timedelta(seconds=(i + 0.5) * minutes * 60 / n) for i in range(n)]


def test_a_deep_queue_is_estimated_from_its_pace_not_from_the_median_wait():
    # kueue#14477: ~9.6 admissions a minute, 536 deep; the history's median wait (12 s of a
    # shallow time) would put the start minutes away, the line puts it an hour away.
    est = estimate_start(pending(), QUOTA, own_running=[], history_waits=[12.0] * 20, now=NOW,
                         ahead=536, admitted_recently=admissions(9.6), window_seconds=3600)
    assert est.basis == "drain"
    minutes = (est.at - NOW).total_seconds() / 60
    assert 55 < minutes < 57  # 537 / 9.6
    assert est.low < est.at < est.high
    assert "536 workload(s) ahead of it" in est.text and "9.6 a minute" in est.text


def test_next_in_line_keeps_its_history_and_too_few_admissions_say_nothing_of_pace():
    head = estimate_start(pending(), QUOTA, own_running=[], history_waits=[600.0] * 5, now=NOW,
                          ahead=0, admitted_recently=admissions(9.6), window_seconds=3600)
    assert head.basis == "history"
    sparse = estimate_start(pending(), QUOTA, own_running=[], history_waits=[600.0] * 5,
                            now=NOW, ahead=40, admitted_recently=[NOW - dt.timedelta(minutes=3)],
                            window_seconds=3600)
    assert sparse.basis == "history"  # one admission in an hour is no rate
    assert drain_rate([NOW] * 2, now=NOW, window_seconds=60) is None


def test_a_queue_with_no_history_but_a_pace_still_gets_an_estimate():
    est = estimate_start(pending(), QUOTA, own_running=[], history_waits=[], now=NOW,
                         ahead=0, admitted_recently=admissions(0.5), window_seconds=3600)
    assert est.basis == "drain" and "it is next" in est.text and "one every 2 min" in est.text


def test_admissions_outside_the_window_do_not_count():
    old = [NOW - dt.timedelta(hours=2, minutes=i) for i in range(50)]
    assert drain_rate(old, now=NOW, window_seconds=3600) is None
    recent = admissions(1)  # one a minute, the first 59.5 min ago
    assert drain_rate(old + recent, now=NOW, window_seconds=3600) == pytest.approx(59 / 3570)


def test_a_burst_is_paced_by_itself_and_a_stall_slows_the_pace():
    burst = [NOW - dt.timedelta(seconds=s) for s in (4, 3, 2, 1)]
    assert drain_rate(burst, now=NOW, window_seconds=3600) == pytest.approx(3 / 4)
    later = NOW + dt.timedelta(minutes=10)  # nothing admitted since: slower and slower
    assert drain_rate(burst, now=later, window_seconds=3600) < 3 / 600


@given(st.integers(0, 5000), st.floats(0.001, 5.0))
def test_the_range_holds_the_estimate_and_widens_slower_than_the_line(ahead, rate):
    mean, low, high = drain_wait(ahead, rate)
    assert 0 <= low <= mean <= high
    assert abs(mean - (ahead + 1) / rate) < 1e-6 * max(1.0, mean)
    # relative width falls as the line grows (√k / k): a deep queue's estimate is firmer
    deeper = drain_wait(ahead * 4 + 3, rate)
    assert (deeper[2] - deeper[1]) / deeper[0] <= (high - low) / mean + 1e-9


def test_each_basis_answers_for_its_own_errors():
    record = track_record_by_basis([("drain", 60.0), ("drain", 120.0), ("drain", 600.0),
                                    ("history", 3600.0), ("", 5.0)])
    assert record["drain"] == (3, 120.0, 504.0)
    assert record["history"] == (1, 3600.0, 3600.0)
    assert record["none"] == (1, 5.0, 5.0)
