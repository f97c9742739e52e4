"""A dispatched allocation's side effects on its workers and on the manager's MultiKueue
wiring (the decisions are fleet/allocations/dispatch.py). The manager's own part goes
through the provisioning sink like any allocation's, and so does each worker's part
(applied to the worker, or committed to its directory in Git), each worker on its own, so
one that does not answer holds up nobody: it is named, and reconcile applies its part once
it answers. The workers' kubeconfig Secrets are applied to the manager in either mode: a
credential is never committed to Git."""

from __future__ import annotations

from django.db import transaction

from tenants.audit import audit_record

from ..inventory.connections import dispatch_kubeconfig
from ..kube import KubeBackend, KubeError, ObjectKey
from ..models import Allocation, Cluster
from .apply import apply_together, record_repair
from .desired import WorkerTarget, decided_shares, worker_targets
from .dispatch import kubeconfig_secret
from .repair import Repair
from .sinks import provisioning_sink


def shares_decide(alloc: Allocation) -> dict[str, int]:
    """Fix the split across workers at first provisioning, with its audit row."""
    if alloc.cluster_shares:
        return alloc.cluster_shares
    shares = decided_shares(alloc)
    with transaction.atomic():
        Allocation.objects.filter(pk=alloc.pk).update(cluster_shares=shares)
        audit_record(actor=None, subject=alloc, tenant=alloc.tenant,
                     action="allocation.shares",
                     reason="Quota split across MultiKueue workers in proportion to the "
                            "pool's validated devices on each: "
                            + ", ".join(f"{k} {v}" for k, v in sorted(shares.items()))
                            + " device(s); the manager holds their sum.",
                     data={"shares": shares})
    alloc.cluster_shares = shares
    return shares


def wiring_apply(manager: KubeBackend, workers: list[Cluster]) -> None:
    """Each worker's kubeconfig as a Secret in Kueue's namespace on the manager, made from
    the registry's reference (the database never holds it)."""
    apply_together(manager, [kubeconfig_secret(w.slug, dispatch_kubeconfig(w))
                             for w in workers])


def workers_provision(alloc: Allocation) -> tuple[list[WorkerTarget], list[str]]:
    """Apply every worker's part; (the targets, the workers not reached and why). A
    non-retriable failure (a refused object, a broken reference) is raised."""
    shares_decide(alloc)
    targets, missed = worker_targets(alloc), []
    for target in targets:
        try:
            provisioning_sink().publish_part(alloc, target.cluster, target.manifests)
        except KubeError as exc:
            if not exc.retriable:
                raise
            missed.append(f"{target.cluster.described}: {exc.message}")
    if missed:
        audit_record(actor=None, subject=alloc, tenant=alloc.tenant,
                     action="allocation.worker_unreached",
                     reason="Not reached yet: " + "; ".join(missed) + ". Its share there is "
                            "applied by reconcile once the worker answers; the other workers "
                            "take its work meanwhile.", data={"missed": missed})
    return targets, missed


def workers_repair(alloc: Allocation, *, cause: str = "") -> list[str]:
    """Reconcile on every worker that answers (one that does not is tried next round); the
    workers' findings added to the round's report, each named with its worker."""
    repair = Repair()
    for target in worker_targets(alloc):
        try:
            repair += provisioning_sink().repair_part(alloc, target.cluster, target.manifests)
        except KubeError as exc:
            if not exc.retriable:
                raise
    record_repair(alloc, repair, cause=cause, append=True)
    return repair.found


def workers_withdraw(alloc: Allocation) -> tuple[list[ObjectKey], list[str]]:
    """Remove the allocation's objects from every worker it touched; (removed, workers not
    reached). What an unreachable worker keeps is pruned by reconcile when it answers (the
    allocation is retired by then: its objects are leftovers)."""
    removed, missed = [], []
    for slug in sorted(alloc.cluster_shares or {}):
        cluster = Cluster.objects.filter(slug=slug).first()
        if cluster is None:
            continue
        try:
            removed += provisioning_sink().withdraw_part(alloc, cluster)
        except KubeError as exc:
            missed.append(f"{cluster.described}: {exc.message}")
    return removed, missed
