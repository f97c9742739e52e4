"""Intake decisions as pure functions: routing, sizing, pricing, fit and lifecycle rules.

No ORM, no clock, no I/O: every input is a plain value and every answer is a frozen
dataclass with a human-readable reason, so the live preview, the review page, the API and
the audit trail all explain the same decision in the same words.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum

from fleet.allocations.dispatch import split_shares
from fleet.domain import (
    SLICES_PER_DEVICE,
    Route,
    devices_text,
    largest_job,
    mig_device_equivalents,
    mig_profile,
    smallest_profile_for_memory,
)
from fleet.inventory.pricing import money

HOURS_PER_MONTH = Decimal("730")  # 365 × 24 / 12: the usual cloud month
MAX_REPLICAS = 512
MIN_REFERENCE_LENGTH = 3


class Isolation(StrEnum):
    CONTRACTUAL = "contractual"
    REGULATORY = "regulatory"
    HABITUAL = "habitual"

    @property
    def is_binding(self) -> bool:
        """Contracts and regulation bind; habit does not."""
        return self is not Isolation.HABITUAL


class Fill(StrEnum):
    SMALL = "small"
    FULL = "full"


ISOLATION_LABELS = {
    Isolation.CONTRACTUAL: "Contractual",
    Isolation.REGULATORY: "Regulatory",
    Isolation.HABITUAL: "Habitual",
}
FILL_LABELS = {Fill.SMALL: "Small (a fraction of a device)", Fill.FULL: "Full (whole devices)"}

# The intake matrix, once: (isolation origin's row, device fill) → route. route_request reads
# it and the form's matrix display renders it (matrix_table).
ORIGIN_ROWS = (("binding", "Contractual or regulatory"), ("habitual", "Habitual"))
ROUTING_MATRIX: dict[tuple[str, Fill], Route] = {
    ("binding", Fill.SMALL): Route.CONFIDENTIAL_POOL,
    ("binding", Fill.FULL): Route.DEDICATED_BLOCK,
    ("habitual", Fill.SMALL): Route.MIG_VCLUSTER,
    ("habitual", Fill.FULL): Route.SHARED_POOL,
}


def origin_row(isolation: Isolation) -> str:
    return "binding" if isolation.is_binding else "habitual"


def matrix_table(active: tuple[str, str] | None) -> dict:
    """The matrix as the form shows it, the answered cell marked."""
    return {"matrix": [{"label": label, "cells": [
        {"route": ROUTING_MATRIX[(row, fill)], "active": active == (row, str(fill))}
        for fill in Fill]} for row, label in ORIGIN_ROWS],
        "matrix_cols": [FILL_LABELS[fill] for fill in Fill]}


# ---------------------------------------------------------------------------------------
# Routing


@dataclass(frozen=True)
class IntakeAnswers:
    """What the requester answered, as plain values."""

    isolation: Isolation | None
    fill: Fill | None
    reference: str = ""
    whole_devices: int = 0  # fill = full: total whole devices
    replicas: int = 0  # fill = small: how many replicas, each one slice
    mig_profile: str = ""  # fill = small: a named profile …
    memory_gb: int = 0  # … or the memory one replica needs
    gpu_memory_gb: int = 80
    offered_profiles: tuple[str, ...] = ()  # what the MIG pool offers (memory → profile)
    mig_weights: tuple[tuple[str, str], ...] = ()  # PORTAL_MIG_WEIGHTS, as (profile, weight)


@dataclass(frozen=True)
class RouteDecision:
    route: Route | None
    reason: str
    isolation: Isolation | None = None
    fill: Fill | None = None  # the effective fill (a fraction that fits no profile is full)
    whole_devices: int = 0  # whole devices requested (or one per replica when rounded up)
    mig_profile: str = ""
    mig_count: int = 0
    errors: tuple[tuple[str, str], ...] = ()  # (field, message) that block the route
    mig_weights: tuple[tuple[str, str], ...] = ()

    @property
    def charges_idle(self) -> bool:
        """Whole devices reserved for one tenant are paid for, used or not."""
        return self.route in (Route.DEDICATED_BLOCK, Route.CONFIDENTIAL_POOL)

    @property
    def ok(self) -> bool:
        return self.route is not None and not self.errors

    @property
    def device_equivalents(self) -> Decimal:
        if self.route is Route.MIG_VCLUSTER:
            if mig_profile(self.mig_profile) is None:
                return Decimal(0)
            return mig_device_equivalents(self.mig_profile, self.mig_count,
                                          dict(self.mig_weights))
        return Decimal(self.whole_devices)

    @property
    def cell(self) -> tuple[str, str] | None:
        """The intake-matrix cell: (binding|habitual, small|full)."""
        if self.isolation is None or self.fill is None:
            return None
        return (origin_row(self.isolation), str(self.fill))


def validate_answers(a: IntakeAnswers) -> tuple[tuple[str, str], ...]:
    """Field errors in the answers themselves, independent of any pool."""
    errors: list[tuple[str, str]] = []
    if a.isolation is None:
        errors.append(("isolation_origin", "Say where the need for separation comes from."))
    elif a.isolation.is_binding and len(a.reference.strip()) < MIN_REFERENCE_LENGTH:
        what = "contract id" if a.isolation is Isolation.CONTRACTUAL else \
            "regulation or data class"
        errors.append(("isolation_reference",
                       f"A {a.isolation.value} boundary needs evidence: give the {what}."))
    if a.fill is None:
        errors.append(("device_fill", "Say whether one replica fills a whole device or less."))
    elif a.fill is Fill.FULL:
        if a.whole_devices < 1:
            errors.append(("whole_devices", "Ask for at least one whole device."))
        elif a.whole_devices > MAX_REPLICAS:
            errors.append(("whole_devices", f"At most {MAX_REPLICAS} devices in one request."))
    else:
        if a.replicas < 1:
            errors.append(("replicas", "Ask for at least one replica."))
        elif a.replicas > MAX_REPLICAS:
            errors.append(("replicas", f"At most {MAX_REPLICAS} replicas in one request."))
        if a.mig_profile:
            profile = mig_profile(a.mig_profile)
            if profile is None:
                errors.append(("mig_profile", f"{a.mig_profile!r} is not a MIG profile."))
            elif not profile.is_fraction:
                errors.append(("mig_profile", f"{profile.name} is a whole device: choose "
                               "'Full' for whole devices."))
        elif a.memory_gb < 1:
            errors.append(("mig_profile", "Choose a MIG profile or give the memory one replica "
                           "needs."))
    return tuple(errors)


MAX_MEMORY_GB = 4096  # far above any device; the pool's own device size is checked too
MAX_LEAD_DAYS = 366  # a request starts within a year
MAX_WINDOW_DAYS = 3 * 366  # and lasts at most three years


def validate_request_fields(*, starts_on: dt.date | None, ends_on: dt.date | None,
                            memory_gb: int | None, today: dt.date, new: bool
                            ) -> tuple[tuple[str, str], ...]:
    """Limits that reflect reality, for every way a request is written (form, API,
    service): the window within sane bounds of today, the memory per replica a number a
    device could hold. `new`: a start in the past is allowed only for an existing request
    (an approved one's start has passed)."""
    errors: list[tuple[str, str]] = []
    if starts_on is not None:
        if new and starts_on < today - dt.timedelta(days=1):
            errors.append(("starts_on", "The start is in the past."))
        elif starts_on > today + dt.timedelta(days=MAX_LEAD_DAYS):
            errors.append(("starts_on", f"The start is more than {MAX_LEAD_DAYS} days ahead; "
                           "file closer to the date."))
    if starts_on is not None and ends_on is not None:
        if ends_on < starts_on:
            errors.append(("ends_on", "The end is before the start."))
        elif ends_on > starts_on + dt.timedelta(days=MAX_WINDOW_DAYS):
            errors.append(("ends_on", "At most three years per request; renew it later."))
    if memory_gb is not None and memory_gb > MAX_MEMORY_GB:
        errors.append(("memory_gb", f"At most {MAX_MEMORY_GB} GB per replica."))
    return tuple(errors)


def route_request(a: IntakeAnswers) -> RouteDecision:
    """The intake matrix: (isolation origin × device fill) → route, with the reason why."""
    errors = validate_answers(a)
    if errors:
        return RouteDecision(None, "Not routed yet: " + " ".join(m for _, m in errors),
                             isolation=a.isolation, fill=a.fill, errors=errors)
    assert a.isolation is not None and a.fill is not None

    fill = a.fill
    whole, profile_name, count = a.whole_devices, "", 0
    sizing_note = ""
    if fill is Fill.SMALL:
        profile = mig_profile(a.mig_profile) if a.mig_profile else \
            smallest_profile_for_memory(a.memory_gb, gpu_memory_gb=a.gpu_memory_gb,
                                        offered=a.offered_profiles)
        if profile is None and a.gpu_memory_gb and a.memory_gb > a.gpu_memory_gb:
            message = (f"{a.memory_gb} GB per replica is more than one device holds "
                       f"({a.gpu_memory_gb} GB): split the replica across devices and ask "
                       "for whole devices ('Full'), or lower the memory.")
            return RouteDecision(None, "Not routed yet: " + message, isolation=a.isolation,
                                 fill=a.fill, errors=(("memory_gb", message),))
        if profile is None:
            # A fraction that fits no MIG profile is, in practice, a whole device.
            fill, whole = Fill.FULL, a.replicas
            sizing_note = (f" {a.memory_gb} GB per replica fits no MIG slice of a "
                           f"{a.gpu_memory_gb} GB device, so each of the {a.replicas} "
                           f"replica(s) is counted as one whole device.")
        else:
            whole, profile_name, count = 0, profile.name, a.replicas
            if not a.mig_profile:
                sizing_note = (f" {a.memory_gb} GB per replica maps to the {profile.name} "
                               "slice, the smallest that holds it.")

    ref = f" ({a.reference.strip()})" if a.isolation.is_binding else ""
    origin = a.isolation.value
    route = ROUTING_MATRIX[(origin_row(a.isolation), fill)]
    if route is not Route.MIG_VCLUSTER and "slice, the smallest" in sizing_note:
        sizing_note = ""  # no slice on this route: each replica gets a whole device
    if route is Route.DEDICATED_BLOCK:
        size = (f"{whole} whole device(s) fill whole nodes" if a.fill is Fill.FULL else
                f"its {whole} replica(s) need whole devices (no MIG slice holds them), and "
                "whole devices behind a binding boundary come as whole nodes")
        reason = (f"Dedicated block: the {origin} boundary{ref} needs hardware that no other "
                  f"tenant shares, and {size}. Whole validated nodes are reserved for the "
                  "tenant; their idle hours are priced back to the tenant that required them.")
    elif route is Route.CONFIDENTIAL_POOL:
        whole = count
        reason = (f"Confidential pool: the {origin} boundary{ref} is not softened by a MIG "
                  f"slice, so each of the {count} replica(s) gets a whole device on nodes "
                  "running the confidential-compute BIOS profile. Whole devices are charged "
                  "whether used or not.")
        profile_name, count = "", 0
    elif route is Route.MIG_VCLUSTER:
        share = mig_device_equivalents(profile_name, count, dict(a.mig_weights))
        reason = (f"MIG under vCluster: {count} × {profile_name} slice(s) "
                  f"(= {devices_text(share)} device(s)) through DRA claims, with a virtual "
                  "control plane of the tenant's own. A habitual preference for separation is "
                  "met by that control plane; the physical GPUs are shared with other tenants.")
    else:
        reason = (f"Shared pool: {whole} whole device(s) under a Kueue quota in the shared "
                  "cohort, borrowing beyond it when peers are idle. A habitual boundary is "
                  "not a compliance requirement, so no hardware is reserved.")
    return RouteDecision(route, reason + sizing_note, isolation=a.isolation, fill=fill,
                         whole_devices=whole, mig_profile=profile_name, mig_count=count,
                         mig_weights=a.mig_weights)


def override_decision(decision: RouteDecision, route: Route, why: str) -> RouteDecision:
    """An admin's route override, resized for the new route, with the reason kept."""
    if decision.route is None:
        raise ValueError("Only a routed request can be overridden.")
    if route is decision.route:
        return decision
    whole, profile, count = decision.whole_devices, "", 0
    if route is Route.MIG_VCLUSTER:
        if not decision.mig_profile:
            raise ValueError("MIG under vCluster needs a MIG profile: request changes so the "
                             "requester can size it in slices.")
        whole, profile, count = 0, decision.mig_profile, decision.mig_count
    elif decision.route is Route.MIG_VCLUSTER:
        # From slices to whole devices: one per replica where the boundary binds, else packed.
        whole = (decision.mig_count if route is Route.CONFIDENTIAL_POOL
                 else math.ceil(decision.device_equivalents))
    reason = (f"Route overridden from {Route(decision.route).label} to {route.label} by a "
              f"platform admin: {why.strip()} (The matrix said: {decision.reason})")
    return RouteDecision(route, reason, isolation=decision.isolation, fill=decision.fill,
                         whole_devices=whole, mig_profile=profile, mig_count=count,
                         mig_weights=decision.mig_weights)


# ---------------------------------------------------------------------------------------
# Sizing, price and fit against a pool


@dataclass(frozen=True)
class PoolFacts:
    """What a plan needs to know of the target pool, as plain values."""

    name: str
    route: Route
    gpu_model: str
    devices_per_node: int
    capacity_devices: Decimal  # promisable (validated, healthy) device-equivalents
    allocated_devices: Decimal  # held by existing allocations
    rate_per_device_hour: Decimal
    mig_profiles: tuple[str, ...] = ()
    capacity_source: str = "validated fleet"
    pool_id: int | None = None
    free_whole_nodes: int | None = None  # None: not counted (a plan over plain numbers)
    free_mig_slices: dict[str, int] | None = None  # per profile, from DRA ResourceSlices
    cluster: str = ""  # the cluster the pool lives in, in words; blank: one cluster only
    # A dispatched pool (MultiKueue): each worker in words with the pool's validated devices
    # there, which the quota's split follows.
    dispatch_to: tuple[tuple[str, int], ...] = ()

    @property
    def free_devices(self) -> Decimal:
        return max(Decimal(0), self.capacity_devices - self.allocated_devices)


class Fit(StrEnum):
    FITS_NOW = "fits_now"
    FITS_LATER = "fits_later"  # after allocations already promised end
    NEVER = "never"

    @property
    def label(self) -> str:
        return FIT_LABELS[self]


FIT_LABELS = {Fit.FITS_NOW: "fits now", Fit.FITS_LATER: "fits later", Fit.NEVER: "does not fit"}


@dataclass(frozen=True)
class RequestPlan:
    decision: RouteDecision
    pool: PoolFacts
    held_devices: Decimal  # what the tenant holds (whole nodes for a dedicated block)
    nodes: int
    charged_device_hours_per_month: Decimal
    expected_used_device_hours_per_month: Decimal
    idle_device_hours_per_month: Decimal
    monthly_price: Decimal
    window_hours: Decimal | None
    window_price: Decimal | None
    fit: Fit
    fit_reason: str
    notes: tuple[str, ...] = ()
    errors: tuple[tuple[str, str], ...] = field(default=())

    @property
    def ok(self) -> bool:
        return self.decision.ok and not self.errors


def dispatch_note(pool: PoolFacts, devices: int) -> str:
    """Where a dispatched pool's request lands, and what the split means for its jobs."""
    capacity = {name: n for name, n in pool.dispatch_to}
    shares = split_shares(devices, capacity)
    split = ", ".join(f"{name} {shares[name]}" for name, _n in pool.dispatch_to)
    where = ", ".join(f"{name} ({n} validated device{'s' if n != 1 else ''})"
                      for name, n in pool.dispatch_to)
    return (f"Queued on {pool.cluster or 'the MultiKueue manager'}; MultiKueue runs its jobs "
            f"on the workers where {pool.name}'s nodes are: {where}. The quota is split in "
            f"that proportion ({split}) and each job runs on one worker, so the largest job "
            f"is {largest_job(shares)} device(s).")


def plan_request(decision: RouteDecision, pool: PoolFacts, *, expected_utilisation: int = 100,
                 window_hours: Decimal | None = None) -> RequestPlan:
    """Devices held, price at the pool's rate, and whether it fits the pool's capacity."""
    errors: list[tuple[str, str]] = []
    notes: list[str] = []
    if decision.route is not None and pool.route != decision.route:
        errors.append(("pool", f"{pool.name} serves {Route(pool.route).label}, "
                       f"not {Route(decision.route).label}."))
    if decision.route is Route.MIG_VCLUSTER and pool.mig_profiles and \
            decision.mig_profile not in pool.mig_profiles:
        errors.append(("mig_profile", f"{pool.name} offers {', '.join(pool.mig_profiles)}; "
                       f"not {decision.mig_profile}."))

    requested = decision.device_equivalents
    if pool.dispatch_to:
        notes.append(dispatch_note(pool, int(requested)))
    elif pool.cluster:
        notes.append(f"Lands in {pool.cluster}: {pool.name} lives there, so its objects, "
                     "guards and queues are made in that cluster.")
    per_node = max(1, pool.devices_per_node)
    if decision.route is Route.DEDICATED_BLOCK:
        nodes = math.ceil(decision.whole_devices / per_node) if decision.whole_devices else 0
        held = Decimal(nodes * per_node)
        if held > requested:
            notes.append(f"A dedicated block reserves whole nodes: {nodes} node(s) × {per_node} "
                         f"devices = {held} devices held for {requested} requested.")
    elif decision.route is Route.MIG_VCLUSTER:
        held = requested
        slices = (mig_profile(decision.mig_profile).compute_slices * decision.mig_count
                  if decision.mig_profile else 0)
        nodes = math.ceil(slices / (SLICES_PER_DEVICE * per_node)) if slices else 0
    else:
        held = requested
        nodes = math.ceil(decision.whole_devices / per_node) if decision.whole_devices else 0
    if nodes > 1 and decision.route in (Route.SHARED_POOL, Route.CONFIDENTIAL_POOL,
                                        Route.MIG_VCLUSTER):
        notes.append(f"Larger than one node ({per_node} devices): it spans {nodes} nodes, so "
                     "no single replica may need more than one node.")
    elif nodes > 1:
        notes.append(f"Spans {nodes} nodes of {per_node} devices each.")

    utilisation = Decimal(max(0, min(100, expected_utilisation))) / 100
    charged = held * HOURS_PER_MONTH
    used = requested * utilisation * HOURS_PER_MONTH
    idle = max(Decimal(0), charged - used)
    monthly = money(charged * pool.rate_per_device_hour)
    window_price = (money(held * window_hours * pool.rate_per_device_hour)
                    if window_hours is not None else None)

    fit, fit_reason = _fit(decision, pool, held, nodes)
    return RequestPlan(
        decision=decision, pool=pool, held_devices=held, nodes=nodes,
        charged_device_hours_per_month=charged, expected_used_device_hours_per_month=used,
        idle_device_hours_per_month=idle, monthly_price=monthly, window_hours=window_hours,
        window_price=window_price, fit=fit, fit_reason=fit_reason, notes=tuple(notes),
        errors=tuple(errors),
    )


def _fit(decision: RouteDecision, pool: PoolFacts, held: Decimal, nodes: int
         ) -> tuple[Fit, str]:
    """Fits now / fits once promised allocations end / can never fit, with the reason."""
    free, capacity = pool.free_devices, pool.capacity_devices
    where = f"{pool.name} ({pool.capacity_source})"
    if held <= 0:
        return Fit.NEVER, "Nothing to place yet."
    if capacity <= 0:
        return Fit.NEVER, (f"Nothing can be promised in {pool.name} now: "
                           f"{pool.capacity_source}. Only validated, healthy, uncordoned "
                           "devices are promised; the platform team brings such nodes into "
                           "the pool (or choose another GPU model).")
    if held > capacity:
        return Fit.NEVER, (f"Can never fit {pool.name}: it needs {devices_text(held)} "
                           f"device(s) and the pool can promise {devices_text(capacity)} "
                           f"({pool.capacity_source}).")
    if held > free:
        return Fit.FITS_LATER, (f"Does not fit now: {devices_text(free)} of "
                                f"{devices_text(capacity)} device(s) are free in {where}; it "
                                "fits once allocations already promised end.")
    if decision.route is Route.DEDICATED_BLOCK and pool.free_whole_nodes is not None \
            and nodes > pool.free_whole_nodes:
        return Fit.FITS_LATER, (f"Does not fit now: it needs {nodes} whole validated node(s) "
                                f"and {pool.free_whole_nodes} are free in {where}.")
    if decision.route is Route.MIG_VCLUSTER and pool.free_mig_slices is not None:
        if decision.mig_profile not in pool.free_mig_slices:
            carried = ", ".join(sorted(pool.free_mig_slices)) or "none"
            return Fit.NEVER, (
                f"Can never fit {pool.name} as it is laid out: no schedulable node carries "
                f"{decision.mig_profile} slices (its nodes offer: {carried}). Choose one of "
                "those, or ask the platform team to change the MIG layout.")
        free_slices = pool.free_mig_slices.get(decision.mig_profile, 0)
        if decision.mig_count > free_slices:
            return Fit.FITS_LATER, (
                f"Does not fit now: {free_slices} free {decision.mig_profile} slice(s) on "
                f"schedulable nodes in {pool.name}, {decision.mig_count} needed; it fits once "
                "slices are freed or the MIG layout is changed.")
        return Fit.FITS_NOW, (f"Fits now: {decision.mig_count} of {free_slices} free "
                              f"{decision.mig_profile} slice(s) in {where}.")
    return Fit.FITS_NOW, (f"Fits now: {devices_text(held)} of {devices_text(free)} free "
                          f"device(s) in {where}.")


# ---------------------------------------------------------------------------------------
# Lifecycle rules


class Status(StrEnum):
    DRAFT = "draft"
    SUBMITTED = "submitted"
    APPROVED = "approved"
    DENIED = "denied"
    CHANGES_REQUESTED = "changes_requested"
    PROVISIONING = "provisioning"
    ACTIVE = "active"
    EXPIRING = "expiring"
    RETIRED = "retired"
    FAILED = "failed"
    WITHDRAWN = "withdrawn"


class Actor(StrEnum):
    LEAD = "lead"  # a team lead of the request's tenant
    ADMIN = "admin"


@dataclass(frozen=True)
class TransitionRule:
    action: str
    from_states: frozenset[Status]
    to_state: Status
    actor: Actor
    needs_reason: bool


TRANSITIONS: dict[str, TransitionRule] = {
    r.action: r for r in (
        TransitionRule("submit", frozenset({Status.DRAFT, Status.CHANGES_REQUESTED}),
                       Status.SUBMITTED, Actor.LEAD, needs_reason=False),
        TransitionRule("approve", frozenset({Status.SUBMITTED}), Status.APPROVED, Actor.ADMIN,
                       needs_reason=True),
        TransitionRule("deny", frozenset({Status.SUBMITTED}), Status.DENIED, Actor.ADMIN,
                       needs_reason=True),
        TransitionRule("request_changes", frozenset({Status.SUBMITTED}),
                       Status.CHANGES_REQUESTED, Actor.ADMIN, needs_reason=True),
        # The lead's way back: a filed request taken out of review; a draft deleted.
        TransitionRule("withdraw", frozenset({Status.SUBMITTED, Status.CHANGES_REQUESTED}),
                       Status.WITHDRAWN, Actor.LEAD, needs_reason=False),
        TransitionRule("delete", frozenset({Status.DRAFT}), Status.WITHDRAWN, Actor.LEAD,
                       needs_reason=False),
    )
}
EDITABLE_STATES = frozenset({Status.DRAFT, Status.CHANGES_REQUESTED})
# Still wanted and holding nothing yet: the states in which a request can be told when
# capacity frees up (intake.selectors.why_not_yet).
WAITING_STATES = frozenset({Status.DRAFT, Status.SUBMITTED, Status.CHANGES_REQUESTED})


@dataclass(frozen=True)
class TransitionCheck:
    allowed: bool
    to_state: Status | None
    reason: str


def check_transition(*, action: str, status: Status, is_admin: bool, is_lead: bool,
                     reason: str = "") -> TransitionCheck:
    rule = TRANSITIONS.get(action)
    if rule is None:
        return TransitionCheck(False, None, f"Unknown action {action!r}.")
    if rule.actor is Actor.ADMIN and not is_admin:
        return TransitionCheck(False, None, "Only a platform admin may do this.")
    if rule.actor is Actor.LEAD and not is_lead:
        return TransitionCheck(False, None, "Only a team lead of this tenant may do this.")
    if status not in rule.from_states:
        allowed_from = " or ".join(sorted(s.value.replace("_", " ") for s in rule.from_states))
        return TransitionCheck(False, None, f"This request is {status.value.replace('_', ' ')}; "
                               f"'{action.replace('_', ' ')}' needs it to be {allowed_from}.")
    if rule.needs_reason and not reason.strip():
        return TransitionCheck(False, None, "Give a reason: it is shown to the requester and "
                               "kept in the audit trail.")
    return TransitionCheck(True, rule.to_state, "")


def no_pool_message(route: Route | str, gpu_model: str = "") -> str:
    """The one sentence for a route no active pool serves (with this GPU model)."""
    return (f"No active pool serves {Route(route).label}"
            + (f" with {gpu_model}" if gpu_model else ""))


def submit_blocked(decision: RouteDecision, plan: RequestPlan | None, gpu_model: str) -> str:
    """Why submitting these answers cannot pass (the service would refuse it), or ''. Only
    what no edit of the dates or a wait can fix: the form disables its submit with it."""
    if decision.route and plan is None:
        return no_pool_message(decision.route, gpu_model) + ": change the answers."
    if plan is not None and plan.fit is Fit.NEVER:
        return plan.fit_reason
    return ""


# What the audit calls each editable answer (the form's words, shortened for one line).
FIELD_WORDS = {
    "title": "title", "workload_kind": "workload kind", "isolation_origin": "isolation origin",
    "isolation_reference": "evidence", "device_fill": "device fill",
    "whole_devices": "whole devices", "replicas": "replicas", "mig_profile": "MIG profile",
    "memory_gb": "GPU memory per replica (GB)", "gpu_model": "GPU model", "starts_on": "start",
    "ends_on": "end", "expected_utilisation": "expected utilisation (%)",
    "justification": "justification",
}
# Free text too long for one line: the audit says it changed, the data keeps both versions.
PROSE_FIELDS = frozenset({"justification", "isolation_reference", "title"})


def edit_summary(changed: dict[str, tuple[str, str]]) -> str:
    """One sentence for an edit: each changed answer in the form's words, old → new.
    `changed` maps a field to its (old, new) as the page shows them."""
    parts = []
    for name in FIELD_WORDS:  # the form's order, not the alphabet's
        if name not in changed:
            continue
        old, new = changed[name]
        if name in PROSE_FIELDS:
            parts.append(f"{FIELD_WORDS[name]} rewritten" if old and new else
                         f"{FIELD_WORDS[name]} {'added' if new else 'removed'}")
        else:
            parts.append(f"{FIELD_WORDS[name]} {old or 'none'} → {new or 'none'}")
    return ("Changed " + "; ".join(parts) + ".") if parts else "Nothing changed."
