"""Reaching clusters: the registry's rows turned into the adapter's connections, and a
check of what each one answers. Nothing in the portal holds a global client: every call
names the cluster it talks to (`backend_of`)."""

from __future__ import annotations

import base64
from pathlib import Path

from ..kube import ClusterConnection, DryRunBackend, KubeBackend, KubeError, backend_for
from ..models import Cluster, home_cluster_id
from ..vocabulary import HOME_CLUSTER, KUEUE, ClusterConnections
from .clusters import ClusterHealth, cluster_health, multikueue_state, parse_credential_ref

KUEUE_DEPLOYMENT = ("kueue-system", "kueue-controller-manager")


def home_cluster() -> Cluster:
    """The portal's own cluster (PORTAL_KUBE_BACKEND), registered on first use."""
    return Cluster.objects.get(pk=home_cluster_id())


def live_clusters() -> list[Cluster]:
    return list(Cluster.objects.live())


def live_cluster(slug: str) -> Cluster | None:
    """A live cluster by slug; the home cluster is registered on first use."""
    if slug == HOME_CLUSTER:
        return home_cluster()
    return Cluster.objects.live().filter(slug=slug).first()


def each_live_cluster(read) -> list[tuple[Cluster, str]]:
    """`read(cluster)` (a sync's summary) for every live cluster in turn; one that does not
    answer is said so and does not stop the others."""
    out = []
    for cluster in live_clusters():
        try:
            out.append((cluster, read(cluster)))
        except KubeError as exc:
            out.append((cluster, f"not read: {exc.message}"))
    return out


def connection_of(cluster: Cluster) -> ClusterConnection:
    if not cluster.by_kubeconfig:
        return ClusterConnection(cluster.slug, cluster.connection)
    ref = parse_credential_ref(cluster.credential_ref)
    if ref.kind == "file":
        return ClusterConnection(cluster.slug, ClusterConnections.KUBECONFIG,
                                 kubeconfig_file=ref.path,
                                 api_server=cluster.api_server)
    return ClusterConnection(cluster.slug, ClusterConnections.KUBECONFIG,
                             kubeconfig_secret=str(ref),
                             api_server=cluster.api_server)


def _secret_text(cluster: Cluster, reference: str = "") -> str:
    """The kubeconfig a Secret in the portal's own cluster holds for `cluster` (its
    credential, or the one `reference` names)."""
    ref = parse_credential_ref(reference or cluster.credential_ref)
    if cluster.slug == HOME_CLUSTER:
        raise KubeError("The home cluster's credential cannot live in itself.", retriable=False)
    secret = backend_of(home_cluster()).get("v1", "Secret", ref.name, ref.namespace)
    if secret is None:
        raise KubeError(f"Secret {ref.namespace}/{ref.name} is not in the portal's cluster.",
                        retriable=False)
    data = (secret.get("data") or {}).get(ref.key)
    if not data:
        raise KubeError(f"Secret {ref.namespace}/{ref.name} has no key {ref.key!r}.",
                        retriable=False)
    return base64.b64decode(data).decode()


def backend_of(cluster: Cluster) -> KubeBackend:
    """The adapter for `cluster`. A reference that cannot be used is a KubeError that says
    why, like any other failed call, so a request is left retriable with the reason shown."""
    try:
        conn = connection_of(cluster)
    except ValueError as exc:
        raise KubeError(f"Cluster {cluster.slug}: {exc}", retriable=False) from exc
    return backend_for(conn, load_kubeconfig=lambda: _secret_text(cluster))


def dispatch_kubeconfig(worker: Cluster) -> bytes:
    """The kubeconfig MultiKueue on the manager uses for `worker`: its dispatch credential,
    else the portal's own for it. Read when it is applied, never stored."""
    reference = worker.dispatch_credential_ref or worker.credential_ref
    try:
        ref = parse_credential_ref(reference)
    except ValueError as exc:
        raise KubeError(f"Cluster {worker.slug}: {exc}", retriable=False) from exc
    if ref.kind == "secret":
        return _secret_text(worker, reference).encode()
    try:
        return Path(ref.path).read_bytes()
    except OSError as exc:
        raise KubeError(f"Cluster {worker.slug}: the kubeconfig file {ref.path} cannot be "
                        f"read ({exc.strerror}).", retriable=False) from exc


def read_health(cluster: Cluster, *, manager: Cluster | None = None) -> ClusterHealth:
    """Ask the cluster (and, for a worker, the manager about it); never raises."""
    multikueue = None
    if cluster.is_worker and manager is not None:
        try:
            multikueue = multikueue_state(backend_of(manager).get(
                KUEUE, "MultiKueueCluster", cluster.multikueue_cluster))
        except KubeError as exc:
            multikueue = (None, f"The manager {manager.slug} did not answer: {exc.message}")
    try:
        backend = backend_of(cluster)
        if isinstance(backend, DryRunBackend):
            return cluster_health(dry_run=True, version=None, multikueue=multikueue)
        server = getattr(backend, "server", "")
        version = backend.get_path("/version")
        group = _quiet(backend.get_path, "/apis/" + KUEUE.split("/")[0])
        deployment = _quiet(backend.get, "apps/v1", "Deployment", KUEUE_DEPLOYMENT[1],
                            KUEUE_DEPLOYMENT[0])
    except KubeError as exc:
        return cluster_health(dry_run=False, version=None, error=exc.message,
                              multikueue=multikueue)
    return cluster_health(dry_run=False, version=version, server=server, kueue_group=group,
                          kueue_deployment=deployment, role=cluster.role,
                          multikueue=multikueue)


def _quiet(call, *args):
    """An optional read: not served or not allowed is simply not known."""
    try:
        return call(*args)
    except KubeError as exc:
        if exc.retriable:
            raise
        return None
