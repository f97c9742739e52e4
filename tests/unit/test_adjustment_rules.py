"""How far a closed month may be adjusted: the one rule behind the statement's form, the API
serializer and the service (billing.domain.AdjustmentCheck, billing.validation)."""

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from billing.domain import adjustment_check
from billing.validation import adjustment_errors

pytestmark = pytest.mark.unit
BILL = Decimal("8050.74")


def test_a_credit_far_beyond_the_bill_is_held_on_its_amount_with_the_new_final():
    """Issue #46: −50,000 on an EUR 8,050.74 statement was taken without a word."""
    verdict = adjustment_errors(amount_value="-50000", reason="Goodwill", confirm="",
                                final_before=BILL)
    assert set(verdict.errors) == {"amount"} and verdict.asks_confirmation
    message = verdict.errors["amount"]
    assert "EUR\u00a0-50,000.00" in message and "EUR\u00a0-41,949.26" in message
    assert "below zero" in message and "EUR\u00a08,050.74" in message
    # Confirmed by repeating the amount (as the page's checkbox does): taken.
    for confirm in ("-50000", "-50000.00", " -50000.0 "):
        assert adjustment_errors(amount_value="-50000", reason="Refund of the prepayment",
                                 confirm=confirm, final_before=BILL).errors == {}
    # A confirmation of another amount confirms nothing.
    for confirm in ("-5000", "on", "true", "x", None):
        assert "amount" in adjustment_errors(amount_value="-50000", reason="r",
                                             confirm=confirm, final_before=BILL).errors


@pytest.mark.parametrize(("amount", "held"), [
    ("-25.00", False), ("-4025.37", False), ("-4025.38", True), ("4025.37", False),
    ("4025.38", True), ("-8050.74", True), ("-8050.75", True)])
def test_more_than_half_the_bill_is_confirmed_first(amount, held):
    check = adjustment_check(Decimal(amount), BILL)
    assert check.needs_confirmation is held
    assert check.below_zero is (Decimal(amount) < -BILL)
    assert bool(check.problem) is held


def test_on_a_bill_of_nothing_every_adjustment_is_confirmed():
    assert adjustment_check(Decimal("10"), Decimal(0)).needs_confirmation
    assert adjustment_check(Decimal("-1"), Decimal(0)).below_zero


def test_the_fields_are_refused_each_on_its_own():
    verdict = adjustment_errors(amount_value="1.234", reason=" ", confirm="",
                                final_before=BILL)
    assert "2 decimal places" in verdict.errors["amount"] and "reason" in verdict.errors
    assert "zero" in adjustment_errors(amount_value="0", reason="r", confirm="",
                                       final_before=BILL).errors["amount"]


@settings(max_examples=300, deadline=None)
@given(amount=st.decimals(min_value=-10**6, max_value=10**6, places=2).filter(bool),
       final=st.decimals(min_value=-10**4, max_value=10**6, places=2))
def test_no_final_goes_below_zero_unconfirmed(amount, final):
    """Whatever the amount and the final: unconfirmed, nothing below zero is taken, and
    nothing over half the bill; confirmed with its amount, everything valid is."""
    verdict = adjustment_errors(amount_value=str(amount), reason="r", confirm="",
                                final_before=final)
    if final + amount < 0 or final <= 0 or abs(amount) > final / 2:
        assert "amount" in verdict.errors and verdict.asks_confirmation
    else:
        assert verdict.errors == {}
    assert adjustment_errors(amount_value=str(amount), reason="r", confirm=str(amount),
                             final_before=final).errors == {}
