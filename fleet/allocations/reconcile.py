"""Reconcile: an allocation's desired state brought back by its sink (drift reported, or a
change the portal made carried out), and what retired allocations left pruned."""

from __future__ import annotations

from ..inventory.connections import backend_of
from ..kube import KubeBackend, ObjectKey
from ..models import Allocation
from . import lifecycle
from .desired import allocation_manifests
from .multikueue import workers_repair
from .sinks import provisioning_sink


def allocation_reconcile(allocation_id: int, *, backend: KubeBackend | None = None,
                         cause: str = "") -> list[str]:
    """Re-apply desired state; report what had drifted (changed or deleted outside us).
    With a cause (a move the portal itself made), the differences are the change being
    carried out, not drift, and are recorded as such.
    In GitOps mode the repository is the desired state: the directory is re-published
    (a commit only if it differs) and the GitOps tool repairs the cluster."""
    alloc = Allocation.objects.select_related("tenant", "pool__cluster").get(pk=allocation_id)
    backend = backend or backend_of(alloc.pool.cluster)
    if alloc.status not in lifecycle.RECONCILED:
        return []
    found = provisioning_sink().repair(alloc, allocation_manifests(alloc), backend, cause=cause)
    if alloc.pool.dispatched:
        found += workers_repair(alloc, cause=cause)
    return found


def prune_leftovers(*, backend: KubeBackend) -> list[ObjectKey]:
    """Objects the portal manages in one cluster whose allocation is retired or unknown (the
    GitOps tool prunes for itself what Git no longer holds)."""
    return provisioning_sink().prune_leftovers(backend)
