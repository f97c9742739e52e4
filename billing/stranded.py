"""Stranded capacity as pure findings: devices held and paid for that the DCGM series say
nobody uses, or quota that says no while validated devices idle.

No ORM, no clock, no I/O. The inputs are plain values — a hold (what an allocation keeps,
at what rate), the measured series of its namespace (DCGM activity and memory, as
`billing.stranded_reading` reads them from Prometheus), its running workloads' recent peak
activity, its queue's pending work — and each detector returns a `Finding` or None. A
finding carries its evidence (window, series summary, thresholds) and its price per day,
which is billing's own arithmetic (`billing.domain.amount`) over the stranded
device-seconds, so what a finding says it costs is what the statement charges for those
hours. Sizes come from the fleet's rules (`fleet.domain`: MIG profiles, shares, device
counts); prices from the rate the caller read through `fleet.inventory.pricing`.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum

from fleet.domain import (
    MIG_PROFILES_BY_MEMORY,
    Route,
    devices_text,
    mig_device_equivalents,
    mig_profile,
)
from fleet.inventory.pricing import money

from .domain import SECONDS_PER_HOUR, amount
from .stranded_thresholds import Thresholds


class Kind(StrEnum):
    IDLE_HOLD = "idle_hold"
    STALLED_RUN = "stalled_run"
    OVERSIZED = "oversized"
    QUOTA_BLOCKED = "quota_blocked"


KIND_LABELS = {
    Kind.IDLE_HOLD: "Idle hold",
    Kind.STALLED_RUN: "Stalled run",
    Kind.OVERSIZED: "Oversized hold",
    Kind.QUOTA_BLOCKED: "Quota says no while capacity idles",
}


class Action(StrEnum):
    """What a finding proposes. The portal carries out a release (the fleet's release) and
    a shrink within the hold's own unit (the fleet's resize); the others are recorded and
    told to the platform team."""

    RELEASE = "release"
    SHRINK = "shrink"
    MOVE_TO_MIG = "move_to_mig"
    CHECK_RUN = "check_run"
    RAISE_QUOTA = "raise_quota"


# -- the measured series ------------------------------------------------------------------

@dataclass(frozen=True)
class Sample:
    """One moment of a namespace's GPUs, from DCGM."""

    at: dt.datetime
    busy_devices: Decimal  # Σ activity of its devices, each MIG slice by its share
    top_activity: float  # the busiest single device, 0–1
    memory_gb: float | None  # the most memory one device held
    active_devices: int  # devices with any activity


@dataclass(frozen=True)
class SeriesSummary:
    start: dt.datetime
    end: dt.datetime
    samples: int
    mean_busy_devices: Decimal
    peak_busy_devices: Decimal
    peak_activity: float
    peak_memory_gb: float | None
    peak_active_devices: int

    def as_evidence(self) -> dict:
        return {"start": self.start.isoformat(), "end": self.end.isoformat(),
                "samples": self.samples, "mean_busy_devices": str(self.mean_busy_devices),
                "peak_busy_devices": str(self.peak_busy_devices),
                "peak_activity": round(self.peak_activity, 4),
                "peak_memory_gb": self.peak_memory_gb,
                "peak_active_devices": self.peak_active_devices}

    @property
    def text(self) -> str:
        memory = (f", at most {self.peak_memory_gb:g} GB on one device"
                  if self.peak_memory_gb is not None else "")
        if not self.samples:
            return "no GPU series in its namespace over the window: nothing ran on its devices"
        return (f"{self.samples} samples: on average {devices_text(self.mean_busy_devices)} "
                f"device(s) busy, at most {devices_text(self.peak_busy_devices)} at once; the "
                f"busiest device peaked at {self.peak_activity:.0%}{memory}")


def summarise(samples: Iterable[Sample], start: dt.datetime, end: dt.datetime
              ) -> SeriesSummary:
    """The samples in (start, end], summed up; no samples: everything zero."""
    inside = [s for s in samples if start < s.at <= end]
    if not inside:
        return SeriesSummary(start, end, 0, Decimal(0), Decimal(0), 0.0, None, 0)
    memory = [s.memory_gb for s in inside if s.memory_gb is not None]
    busy = [max(Decimal(0), s.busy_devices) for s in inside]
    return SeriesSummary(
        start, end, len(inside), (sum(busy, Decimal(0)) / len(inside)).quantize(
            Decimal("0.0001")), max(busy), max(max(0.0, min(1.0, s.top_activity))
                                               for s in inside),
        max(memory) if memory else None, max(s.active_devices for s in inside))


