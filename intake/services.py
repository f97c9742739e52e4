"""Writes of the intake app: each checks the actor, audits, and is safe under concurrency."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from fleet.allocations.lifecycle import RENEWABLE
from fleet.allocations.services import (
    allocation_create,
    allocation_extend,
    allocation_reserve_nodes,
)
from fleet.domain import devices_text
from fleet.models import Allocation, Pool, Route
from tenants.access import roles_for
from tenants.audit import audit_record, reason_error
from tenants.errors import DomainError
from tenants.models import Tenant
from tenants.notifications import Kind, notify, tenant_leads

from .domain import (
    FIELD_WORDS,
    TRANSITIONS,
    Fit,
    Status,
    check_transition,
    edit_summary,
    no_pool_message,
)
from .models import CapacityRequest
from .selectors import (
    approval_decision,
    approval_plan,
    plan_for_request,
    pool_for_route,
)
from .validation import normalised, request_field_errors

EDITABLE_FIELDS = tuple(FIELD_WORDS)  # the answers a lead may change, in the form's order


class IntakeError(DomainError):
    """A refusal of the intake: a message for the user and optional field errors."""


def _check(request: CapacityRequest, action: str, by, reason: str = "") -> Status:
    roles = roles_for(by)
    check = check_transition(
        action=action, status=Status(request.status), is_admin=roles.platform_admin,
        is_lead=roles.can_file_for(request.tenant_id), reason=reason,
    )
    if not check.allowed:
        if request.decided_by_id and Status(request.status) in (
                Status.APPROVED, Status.DENIED, Status.CHANGES_REQUESTED):
            # Loaded apart from the locking query: a join read under FOR UPDATE can be stale.
            who = get_user_model().objects.get(pk=request.decided_by_id).get_username()
            when = timezone.localtime(request.decided_at).strftime("%Y-%m-%d %H:%M")
            raise IntakeError(f"{check.reason} {who} decided it at {when}.")
        raise IntakeError(check.reason)
    assert check.to_state is not None
    return check.to_state


def _clean_fields(fields: dict[str, Any], *, new: bool = True) -> dict[str, Any]:
    """The one validation (intake.validation) every writer goes through, form and API
    included; a refusal names each field with its message."""
    unknown = set(fields) - set(EDITABLE_FIELDS)
    if unknown:
        raise IntakeError(f"Unknown fields: {', '.join(sorted(unknown))}.")
    errors = request_field_errors(fields, new=new)
    if errors:
        raise IntakeError(" ".join(m for messages in errors.values() for m in messages),
                          fields={name: " ".join(messages) for name, messages in errors.items()})
    return normalised(fields)


@transaction.atomic
def request_create(*, tenant: Tenant, by, fields: dict[str, Any]) -> CapacityRequest:
    roles = roles_for(by)
    if not roles.can_file_for(tenant.pk):
        raise IntakeError("Only a team lead of this tenant may file requests for it.")
    request = CapacityRequest.objects.create(tenant=tenant, requester=by,
                                             **_clean_fields(fields))
    audit_record(actor=by, subject=request, tenant=tenant, action="request.created",
                 to_state=request.status, reason="Draft created.")
    return request


@transaction.atomic
def request_create_renewal(*, request: CapacityRequest, by) -> CapacityRequest:
    """A draft that asks to extend this request's allocation, same size and route."""
    alloc = Allocation.objects.filter(pk=request.allocation_id).first()  # as it is now
    if alloc is None or alloc.status not in RENEWABLE:
        raise IntakeError("Only an active or expiring allocation can be renewed.")
    if alloc.ends_at is None:
        raise IntakeError("This allocation is open-ended: it needs no renewal.")
    if not roles_for(by).can_file_for(request.tenant_id):
        raise IntakeError("Only a team lead of this tenant may renew its allocations.")
    fields = {name: getattr(request, name) for name in EDITABLE_FIELDS}
    # The size it holds now (resized in place since approval, perhaps), where the answers
    # say it: a renewal keeps the allocation as it is.
    if alloc.route == Route.MIG_VCLUSTER and request.device_fill == "small":
        fields["replicas"] = alloc.mig_count
    elif request.device_fill == "full":
        fields["whole_devices"] = alloc.whole_devices
    old_end = alloc.ends_at.date() if alloc.ends_at else timezone.localdate()
    length = (request.ends_on - request.starts_on) if request.ends_on else dt.timedelta(days=90)
    fields.update(title=f"Renewal: {request.title}"[:120], starts_on=old_end,
                  ends_on=old_end + length)
    renewal = CapacityRequest.objects.create(tenant=request.tenant, requester=by, renews=alloc,
                                             **fields)
    audit_record(actor=by, subject=renewal, tenant=request.tenant, action="request.created",
                 to_state=renewal.status,
                 reason=f"Renewal draft for allocation {alloc.namespace} (request #{request.pk}).")
    return renewal


