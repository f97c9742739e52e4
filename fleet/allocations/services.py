"""Writes of the fleet: allocations and pools. Each one audits in the same transaction."""

from __future__ import annotations

import datetime as dt
import logging
from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from tenants.access import require_platform_admin, roles_for
from tenants.audit import audit_record, reason_error
from tenants.models import Tenant

from ..domain import FleetError
from ..models import Allocation, GpuNode, Pool, Route
from . import lifecycle
from .retirement import allocation_retire
from .tasks import provision_allocation
from .transitions import allocation_transition

log = logging.getLogger(__name__)



def namespace_for(tenant: Tenant, suffix: str) -> str:
    """A DNS-1123 namespace name for a tenant's allocation, at most 63 characters."""
    name = f"{tenant.slug}-{suffix}".lower()
    return name[:63].rstrip("-")


def _queue_provisioning(allocation_id: int) -> None:
    """Provision after commit: a rolled-back approval or retry never starts a task. If the
    task queue is away, the approval still stands: the allocation waits, says so, and the
    stall check queues it once the queue is back (fleet.tasks.requeue_stalled)."""

    def send() -> None:
        try:
            provision_allocation.delay(allocation_id)
        except Exception as exc:  # kombu's OperationalError and kin: the broker is down
            log.warning("could not queue provisioning of allocation %s: %s", allocation_id,
                        exc)
            Allocation.objects.filter(pk=allocation_id, status=Allocation.Status.PENDING
                                      ).update(status_message=(
                                          "Approved; waiting for the task queue, which is "
                                          "unreachable right now. Provisioning starts when "
                                          "it is back."))

    transaction.on_commit(send)


@transaction.atomic
def allocation_create(*, tenant: Tenant, pool: Pool, route: str, whole_devices: int,
                      mig_profile: str, mig_count: int, device_equivalents: Decimal,
                      starts_at: dt.datetime, ends_at: dt.datetime | None, by, reason: str,
                      namespace: str, origin: str = "") -> Allocation:
    allocation = Allocation.objects.create(
        tenant=tenant, pool=pool, route=route, whole_devices=whole_devices,
        mig_profile=mig_profile, mig_count=mig_count, device_equivalents=device_equivalents,
        namespace=namespace, starts_at=starts_at, ends_at=ends_at, origin=origin,
    )
    audit_record(actor=by, subject=allocation, tenant=tenant, action="allocation.created",
                 to_state=allocation.status, reason=reason, data={
                     "pool": pool.slug, "route": route,
                     "device_equivalents": str(device_equivalents),
                     "whole_devices": whole_devices, "mig_profile": mig_profile,
                     "mig_count": mig_count})
    _queue_provisioning(allocation.pk)
    return allocation


@transaction.atomic(savepoint=False)  # the reservation with its audit row
def allocation_reserve_nodes(*, allocation: Allocation, names: tuple[str, ...],
                             count: int, by) -> list[str]:
    """Reserve the whole validated nodes the plan chose for a dedicated block (the caller
    holds the pool lock, so they are still free)."""
    if allocation.route != Route.DEDICATED_BLOCK or count <= 0:
        return []
    if len(names) < count:
        raise FleetError(f"only {len(names)} free validated node(s), {count} needed")
    allocation.nodes.set(GpuNode.objects.filter(pool=allocation.pool, name__in=names))
    audit_record(actor=by, subject=allocation, tenant=allocation.tenant,
                 action="allocation.nodes_reserved",
                 reason=f"Reserved validated node(s) {', '.join(names)} for the dedicated block.",
                 data={"nodes": list(names)})
    return list(names)


@transaction.atomic
def allocation_extend(*, allocation: Allocation, ends_at: dt.datetime | None, by,
                      reason: str) -> Allocation:
    """A renewal: move the end, and bring an expiring allocation back to active (through
    the lifecycle's one transition, which audits it)."""
    alloc = Allocation.objects.select_for_update(of=("self",)).get(pk=allocation.pk)
    if alloc.status not in lifecycle.RENEWABLE:
        raise FleetError(f"only an active or expiring allocation can be renewed; this one is "
                         f"{alloc.get_status_display().lower()}")
    old_end = alloc.ends_at
    Allocation.objects.filter(pk=alloc.pk).update(ends_at=ends_at, expiry_notice_sent=False)
    until = f"{ends_at:%Y-%m-%d}" if ends_at else "open-ended"
    was = f"{old_end:%Y-%m-%d}" if old_end else "open-ended"
    moved = allocation_transition(alloc.pk, from_states=lifecycle.RENEWABLE,
                                  to=Allocation.Status.ACTIVE, by=by,
                                  action="allocation.renewed",
                                  reason=f"Renewed until {until} (was {was}): {reason}")
    return moved


@transaction.atomic
def allocation_retry(*, allocation: Allocation, by) -> None:
    """An admin's retry of a failed allocation; the task is queued after commit."""
    require_platform_admin(by)
    moved = allocation_transition(allocation.pk, from_states=(Allocation.Status.FAILED,),
                                  to=Allocation.Status.PENDING, by=by,
                                  reason="Retry requested by a platform admin.",
                                  action="allocation.retry")
    if moved is None:
        raise FleetError("Only a failed allocation can be retried.")
    _queue_provisioning(allocation.pk)


def allocation_release(*, allocation: Allocation, by, reason: str = "",
                       by_policy: str = "") -> Allocation:
    """End an allocation now, before its end date: billing stops at this moment and its
    objects are removed (the expiry task's own retirement, run at once). A team lead of the
    tenant or a platform admin; or nobody (`by` None) acting on a standing policy the
    tenant's lead set, named in `by_policy` (billing's stranded-capacity grace period)."""
    roles = roles_for(by)
    if by_policy and by is None:
        pass  # the policy is the authority; the audit row names it
    elif not roles.can_change_holdings_of(allocation.tenant_id):
        raise FleetError("Only a team lead of this tenant or a platform admin may release it.")
    if problem := reason_error(reason, required=False):
        raise FleetError(problem)
    now = timezone.now()
    with transaction.atomic():
        alloc = Allocation.objects.select_for_update(of=("self",)).select_related(
            "tenant").get(pk=allocation.pk)
        if alloc.status not in lifecycle.RETIRABLE:
            raise FleetError(f"{alloc.namespace} is {alloc.get_status_display().lower()}: "
                             "there is nothing to release.")
        if alloc.ends_at is None or alloc.ends_at > now:
            Allocation.objects.filter(pk=alloc.pk).update(ends_at=now)
        audit_record(actor=by, subject=alloc, tenant=alloc.tenant, action="allocation.released",
                     reason=(reason.strip() or "Released early.") +
                     f" Billing stops at {now:%Y-%m-%d %H:%M} UTC.",
                     data={"policy": by_policy} if by_policy else None)
    # The cluster calls outside the transaction; a failure leaves the end in the past, so
    # the expiry task retires it on its next run.
    try:
        return allocation_retire(alloc.pk, by=by)
    except Exception as exc:  # noqa: BLE001 - reported; the sweep finishes the job
        log.warning("release of allocation %s: retirement deferred: %s", alloc.pk, exc)
        return Allocation.objects.get(pk=alloc.pk)
