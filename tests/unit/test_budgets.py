"""Budget arithmetic and hour formatting: pure functions, checked across their ranges."""

import datetime as dt
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from billing.domain import BUDGET_THRESHOLDS, budget_status, run_rate_forecast, thresholds_crossed
from fleet.inventory.pricing import money
from portal.templatetags.portal_extras import hours

pytestmark = pytest.mark.unit
NOV = dt.date(2026, 11, 1)


@pytest.mark.parametrize(("spent", "expected"), [
    ("0", []), ("49.99", []), ("50", [50]), ("74.99", [50]), ("75", [50, 75]),
    ("90", [50, 75, 90]), ("99.99", [50, 75, 90]), ("100", [50, 75, 90, 100]),
    ("250", [50, 75, 90, 100])])
def test_thresholds_crossed_on_a_budget_of_100(spent, expected):
    assert thresholds_crossed(Decimal(spent), Decimal(100)) == expected


def test_no_thresholds_without_a_positive_budget():
    assert thresholds_crossed(Decimal(500), Decimal(0)) == []


def test_every_threshold_is_reached_exactly_at_its_share():
    budget = Decimal("1234.56")
    for t in BUDGET_THRESHOLDS:
        at = budget * t / 100
        assert t in thresholds_crossed(at, budget)
        assert t not in thresholds_crossed(at - Decimal("0.01"), budget)


def test_run_rate_forecast_extends_the_spend_to_the_month():
    # 10 of 30 days rolled up, 100 spent → 300 at the same rate.
    now = dt.datetime(2026, 11, 11, tzinfo=dt.UTC)
    assert run_rate_forecast(Decimal(100), NOV, now, now) == Decimal("300.00")
    # Before a full day is rolled up the rate is noise: the forecast is the spend.
    early = dt.datetime(2026, 11, 1, 6, tzinfo=dt.UTC)
    assert run_rate_forecast(Decimal(100), NOV, early, early) == Decimal("100.00")
    assert run_rate_forecast(Decimal(100), NOV, now, early) == Decimal("100.00")
    assert run_rate_forecast(Decimal(100), NOV, now, None) == Decimal("100.00")
    # A past month's forecast is what it spent.
    later = dt.datetime(2027, 1, 5, tzinfo=dt.UTC)
    assert run_rate_forecast(Decimal(100), NOV, later, later) == Decimal("100.00")


def test_the_forecast_divides_by_the_hours_rolled_up_not_the_wall_clock():
    """Issue #46: December's forecast fell by the minute while the spend stood still (spend
    to the last rollup over wall-clock hours). 10 days rolled up at 100: 300, whether it is
    read at the rollup's hour, a minute later or two hours later (a rollup late)."""
    covered = dt.datetime(2026, 11, 11, tzinfo=dt.UTC)
    for late in (dt.timedelta(0), dt.timedelta(minutes=1), dt.timedelta(minutes=59),
                 dt.timedelta(hours=2)):
        assert run_rate_forecast(Decimal(100), NOV, covered + late, covered) == \
            Decimal("300.00")


@settings(max_examples=200, deadline=None)
@given(spent=st.decimals(min_value=0, max_value=10**7, places=2),
       covered_h=st.integers(min_value=24, max_value=30 * 24),
       late_s=st.integers(min_value=0, max_value=6 * 3600))
def test_the_forecast_stands_still_between_rollups(spent, covered_h, late_s):
    """However long after its last rollup the month is read, the forecast is the same, and
    it is the spend over the hours covered times the month's hours (never below the spend)."""
    covered = dt.datetime(2026, 11, 1, tzinfo=dt.UTC) + dt.timedelta(hours=covered_h)
    now = min(covered + dt.timedelta(seconds=late_s),
              dt.datetime(2026, 11, 30, 23, 59, tzinfo=dt.UTC))
    at_rollup = run_rate_forecast(spent, NOV, covered - dt.timedelta(seconds=1), covered)
    assert run_rate_forecast(spent, NOV, now, covered) == at_rollup
    expected = money(spent * 720 / covered_h)
    assert at_rollup == expected and expected >= spent


@pytest.mark.parametrize(("spent", "day", "level"), [
    ("10", 16, "ok"), ("60", 16, "watch"), ("90", 28, "warn"), ("101", 28, "over")])
def test_budget_levels(spent, day, level):
    now = dt.datetime(2026, 11, day, tzinfo=dt.UTC)
    status = budget_status(budget=Decimal(100), spent=Decimal(spent), month=NOV, now=now,
                           covered_until=now)
    assert status.level == level
    assert f"{status.percent}%" in status.summary


@settings(max_examples=200, deadline=None)
@given(spent=st.decimals(min_value=0, max_value=10**5, places=2),
       budget=st.decimals(min_value=1, max_value=10**5, places=2),
       covered_h=st.integers(min_value=24, max_value=30 * 24))
def test_a_forecast_over_budget_is_always_flagged(spent, budget, covered_h):
    """Issue #46: a tenant forecast at 108.6 % read "none over · 0 at 90 % or more". Every
    status whose forecast is over its budget is flagged (forecast_over) and is never "ok"."""
    covered = dt.datetime(2026, 11, 1, tzinfo=dt.UTC) + dt.timedelta(hours=covered_h)
    status = budget_status(budget=budget, spent=spent, month=NOV, now=covered,
                           covered_until=covered)
    if status.forecast > status.budget * Decimal("1.001"):
        assert status.forecast_over and status.level != "ok"
        assert status.level in ("watch", "warn", "over")
    if status.forecast <= status.budget:
        assert not status.forecast_over


@pytest.mark.parametrize(("value", "text"), [
    (Decimal("0"), "0\u00a0h"), (Decimal("0.254"), "0.25\u00a0h"), (Decimal("12.345"),
     "12.3\u00a0h"), (Decimal("1234.5"), "1,234\u00a0h"), (Decimal("-3"), "-3.00\u00a0h"),
    ("x", "—"), (None, "—"), (Decimal("NaN"), "—")])
def test_hours_read_as_hours(value, text):
    assert hours(value) == text
