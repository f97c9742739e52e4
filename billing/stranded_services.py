"""Writes of stranded capacity: recording what a detection pass found (one open finding per
allocation and kind), and the lead's answer. Each write audits in its own transaction and
notifies through the portal's notification service (the e-mail leaves after commit).

Releasing goes through the fleet's own `allocation_release` (the lifecycle's transition,
billing stops at that instant) and a shrink through its `allocation_resize` (the lifecycle's
step in place, under the pool's lock); nothing here writes an allocation's status. Accepting
a move to MIG, a check of a run or a quota raise records the yes and tells the platform
team.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable
from dataclasses import dataclass, replace
from decimal import Decimal

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.utils import timezone

from fleet.allocations import lifecycle
from fleet.allocations.resize import resize_carry_out, resize_record, running_work
from fleet.allocations.services import allocation_release
from fleet.domain import FleetError, devices_text
from fleet.models import Allocation
from tenants.access import roles_for
from tenants.audit import audit_record, reason_error
from tenants.errors import DomainError
from tenants.models import NotificationKind, PlatformRole
from tenants.notifications import notify, tenant_leads

from .models import StrandedFinding, StrandedPolicy
from .stranded import Action, Finding, Unanswered, grace_action

log = logging.getLogger(__name__)
F = StrandedFinding


class StrandedError(DomainError):
    """A refusal of a finding's decision (message + field errors)."""


def finding_link(finding: StrandedFinding) -> str:
    return f"/stranded/{finding.pk}/"


def platform_admins() -> list:
    return list(get_user_model().objects.filter(
        platform_roles__role=PlatformRole.Role.PLATFORM_ADMIN, is_active=True).distinct())


@dataclass(frozen=True)
class RecordReport:
    found: int = 0
    refreshed: int = 0
    resolved: int = 0
    quiet: int = 0

    def summary(self) -> str:
        return (f"{self.found} stranded finding(s) new, {self.refreshed} still open, "
                f"{self.resolved} resolved, {self.quiet} declined lately (not raised again)")


def _since(f: Finding, now: dt.datetime) -> dt.datetime:
    window = f.evidence.get("series") or f.evidence.get("window") or {}
    try:
        return dt.datetime.fromisoformat(window["start"])
    except (KeyError, TypeError, ValueError):
        return now


def _figures(f: Finding) -> dict:
    return {"stranded_devices": f.stranded_devices, "cost_per_day": f.cost_per_day,
            "action": str(f.proposal.action), "proposal": f.proposal.text,
            "proposal_data": f.proposal.as_data(),
            "cost_per_day_after": f.proposal.cost_per_day_after, "reason": f.reason,
            "evidence": f.evidence, "needs_yes": f.needs_yes}


def _announce(row: StrandedFinding) -> None:
    yes = " It is held under a contractual or regulatory origin: nothing changes without " \
        "your yes." if row.needs_yes else ""
    notify(tenant_leads(row.tenant), NotificationKind.STRANDED_CAPACITY,
           f"{row.get_kind_display()}: {row.allocation.namespace} "
           f"({row.cost_text} a day)",
           f"{row.reason}\n\nProposed: {row.proposal_sentence}{yes}\nAccept or keep it (with a "
           "reason) on the finding's page.", link=finding_link(row))