# -- what is held ------------------------------------------------------------------------

@dataclass(frozen=True)
class Hold:
    """What one allocation keeps, as plain values."""

    allocation_id: int
    tenant: str
    pool: str
    route: Route
    held_devices: Decimal  # device-equivalents held (whole nodes for a dedicated block)
    held_since: dt.datetime
    rate_per_device_hour: Decimal
    whole_devices: int = 0
    mig_profile: str = ""
    mig_count: int = 0
    devices_per_node: int = 8
    gpu_memory_gb: int = 80
    mig_profiles_offered: tuple[str, ...] = ()
    mig_weights: tuple[tuple[str, str], ...] = ()

    @property
    def binding(self) -> bool:
        """Held under a contractual or regulatory origin (the matrix's binding row): changed
        only with the lead's yes."""
        return self.route in (Route.DEDICATED_BLOCK, Route.CONFIDENTIAL_POOL)


@dataclass(frozen=True)
class MigOffer:
    """A MIG pool a habitual whole-device hold could move to."""

    pool: str
    gpu_memory_gb: int
    mig_profiles: tuple[str, ...]
    rate_per_device_hour: Decimal


def cost_per_day(devices: Decimal, rate_per_device_hour: Decimal) -> Decimal:
    """What billing charges for `devices` held one day, to the cent: the rollup prices each
    hour on its own (`amount`, to four places) and a statement sums the hours, so this does."""
    return money(amount(Decimal(devices) * SECONDS_PER_HOUR, rate_per_device_hour) * 24)


@dataclass(frozen=True)
class Proposal:
    action: Action
    text: str
    devices_after: Decimal | None = None  # device-equivalents held after the action
    whole_devices_after: int | None = None
    mig_profile_after: str = ""
    mig_count_after: int | None = None
    pool_after: str = ""
    cost_per_day_after: Decimal | None = None

    def as_data(self) -> dict:
        return {"action": str(self.action), "text": self.text,
                "devices_after": None if self.devices_after is None else str(self.devices_after),
                "whole_devices_after": self.whole_devices_after,
                "mig_profile_after": self.mig_profile_after,
                "mig_count_after": self.mig_count_after, "pool_after": self.pool_after,
                "cost_per_day_after": (None if self.cost_per_day_after is None
                                       else str(self.cost_per_day_after))}


@dataclass(frozen=True)
class Finding:
    kind: Kind
    allocation_id: int
    tenant: str
    pool: str
    stranded_devices: Decimal
    cost_per_day: Decimal
    proposal: Proposal
    reason: str
    needs_yes: bool  # a binding hold: nothing happens without the lead's yes
    evidence: dict = field(default_factory=dict)


def _finding(kind: Kind, hold: Hold, stranded: Decimal, proposal: Proposal, reason: str,
             evidence: dict) -> Finding:
    return Finding(kind, hold.allocation_id, hold.tenant, hold.pool, stranded,
                   cost_per_day(stranded, hold.rate_per_device_hour), proposal, reason,
                   hold.binding, {**evidence, "rate_per_device_hour": str(
                       hold.rate_per_device_hour), "held_devices": str(hold.held_devices)})


def _held_over(hold: Hold, summary: SeriesSummary, th: Thresholds) -> bool:
    return hold.held_devices > 0 and hold.held_since <= summary.start and \
        summary.end - summary.start >= th.window


# -- the detectors ---------------------------------------------------------------------------

def idle_hold(hold: Hold, summary: SeriesSummary, th: Thresholds) -> Finding | None:
    """Held for the whole window and no device reached the idle threshold."""
    if not _held_over(hold, summary, th) or summary.peak_activity >= th.idle_activity:
        return None
    hours = th.window.total_seconds() / 3600
    binding = (" It is held under a contractual or regulatory origin: nothing changes "
               "without the lead's yes." if hold.binding else "")
    proposal = Proposal(Action.RELEASE, f"Release it: {devices_text(hold.held_devices)} "
                        f"device(s) go back to {hold.pool} and its charge stops.{binding}",
                        devices_after=Decimal(0), cost_per_day_after=Decimal("0.00"))
    reason = (f"No device of {hold.pool} held by this allocation reached "
              f"{th.idle_activity:.0%} activity in {hours:g} h ({summary.text}).")
    return _finding(Kind.IDLE_HOLD, hold, hold.held_devices, proposal, reason,
                    {"series": summary.as_evidence(), "thresholds": th.as_evidence()})