@transaction.atomic
def request_update(*, request: CapacityRequest, by, fields: dict[str, Any]) -> CapacityRequest:
    request = CapacityRequest.objects.select_for_update(of=("self",)).get(pk=request.pk)
    if not roles_for(by).can_file_for(request.tenant_id):
        raise IntakeError("Only a team lead of this tenant may edit its requests.")
    if not request.is_editable:
        raise IntakeError(f"This request is {request.get_status_display().lower()}; only "
                          "drafts and requests with changes requested can be edited.")
    merged = _clean_fields({name: getattr(request, name) for name in EDITABLE_FIELDS} | fields,
                           new=False)
    changed, shown = {}, {}
    for name, value in merged.items():
        if getattr(request, name) != value:
            changed[name] = {"from": str(getattr(request, name)), "to": str(value)}
            shown[name] = (_shown(name, getattr(request, name)), _shown(name, value))
            setattr(request, name, value)
    if changed:
        request.save()
        audit_record(actor=by, subject=request, tenant=request.tenant, action="request.edited",
                     reason=edit_summary(shown), data={"changes": changed})
    return request


def _shown(name: str, value: Any) -> str:
    """An answer as the page shows it: a choice by its label, a number or date as written."""
    choices = dict(CapacityRequest._meta.get_field(name).flatchoices)
    return str(choices.get(value, value) if value not in (None, "") else "")


@transaction.atomic
def request_submit(*, request: CapacityRequest, by) -> CapacityRequest:
    request = CapacityRequest.objects.select_for_update(of=("self",)).get(pk=request.pk)
    to_state = _check(request, "submit", by)
    decision, plan = plan_for_request(request)
    if not decision.ok:
        raise IntakeError(decision.reason, fields=dict(decision.errors))
    if plan is None:
        raise IntakeError(no_pool_message(decision.route, request.gpu_model) + ".",
                          fields={"gpu_model": "No pool offers this GPU model here."})
    if plan.errors:
        raise IntakeError(" ".join(m for _, m in plan.errors), fields=dict(plan.errors))
    if request.renews_id:
        _check_renewal_keeps_shape(request, decision, plan)
    elif plan.fit is Fit.NEVER:
        raise IntakeError(plan.fit_reason)
    from_state = request.status
    request.status = to_state.value
    request.route = decision.route.value
    request.route_reason = decision.reason
    request.pool = Pool.objects.get(pk=plan.pool.pool_id)
    # A resubmitted request has no decision yet: the earlier one (changes requested) stays
    # in the audit trail, not on the page as if it applied.
    request.decided_by, request.decided_at, request.decision_reason = None, None, ""
    request.save()
    audit_record(actor=by, subject=request, tenant=request.tenant, action="request.submitted",
                 from_state=from_state, to_state=request.status,
                 reason=f"Submitted for review. Route: {decision.reason} {plan.fit_reason}",
                 data={"route": decision.route.value, "pool": request.pool.slug,
                       "monthly_price": str(plan.monthly_price)})
    return request


def _check_renewal_keeps_shape(request: CapacityRequest, decision, plan) -> None:
    alloc = request.renews
    if decision.route.value != alloc.route or plan.held_devices != alloc.device_equivalents:
        raise IntakeError(
            f"A renewal keeps the allocation's route and size ({Route(alloc.route).label}, "
            f"{devices_text(alloc.device_equivalents)} device(s)); file a new request to "
            "change them.")


