"""One rule per kind of number, for templates and code alike: a device count and a share
in percent read the same on every page, export and message."""

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from billing.domain import parse_month, utilisation
from fleet.domain import devices_text, percent_of
from portal.templatetags.portal_extras import devices, percent

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("value", "text"), [
    (8, "8"), (Decimal("8.0000"), "8"), (Decimal("0.142857"), "0.14"),
    (Decimal("0.125"), "0.13"), (Decimal("2.5"), "2.5"), ("x", "—"), (None, "—")])
def test_devices_read_one_way(value, text):
    assert devices_text(value) == devices(value) == text


def test_a_tie_rounds_half_up_on_the_card_and_in_the_table():
    """12.25 % read 12.2 on the finance overview's card (the tag rounded ties to even) and
    12.3 in its footer (utilisation rounds half up)."""
    assert percent(Decimal("12.25"), 100) == f"{utilisation(Decimal('12.25'), Decimal(100))}"
    assert percent(Decimal("12.25"), 100) == "12.3"


@given(st.decimals(min_value=0, max_value=10_000, places=4),
       st.decimals(min_value=Decimal("0.0001"), max_value=10_000, places=4))
def test_the_tag_and_the_figure_agree_wherever_a_share_fits(part, whole):
    share = percent_of(part, whole)
    assert percent(part, whole) == f"{min(Decimal(100), share):.1f}"
    assert utilisation(part, whole) == share


def test_no_whole_no_share():
    assert percent_of(1, 0) is None and utilisation(Decimal(1), Decimal(0)) is None
    assert percent(1, 0) == "0" and percent("x", 1) == "0"


@pytest.mark.parametrize(("text", "month"), [
    ("2026-12", (2026, 12)), ("2000-01", (2000, 1)), ("2999-12", (2999, 12)),
    ("2150-06", (2150, 6)),  # the API stopped at 2100, the pages at 2999
    ("1999-12", None), ("3000-01", None), ("2026-13", None), ("2026-00", None),
    ("٢٠٢٦-١٢", None),  # digits that are not ASCII: the API took them
    ("2026-1", None), (" 2026-12", None), ("", None), (None, None)])
def test_one_month_parser_for_pages_and_the_api(text, month):
    got = parse_month(text)
    assert (got.year, got.month) == month if month else got is None
