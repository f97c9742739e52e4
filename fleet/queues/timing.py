"""Which clock a ledger step's time comes from, and how far it may be off (pure).

Kubernetes stamps objects in whole seconds (RFC 3339, truncated: a condition written at
12:00:00.870 reads 12:00:00), so a step read from an object alone is known to a second. Two
finer clocks exist, and each step takes the best one it has (docs/ledger.md, "The clocks"):

1. **event**: an `events.k8s.io/v1` Event's `eventTime` (a MicroTime) recording the step —
   the scheduler's `Scheduled` for a pod, say. It is taken only when it falls in the second the
   object's stamp names (a little skew allowed): an Event about an earlier admission's pod,
   or one from a component whose clock is far off, is no time for this step.
2. **watch**: the moment the portal's watch received the object version that first showed
   the step. The step happened before that (and not before its stamp), so the watch's time is
   taken when it falls inside the stamp's second; its error bar is the watch's own lag as
   measured (Events' `eventTime` against their arrival), never more than the time since the
   stamp.
3. **object**: the stamp itself, good to a second.

A step with no stamp at all (a deletion seen by a list, a requeue Kueue wrote no time for)
is timed by the portal: the watch's moment if it saw it, else the moment it was recorded.

After each step is timed, a workload's steps are kept in causal order (a step is never
before the one it follows: a pod runs after it was created) and its seams are measured
between those times, in milliseconds (`timed_steps`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..vocabulary import LedgerEvent as K

EVENT, WATCH, OBJECT, PORTAL = "event", "watch", "object", "portal"
SOURCES = (EVENT, WATCH, OBJECT, PORTAL)
STAMP = dt.timedelta(seconds=1)  # what a whole-second stamp leaves open
MICRO = 1e-6  # the resolution of a MicroTime, seconds
# How far another component's clock may be from the API server's for its Event to still
# count for the step it stamps (same-machine clocks agree; NTP keeps a cluster within ms).
CLOCK_SKEW = dt.timedelta(milliseconds=250)

# The Events that record a step: step → (the kind of object they are about, their reasons).
# The scheduler writes events.k8s.io/v1 Events (with eventTime); controllers still on the
# core/v1 recorder (Kueue, the Job controller) write none, and the step falls to the watch.
RECORDED_BY: dict[str, tuple[str, tuple[str, ...]]] = {
    K.SUBMITTED: ("Job", ("CreatedWorkload",)),
    K.ADMITTED: ("Workload", ("Admitted",)),
    K.PREEMPTED: ("Workload", ("Preempted",)),
    K.FINISHED: ("Workload", ("Finished",)),
    K.PODS: ("Job", ("SuccessfulCreate",)),
    K.SCHEDULED: ("Pod", ("Scheduled",)),
    K.RUNNING: ("Pod", ("Started",)),
}


@dataclass(frozen=True)
class Clue:
    """What the portal knows of a step besides the object's stamp."""

    seen: dt.datetime | None = None  # when the watch received the version that shows it
    events: tuple[dt.datetime, ...] = ()  # eventTimes of Events recording it (RECORDED_BY)


NO_CLUE = Clue()


@dataclass(frozen=True)
class Timing:
    """A step's time: `at` (the best), which clock gave it, the seconds either side of `at`
    within which the step happened (None: unknown), and the stamp Kubernetes recorded."""

    at: dt.datetime
    source: str
    bound: float | None
    kube_at: dt.datetime | None

    def columns(self) -> dict:
        return {"at": self.at, "at_source": self.source, "at_bound_seconds": self.bound,
                "kube_at": self.kube_at}


