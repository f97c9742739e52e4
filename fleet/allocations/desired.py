"""An allocation's desired state: its spec read from the database, its rendered objects,
and what the API server says of them before anything is applied (the review's preview)."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings

from tenants.models import Tenant

from ..inventory.capacity import promisable_capacity
from ..inventory.selectors import facts_by_cluster
from ..kube import DryRunBackend, KubeBackend, KubeError, ObjectKey
from ..models import Allocation, Cluster, GpuNode, Pool
from .dispatch import WorkerShare, manager_manifests, split_shares, worker_manifests
from .manifests import AllocationSpec, render_manifests


def spec_for(*, allocation_id: int, tenant: Tenant, pool: Pool, namespace: str, route: str,
             whole_devices: int, mig_profile: str, mig_count: int,
             nodes: tuple[str, ...] = ()) -> AllocationSpec:
    return AllocationSpec(
        allocation_id=allocation_id, tenant=tenant.slug, namespace=namespace, route=route,
        pool=pool.slug, gpu_model=pool.gpu_model, node_selector=dict(pool.node_selector or {}),
        whole_devices=whole_devices, mig_profile=mig_profile, mig_count=mig_count,
        device_class=pool.device_class, nodes=nodes,
        cohort=pool.cohort, borrowing_limit=pool.borrowing_limit_devices,
        group_prefix=settings.PORTAL_K8S_GROUP_PREFIX,
        lead_group=settings.PORTAL_LEAD_GROUP_PATTERN,
        member_group=settings.PORTAL_MEMBER_GROUP_PATTERN,
        confidential_runtime_class=settings.PORTAL_CONFIDENTIAL_RUNTIME_CLASS,
        platform_namespaces=tuple(settings.PORTAL_PLATFORM_NAMESPACES),
    )


def allocation_spec(allocation: Allocation) -> AllocationSpec:
    return spec_for(
        allocation_id=allocation.pk, tenant=allocation.tenant, pool=allocation.pool,
        namespace=allocation.namespace, route=allocation.route,
        whole_devices=allocation.whole_devices, mig_profile=allocation.mig_profile,
        mig_count=allocation.mig_count,
        nodes=tuple(sorted(node.name for node in allocation.nodes.all())))


def allocation_manifests(allocation: Allocation) -> list[dict]:
    """What the allocation's own cluster (its pool's) holds; for a dispatched allocation,
    the manager's part (dispatch_targets gives every cluster's)."""
    spec = allocation_spec(allocation)
    if not allocation.pool.dispatched:
        return render_manifests(spec)
    return manager_manifests(spec, worker_shares(allocation))


def dispatch_workers() -> list[Cluster]:
    """The workers MultiKueue dispatches to: every live worker of the registry, by slug."""
    return list(Cluster.objects.live().filter(role=Cluster.Role.WORKER).order_by("slug"))


def worker_capacity(pool: Pool, workers: list[Cluster]) -> dict[str, int]:
    """Validated devices of the pool on each worker (what the split follows)."""
    by_cluster = facts_by_cluster(GpuNode.objects.filter(pool=pool))
    return {w.slug: int(promisable_capacity(by_cluster.get(w.pk, {}).get(pool.pk, []),
                                            allocated_devices=Decimal(0)).capacity_devices)
            for w in workers}


def decided_shares(allocation: Allocation) -> dict[str, int]:
    """The stored split, or the split the fleet gives now (stored at first provisioning)."""
    if allocation.cluster_shares:
        return {k: int(v) for k, v in allocation.cluster_shares.items()}
    workers = dispatch_workers()
    return split_shares(allocation.whole_devices, worker_capacity(allocation.pool, workers))


def worker_shares(allocation: Allocation) -> tuple[WorkerShare, ...]:
    shares = decided_shares(allocation)
    names = {w.slug: w.multikueue_cluster for w in Cluster.objects.filter(slug__in=shares)}
    return tuple(WorkerShare(slug, names.get(slug, slug), devices)
                 for slug, devices in sorted(shares.items()) if slug in names)


@dataclass(frozen=True)
class WorkerTarget:
    """One worker's part of a dispatched allocation."""

    cluster: Cluster
    share: WorkerShare
    manifests: list[dict]


def worker_targets(allocation: Allocation) -> list[WorkerTarget]:
    """Every worker's part of a dispatched allocation (none for any other)."""
    if not allocation.pool.dispatched:
        return []
    spec = allocation_spec(allocation)
    clusters = {c.slug: c for c in Cluster.objects.filter(
        slug__in=[s.cluster for s in worker_shares(allocation)])}
    return [WorkerTarget(clusters[s.cluster], s, worker_manifests(spec, s))
            for s in worker_shares(allocation)]


@dataclass(frozen=True)
class PreviewRow:
    key: ObjectKey
    accepted: bool
    message: str
    manifest: dict


def preview(manifests: list[dict], *, backend: KubeBackend) -> list[PreviewRow]:
    """Dry-run every object (`dryRun=All`). Objects for a namespace that does not exist yet
    are dry-run in the portal's own namespace, so schema, CEL and admission still run."""
    rows = []
    namespaces = {m["metadata"]["name"] for m in manifests if m["kind"] == "Namespace"}
    existing: dict[str, bool] = {}
    for manifest in manifests:
        key = ObjectKey.of(manifest)
        target, note = manifest, ""
        if key.namespace in namespaces:
            if key.namespace not in existing:
                existing[key.namespace] = backend.get("v1", "Namespace", key.namespace) \
                    is not None
            if not existing[key.namespace]:
                target = {**manifest, "metadata": {
                    **manifest["metadata"], "namespace": settings.PORTAL_NAMESPACE}}
                note = f" (checked in {settings.PORTAL_NAMESPACE}: {key.namespace} does not " \
                       "exist yet)"
        try:
            backend.apply(target, dry_run=True)
            said = ("accepted by the API server" if not isinstance(backend, DryRunBackend)
                    else "not validated: the embedded dry-run backend has no API server")
            rows.append(PreviewRow(key, True, said + note, manifest))
        except KubeError as exc:
            rows.append(PreviewRow(key, False, exc.message, manifest))
    return rows
