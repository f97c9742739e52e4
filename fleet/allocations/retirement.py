"""Expiry and retirement of allocations: which are due, the expiring notice, and retirement
(the sink withdraws the objects, the dedicated nodes are released, then the status moves)."""

from __future__ import annotations

import datetime as dt

from django.db import transaction

from tenants.audit import audit_record

from ..inventory.connections import backend_of
from ..kube import KubeBackend
from ..models import Allocation
from . import lifecycle
from .manifests import node_release
from .multikueue import workers_withdraw
from .sinks import provisioning_sink
from .transitions import allocation_transition

S = Allocation.Status


def allocations_due(now: dt.datetime, notice: dt.timedelta):
    """(to mark expiring, to retire), by their end date."""
    ending = Allocation.objects.filter(ends_at__isnull=False)
    expiring = ending.filter(status=S.ACTIVE, ends_at__lte=now + notice, ends_at__gt=now)
    # Provisioning too: one stuck there (its worker died) must not outlive its end. Should a
    # worker still be applying, its late objects are leftovers the reconcile prunes.
    retire = ending.filter(status__in=lifecycle.RETIRABLE, ends_at__lte=now)
    return list(expiring.values_list("pk", flat=True)), list(retire.values_list("pk", flat=True))


def allocation_mark_expiring(allocation_id: int) -> None:
    alloc = Allocation.objects.get(pk=allocation_id)
    allocation_transition(allocation_id, from_states=(S.ACTIVE,), to=S.EXPIRING,
                          reason=f"Ends {alloc.ends_at:%Y-%m-%d %H:%M} UTC: renew through a "
                                 "new request before then, or its objects are removed.")


def retired_reason(deleted: list, released: list[str]) -> str:
    head = provisioning_sink().withdrawn_words(deleted)
    return head + (f", released {len(released)} dedicated node(s)" if released else "") + "."


def allocation_retire(allocation_id: int, *, backend: KubeBackend | None = None,
                      by=None) -> Allocation:
    """Prune every object of the allocation, then release its dedicated nodes.

    The Kubernetes calls come first and outside any transaction (they are idempotent: a
    second run finds nothing left); the status change, the release of the nodes and their
    audit rows are then written together."""
    alloc = Allocation.objects.select_related("tenant", "pool__cluster").get(pk=allocation_id)
    backend = backend or backend_of(alloc.pool.cluster)
    if alloc.status == S.RETIRED:
        return alloc
    deleted = provisioning_sink().withdraw(alloc, backend)
    if alloc.pool.dispatched:
        elsewhere, _missed = workers_withdraw(alloc)  # the unreachable: reconcile prunes
        deleted = [*deleted, *elsewhere]
    released = []
    for node in alloc.nodes.all():
        backend.apply(node_release(node.name))  # drops the labels and taint we owned
        released.append(node.name)
    with transaction.atomic():
        moved = allocation_transition(
            allocation_id, from_states=lifecycle.RETIRABLE, to=S.RETIRED, by=by,
            reason=retired_reason(deleted, released))
        if moved is not None and released:
            audit_record(actor=by, subject=alloc, tenant=alloc.tenant,
                         action="allocation.nodes_released",
                         reason=f"Released node(s) {', '.join(released)}.",
                         data={"nodes": released})
            alloc.nodes.clear()
    return Allocation.objects.get(pk=allocation_id)