def best_time(kube_at: dt.datetime | None, clue: Clue = NO_CLUE, *, lag: float | None,
              now: dt.datetime) -> Timing:
    """The best time Kubernetes offers for a step stamped `kube_at` (None: no stamp), given
    what the portal saw (`clue`) and the watch's measured lag in seconds (None: not measured
    yet). Pure; the rules are this module's docstring."""
    if kube_at is None:
        if clue.seen is not None:
            return Timing(clue.seen, WATCH, lag, None)
        return Timing(now, PORTAL, None, None)
    end = kube_at + STAMP
    fitting = sorted(t for t in clue.events if kube_at - CLOCK_SKEW <= t < end + CLOCK_SKEW)
    if fitting:
        t = fitting[0]
        outside = max(kube_at - t, t - end, dt.timedelta(0)).total_seconds()
        return Timing(t, EVENT, MICRO + outside, kube_at)
    if clue.seen is not None and kube_at <= clue.seen < end:
        since_stamp = max((clue.seen - kube_at).total_seconds(), MICRO)
        bound = since_stamp if lag is None else min(max(lag, MICRO), since_stamp)
        return Timing(clue.seen, WATCH, bound, kube_at)
    return Timing(kube_at, OBJECT, STAMP.total_seconds(), kube_at)


# The steps each step never comes before, within one admission (causal order).
AFTER: dict[str, tuple[str, ...]] = {
    K.REQUEUED: (K.PREEMPTED, K.EVICTED),
    K.ADMITTED: (K.SUBMITTED, K.REQUEUED),
    K.PODS: (K.ADMITTED,),
    K.CLAIMED: (K.PODS,),
    K.SCHEDULED: (K.PODS,),
    K.RUNNING: (K.ADMITTED, K.PODS, K.SCHEDULED),
    K.FINISHED: (K.ADMITTED, K.RUNNING),
}
# The step each seam is measured from (the queue wait: from the requeue or the submission,
# as its event's wait says).
SINCE = {K.PODS: K.ADMITTED, K.CLAIMED: K.PODS, K.SCHEDULED: K.PODS, K.RUNNING: K.ADMITTED}
ORDER = (K.SUBMITTED, K.PREEMPTED, K.EVICTED, K.REQUEUED, K.ADMITTED, K.DISPATCHED, K.PODS,
         K.CLAIMED, K.SCHEDULED, K.RUNNING, K.FINISHED, K.GONE)

Recorded = Mapping[tuple[str, dt.datetime], tuple[dt.datetime, float | None]]