@dataclass(frozen=True)
class Run:
    """A running workload of the allocation: its devices and its pods' recent peak."""

    workload: str
    devices: Decimal
    running_since: dt.datetime
    peak_activity: float | None  # over the stall window; None: no series for its pods


def stalled_run(hold: Hold, runs: Sequence[Run], now: dt.datetime, th: Thresholds
                ) -> Finding | None:
    """Running workloads that hold devices and kept them under the stall threshold for the
    whole stall window (a run with no series yet is not judged)."""
    stalled = sorted((r for r in runs if r.devices > 0 and r.peak_activity is not None
                      and r.running_since <= now - th.stall_window
                      and r.peak_activity < th.stall_activity), key=lambda r: r.workload)
    if not stalled:
        return None
    devices = min(hold.held_devices, sum((r.devices for r in stalled), Decimal(0)))
    minutes = th.stall_window.total_seconds() / 60
    names = ", ".join(f"{r.workload} ({devices_text(r.devices)} device(s), peak "
                      f"{r.peak_activity:.0%})" for r in stalled)
    proposal = Proposal(Action.CHECK_RUN, f"Check {'these runs' if len(stalled) > 1 else 'the run'}"
                        f" (data input, a hung step): stopped, {devices_text(devices)} "
                        "device(s) go to the work queued behind them.")
    reason = (f"Running for {minutes:g} min or more with its devices under "
              f"{th.stall_activity:.0%} activity: {names}.")
    return _finding(Kind.STALLED_RUN, hold, devices, proposal, reason, {
        "window": {"start": (now - th.stall_window).isoformat(), "end": now.isoformat()},
        "runs": [{"workload": r.workload, "devices": str(r.devices),
                  "running_since": r.running_since.isoformat(),
                  "peak_activity": round(r.peak_activity or 0.0, 4)} for r in stalled],
        "thresholds": th.as_evidence()})


def _need(value: Decimal | float, headroom: Decimal) -> Decimal:
    return Decimal(str(value)) * (1 + headroom)


def _smallest_slice(memory_gb: Decimal, activity: Decimal, *, gpu_memory_gb: int,
                    offered: tuple[str, ...]):
    """The smallest fractional MIG profile of the family that holds the memory and the
    activity one device was measured at (the fleet's profile table)."""
    family = MIG_PROFILES_BY_MEMORY.get(gpu_memory_gb, MIG_PROFILES_BY_MEMORY[80])
    fits = [p for p in family if p.is_fraction and p.memory_gb >= memory_gb
            and p.share >= activity and (not offered or p.name in offered)]
    return min(fits, key=lambda p: (p.compute_slices, p.memory_gb), default=None)


def _weights(hold: Hold) -> dict[str, str]:
    return dict(hold.mig_weights)


def _shrink(hold: Hold, summary: SeriesSummary, th: Thresholds) -> Proposal | None:
    need = _need(summary.peak_busy_devices, th.headroom)
    if hold.route == Route.MIG_VCLUSTER:
        current = mig_profile(hold.mig_profile)
        if current is None or summary.peak_memory_gb is None:
            return None
        profile = _smallest_slice(_need(summary.peak_memory_gb, th.headroom),
                                  _need(summary.peak_activity, th.headroom),
                                  gpu_memory_gb=hold.gpu_memory_gb,
                                  offered=hold.mig_profiles_offered) or current
        count = max(1, summary.peak_active_devices, math.ceil(need / profile.share))
        count = min(count, hold.mig_count) if profile == current else count
        after = mig_device_equivalents(profile.name, count, _weights(hold))
        if after >= hold.held_devices:
            return None
        return Proposal(Action.SHRINK, f"{hold.mig_count} × {hold.mig_profile} → {count} × "
                        f"{profile.name} in {hold.pool}", devices_after=after,
                        mig_profile_after=profile.name, mig_count_after=count,
                        cost_per_day_after=cost_per_day(after, hold.rate_per_device_hour))
    devices = max(1, math.ceil(need))
    if hold.route == Route.DEDICATED_BLOCK:  # a block is whole nodes
        per_node = max(1, hold.devices_per_node)
        devices = math.ceil(devices / per_node) * per_node
    after = Decimal(devices)
    if after >= hold.held_devices:
        return None
    nodes = (f" ({devices // max(1, hold.devices_per_node)} node(s))"
             if hold.route == Route.DEDICATED_BLOCK else "")
    return Proposal(Action.SHRINK, f"{devices_text(hold.held_devices)} → {devices} device(s)"
                    f"{nodes} in {hold.pool}", devices_after=after, whole_devices_after=devices,
                    cost_per_day_after=cost_per_day(after, hold.rate_per_device_hour))


