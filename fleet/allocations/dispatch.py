"""MultiKueue dispatch of a shared allocation, decided: how its quota is split across the
workers, and what each cluster gets. Pure, over plain values (docs/clusters.md).

A dispatched allocation is one tenant's shared-pool quota whose work runs on several
clusters. The manager holds the tenant's ClusterQueue with the whole quota and MultiKueue's
admission check; each worker holds the same namespace, LocalQueue and access, and a
ClusterQueue with the tenant's *share* there. Kueue's rule is followed: the manager's quota
equals the sum of the workers'. The manager admits no more than the allocation; a worker no
more than its share; the first worker to admit a job runs it.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, replace

from ..vocabulary import KUEUE, LABEL_POOL, MANAGED_BY, MANAGER
from .manifests import AllocationSpec, render_manifests

MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"
KUEUE_NAMESPACE = "kueue-system"  # where Kueue on the manager reads worker kubeconfigs


@dataclass(frozen=True)
class WorkerShare:
    """One worker of a dispatched allocation: its registry slug, its MultiKueueCluster name
    on the manager, and the devices of the allocation's quota it holds."""

    cluster: str
    multikueue_name: str
    devices: int


def split_shares(devices: int, capacity: dict[str, int]) -> dict[str, int]:
    """The allocation's devices split across workers in proportion to the pool's validated
    devices on each (largest remainder; ties to the larger worker, then by name), so the
    shares sum to the allocation exactly and no worker is given more than it holds when the
    pool as a whole can hold the allocation. A worker with no validated devices gets none;
    with none anywhere, nothing is split (the allocation could not have been promised)."""
    total = sum(max(0, c) for c in capacity.values())
    if devices <= 0 or total <= 0:
        return {name: 0 for name in capacity}
    exact = {name: devices * max(0, c) / total for name, c in capacity.items()}
    shares = {name: int(v) for name, v in exact.items()}
    left = devices - sum(shares.values())
    by_remainder = sorted(capacity, key=lambda n: (-(exact[n] - shares[n]), -capacity[n], n))
    for name in by_remainder[:left]:
        shares[name] += 1
    return shares


def check_name(pool: str) -> str:
    return f"multikueue-{pool}"


def secret_name(worker: str) -> str:
    return f"aifactory-multikueue-{worker}"


def _pool_meta(spec: AllocationSpec, name: str, namespace: str = "") -> dict:
    """Pool-level objects carry no allocation label: they outlive any one allocation and
    the pruning of retired allocations' objects keeps them."""
    meta = {"name": name, "labels": {MANAGED_BY: MANAGER, LABEL_POOL: spec.pool}}
    if namespace:
        meta["namespace"] = namespace
    return meta


def multikueue_objects(spec: AllocationSpec, workers: tuple[WorkerShare, ...]) -> list[dict]:
    """The manager's MultiKueue wiring for the pool: a MultiKueueCluster per worker (its
    kubeconfig in a Secret of Kueue's namespace), the pool's MultiKueueConfig listing them and
    the AdmissionCheck its ClusterQueues carry."""
    name = check_name(spec.pool)
    clusters = [{"apiVersion": KUEUE, "kind": "MultiKueueCluster",
                 "metadata": _pool_meta(spec, w.multikueue_name),
                 "spec": {"clusterSource": {"kubeConfig": {
                     "locationType": "Secret", "location": secret_name(w.cluster)}}}}
                for w in workers]
    return [*clusters,
            {"apiVersion": KUEUE, "kind": "MultiKueueConfig", "metadata": _pool_meta(spec, name),
             "spec": {"clusters": sorted(w.multikueue_name for w in workers)}},
            {"apiVersion": KUEUE, "kind": "AdmissionCheck", "metadata": _pool_meta(spec, name),
             "spec": {"controllerName": MULTIKUEUE_CONTROLLER, "parameters": {
                 "apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": name}}}]


def manager_manifests(spec: AllocationSpec, workers: tuple[WorkerShare, ...]) -> list[dict]:
    """What the manager holds: the allocation's objects with its whole quota, its
    ClusterQueue behind MultiKueue's admission check, its flavor selecting no node (the
    manager runs none of the work), and the pool's MultiKueue wiring before the queue."""
    out = []
    for m in render_manifests(spec):
        if m["kind"] == "ResourceFlavor":
            m = {**m, "spec": {}}
        if m["kind"] == "ClusterQueue":
            m = {**m, "spec": {**m["spec"], "admissionChecksStrategy": {
                "admissionChecks": [{"name": check_name(spec.pool)}]}}}
            out += multikueue_objects(spec, workers)
        out.append(m)
    return out


def worker_manifests(spec: AllocationSpec, share: WorkerShare) -> list[dict]:
    """What one worker holds: the same namespace, queues and access, with its share."""
    return render_manifests(replace(spec, whole_devices=share.devices))


def kubeconfig_secret(worker: str, kubeconfig: bytes) -> dict:
    """The Secret Kueue on the manager reads a worker's kubeconfig from (key `kubeconfig`).
    Built at apply time from the registry's reference, never rendered for a page."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": secret_name(worker), "namespace": KUEUE_NAMESPACE,
                         "labels": {MANAGED_BY: MANAGER}},
            "data": {"kubeconfig": base64.b64encode(kubeconfig).decode()}}