def timed_steps(events: list[dict], *, stamps: Mapping[str, dt.datetime | None],
                clues: Mapping[str, Clue], recorded: Recorded, lag: float | None,
                now: dt.datetime, retell: Callable[[dict], str] | None = None) -> list[dict]:
    """One workload's new ledger rows (their `at` the stamp Kubernetes recorded, or `now`
    where it recorded none) with the best time of each (`best_time`), kept in causal order
    (`AFTER`: a step earlier than the one it follows is moved to it, its bound widened by
    as much; a watch's time later than a following step's Event is brought back to that
    Event, which it cannot have followed), and each seam measured between the times so
    found. Pure.

    `stamps`: step → the stamp of the current admission's step (the predecessors' stamps);
    `clues`: step → what the portal saw of it; `recorded`: (step, stamp) → (time, bound) of
    steps recorded before; `retell(event)`: a step's reason again, after its seam moved."""
    done: dict[tuple[str, dt.datetime | None], Timing] = {}

    def time_of(kind: str, stamp: dt.datetime | None) -> tuple[dt.datetime, float | None] | None:
        if stamp is None:
            return None
        if (kind, stamp) in done:
            t = done[(kind, stamp)]
            return t.at, t.bound
        return recorded.get((kind, stamp))

    out = [dict(e) for e in events]
    # An Event's time for a step bounds its predecessors' from above: a pod created, seen by
    # the watch a few ms late, was created before the scheduler's Event placed it.
    ceilings: dict[str, dt.datetime] = {}
    for e in out:
        stamp = None if e["at"] is now else e["at"]
        if stamp is None or stamp != stamps.get(e["kind"]):
            continue
        t = best_time(stamp, clues.get(e["kind"], NO_CLUE), lag=lag, now=now)
        if t.source == EVENT:
            for k in AFTER.get(e["kind"], ()):
                ceilings[k] = min(t.at, ceilings.get(k, t.at))
    for e in sorted(out, key=lambda e: ORDER.index(e["kind"]) if e["kind"] in ORDER else 99):
        kind = e["kind"]
        stamp = None if e["at"] is now else e["at"]
        t = best_time(stamp, clues.get(kind, NO_CLUE), lag=lag, now=now)
        ceiling = ceilings.get(kind) if stamp is not None and stamp == stamps.get(kind) else None
        if t.source == WATCH and ceiling is not None and t.kube_at <= ceiling < t.at:
            earliest = t.kube_at if t.bound is None else max(
                t.kube_at, t.at - dt.timedelta(seconds=t.bound))
            if earliest > ceiling:  # later than the lag allows: only the stamp bounds it
                earliest = t.kube_at
            t = Timing(ceiling, WATCH, max(MICRO, (ceiling - earliest).total_seconds()),
                       t.kube_at)
        since = _since(e, kind, stamps, time_of)
        before = [found[0] for k in AFTER.get(kind, ())
                  if (found := time_of(k, stamps.get(k))) is not None]
        if since is not None:
            before.append(since[0])
        floor = max(before, default=None)
        if floor is not None and t.at < floor:
            moved = (floor - t.at).total_seconds()
            t = Timing(floor, t.source, None if t.bound is None else t.bound + moved,
                       t.kube_at)
        done[(kind, stamp)] = t
        e.update(t.columns())
        if since is not None and e.get("seam_seconds") is not None:
            seam = max(0.0, (t.at - since[0]).total_seconds())
            e["seam_seconds"] = seam
            if "wait_seconds" in e and e["wait_seconds"] is not None:
                e["wait_seconds"] = seam
            if retell is not None:
                e["reason"] = retell(e)
    return out


def _since(e: dict, kind: str, stamps: Mapping[str, dt.datetime | None], time_of
           ) -> tuple[dt.datetime, float | None] | None:
    """The time of the step a seam is measured from: found among the steps timed or
    recorded, else its stamp (good to a second)."""
    if e.get("seam_seconds") is None or e["at"] is None:
        return None
    if kind == K.ADMITTED:
        stamp = e["at"] - dt.timedelta(seconds=e["seam_seconds"])
        kinds: tuple[str, ...] = (K.REQUEUED, K.SUBMITTED)
    elif kind in SINCE:
        stamp, kinds = stamps.get(SINCE[kind]), (SINCE[kind],)
    else:
        return None
    if stamp is None:
        return None
    for k in kinds:
        found = time_of(k, stamp)
        if found is not None:
            return found
    return stamp, STAMP.total_seconds()


def watch_lag(lags: list[float], *, quantile: float = 0.95) -> float | None:
    """The watch's lag as its error bar: a high quantile of the latest measured delays
    (seconds from an Event's eventTime to its arrival), None before any was measured."""
    if not lags:
        return None
    ordered = sorted(max(0.0, x) for x in lags)
    return ordered[min(len(ordered) - 1, int(quantile * len(ordered)))]


def clock_words(source: str, bound: float | None) -> str:
    """Where a step's time comes from and how close it is, in words (the timeline's hint)."""
    if source == EVENT:
        return "the time on the Event Kubernetes wrote for it (to the microsecond)"
    if source == WATCH:
        near = "" if bound is None else f", within {max(1, round(bound * 1000))} ms"
        return f"when the portal's watch saw it{near}"
    if source == OBJECT:
        return "the time Kubernetes stamped on the object (to the second)"
    if source == PORTAL:
        return "when the portal recorded it (Kubernetes stamped no time)"
    return "as recorded (before the ledger kept its clocks)"


def is_fine(source: str) -> bool:
    """Whether a step's time is finer than a second (shown to the millisecond)."""
    return source in (EVENT, WATCH)