def _window(request: CapacityRequest, now: dt.datetime) -> tuple[dt.datetime, dt.datetime | None]:
    start = dt.datetime.combine(request.starts_on, dt.time.min, tzinfo=dt.UTC)
    end = (dt.datetime.combine(request.ends_on + dt.timedelta(days=1), dt.time.min,
                               tzinfo=dt.UTC) if request.ends_on else None)
    return max(start, now), end


@transaction.atomic
def request_approve(*, request: CapacityRequest, by, reason: str, override_route: str = "",
                    override_reason: str = "") -> CapacityRequest:
    """Approve and promise capacity. Two admins at once: the row lock makes one win; the
    pool lock makes capacity impossible to promise twice."""
    request = (CapacityRequest.objects.select_for_update(of=("self",))
               .select_related("tenant").get(pk=request.pk))
    to_state = _check(request, "approve", by, reason)
    if request.renews_id:
        return _approve_renewal(request, by, reason, to_state)
    overridden = bool(override_route) and override_route != request.route
    if overridden and not override_reason.strip():
        raise IntakeError("Overriding the route needs a written reason.",
                          fields={"override_reason": "Say why the route is overridden."})
    try:
        decision, pool = approval_decision(request, override_route, override_reason)
    except ValueError as exc:
        raise IntakeError(str(exc), fields={"override_route": str(exc)}) from exc
    if not decision.ok:
        raise IntakeError(decision.reason)
    pool = pool_for_route(decision, request.gpu_model, pool)
    if pool is None:
        raise IntakeError(no_pool_message(decision.route) + ".")
    # Lock the pool, then plan once: numbers read before the lock could be stale.
    pool = Pool.objects.select_for_update(of=("self",)).get(pk=pool.pk)
    approval = approval_plan(request, decision=decision, pool=pool)
    plan = approval.plan
    if plan.errors:
        raise IntakeError(" ".join(m for _, m in plan.errors))
    if plan.fit is not Fit.FITS_NOW:
        raise IntakeError(f"Not approved: {plan.fit_reason}")
    now = timezone.now()
    starts_at, ends_at = _window(request, now)
    allocation = allocation_create(
        tenant=request.tenant, pool=pool, route=decision.route.value,
        whole_devices=approval.whole_devices, mig_profile=decision.mig_profile,
        mig_count=decision.mig_count, device_equivalents=plan.held_devices,
        starts_at=starts_at, ends_at=ends_at, by=by, namespace=approval.namespace,
        reason=f"Approved request #{request.pk}: {decision.reason}",
        origin=f"request #{request.pk}",
    )
    try:
        allocation_reserve_nodes(allocation=allocation, names=approval.nodes, count=plan.nodes,
                                 by=by)
    except ValueError as exc:
        raise IntakeError(f"Not approved: {exc}.") from exc
    updated = CapacityRequest.objects.filter(pk=request.pk, status=Status.SUBMITTED).update(
        status=to_state.value, route=decision.route.value, route_reason=decision.reason,
        pool=pool, route_overridden=overridden, override_reason=override_reason.strip(),
        decided_by=by, decided_at=now, decision_reason=reason.strip(), allocation=allocation,
        updated_at=now,
    )
    if updated != 1:  # cannot happen under the row lock; refuse rather than promise twice
        raise IntakeError("Another admin decided this request at the same moment.")
    if overridden:
        audit_record(actor=by, subject=request, tenant=request.tenant, action="request.rerouted",
                     reason=override_reason, data={"from": request.route,
                                                   "to": decision.route.value})
    audit_record(actor=by, subject=request, tenant=request.tenant, action="request.approved",
                 from_state=Status.SUBMITTED.value, to_state=to_state.value, reason=reason,
                 data={"allocation": allocation.pk, "pool": pool.slug,
                       "held_devices": str(plan.held_devices), "fit": plan.fit_reason})
    request.refresh_from_db()
    _tell_requester(request, "approved", reason)
    return request