def findings_record(*, findings: Iterable[Finding], judged: set[int], now: dt.datetime
                    ) -> RecordReport:
    """Record one pass: a new finding opens (audited, the leads told), an open one is
    refreshed with the latest figures, an open one of a judged allocation not found again is
    resolved. Safe to run twice: the second pass refreshes what the first opened."""
    found = refreshed = resolved = quiet = 0
    quiet_since = now - dt.timedelta(days=settings.PORTAL_STRANDED_QUIET_DAYS)
    seen: set[tuple[int, str]] = set()
    with transaction.atomic():
        open_rows = {(r.allocation_id, r.kind): r for r in F.objects.select_for_update().filter(
            status=F.Status.OPEN, allocation_id__in=judged)}
        kept = set(F.objects.filter(status=F.Status.DECLINED, closed_at__gte=quiet_since,
                                    allocation_id__in=judged).values_list("allocation_id",
                                                                          "kind"))
        allocations = Allocation.objects.select_related("tenant", "pool").in_bulk(
            {f.allocation_id for f in findings})
        for f in findings:
            key = (f.allocation_id, str(f.kind))
            seen.add(key)
            if key in open_rows:
                F.objects.filter(pk=open_rows[key].pk).update(last_seen_at=now, **_figures(f))
                refreshed += 1
                continue
            if key in kept:
                quiet += 1
                continue
            alloc = allocations[f.allocation_id]
            try:
                with transaction.atomic():  # another pass may open the same one at once
                    row = F.objects.create(allocation=alloc, tenant=alloc.tenant,
                                           pool=alloc.pool, kind=str(f.kind),
                                           stranded_since=_since(f, now), found_at=now,
                                           last_seen_at=now, **_figures(f))
            except IntegrityError:
                refreshed += 1
                continue
            audit_record(actor=None, subject=row, tenant=alloc.tenant, action="stranded.found",
                         to_state=row.status, reason=f"{row.get_kind_display()}: {f.reason}",
                         data={"allocation": alloc.pk, "kind": row.kind,
                               "stranded_devices": str(f.stranded_devices),
                               "cost_per_day": str(f.cost_per_day),
                               "action": row.action})
            _announce(row)
            found += 1
        for key, row in open_rows.items():
            if key in seen:
                continue
            F.objects.filter(pk=row.pk, status=F.Status.OPEN).update(
                status=F.Status.RESOLVED, closed_at=now, outcome="No longer measured as "
                "stranded.")
            audit_record(actor=None, subject=row, tenant=row.tenant, action="stranded.resolved",
                         from_state=F.Status.OPEN, to_state=F.Status.RESOLVED,
                         reason="No longer measured as stranded: the last pass did not find it.")
            resolved += 1
    return RecordReport(found, refreshed, resolved, quiet)


def _decidable(finding: StrandedFinding, by, by_policy: str = "") -> StrandedFinding:
    """The open finding, locked, if `by` is a lead of its tenant (or, `by` None, the
    tenant's standing policy answers for them)."""
    if not (by is None and by_policy) and not roles_for(by).can_file_for(finding.tenant_id):
        raise StrandedError("Only a team lead of this tenant answers its findings.")
    row = F.objects.select_for_update(of=("self",)).select_related(
        "allocation", "tenant").get(pk=finding.pk)
    if row.status != F.Status.OPEN:
        raise StrandedError(f"This finding is {row.get_status_display().lower()} already.")
    return row


def _tell(row: StrandedFinding, what: str) -> None:
    notify([*tenant_leads(row.tenant), *platform_admins()], NotificationKind.STRANDED_CAPACITY,
           f"{row.get_kind_display()} {what}: {row.allocation.namespace}",
           f"{row.reason}\n\nProposed: {row.proposal_sentence}\n{what.capitalize()} by "
           f"{row.decided_by.get_username() if row.decided_by else 'the system'}"
           f"{': ' + row.decision_reason if row.decision_reason else '.'}\n{row.outcome}",
           link=finding_link(row))


def finding_accept(*, finding: StrandedFinding, by, reason: str = "") -> StrandedFinding:
    """The lead's yes. A release is carried out at once through the fleet's release service
    and a shrink through its resize (refused, with the fleet's reason, while running work
    holds what it would take); any other proposal is recorded and the platform team told."""
    if problem := reason_error(reason, required=False):
        raise StrandedError(problem, fields={"reason": problem})
    return _accept(finding, by=by, reason=reason)


def in_place_size(finding: StrandedFinding) -> int | None:
    """The size a proposed shrink resizes the hold to in place (its unit: whole devices,
    or slices of its own profile); None for anything else (a smaller profile is a new
    request, as a move to MIG is)."""
    data, alloc = finding.proposal_data or {}, finding.allocation
    if finding.action != F.Action.SHRINK:
        return None
    if data.get("mig_count_after") and data.get("mig_profile_after") in ("", alloc.mig_profile):
        return int(data["mig_count_after"])
    if data.get("whole_devices_after") and not alloc.mig_profile:
        return int(data["whole_devices_after"])
    return None


