"""A dispatched allocation's side effects on its workers and on the manager's MultiKueue
wiring (the decisions are fleet/allocations/dispatch.py). The manager's own part goes
through the provisioning sink like any allocation's; the workers' parts are applied here,
each worker on its own, so one that does not answer holds up nobody: it is named, and
reconcile applies its part once it answers."""

from __future__ import annotations

from django.db import transaction

from tenants.audit import audit_record

from ..inventory.connections import backend_of, dispatch_kubeconfig
from ..kube import LABEL_ALLOCATION, KubeBackend, KubeError, ObjectKey, prune
from ..models import Allocation, Cluster
from .apply import apply_together, reapply, record_repair
from .desired import WorkerTarget, decided_shares, worker_targets
from .dispatch import kubeconfig_secret
from .manifests import OWNED_KINDS, apply_waves
from .repair import Repair


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


def _apply_worker(target: WorkerTarget) -> None:
    backend = backend_of(target.cluster)
    for wave in apply_waves(target.manifests):
        apply_together(backend, wave)


def workers_provision(alloc: Allocation) -> tuple[list[WorkerTarget], list[str]]:
    """Apply every worker's part; (the targets, the workers not reached and why). A
    non-retriable failure (a refused object, a broken reference) is raised."""
    shares_decide(alloc)
    targets, missed = worker_targets(alloc), []
    for target in targets:
        try:
            _apply_worker(target)
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
            repair += reapply(alloc, target.manifests,
                              backend_of(target.cluster)).on(target.cluster.slug)
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
            removed += prune(backend_of(cluster), label_selector=f"{LABEL_ALLOCATION}={alloc.pk}",
                             kinds=OWNED_KINDS)
        except KubeError as exc:
            missed.append(f"{cluster.described}: {exc.message}")
    return removed, missed
