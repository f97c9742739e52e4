"""When a waiting workload should start, and on what basis — pure, over the queue's facts.

Four bases, the firmest first: *now* (the devices are free), *drain* (workloads ahead of it
and the queue's measured admission rate: in a deep queue Kueue admits about one head per
ClusterQueue per scheduling cycle, so the line, not the median wait, sets the start),
*limits* (the running workloads of the queue declared time limits, and enough of them end
by then), *history* (the median wait of this queue at this priority). Each estimate carries
a range; the one first shown is stored and scored when the workload is admitted."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from .truth import Waiting, WorkloadFacts, duration, percentile

# The drain basis needs this many admissions in its window before it is trusted.
MIN_DRAIN_ADMISSIONS = 3
# A range from the 10th to the 90th percentile: z of 1.2816 either side of a normal's mean.
Z80 = 1.2816
# What an estimate may rest on, the firmest first (the API lists them as its choices).
BASES = ("now", "drain", "limits", "history", "none")


@dataclass(frozen=True)
class Estimate:
    at: dt.datetime | None
    basis: str  # one of BASES
    text: str
    low: dt.datetime | None = None  # the range shown beside it (None: no range)
    high: dt.datetime | None = None


def drain_rate(admitted: Sequence[dt.datetime], *, now: dt.datetime, window_seconds: float,
               minimum: int = MIN_DRAIN_ADMISSIONS) -> float | None:
    """Admissions per second of one ClusterQueue, from those in the window before `now`: the
    gaps after the first one, over the time from it to now (a queue busy for a minute of the
    hour is not averaged over the hour; one stalled since its last admission slows down as
    the stall lasts). None while the window holds too few to say."""
    since = now - dt.timedelta(seconds=window_seconds)
    seen = [at for at in admitted if since <= at <= now]
    if len(seen) < minimum:
        return None
    span = (now - min(seen)).total_seconds()
    return (len(seen) - 1) / span if span > 0 else None


def drain_wait(ahead: int, rate: float) -> tuple[float, float, float]:
    """Seconds until `ahead` workloads and then this one are admitted at `rate` a second: the
    mean and a 10–90 % range. With admissions as a Poisson stream the wait for the k-th is
    Gamma(k, rate): mean k/rate, standard deviation √k/rate."""
    k = ahead + 1
    mean, sd = k / rate, math.sqrt(k) / rate
    return mean, max(0.0, mean - Z80 * sd), mean + Z80 * sd


def _range_text(low: dt.datetime, high: dt.datetime) -> str:
    if high - low < dt.timedelta(days=1) and low.date() == high.date():
        return f"between {low:%H:%M} and {high:%H:%M} UTC"
    return f"between {low:%Y-%m-%d %H:%M} and {high:%Y-%m-%d %H:%M} UTC"


def _pace(rate: float) -> str:
    per_minute = rate * 60
    return f"{per_minute:.1f} a minute" if per_minute >= 0.95 else \
        f"one every {duration(1 / rate)}"


def _drained(ahead: int, rate: float, now: dt.datetime, why: str, tail: str = "") -> Estimate:
    """The drain basis: `ahead` admissions then this one's, at `rate`, with its range."""
    mean, lo, hi = drain_wait(ahead, rate)
    at, low, high = (now + dt.timedelta(seconds=s) for s in (mean, lo, hi))
    return Estimate(at, "drain", f"Around {at:%Y-%m-%d %H:%M} UTC ({_range_text(low, high)}"
                    f"): {why}, and this queue admits about {_pace(rate)}{tail}.", low, high)


def estimate_start(w: WorkloadFacts, waiting: Waiting, *, own_running: Sequence[WorkloadFacts],
                   history_waits: Sequence[float], now: dt.datetime, min_history: int = 3,
                   ahead: int = 0, admitted_recently: Sequence[dt.datetime] = (),
                   window_seconds: float = 3600) -> Estimate:
    """When `w` should start, and on what basis. `ahead`: the workloads before it in its
    ClusterQueue's line; `admitted_recently`: that queue's admission times (any priority);
    `window_seconds`: how far back its admission rate is measured."""
    if waiting.code in ("never", "queue-stopped", "deactivated"):
        return Estimate(None, "none", "No start time: it cannot start as things are.")
    if waiting.code in ("starting", "behind"):
        return Estimate(now, "now", "Any moment: the devices are free.")
    rate = drain_rate(admitted_recently, now=now, window_seconds=window_seconds)
    if ahead and rate:
        # A line ahead of it: its start is set by how fast the line drains, not by when the
        # queue's own running work ends (that frees devices for the head, not for it).
        return _drained(ahead, rate, now, f"{ahead} workload(s) ahead of it",
                        f" (over the last {duration(window_seconds)})")
    ends = sorted((r.admitted_at + dt.timedelta(seconds=r.max_seconds), r.devices)
                  for r in own_running if r.admitted_at and r.max_seconds)
    freed = Decimal(0)
    for end, devices in ends:
        freed += devices
        if freed >= waiting.short:
            at = max(end, now)
            return Estimate(at, "limits", f"By {at:%Y-%m-%d %H:%M} UTC at the latest: the "
                            "running workloads of your queue declared time limits, and enough "
                            "of them end by then.", now, at)
    if len(history_waits) >= min_history:
        p50 = percentile(history_waits, 50) or 0.0
        start = w.submitted_at or now
        at = start + dt.timedelta(seconds=p50)
        basis = f"the median wait of this queue at this priority ({duration(p50)}, " \
                f"{len(history_waits)} admissions)"
        if at < now:
            return Estimate(now, "history", f"Overdue: it has waited longer than {basis}.")
        low = max(now, start + dt.timedelta(seconds=percentile(history_waits, 10) or 0.0))
        high = max(at, start + dt.timedelta(seconds=percentile(history_waits, 90) or 0.0))
        return Estimate(at, "history", f"Around {at:%Y-%m-%d %H:%M} UTC, from {basis}.",
                        low, high)
    if rate:  # next in line, nothing declared, little history: the queue's pace still says
        return _drained(0, rate, now, "it is next")
    return Estimate(None, "none", "No estimate yet: the running workloads declared no time "
                    "limits and this queue has too little history.")


def track_record_by_basis(scored: Sequence[tuple[str, float]]
                          ) -> dict[str, tuple[int, float, float]]:
    """basis → (how many, median and p90 absolute error in seconds) of the first estimates
    scored against their admissions: each basis answers for itself."""
    by: dict[str, list[float]] = {}
    for basis, error in scored:
        by.setdefault(basis or "none", []).append(error)
    return {b: (len(e), percentile(e, 50) or 0.0, percentile(e, 90) or 0.0)
            for b, e in sorted(by.items())}
