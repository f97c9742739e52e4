"""Budget arithmetic and hour formatting: pure functions, checked across their ranges."""

import datetime as dt
from decimal import Decimal

import pytest

from billing.domain import BUDGET_THRESHOLDS, budget_status, run_rate_forecast, thresholds_crossed
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
    # 10 of 30 days gone, 100 spent → 300 at the same rate.
    now = dt.datetime(2026, 11, 11, tzinfo=dt.UTC)
    assert run_rate_forecast(Decimal(100), NOV, now) == Decimal("300.00")
    # Before a full day has passed the rate is noise: the forecast is the spend.
    early = dt.datetime(2026, 11, 1, 6, tzinfo=dt.UTC)
    assert run_rate_forecast(Decimal(100), NOV, early) == Decimal("100.00")
    # A past month's forecast is what it spent.
    later = dt.datetime(2027, 1, 5, tzinfo=dt.UTC)
    assert run_rate_forecast(Decimal(100), NOV, later) == Decimal("100.00")


@pytest.mark.parametrize(("spent", "day", "level"), [
    ("10", 16, "ok"), ("60", 16, "watch"), ("90", 28, "warn"), ("101", 28, "over")])
def test_budget_levels(spent, day, level):
    status = budget_status(budget=Decimal(100), spent=Decimal(spent), month=NOV,
                           now=dt.datetime(2026, 11, day, tzinfo=dt.UTC))
    assert status.level == level
    assert f"{status.percent}%" in status.summary


@pytest.mark.parametrize(("value", "text"), [
    (Decimal("0"), "0\u00a0h"), (Decimal("0.254"), "0.25\u00a0h"), (Decimal("12.345"),
     "12.3\u00a0h"), (Decimal("1234.5"), "1,234\u00a0h"), (Decimal("-3"), "-3.00\u00a0h"),
    ("x", "—"), (None, "—"), (Decimal("NaN"), "—")])
def test_hours_read_as_hours(value, text):
    assert hours(value) == text