def _to_mig(hold: Hold, summary: SeriesSummary, th: Thresholds,
            offers: Sequence[MigOffer]) -> Proposal | None:
    """A habitual whole-device hold whose devices each did a slice's work: the matrix's own
    small cell (MIG under vCluster), one slice per device that was active."""
    if hold.binding or hold.route != Route.SHARED_POOL or summary.peak_memory_gb is None:
        return None
    best = None
    for offer in offers:
        profile = _smallest_slice(_need(summary.peak_memory_gb, th.headroom),
                                  _need(summary.peak_activity, th.headroom),
                                  gpu_memory_gb=offer.gpu_memory_gb, offered=offer.mig_profiles)
        if profile is None:
            continue
        count = max(1, summary.peak_active_devices)
        after = mig_device_equivalents(profile.name, count, _weights(hold))
        cost = cost_per_day(after, offer.rate_per_device_hour)
        if best is None or cost < best.cost_per_day_after:
            best = Proposal(Action.MOVE_TO_MIG, f"{devices_text(hold.held_devices)} whole "
                            f"device(s) → {count} × MIG {profile.name} in {offer.pool} (a new "
                            "request pre-filled from this finding)", devices_after=after,
                            mig_profile_after=profile.name, mig_count_after=count,
                            pool_after=offer.pool, cost_per_day_after=cost)
    return best


def oversized(hold: Hold, summary: SeriesSummary, th: Thresholds,
              offers: Sequence[MigOffer] = ()) -> Finding | None:
    """Busy, but its measured peak (activity and memory, plus headroom) fits fewer devices,
    a smaller MIG profile, or — habitual whole devices — MIG slices; the cheaper is proposed."""
    if not _held_over(hold, summary, th) or summary.peak_activity < th.idle_activity:
        return None
    options = [p for p in (_shrink(hold, summary, th), _to_mig(hold, summary, th, offers))
               if p is not None and p.devices_after < hold.held_devices]
    if not options:
        return None
    proposal = min(options, key=lambda p: (p.cost_per_day_after, p.action != Action.SHRINK))
    stranded = hold.held_devices - (proposal.devices_after or Decimal(0))
    if proposal.cost_per_day_after >= cost_per_day(hold.held_devices, hold.rate_per_device_hour):
        return None  # another pool's rate can make the smaller hold no cheaper
    reason = (f"Its measured peak over {th.window.total_seconds() / 3600:g} h with "
              f"{th.headroom:.0%} headroom fits {proposal.text} ({summary.text}).")
    return _finding(Kind.OVERSIZED, hold, stranded, proposal, reason,
                    {"series": summary.as_evidence(), "thresholds": th.as_evidence(),
                     "alternatives": [p.as_data() for p in options]})


# -- quota that says no --------------------------------------------------------------------

@dataclass(frozen=True)
class QueueFacts:
    """An allocation's queue as last read: its quota and the work that waits."""

    hold: Hold
    gpu_model: str
    cohort: str
    nominal: Decimal
    borrowing_limit: Decimal | None  # None: no limit
    usage: Decimal
    pending_workloads: int
    pending_devices: Decimal
    oldest_pending_since: dt.datetime | None


@dataclass(frozen=True)
class IdleCapacity:
    """Validated devices of a pool nobody uses: free (promised to no one) or held idle."""

    pool: str
    gpu_model: str
    cohort: str
    free_devices: Decimal
    idle_held_devices: Decimal = Decimal(0)