def _accept(finding: StrandedFinding, *, by, reason: str, by_policy: str = ""
            ) -> StrandedFinding:
    size = in_place_size(finding)
    resized = None
    with transaction.atomic():  # the finding's lock, then the pool's and the allocation's
        row = _decidable(finding, by, by_policy)
        release = row.action == F.Action.RELEASE
        if release and row.allocation.status not in lifecycle.RETIRABLE:
            raise StrandedError(f"{row.allocation.namespace} is "
                                f"{row.allocation.get_status_display().lower()}: there is "
                                "nothing to release.")
        if release:  # a finding never ends work that runs (a release from its page may)
            in_use, jobs = running_work(row.allocation)
            if in_use:
                raise StrandedError(
                    f"Not released: {devices_text(in_use)} of its devices are held by "
                    f"running work ({', '.join(jobs)}), which a release would end. Stop it "
                    "first, or keep the hold with a reason.")
        given_back = row.stranded_devices if release else Decimal(0)
        if size is not None:  # carried out with the yes, or neither is recorded
            try:
                resized = resize_record(allocation=row.allocation, size=size, by=by,
                                        by_policy=by_policy, may_grow=False,
                                        reason=f"Stranded finding #{row.pk} accepted.")
            except FleetError as exc:
                raise StrandedError(f"The shrink cannot be carried out now: {exc}") from exc
            _, held, plan = resized
            given_back = held.device_equivalents - plan.device_equivalents
        outcome = (f"Released: {devices_text(given_back)} device(s) given back to "
                   f"{row.pool.slug}; billing stops now." if release else
                   f"Shrunk in place ({row.proposal.rstrip('.')}): "
                   f"{devices_text(given_back)} device(s) given back to {row.pool.slug}; "
                   "billing follows from now." if size is not None else
                   "Recorded. The platform team carries it out (only a release or a shrink "
                   "in place is done by the portal); the hold is unchanged until then.")
        now = timezone.now()
        F.objects.filter(pk=row.pk).update(
            status=F.Status.ACCEPTED, decided_by=by, closed_at=now,
            grace_ended_at=now if by_policy else None,
            decision_reason=reason.strip(), outcome=outcome, given_back_devices=given_back)
        row.refresh_from_db()
        audit_record(actor=by, subject=row, tenant=row.tenant, action="stranded.accepted",
                     from_state=F.Status.OPEN, to_state=F.Status.ACCEPTED,
                     reason=(reason.strip() or f"Accepted: {row.proposal_sentence}")
                     + f" {outcome}",
                     data={"action": row.action, "allocation": row.allocation_id,
                           "given_back_devices": str(row.given_back_devices)})
        _tell(row, "accepted")
    if resized is not None:  # the cluster follows after the commit
        resize_carry_out(row.allocation_id, resized[1], resized[2])
    if release:  # the release's own transaction and cluster calls, after the yes is kept
        try:
            allocation_release(allocation=row.allocation, by=by, by_policy=by_policy,
                               reason=f"Stranded finding #{row.pk} accepted: "
                                      f"{row.proposal_sentence}")
        except FleetError as exc:
            F.objects.filter(pk=row.pk).update(outcome=f"The release was refused: {exc}",
                                               given_back_devices=0)
            log.warning("finding %s accepted, release refused: %s", row.pk, exc)
        row.refresh_from_db()
    return row


def finding_decline(*, finding: StrandedFinding, by, reason: str) -> StrandedFinding:
    """The lead keeps the hold, with a reason (kept in the audit trail); the same kind is
    not raised again for PORTAL_STRANDED_QUIET_DAYS."""
    if problem := reason_error(reason, required=True):
        raise StrandedError(problem, fields={"reason": problem})
    with transaction.atomic():
        row = _decidable(finding, by)
        now = timezone.now()
        F.objects.filter(pk=row.pk).update(
            status=F.Status.DECLINED, decided_by=by, closed_at=now,
            decision_reason=reason.strip(), outcome="Kept as it is.")
        row.refresh_from_db()
        audit_record(actor=by, subject=row, tenant=row.tenant, action="stranded.declined",
                     from_state=F.Status.OPEN, to_state=F.Status.DECLINED,
                     reason=f"Kept: {reason.strip()}", data={"allocation": row.allocation_id})
        _tell(row, "kept")
    return row


