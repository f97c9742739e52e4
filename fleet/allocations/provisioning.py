"""Provisioning of an allocation through the Kubernetes API: claimed for provisioning once,
then handed to the sink (apply or Git), resumed where it deferred to let the guards compile.

Tasks call this with ids. Each step is idempotent (server-side apply; conditional status
updates) so a retry or a second run never duplicates or orphans anything.
"""

from __future__ import annotations

from django.db.models import F

from ..inventory.connections import backend_of
from ..kube import KubeBackend
from ..models import Allocation
from . import lifecycle
from .desired import allocation_manifests
from .guards import Defer, GuardsPending
from .multikueue import wiring_apply, workers_provision
from .sinks import provisioning_sink
from .transitions import allocation_transition

S = Allocation.Status


def allocation_provision(allocation_id: int, *, backend: KubeBackend | None = None,
                         defer: Defer | None = None,
                         resume: GuardsPending | dict | None = None) -> Allocation:
    """Apply the allocation's desired state. Raises KubeError for the task to retry or fail.
    With `resume`, go on where an earlier call deferred to let the guards compile."""
    alloc = Allocation.objects.select_related("tenant", "pool__cluster").get(pk=allocation_id)
    backend = backend or backend_of(alloc.pool.cluster)  # provisioned where its pool is
    if alloc.status in lifecycle.PROVISIONED:
        return alloc  # done already: a duplicate task changes nothing
    if resume is not None:
        if alloc.status != S.PROVISIONING:
            return alloc  # failed, retired or moved meanwhile: nothing to go on with
        pending = resume if isinstance(resume, GuardsPending) else GuardsPending(**resume)
        return provisioning_sink().resume(alloc, allocation_manifests(alloc), backend,
                                          pending, defer)
    if alloc.status != S.PROVISIONING:
        claimed = allocation_transition(
            allocation_id, from_states=lifecycle.STARTABLE, to=S.PROVISIONING,
            reason="Provisioning started.", action="allocation.provisioning")
        if claimed is None:
            return Allocation.objects.get(pk=allocation_id)
        alloc.refresh_from_db(fields=["status", "status_message"])  # provisioning now
    Allocation.objects.filter(pk=allocation_id).update(attempts=F("attempts") + 1)
    if alloc.pool.dispatched:
        # The workers first (each its share), then the manager's wiring and queue: a job
        # the manager dispatches finds its namespace and queue on every worker it reached.
        targets, _missed = workers_provision(alloc)
        wiring_apply(backend, [t.cluster for t in targets])
    return provisioning_sink().publish(alloc, allocation_manifests(alloc), backend, defer)
