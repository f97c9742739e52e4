"""The one writer of an allocation's status: each move checked against the lifecycle's
table and audited in the same transaction; and provisioning's progress counter."""

from __future__ import annotations

import time

from django.db import transaction
from django.utils import timezone

from tenants.audit import audit_record

from ..models import Allocation
from ..signals import allocation_status_changed
from . import lifecycle

S = Allocation.Status


def allocation_transition(allocation_id: int, *, from_states, to: str, reason: str, by=None,
                          message: str = "", action: str = "",
                          data: dict | None = None) -> Allocation | None:
    """Conditional status change with its audit row; None if another worker moved it."""
    with transaction.atomic():
        alloc = (Allocation.objects.select_for_update(of=("self",)).select_related("tenant")
                 .get(pk=allocation_id))
        if alloc.status not in from_states:
            return None
        if not lifecycle.can_move(alloc.status, to):
            raise ValueError(f"an allocation cannot go from {alloc.status} to {to}")
        old = alloc.status
        alloc.status, alloc.status_message = to, message
        alloc.save(update_fields=["status", "status_message"])
        audit_record(actor=by, subject=alloc, tenant=alloc.tenant,
                     action=action or f"allocation.{to}", from_state=old, to_state=to,
                     reason=reason, data=data)
        if old != to:  # a renewal of an active allocation stays active: nobody to tell
            transaction.on_commit(lambda: allocation_status_changed.send(
                sender=Allocation, allocation_id=allocation_id, old=old, new=to,
                reason=reason))
    return alloc


def record_progress(allocation_id: int, done: int, total: int) -> None:
    Allocation.objects.filter(pk=allocation_id).update(progress_done=done, progress_total=total,
                                                       progress_at=timezone.now())


class Progress:
    """An allocation's progress as its waves are applied: written at the start, when all is
    applied, and in between at most once per PROGRESS_EVERY seconds (a page polls every few
    seconds; a write per wave of a fast allocation was most of its database work). The
    stall check reads progress_at: far longer than this."""

    PROGRESS_EVERY = 1.0

    def __init__(self, allocation_id: int, total: int, done: int = 0) -> None:
        self.allocation_id, self.total, self.written = allocation_id, total, 0.0
        self.advance(done, force=True)

    def advance(self, done: int, *, force: bool = False) -> None:
        now = time.monotonic()
        if force or done >= self.total or now - self.written >= self.PROGRESS_EVERY:
            record_progress(self.allocation_id, done, self.total)
            self.written = now


def allocation_fail(allocation_id: int, message: str) -> None:
    allocation_transition(allocation_id, from_states=(S.PENDING, S.PROVISIONING), to=S.FAILED,
                          reason=f"Provisioning failed: {message}", message=message)
