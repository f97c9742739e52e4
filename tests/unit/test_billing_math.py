"""Billing math over every policy and edge."""

import datetime as dt
from decimal import Decimal

import pytest

from billing.domain import (
    allocated_device_seconds,
    amount,
    credit_device_seconds,
    hour_charge,
    hours_between,
    month_bounds,
    utilisation,
)
from billing.figures import grand_total
from fleet.domain import mig_share as mig_weight
from fleet.inventory.pricing import Rate, rate_at

UTC = dt.UTC
H = dt.datetime(2026, 10, 31, 23, 0, tzinfo=UTC)


def t(*args):
    return dt.datetime(*args, tzinfo=UTC)


def test_a_full_hour_is_3600_seconds_per_device():
    assert allocated_device_seconds(starts_at=t(2026, 1, 1), ends_at=None,
                                    devices=Decimal(8), hour=H) == 8 * 3600


def test_allocation_starting_and_ending_mid_hour():
    start, end = H + dt.timedelta(minutes=15), H + dt.timedelta(minutes=45)
    assert allocated_device_seconds(starts_at=start, ends_at=None, devices=Decimal(2),
                                    hour=H) == 2 * 45 * 60
    assert allocated_device_seconds(starts_at=t(2026, 1, 1), ends_at=end, devices=Decimal(2),
                                    hour=H) == 2 * 45 * 60
    assert allocated_device_seconds(starts_at=start, ends_at=end, devices=Decimal(2),
                                    hour=H) == 2 * 30 * 60


def test_outside_the_window_is_zero():
    assert allocated_device_seconds(starts_at=H + dt.timedelta(hours=1), ends_at=None,
                                    devices=Decimal(4), hour=H) == 0
    assert allocated_device_seconds(starts_at=t(2026, 1, 1), ends_at=H, devices=Decimal(4),
                                    hour=H) == 0


def test_mig_slices_count_as_their_share():
    assert mig_weight("1g.10gb") == Decimal(1) / 7
    assert mig_weight("3g.40gb") == Decimal(3) / 7
    assert mig_weight("") == 1
    assert mig_weight("1g.10gb", {"1g.10gb": Decimal("0.125")}) == Decimal("0.125")
    # 7 × 1g.10gb are stored as 1.0000 device-equivalents: one device-hour per hour.
    assert allocated_device_seconds(starts_at=t(2026, 1, 1), ends_at=None,
                                    devices=Decimal("1.0000"), hour=H) == 3600


def test_month_boundary_hours_belong_to_their_month():
    hours = hours_between(t(2026, 10, 31, 22, 30), t(2026, 11, 1, 1, 0))
    assert hours == [t(2026, 10, 31, 22), t(2026, 10, 31, 23), t(2026, 11, 1, 0)]
    oct_start, oct_end = month_bounds(dt.date(2026, 10, 1))
    assert (oct_start, oct_end) == (t(2026, 10, 1), t(2026, 11, 1))
    dec = month_bounds(dt.date(2026, 12, 1))
    assert dec == (t(2026, 12, 1), t(2027, 1, 1))


def test_rate_changes_mid_month_apply_from_their_moment():
    rates = [Rate(t(2026, 1, 1), Decimal("2.00")), Rate(t(2026, 11, 15, 12), Decimal("2.50"))]
    assert rate_at(rates, t(2026, 11, 15, 11)) == Decimal("2.00")
    assert rate_at(rates, t(2026, 11, 15, 12)) == Decimal("2.50")
    assert rate_at([], t(2026, 11, 15)) == Decimal(0)  # no card: no price, never a guess
    assert rate_at(rates, t(2025, 12, 31)) == Decimal(0)
    # At the same moment a card for the pool's own GPU model beats a blank one.
    tie = [Rate(t(2026, 1, 1), Decimal("2.00")), Rate(t(2026, 1, 1), Decimal("2.20"), True)]
    assert rate_at(tie, t(2026, 2, 1)) == rate_at(list(reversed(tie)), t(2026, 2, 1)) == \
        Decimal("2.20")


@pytest.mark.parametrize("route", ["dedicated_block", "confidential_pool"])
def test_binding_routes_pay_allocated_hours_idle_included(route):
    c = hour_charge(route, allocated=Decimal(8 * 3600), used=Decimal(3600), credit=Decimal(0))
    assert c.charged == 8 * 3600 and c.idle == 7 * 3600
    assert "idle included" in c.policy


def test_mig_pays_its_slices_whatever_it_used():
    c = hour_charge("mig_vcluster", allocated=Decimal(1800), used=Decimal(3000),
                    credit=Decimal(0))
    assert c.charged == 1800 and c.idle == 0


def test_shared_pays_quota_plus_what_kueue_admitted_beyond_it():
    # Busy beyond the allocation by DCGM, but nothing admitted above quota: no borrowing.
    c = hour_charge("shared_pool", allocated=Decimal(4 * 3600), used=Decimal(6 * 3600),
                    credit=Decimal(0))
    assert c.charged == 4 * 3600
    # Two devices admitted above quota for the hour, whatever DCGM says they did.
    c = hour_charge("shared_pool", allocated=Decimal(4 * 3600), used=Decimal(3600),
                    credit=Decimal(0), borrowed=Decimal(2 * 3600))
    assert c.charged == 6 * 3600 and "admitted beyond the quota" in c.policy
    # Only the shared pool charges borrowing.
    c = hour_charge("dedicated_block", allocated=Decimal(8 * 3600), used=None,
                    credit=Decimal(0), borrowed=Decimal(3600))
    assert c.charged == 8 * 3600
    c = hour_charge("shared_pool", allocated=Decimal(4 * 3600), used=Decimal(3600),
                    credit=Decimal(0))
    assert c.charged == 4 * 3600 and c.idle == 3 * 3600


