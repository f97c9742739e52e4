"""Billing math as pure functions: device-seconds per hour, policies, rates, months.

Everything is in device-seconds (exact integers of time × Decimal devices) until a
statement shows hours, so rollups match measurements to the device-second.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

from fleet.domain import Route, percent_of
from fleet.inventory.pricing import borrowing_is_billed, money, money_text

HOUR = dt.timedelta(hours=1)
SECONDS_PER_HOUR = Decimal(3600)


def floor_hour(t: dt.datetime) -> dt.datetime:
    return t.replace(minute=0, second=0, microsecond=0)


def hours_between(start: dt.datetime, end: dt.datetime) -> list[dt.datetime]:
    """Hour starts h with [h, h+1h) overlapping [start, end)."""
    out, h = [], floor_hour(start)
    while h < end:
        out.append(h)
        h += HOUR
    return out


def overlap_seconds(a_start: dt.datetime, a_end: dt.datetime | None, b_start: dt.datetime,
                    b_end: dt.datetime) -> int:
    end = min(a_end, b_end) if a_end else b_end
    start = max(a_start, b_start)
    return max(0, int((end - start).total_seconds()))


def allocated_device_seconds(*, starts_at: dt.datetime, ends_at: dt.datetime | None,
                             devices: Decimal, hour: dt.datetime) -> Decimal:
    """Device-seconds an allocation holds in one hour (partial at its start and end)."""
    return Decimal(overlap_seconds(starts_at, ends_at, hour, hour + HOUR)) * devices


Resize = tuple[dt.datetime, Decimal, Decimal]  # (at, devices before, devices after)


def held_device_seconds(*, starts_at: dt.datetime, ends_at: dt.datetime | None,
                        devices: Decimal, hour: dt.datetime,
                        resizes: Sequence[Resize] = ()) -> Decimal:
    """Device-seconds held in one hour at the size in force at each moment: the resizes
    (in order; fleet's AllocationResize rows, stamped in whole seconds) split the hold where
    its size changed. Without any, the allocation's size throughout."""
    if not resizes:
        return allocated_device_seconds(starts_at=starts_at, ends_at=ends_at, devices=devices,
                                        hour=hour)
    pieces = [(starts_at, resizes[0][1])] + [(at, after) for at, _, after in resizes]
    total = Decimal(0)
    for i, (since, size) in enumerate(pieces):
        until = pieces[i + 1][0] if i + 1 < len(pieces) else ends_at
        if ends_at is not None and until is not None:
            until = min(until, ends_at)
        total += allocated_device_seconds(starts_at=max(since, starts_at), ends_at=until,
                                          devices=size, hour=hour)
    return total


def sizes_held(current, resizes: Sequence[tuple[dt.datetime, object, object]],
               start: dt.datetime, end: dt.datetime) -> list:
    """The sizes an allocation held in [start, end), in order, from its size now and its
    resizes (at, before, after) in order: a statement line of a resized month says them
    all ("4 → 3 device(s)"), not only today's."""
    later = [r for r in resizes if r[0] >= start]
    sizes = [later[0][1] if later else current]
    sizes += [after for at, _, after in later if at < end]
    return [x for i, x in enumerate(sizes) if i == 0 or x != sizes[i - 1]]


def credit_device_seconds(*, outages: Iterable[tuple[dt.datetime, dt.datetime | None, int]],
                          starts_at: dt.datetime, ends_at: dt.datetime | None,
                          hour: dt.datetime) -> Decimal:
    """Device-seconds on reserved nodes that were not validated or not healthy: not charged.

    outages: (from, to or None, devices on that node).
    """
    h_end = hour + HOUR
    win_start = max(starts_at, hour)
    win_end = min(ends_at, h_end) if ends_at else h_end
    total = Decimal(0)
    for o_start, o_end, devices in outages:
        total += Decimal(overlap_seconds(o_start, o_end, win_start, win_end)) * devices
    return total


@dataclass(frozen=True)
class HourCharge:
    allocated: Decimal  # device-seconds
    used: Decimal | None  # None while Prometheus has not answered for this hour
    credit: Decimal
    charged: Decimal
    policy: str

    @property
    def idle(self) -> Decimal:
        return max(Decimal(0), self.allocated - (self.used or Decimal(0)))


POLICIES = {
    Route.DEDICATED_BLOCK: "allocated hours, idle included (priced back)",
    Route.CONFIDENTIAL_POOL: "allocated hours, idle included (priced back)",
    Route.MIG_VCLUSTER: "allocated slice-hours of the approved slices, plus slice-hours Kueue "
                        "admitted beyond the quota (borrowed from the cohort)",
    Route.SHARED_POOL: "allocated quota hours, plus device-hours Kueue admitted beyond the "
                       "quota (borrowed from the cohort)",
}


def hour_charge(route: str, *, allocated: Decimal, used: Decimal | None,
                credit: Decimal, borrowed: Decimal = Decimal(0)) -> HourCharge:
    """What one allocation-hour is charged for, by the route's policy.

    Borrowing is what Kueue admitted above the queue's nominal quota, integrated from its
    admissions (fleet's queue-hours), not DCGM use above the allocation: a device can be busy
    without being borrowed and borrowed without being busy."""
    base = max(Decimal(0), allocated - credit)
    charged = base
    if borrowing_is_billed(route) and borrowed > 0:
        charged += borrowed
    return HourCharge(allocated, used, credit, charged, POLICIES.get(route, "allocated hours"))


def amount(device_seconds: Decimal, rate_per_device_hour: Decimal) -> Decimal:
    return (device_seconds / SECONDS_PER_HOUR * rate_per_device_hour).quantize(
        Decimal("0.0001"), rounding=ROUND_HALF_UP)


def final_label(closed: bool) -> str:
    """What a statement's bottom line is called: only a closed month's total is final."""
    return "Final" if closed else "So far (open month, not final)"


def month_start(t: dt.datetime | dt.date) -> dt.date:
    return dt.date(t.year, t.month, 1)


MONTH = re.compile(r"^([0-9]{4})-([0-9]{2})$")  # ASCII digits only: "٢٠٢٦-١٢" is no month
FIRST_YEAR, LAST_YEAR = 2000, 2999  # far enough either way; month arithmetic stays in range
MONTH_RULE = f"A month as YYYY-MM, between {FIRST_YEAR}-01 and {LAST_YEAR}-12."


def parse_month(value: str | None) -> dt.date | None:
    """The first day of a month written `YYYY-MM` (in a URL or a query), or None: the one
    reading of a month for pages and the API alike."""
    match = MONTH.match(value or "")
    if not match:
        return None
    year, month = int(match[1]), int(match[2])
    if not (FIRST_YEAR <= year <= LAST_YEAR and 1 <= month <= 12):
        return None
    return dt.date(year, month, 1)


def month_bounds(month: dt.date) -> tuple[dt.datetime, dt.datetime]:
    start = dt.datetime(month.year, month.month, 1, tzinfo=dt.UTC)
    nxt = dt.datetime(month.year + (month.month == 12), month.month % 12 + 1, 1, tzinfo=dt.UTC)
    return start, nxt


def utilisation(used: Decimal, allocated: Decimal) -> Decimal | None:
    """Used of allocated hours, in percent (fleet.domain.percent_of: one place, half up)."""
    return percent_of(used, allocated)


RIGHT_SIZE_BELOW = Decimal(30)  # percent


def right_sizing(route: str, allocated_h: Decimal, used_h: Decimal) -> str:
    """A plain-language proposal when an allocation is used far below what it holds."""
    u = utilisation(used_h, allocated_h)
    if u is None or u >= RIGHT_SIZE_BELOW or allocated_h <= 0:
        return ""
    if route in (Route.DEDICATED_BLOCK, Route.CONFIDENTIAL_POOL):
        offer = ("if the boundary is not contractual or regulatory after all, MIG under "
                 "vCluster sized to the use would be billed for slices instead of whole devices")
    elif route == Route.SHARED_POOL:
        offer = "a smaller quota would cover it, borrowing from idle peers at peaks"
    else:
        offer = "fewer or smaller slices would cover it"
    return (f"Used {u}% of its allocated hours ({used_h:.0f} of {allocated_h:.0f} "
            f"device-hours): {offer}.")


@dataclass(frozen=True)
class AllocationHour:
    """One allocation's figures for one hour, in device-seconds and money."""

    allocated: Decimal
    used: Decimal | None
    credit: Decimal
    charged: Decimal
    rate: Decimal
    amount: Decimal
    borrowed: Decimal = Decimal(0)


def allocation_hour(*, route: str, starts_at: dt.datetime, ends_at: dt.datetime | None,
                    devices: Decimal, hour: dt.datetime, used: Decimal | None,
                    outages: Iterable[tuple[dt.datetime, dt.datetime | None, int]],
                    rate: Decimal, borrowed: Decimal = Decimal(0),
                    resizes: Sequence[Resize] = ()) -> AllocationHour | None:
    """The rollup's arithmetic for one allocation-hour; None when nothing was allocated."""
    allocated = held_device_seconds(starts_at=starts_at, ends_at=ends_at, devices=devices,
                                    hour=hour, resizes=resizes)
    if allocated <= 0:
        return None
    if used is not None:
        # Use is measured per namespace over the whole hour; an allocation that held its
        # devices for part of it cannot have used more than it held (invariant: used ≤
        # allocated, idle = allocated − used).
        used = min(used, allocated)
    credit = credit_device_seconds(outages=outages, starts_at=starts_at, ends_at=ends_at,
                                   hour=hour)
    charge = hour_charge(route, allocated=allocated, used=used, credit=credit,
                         borrowed=borrowed)
    return AllocationHour(allocated, used, credit, charge.charged, rate,
                          amount(charge.charged, rate),
                          borrowed if borrowing_is_billed(route) else Decimal(0))


# ---------------------------------------------------------------------------------------
# Adjustments: how far a closed month may be corrected

# An adjustment larger than this share of the statement's final (or on a final of zero or
# less) is recorded only once finance confirms it, amount and new final in view.
ADJUSTMENT_CONFIRM_SHARE = Decimal("0.5")


@dataclass(frozen=True)
class AdjustmentCheck:
    """An adjustment against the statement's final as it stands (lines plus the
    adjustments already made): what it makes of it, and whether it needs confirming."""

    amount: Decimal
    final_before: Decimal

    @property
    def final_after(self) -> Decimal:
        return self.final_before + self.amount

    @property
    def below_zero(self) -> bool:
        return self.final_after < 0

    @property
    def large(self) -> bool:
        return self.final_before <= 0 or \
            abs(self.amount) > self.final_before * ADJUSTMENT_CONFIRM_SHARE

    @property
    def needs_confirmation(self) -> bool:
        return self.below_zero or self.large

    def confirmed_by(self, confirm) -> bool:
        """Confirmed: `confirm` repeats the amount (the page's checkbox carries it), so a
        confirmation never carries over to an amount changed after it."""
        try:
            return Decimal(str(confirm).strip()) == self.amount
        except (InvalidOperation, TypeError, ValueError):
            return False

    @property
    def problem(self) -> str:
        """Why it is held for confirmation, in money ('' if it is not)."""
        words = (f"{money_text(self.amount)} takes this statement's final from "
                 f"{money_text(self.final_before)} to {money_text(self.final_after)}")
        if self.below_zero:
            return (f"{words}: below zero, so the portal would owe the tenant "
                    f"{money_text(-self.final_after)}. The most this month can be credited "
                    f"is {money_text(max(self.final_before, Decimal(0)))}; to record more "
                    "(a refund), confirm it and say why in the reason.")
        if self.large:
            return (f"{words}: more than {ADJUSTMENT_CONFIRM_SHARE:.0%} of the bill. "
                    "Confirm it to record it.")
        return ""


def adjustment_check(amount: Decimal, final_before: Decimal) -> AdjustmentCheck:
    return AdjustmentCheck(money(amount), money(final_before))


# ---------------------------------------------------------------------------------------
# Budgets

BUDGET_THRESHOLDS = (50, 75, 90, 100)  # percent of the monthly budget that notify


@dataclass(frozen=True)
class BudgetStatus:
    month: dt.date
    budget: Decimal
    spent: Decimal
    forecast: Decimal  # the month's spend at the run rate so far
    extended: bool = True  # False: too early in the month to extend; forecast = spend

    @property
    def amount(self) -> Decimal:
        return self.budget

    @property
    def percent(self) -> Decimal:
        return (self.spent * 100 / self.budget).quantize(Decimal("0.1")) if self.budget else \
            Decimal(0)

    @property
    def forecast_percent(self) -> Decimal:
        return (self.forecast * 100 / self.budget).quantize(Decimal("0.1")) if self.budget \
            else Decimal(0)

    @property
    def crossed(self) -> list[int]:
        return thresholds_crossed(self.spent, self.budget)

    @property
    def forecast_over(self) -> bool:
        """On course to end the month over its budget: the one rule every page flags by."""
        return self.forecast_percent > 100

    @property
    def level(self) -> str:
        """ok / watch (forecast over) / warn (≥ 90 % spent) / over (≥ 100 %)."""
        if self.percent >= 100:
            return "over"
        if self.percent >= 90:
            return "warn"
        return "watch" if self.forecast_over else "ok"

    @property
    def summary(self) -> str:
        word = {"over": "over budget", "warn": "close to the budget",
                "watch": "on course to exceed the budget", "ok": "within budget"}[self.level]
        return (f"{self.percent}% of the monthly budget spent; at this rate the month ends at "
                f"{self.forecast_percent}% ({word}).")


def thresholds_crossed(spent: Decimal, budget: Decimal) -> list[int]:
    if budget <= 0:
        return []
    return [t for t in BUDGET_THRESHOLDS if spent * 100 >= budget * t]


def forecast_extends(month: dt.date, now: dt.datetime, covered_until: dt.datetime | None
                     ) -> bool:
    """Whether the spend so far is extended to the month: not once the month is over, and
    not before the rollup has covered its first full day (the rate is too noisy then)."""
    start, end = month_bounds(month)
    return (start <= now < end and covered_until is not None
            and (min(covered_until, end) - start).total_seconds() >= 86400)


def run_rate_forecast(spent: Decimal, month: dt.date, now: dt.datetime,
                      covered_until: dt.datetime | None) -> Decimal:
    """Spend so far, extended to the whole month at the rate measured: the spend divided by
    the hours the rollup has covered (the month's start to the end of its latest rolled-up
    hour, `covered_until`), never by the wall clock, so the forecast holds still while the
    spend does (forecast_extends); else the spend itself."""
    if not forecast_extends(month, now, covered_until):
        return money(spent)
    start, end = month_bounds(month)
    return money(spent * Decimal((end - start).total_seconds()) /
                 Decimal((min(covered_until, end) - start).total_seconds()))


def budget_status(*, budget: Decimal, spent: Decimal, month: dt.date, now: dt.datetime,
                  covered_until: dt.datetime | None) -> BudgetStatus:
    start, end = month_bounds(month)
    # "Not extended" is said only inside the month (a past month is final).
    return BudgetStatus(month=month, budget=money(budget), spent=money(spent),
                        forecast=run_rate_forecast(spent, month, now, covered_until),
                        extended=forecast_extends(month, now, covered_until)
                        or not start <= now < end)


# ---------------------------------------------------------------------------------------
# How figures read on pages (the template filters and the precomputed tables share these)


def hours_text(value) -> str:
    """Hours as people read them: '1,234 h', '12.5 h', '0.75 h'."""
    try:
        d = Decimal(value)
    except (InvalidOperation, TypeError, ValueError):
        return "—"
    if not d.is_finite():
        return "—"
    if d == 0:
        return "0\u00a0h"
    places = 0 if abs(d) >= 100 else 1 if abs(d) >= 10 else 2
    return f"{d:,.{places}f}\u00a0h"


def rate_reprices(starts: dt.datetime, now: dt.datetime) -> str:
    """What a new rate does to hours already billed, said when it is recorded: nothing if it
    starts in the future; a back-dated one applies to the open month's hours from its start
    once the rollup is re-run over them (the hourly rollup covers only the last hours)."""
    if starts >= floor_hour(now):
        return ""
    return (f" It starts in the past ({starts:%Y-%m-%d %H:%M} UTC): the hours billed since "
            f"then in the open month of {month_start(starts):%B %Y} keep their old price until "
            "the rollup is re-run over them, and are then re-priced at the new rate.")
