"""Writing the append-only audit trail. Call inside the transaction of the change."""

from __future__ import annotations

from typing import Any

from django.db import models

from .models import AuditEvent, Tenant


def actor_label(user) -> str:
    if user is None:
        return "system"
    return user.get_full_name() or user.get_username()


REASON_MAX = 2000  # the longest reason a person may give, in every form, API field and service


def reason_error(reason: str, *, required: bool) -> str:
    """Why a typed reason is refused ('' if it is fine): one rule for every writer."""
    text = (reason or "").strip()
    if required and not text:
        return "Give a reason: it is kept in the audit trail."
    if len(text) > REASON_MAX:
        return f"At most {REASON_MAX} characters (this is {len(text)})."
    return ""


def audit_record(*, actor, subject: models.Model, action: str, reason: str,
                 tenant: Tenant | None = None, from_state: str = "", to_state: str = "",
                 data: dict[str, Any] | None = None) -> AuditEvent:
    if not reason.strip():
        raise ValueError("every audit event needs a human-readable reason")
    return AuditEvent.objects.create(
        actor=actor if (actor is not None and actor.pk) else None,
        actor_name=actor_label(actor),
        tenant=tenant,
        subject_type=subject._meta.model_name,
        subject_id=subject.pk,
        action=action,
        from_state=from_state,
        to_state=to_state,
        reason=reason.strip(),
        data=data or {},
    )


def audit_bulk(events: list[dict[str, Any]]) -> None:
    """Many events at once (e.g. a first fleet sync of a thousand nodes)."""
    AuditEvent.objects.bulk_create([
        AuditEvent(actor=e.get("actor") if (e.get("actor") and e["actor"].pk) else None,
                   actor_name=actor_label(e.get("actor")), tenant=e.get("tenant"),
                   subject_type=e["subject"]._meta.model_name, subject_id=e["subject"].pk,
                   action=e["action"], reason=e["reason"], data=e.get("data") or {})
        for e in events], batch_size=500)


def audit_for(subject: models.Model):
    return AuditEvent.objects.filter(
        subject_type=subject._meta.model_name, subject_id=subject.pk
    ).select_related("actor")