def _approve_renewal(request: CapacityRequest, by, reason: str, to_state) -> CapacityRequest:
    """A renewal holds the same capacity for longer: no new promise, the end moves."""
    _, ends_at = _window(request, timezone.now())
    try:
        alloc = allocation_extend(allocation=request.renews, ends_at=ends_at, by=by,
                                  reason=f"request #{request.pk}: {reason.strip()}")
    except ValueError as exc:
        raise IntakeError(f"Not approved: {exc}.") from exc
    now = timezone.now()
    CapacityRequest.objects.filter(pk=request.pk, status=Status.SUBMITTED).update(
        status=to_state.value, decided_by=by, decided_at=now, decision_reason=reason.strip(),
        updated_at=now)
    until = f"{alloc.ends_at:%Y-%m-%d}" if alloc.ends_at else "open-ended"
    audit_record(actor=by, subject=request, tenant=request.tenant, action="request.approved",
                 from_state=Status.SUBMITTED.value, to_state=to_state.value,
                 reason=f"{reason.strip()} (renews {alloc.namespace} until {until})")
    request.refresh_from_db()
    _tell_requester(request, "approved", f"{reason.strip()} (renews {alloc.namespace} until "
                                         f"{until})")
    return request


def _tell_requester(request: CapacityRequest, outcome: str, reason: str) -> None:
    """Whoever filed the request (and the tenant's other leads) hear the decision."""
    kind = Kind.CHANGES_REQUESTED if outcome == "changes requested" else Kind.REQUEST_DECIDED
    notify([request.requester, *tenant_leads(request.tenant)], kind,
           f"Request #{request.pk} {outcome}: {request.title}",
           f"{request.tenant.name}, request #{request.pk} ({request.title}) was {outcome} by "
           f"{request.decided_by.get_full_name() or request.decided_by.get_username()}.\n\n"
           f"Reason: {reason.strip()}", link=f"/requests/{request.pk}/")


def _decide(request: CapacityRequest, by, reason: str, action: str) -> CapacityRequest:
    request = (CapacityRequest.objects.select_for_update(of=("self",))
               .select_related("tenant").get(pk=request.pk))
    to_state = _check(request, action, by, reason)
    now = timezone.now()
    CapacityRequest.objects.filter(pk=request.pk, status=request.status).update(
        status=to_state.value, decided_by=by, decided_at=now, decision_reason=reason.strip(),
        updated_at=now)
    audit_record(actor=by, subject=request, tenant=request.tenant, action=f"request.{action}",
                 from_state=request.status, to_state=to_state.value, reason=reason)
    request.refresh_from_db()
    _tell_requester(request, "changes requested" if action == "request_changes" else "rejected",
                    reason)
    return request


@transaction.atomic
def request_withdraw(*, request: CapacityRequest, by, reason: str = "") -> CapacityRequest:
    """A team lead takes a filed request out of review (nothing was promised yet)."""
    request = (CapacityRequest.objects.select_for_update(of=("self",))
               .select_related("tenant").get(pk=request.pk))
    old = request.status
    to_state = _check(request, "withdraw", by)
    if problem := reason_error(reason, required=False):
        raise IntakeError(problem, fields={"reason": problem})
    now = timezone.now()
    CapacityRequest.objects.filter(pk=request.pk, status=old).update(
        status=to_state.value, updated_at=now)
    audit_record(actor=by, subject=request, tenant=request.tenant, action="request.withdrawn",
                 from_state=old, to_state=to_state.value,
                 reason=reason.strip() or "Withdrawn by the team lead.")
    request.refresh_from_db()
    return request


@transaction.atomic
def request_delete_draft(*, request: CapacityRequest, by) -> None:
    """A team lead deletes a draft nobody has seen; the audit trail keeps that it existed."""
    request = (CapacityRequest.objects.select_for_update(of=("self",))
               .select_related("tenant").get(pk=request.pk))
    _check(request, "delete", by)
    audit_record(actor=by, subject=request, tenant=request.tenant, action="request.deleted",
                 from_state=request.status, reason=f"Draft #{request.pk} "
                 f"({request.title or 'untitled'}) deleted by the team lead.")
    request.delete()


@transaction.atomic
def request_deny(*, request: CapacityRequest, by, reason: str) -> CapacityRequest:
    return _decide(request, by, reason, "deny")


@transaction.atomic
def request_request_changes(*, request: CapacityRequest, by, reason: str) -> CapacityRequest:
    return _decide(request, by, reason, "request_changes")


ACTIONS = {
    "submit": request_submit,
    "approve": request_approve,
    "deny": request_deny,
    "request_changes": request_request_changes,
    "withdraw": request_withdraw,
    "delete": request_delete_draft,
}
assert set(ACTIONS) == set(TRANSITIONS)

