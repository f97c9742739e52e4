"""A node leaving the fleet: which dedicated blocks it carries, where each could go, and the
move itself. A block keeps its pool (so its price and its billing history are untouched);
only the node under it changes."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.db import transaction

from tenants.access import require_platform_admin
from tenants.audit import audit_record, reason_error
from tenants.notifications import Kind, notify, tenant_leads

from ..domain import FleetError
from ..inventory.selectors import free_dedicated_nodes
from ..inventory.sync import clear_recovered_flags
from ..kube import KubeBackend, KubeError
from ..models import Allocation, GpuNode, Pool, Route
from .reconcile import allocation_reconcile

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MoveStep:
    """One allocation on a retiring node and the node it could move to (None: no free one)."""

    allocation: Allocation
    replacement: str | None

    @property
    def why(self) -> str:
        pool = self.allocation.pool.name
        if self.replacement:
            return (f"{self.replacement} is validated, healthy, schedulable and reserved by "
                    f"no one in {pool}.")
        return (f"{pool} has no free validated node: add one to the pool, or cancel the "
                "retirement.")


def retirement_plan(node: GpuNode) -> list[MoveStep]:
    """Each dedicated block reserving the node, with a distinct replacement proposed where
    its pool has one (the choice a new block would get: free_dedicated_nodes)."""
    allocations = list(node.allocations.filter(status__in=Allocation.HOLDING,
                                               route=Route.DEDICATED_BLOCK)
                       .select_related("tenant", "pool").order_by("pk"))
    free: dict[int, list[str]] = {}  # per pool, asked once
    steps = []
    for alloc in allocations:
        if alloc.pool_id not in free:
            free[alloc.pool_id] = [n for n in free_dedicated_nodes(
                alloc.pool, len(allocations) + 1) if n != node.name]
        choices = free[alloc.pool_id]
        steps.append(MoveStep(alloc, choices.pop(0) if choices else None))
    return steps


@dataclass(frozen=True)
class MoveWords:
    audit: str
    notice: str


def _gist(text: str) -> str:
    """A reason without case, spacing or punctuation: "End of warranty." is "end of warranty"."""
    return " ".join("".join(c if c.isalnum() else " " for c in text.casefold()).split())


def move_words(*, old: str, new: str, pool: str, namespace: str, retiring_reason: str,
               reason: str) -> MoveWords:
    """What a move says in the allocation's history and to its tenant: why the node leaves
    and the reason given, each once (the page offers the node's retiring reason as the move's
    reason; given unchanged, it is said once, not twice)."""
    given, leaving = reason.strip(), retiring_reason.strip()
    same = _gist(given) == _gist(leaving)
    audit = (f"Moved off {old} onto {new}, a free validated node of {pool}: "
             + (given if same or not leaving else f"{given} ({old} is retiring: {leaving})"))
    notice = (f"{old} is leaving the fleet" + (f" ({leaving})" if leaving else "")
              + f". Your dedicated block {namespace} now runs on {new} in the same pool, at "
              f"the same price. Pods still on {old} keep running until they finish or are "
              f"moved; new pods are placed on {new}."
              + ("" if same else f"\n\nReason given: {given}"))
    return MoveWords(audit, notice)


def allocation_move_off(*, allocation_id: int, node_name: str, by, reason: str,
                        backend: KubeBackend | None = None) -> str:
    """Move a dedicated block off one of its nodes onto a free validated node of its pool.

    The reservation changes first (under the pool's lock, the one approvals take, so no
    approval can take the same node); the cluster follows by the allocation's reconcile,
    which labels and taints the new node, narrows the guard to it and releases the old one.
    If the cluster is away the reconcile loop finishes the move; nothing is half-recorded."""
    require_platform_admin(by)
    if problem := reason_error(reason, required=True):
        raise FleetError(problem)
    with transaction.atomic():
        alloc = Allocation.objects.select_related("tenant", "pool").get(pk=allocation_id)
        Pool.objects.select_for_update(of=("self",)).get(pk=alloc.pool_id)
        alloc = Allocation.objects.select_for_update(of=("self",)).select_related(
            "tenant", "pool").get(pk=allocation_id)
        if alloc.route != Route.DEDICATED_BLOCK or alloc.status not in Allocation.HOLDING:
            raise FleetError(f"{alloc.namespace} is not a holding dedicated block: there is "
                             "no node of it to move.")
        old = alloc.nodes.filter(name=node_name).first()
        if old is None:
            raise FleetError(f"{alloc.namespace} does not reserve {node_name}.")
        free = [n for n in free_dedicated_nodes(alloc.pool, 2) if n != node_name]
        if not free:
            raise FleetError(f"{alloc.pool.name} has no free validated node to move "
                             f"{alloc.namespace} onto: add one, or cancel the retirement.")
        new = GpuNode.objects.get(pool=alloc.pool, name=free[0])
        alloc.nodes.remove(old)
        alloc.nodes.add(new)
        words = move_words(old=old.name, new=new.name, pool=alloc.pool.name,
                           namespace=alloc.namespace, retiring_reason=old.retiring_reason,
                           reason=reason)
        audit_record(actor=by, subject=alloc, tenant=alloc.tenant, action="allocation.moved",
                     reason=words.audit, data={"from": old.name, "to": new.name})
        notify(tenant_leads(alloc.tenant), Kind.CAPACITY_CHANGED,
               f"{alloc.namespace} moves to another node", words.notice)
    try:
        allocation_reconcile(alloc.pk, backend=backend, cause=f"the move onto {new.name}")
    except KubeError as exc:  # the periodic reconcile finishes it
        log.warning("move of allocation %s: cluster update deferred: %s", alloc.pk, exc)
        Allocation.objects.filter(pk=alloc.pk).update(
            status_message=f"Moved to {new.name}; the cluster update waits for the next "
                           f"reconcile: {exc.message}")

    clear_recovered_flags(by=by)
    return new.name