MAX_GRACE_DAYS = 90


def policy_for(tenant) -> StrandedPolicy:
    """The tenant's policy, or the default (remind only, after 7 days) unsaved."""
    return StrandedPolicy.objects.filter(tenant=tenant).first() or StrandedPolicy(tenant=tenant)


def policy_set(*, tenant, by, when_unanswered: str, grace_days) -> StrandedPolicy:
    """A lead of the tenant sets what happens to findings nobody answers; audited."""
    if not roles_for(by).can_file_for(tenant.pk):
        raise StrandedError("Only a team lead of this tenant sets its policy.")
    errors = {}
    if when_unanswered not in StrandedPolicy.WhenUnanswered.values:
        errors["when_unanswered"] = "Choose one of the listed answers."
    try:
        days = int(str(grace_days).strip())
        if not str(grace_days).strip().isascii() or not 1 <= days <= MAX_GRACE_DAYS:
            raise ValueError
    except ValueError:
        errors["grace_days"] = f"A whole number of days from 1 to {MAX_GRACE_DAYS}."
    if errors:
        raise StrandedError("Some fields are not valid.", fields=errors)
    with transaction.atomic():
        policy, _ = StrandedPolicy.objects.select_for_update().get_or_create(tenant=tenant)
        before = (policy.when_unanswered, policy.grace_days)
        policy.when_unanswered, policy.grace_days, policy.updated_by = \
            when_unanswered, days, by
        policy.save()
        audit_record(actor=by, subject=policy, tenant=tenant, action="stranded.policy_set",
                     reason=f"Unanswered findings: {policy.get_when_unanswered_display()} "
                     f"after {days} day(s) (was {before[0]}, {before[1]} day(s)).",
                     data={"when_unanswered": when_unanswered, "grace_days": days})
    return policy


def grace_apply(*, now: dt.datetime) -> int:
    """Open findings whose grace period is over: the tenant's policy accepts the proposal
    (never on a binding hold) or the leads are reminded once. Returns how many were due."""
    due = 0
    policies = {p.tenant_id: p for p in StrandedPolicy.objects.all()}
    for row in F.objects.filter(status=F.Status.OPEN, grace_ended_at__isnull=True
                                ).select_related("tenant", "allocation"):
        policy = policies.get(row.tenant_id) or StrandedPolicy(tenant=row.tenant)
        decision = grace_action(policy=Unanswered(policy.when_unanswered),
                                action=Action(row.action), needs_yes=row.needs_yes,
                                found_at=row.found_at,
                                grace=dt.timedelta(days=policy.grace_days), now=now)
        if not decision.due:
            continue
        due += 1
        if decision.accept:
            try:
                _accept(row, by=None, reason=decision.reason,
                        by_policy=f"{policy.when_unanswered} after {policy.grace_days} day(s)")
                continue
            except StrandedError as exc:  # e.g. running work holds what a shrink takes
                decision = replace(decision, reason=f"{decision.reason} It could not be "
                                   f"carried out, so the leads are reminded: {exc.message}")
        with transaction.atomic():
            if not F.objects.filter(pk=row.pk, status=F.Status.OPEN,
                                    grace_ended_at__isnull=True).update(grace_ended_at=now):
                continue  # answered or reminded meanwhile
            audit_record(actor=None, subject=row, tenant=row.tenant,
                         action="stranded.grace_ended", reason=decision.reason)
            notify(tenant_leads(row.tenant), NotificationKind.STRANDED_CAPACITY,
                   f"Reminder — {row.get_kind_display()}: {row.allocation.namespace} "
                   f"({row.cost_text} a day)", f"{decision.reason}\n\n{row.reason}\n\n"
                   f"Proposed: {row.proposal_sentence}", link=finding_link(row))
    return due


__all__ = ["RecordReport", "StrandedError", "finding_accept", "finding_decline",
           "findings_record", "grace_apply", "policy_for", "policy_set"]