def test_pending_usage_charges_the_allocation_and_shows_no_idle_guess():
    c = hour_charge("shared_pool", allocated=Decimal(3600), used=None, credit=Decimal(0))
    assert c.used is None and c.charged == 3600


def test_unvalidated_node_hours_are_credited():
    outages = [(H + dt.timedelta(minutes=20), H + dt.timedelta(minutes=50), 8),
               (t(2026, 1, 1), None, 0)]
    credit = credit_device_seconds(outages=outages, starts_at=t(2026, 1, 1), ends_at=None,
                                   hour=H)
    assert credit == 8 * 30 * 60
    c = hour_charge("dedicated_block", allocated=Decimal(16 * 3600), used=Decimal(0),
                    credit=credit)
    assert c.charged == 16 * 3600 - 8 * 1800


def test_credit_is_limited_to_the_allocation_window():
    outages = [(t(2026, 1, 1), None, 8)]
    credit = credit_device_seconds(outages=outages, starts_at=H + dt.timedelta(minutes=30),
                                   ends_at=None, hour=H)
    assert credit == 8 * 1800


def test_amount_and_utilisation():
    assert amount(Decimal(8 * 3600), Decimal("2.50")) == Decimal("20.0000")
    assert amount(Decimal(1), Decimal("3600")) == Decimal("1.0000")
    assert utilisation(Decimal(25), Decimal(100)) == Decimal("25.0")
    assert utilisation(Decimal(0), Decimal(0)) is None


def test_the_grand_total_sums_the_months_and_derives_idle_and_utilisation():
    months = [{"month": dt.date(2026, 10, 1), "allocated_h": Decimal("10.0001"),
               "used_h": Decimal("2.5000"), "amount": Decimal("12.34")},
              {"month": dt.date(2026, 11, 1), "allocated_h": Decimal("5.0000"),
               "used_h": Decimal("5.0000"), "amount": Decimal("-1.00")}]
    assert grand_total(months) == {
        "allocated_h": Decimal("15.0001"), "used_h": Decimal("7.5000"),
        "amount": Decimal("11.34"), "idle_h": Decimal("7.5001"),
        "utilisation": utilisation(Decimal("7.5000"), Decimal("15.0001"))}
    nothing = grand_total([{"allocated_h": Decimal(0), "used_h": Decimal(0),
                            "amount": Decimal(0)}])
    assert nothing["idle_h"] == 0 and nothing["utilisation"] is None


def test_right_sizing_speaks_up_only_for_low_use():
    from billing.domain import right_sizing

    hint = right_sizing("dedicated_block", Decimal(5952), Decimal(476))
    assert hint.startswith("Used 8.0% of its allocated hours") and "MIG under vCluster" in hint
    assert "smaller quota" in right_sizing("shared_pool", Decimal(100), Decimal(10))
    assert right_sizing("shared_pool", Decimal(100), Decimal(60)) == ""
    assert right_sizing("mig_vcluster", Decimal(0), Decimal(0)) == ""


def test_an_allocation_that_starts_mid_hour_never_used_more_than_it_held():
    """Use is measured per namespace over the whole hour; an allocation that held its
    devices from 10:45 cannot have used 3,000 device-seconds of that hour (before: 0.84 h
    allocated beside 7.40 h used, shown as 100 %)."""
    from billing.domain import allocation_hour

    hour = t(2026, 12, 1, 10)
    row = allocation_hour(route="shared_pool", starts_at=t(2026, 12, 1, 10, 45), ends_at=None,
                          devices=Decimal(1), hour=hour, used=Decimal(3000), outages=[],
                          rate=Decimal(2))
    assert row.allocated == Decimal(900) and row.used == Decimal(900)
    assert row.allocated - row.used == 0  # idle = allocated − used, never negative
    full = allocation_hour(route="shared_pool", starts_at=t(2026, 12, 1), ends_at=None,
                           devices=Decimal(2), hour=hour, used=Decimal(3000), outages=[],
                           rate=Decimal(2))
    assert full.used == Decimal(3000) <= full.allocated


# --- FOCUS costs in cents that add up to the statement line --------------------------------

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from billing.focus import cents_by_day  # noqa: E402
from fleet.inventory.pricing import money  # noqa: E402


@given(st.lists(st.decimals("0", "500", places=4), min_size=1, max_size=31))
def test_days_in_cents_sum_to_the_line_and_stay_within_a_cent(days):
    line = money(sum(days, Decimal(0)))
    cents = cents_by_day(days, line)
    assert sum(cents, Decimal(0)) == line
    assert all(abs(c - d) < Decimal("0.01") for c, d in zip(cents, days, strict=True))
    assert all(c == c.quantize(Decimal("0.01")) for c in cents)


def test_a_frozen_line_that_differs_is_absorbed_by_the_last_day():
    assert cents_by_day([Decimal("1.004"), Decimal("2.004")], Decimal("5.00")) == [
        Decimal("1.00"), Decimal("4.00")]


def test_every_routes_policy_fits_the_statement_line():
    """A MIG line's policy (126 characters) once failed closing a month on PostgreSQL."""
    from billing.domain import POLICIES
    from billing.models import StatementLine

    limit = StatementLine._meta.get_field("policy").max_length
    assert all(len(text) <= limit for text in POLICIES.values())
