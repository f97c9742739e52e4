"""The price of a pool at an instant, and how money reads: one answer for the request preview,
the approval, the review page, the queue page's borrowed price, billing, statements and
both exports. Rates live only in rate cards (`fleet.models.RateCard`); nothing keeps a copy.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

from django.conf import settings
from django.db.models import F, Q
from django.utils import timezone

from tenants.compiled import compiled_per_arguments

from ..domain import Route
from ..models import RateCard

# A pool's first rate card starts here: "from the beginning".
BEGINNING = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
CENT = Decimal("0.01")


@dataclass(frozen=True)
class Rate:
    effective_from: dt.datetime
    per_device_hour: Decimal
    specific: bool = False  # a card naming the pool's GPU model beats a blank one at a tie


def rate_at(rates: Iterable[Rate], t: dt.datetime) -> Decimal:
    """The rate in force at t: the latest card that started at or before it (0 if none)."""
    best = None
    for r in rates:
        if r.effective_from <= t and (best is None or (r.effective_from, r.specific) >
                                      (best.effective_from, best.specific)):
            best = r
    return best.per_device_hour if best else Decimal(0)


def money(value: Decimal) -> Decimal:
    """An amount rounded to the cent, half up (what a statement and an estimate show)."""
    return Decimal(value).quantize(CENT, rounding=ROUND_HALF_UP)


def money_text(value, currency: str | None = None) -> str:
    """'EUR 1,234.50' (a non-breaking space keeps the code with the amount); '—' if not a
    number."""
    if currency is None:
        currency = settings.PORTAL_CURRENCY
    try:
        return f"{currency}\u00a0{Decimal(value):,.2f}"
    except (InvalidOperation, TypeError, ValueError):
        return "—"


def borrowing_is_billed(route: str) -> bool:
    """Borrowed device-hours are charged on every route whose queue may borrow (a cohort's
    shared pool and MIG pool); the queue page prices borrowing only where this says so."""
    return route in (Route.SHARED_POOL, Route.MIG_VCLUSTER)


# -- reads -----------------------------------------------------------------------------------

@compiled_per_arguments()
def _cards(pool_ids: tuple[int, ...]):
    return (RateCard.objects.filter(pool_id__in=pool_ids)
            .filter(Q(gpu_model="") | Q(gpu_model=F("pool__gpu_model")))
            .values("pool_id", "effective_from", "rate_per_device_hour", "gpu_model"))


def rate_history(pool_ids: Iterable[int]) -> dict[int, list[Rate]]:
    """Every card that applies to each pool (blank or the pool's own GPU model), in one
    query (compiled once per set of pools: pages price the same active pools each view)."""
    out: dict[int, list[Rate]] = defaultdict(list)
    for card in _cards(tuple(pool_ids)):
        out[card["pool_id"]].append(Rate(card["effective_from"], card["rate_per_device_hour"],
                                         bool(card["gpu_model"])))
    return out


def pool_rates(pool_ids: Iterable[int], at: dt.datetime) -> dict[int, Decimal]:
    return pool_rates_until(pool_ids, at)[0]


def pool_rates_until(pool_ids: Iterable[int], at: dt.datetime
                     ) -> tuple[dict[int, Decimal], dt.datetime | None]:
    """The pools' rates at `at`, and when the next card of any of them starts (None: none
    later), until which those rates hold unless a card is written."""
    ids = list(pool_ids)
    history = rate_history(ids)
    later = [r.effective_from for pk in ids for r in history.get(pk, []) if r.effective_from > at]
    return {pk: rate_at(history.get(pk, []), at) for pk in ids}, min(later, default=None)


def pool_rate(pool_id: int, at: dt.datetime | None = None) -> Decimal:
    """The rate of one pool at `at` (now if not given)."""
    return pool_rates([pool_id], at or timezone.now())[pool_id]
