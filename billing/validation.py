"""Whether an adjustment may be recorded: one function for the statement page's form, the API
serializer and the service (which asks again under the statement's lock, before writing)."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from tenants.audit import reason_error
from tenants.fields import decimal_for_column

from .domain import AdjustmentCheck, adjustment_check


@dataclass(frozen=True)
class AdjustmentVerdict:
    amount: Decimal | None  # parsed, when it is a valid amount
    check: AdjustmentCheck | None  # against the final, when it is
    errors: dict[str, str] = field(default_factory=dict)  # field → message

    @property
    def asks_confirmation(self) -> bool:
        """Held only for want of a confirmation (the page then offers the checkbox)."""
        return bool(self.check and self.check.needs_confirmation and "amount" in self.errors)


def adjustment_errors(*, amount_value, reason: str, confirm, final_before: Decimal
                      ) -> AdjustmentVerdict:
    """Field errors of an adjustment of `amount_value` on a statement whose final is
    `final_before`: an amount of at most two places that is not zero, a reason, and — when it
    would take the final below zero, or exceeds half of it — a confirmation that repeats the
    amount (billing.domain.AdjustmentCheck)."""
    errors: dict[str, str] = {}
    if problem := reason_error(reason, required=True):
        errors["reason"] = problem
    try:
        amount = decimal_for_column(amount_value, max_digits=14, decimal_places=2,
                                    what="The amount")
    except ValueError as exc:
        errors["amount"] = str(exc)
        return AdjustmentVerdict(None, None, errors)
    if amount == 0:
        errors["amount"] = "An adjustment of zero changes nothing."
        return AdjustmentVerdict(amount, None, errors)
    check = adjustment_check(amount, final_before)
    if check.needs_confirmation and not check.confirmed_by(confirm):
        errors["amount"] = check.problem
    return AdjustmentVerdict(amount, check, errors)