def quota_blocked(queue: QueueFacts, idle: Sequence[IdleCapacity], now: dt.datetime,
                  th: Thresholds) -> Finding | None:
    """Work pending past the stall window in a queue at its quota, while devices of the same
    GPU model idle where no cohort lends them to it."""
    if queue.pending_workloads <= 0 or queue.pending_devices <= 0 or \
            queue.oldest_pending_since is None or \
            queue.oldest_pending_since > now - th.stall_window:
        return None
    if queue.usage + queue.pending_devices <= queue.nominal:
        return None  # the quota has room: something else holds the work (placement, limits)
    unreachable = [c for c in idle if c.gpu_model == queue.gpu_model
                   and not (queue.cohort and c.cohort == queue.cohort)
                   and c.free_devices + c.idle_held_devices > 0]
    idle_devices = sum((c.free_devices + c.idle_held_devices for c in unreachable), Decimal(0))
    if idle_devices <= 0:
        return None
    missing = queue.usage + queue.pending_devices - queue.nominal
    wanted = min(idle_devices, missing)
    where = ", ".join(f"{c.pool} ({devices_text(c.free_devices + c.idle_held_devices)})"
                      for c in sorted(unreachable, key=lambda c: c.pool))
    fix = (f"put {queue.hold.pool}'s queue in a cohort with them" if not queue.cohort
           else f"let cohort {queue.cohort} borrow them")
    proposal = Proposal(Action.RAISE_QUOTA, f"A temporary raise of {devices_text(wanted)} "
                        f"device(s), or {fix}.", devices_after=queue.hold.held_devices + wanted,
                        cost_per_day_after=cost_per_day(queue.hold.held_devices + wanted,
                                                        queue.hold.rate_per_device_hour))
    waited = (now - queue.oldest_pending_since).total_seconds() / 60
    reason = (f"{queue.pending_workloads} workload(s) asking {devices_text(queue.pending_devices)}"
              f" device(s) wait (the oldest {waited:.0f} min) at a quota of "
              f"{devices_text(queue.nominal)} with {devices_text(queue.usage)} in use, while "
              f"{devices_text(idle_devices)} validated {queue.gpu_model} device(s) idle out of "
              f"its reach: {where}.")
    return _finding(Kind.QUOTA_BLOCKED, queue.hold, wanted, proposal, reason, {
        "queue": {"cohort": queue.cohort, "nominal": str(queue.nominal),
                  "borrowing_limit": (None if queue.borrowing_limit is None
                                      else str(queue.borrowing_limit)),
                  "usage": str(queue.usage), "pending_workloads": queue.pending_workloads,
                  "pending_devices": str(queue.pending_devices),
                  "oldest_pending_since": queue.oldest_pending_since.isoformat()},
        "idle": [{"pool": c.pool, "cohort": c.cohort, "free_devices": str(c.free_devices),
                  "idle_held_devices": str(c.idle_held_devices)} for c in unreachable],
        "thresholds": th.as_evidence()})


def idle_part(hold: Hold, summary: SeriesSummary) -> Decimal:
    """Held device-equivalents the series never kept busy at once (for quota's idle side)."""
    return max(Decimal(0), hold.held_devices - summary.peak_busy_devices)


# -- the grace period --------------------------------------------------------------------

class Unanswered(StrEnum):
    """A tenant's standing answer to a finding nobody answered in its grace period."""

    NOTIFY = "notify"
    SHRINK = "shrink"
    RELEASE = "release"


# Which proposals each policy may accept on the lead's behalf. A move to MIG is a new request
# and a stalled run is the tenant's own work; quota is the platform's: never by policy.
POLICY_ACCEPTS = {Unanswered.NOTIFY: frozenset(),
                  Unanswered.SHRINK: frozenset({Action.SHRINK}),
                  Unanswered.RELEASE: frozenset({Action.SHRINK, Action.RELEASE})}


@dataclass(frozen=True)
class GraceDecision:
    due: bool  # the grace period is over: apply the policy now
    accept: bool  # accept the proposal on the lead's behalf (else remind)
    reason: str


def grace_action(*, policy: Unanswered, action: Action, needs_yes: bool,
                 found_at: dt.datetime, grace: dt.timedelta, now: dt.datetime
                 ) -> GraceDecision:
    """What the tenant's policy does with an open finding at `now`."""
    if now < found_at + grace:
        return GraceDecision(False, False, "The grace period runs.")
    days = grace.total_seconds() / 86400
    if needs_yes:
        return GraceDecision(True, False, f"Unanswered for {days:g} day(s); held under a "
                             "contractual or regulatory origin, so only the lead's yes "
                             "changes it: the leads are reminded.")
    if action in POLICY_ACCEPTS[policy]:
        return GraceDecision(True, True, f"Unanswered for {days:g} day(s): the tenant's "
                             f"policy ({policy}) accepts the proposed {action}.")
    return GraceDecision(True, False, f"Unanswered for {days:g} day(s): the tenant's policy "
                         f"({policy}) reminds the leads of a proposed {action}.")
