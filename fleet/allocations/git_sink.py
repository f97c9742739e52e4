"""The Git sink (PORTAL_PROVISIONING=gitops): an allocation's objects committed to Git for
Argo CD or Flux instead of applied, its directory removed at retirement, and the cluster
followed until it has every object (what the tool reports said while it waits)."""

from __future__ import annotations

from django.conf import settings
from django.db import transaction

from tenants.audit import audit_record
from tenants.models import AuditEvent

from ..inventory.connections import backend_of
from ..kube import KubeBackend, KubeError, ObjectKey
from ..models import Allocation
from . import gitops
from .admission import GUARDED_ROUTES, is_guard_params
from .desired import allocation_manifests, allocation_spec, worker_targets
from .gitops_status import parse_ref, tool_status
from .guard_check import guard_probe, is_guard_check
from .guards import guards_in_force
from .manifests import guard_manifests, is_guard_object
from .repair import Repair
from .transitions import allocation_transition, record_progress

S = Allocation.Status


class GitSink:
    """Commit to Git for Argo CD or Flux; the cluster is followed (follow_gitops) until it
    has every object. The repository is the desired state: repair re-publishes, and the
    GitOps tool prunes what Git no longer holds."""

    def publish(self, alloc, manifests, backend, defer=None):
        return _publish(alloc, manifests, backend)

    def resume(self, alloc, manifests, backend, pending, defer=None):
        return _publish(alloc, manifests, backend)  # nothing of its own waits

    def withdraw(self, alloc, backend):
        return _unpublish(alloc)

    def withdrawn_words(self, withdrawn):
        if withdrawn:
            return (f"Retired: its directory is removed from Git ({withdrawn[0]}); the GitOps "
                    "tool prunes its objects")
        return "Retired: nothing of it was in Git"

    def repair(self, alloc, manifests, backend, cause=""):
        published = _publish_only(alloc)
        return [f"its directory differed from the portal's and was committed again "
                f"({published.commit[:12]})"] if published.changed else []

    def prune_leftovers(self, backend):
        return []

    def publish_part(self, alloc, cluster, manifests):
        _commit(alloc, cluster.slug, manifests)

    def withdraw_part(self, alloc, cluster):
        return _unpublish(alloc, cluster.slug)

    def repair_part(self, alloc, cluster, manifests):
        _commit(alloc, cluster.slug, manifests)  # Git is the desired state: said again
        return Repair()


def gitops_mode() -> bool:
    return settings.PORTAL_PROVISIONING == "gitops"


def _provenance(alloc: Allocation) -> dict[str, str]:
    """Request and approver of an allocation: its origin field and who created it."""
    created = AuditEvent.objects.filter(subject_type="allocation", subject_id=alloc.pk,
                                        action="allocation.created").first()
    return {"tenant": alloc.tenant.slug, "namespace": alloc.namespace,
            "route": alloc.get_route_display(), "request": alloc.origin or "—",
            "approver": created.actor_name if created else "—"}


def cluster_guards(cluster: str, *, excluding: int | None = None) -> list[dict]:
    """The cluster's shared admission guards as one set of objects: the policies of every
    guarded route in use there and the check, once (read now: called under the repository's
    lock). Each allocation's check params sit in its own directory, and go with it."""
    allocations = (Allocation.objects
                   .filter(route__in=GUARDED_ROUTES, pool__cluster__slug=cluster)
                   .exclude(status=S.RETIRED).exclude(pk=excluding)
                   .select_related("tenant", "pool").prefetch_related("nodes")
                   .order_by("pk"))
    shared: dict[tuple, dict] = {}
    for alloc in allocations:
        for m in guard_manifests(allocation_spec(alloc)):
            if not is_guard_params(m):
                shared[(m["kind"], m["metadata"]["name"])] = m
    checks = [m for m in shared.values() if is_guard_check(m)]
    return [*(m for m in shared.values() if not is_guard_check(m)), *checks]


def _commit_guards(cluster: str, *, excluding: int | None = None) -> gitops.Publication:
    def files():
        return gitops.directory_files(cluster_guards(cluster, excluding=excluding))

    return gitops.Repository().change(
        gitops.guards_path(cluster=cluster), files,
        "Admission guards: the shared policies and the check\n")


def allocation_files(manifests: list[dict]) -> dict[str, str]:
    """An allocation's directory: its objects and its own check params, not the shared
    guards (those are the cluster's guards directory, once)."""
    return gitops.directory_files([m for m in manifests
                                   if not is_guard_object(m) or is_guard_params(m)])


def _commit(alloc: Allocation, cluster: str, manifests: list[dict]) -> gitops.Publication:
    """The allocation's directory for one cluster written and committed (idempotent), with
    its audit row when it changed something, its check params among its files. The shared
    admission guards go to the cluster's guards directory, committed first."""
    if any(is_guard_object(m) for m in manifests):
        _commit_guards(cluster)
    files = allocation_files(manifests)
    path = gitops.allocation_path(alloc.tenant.slug, alloc.namespace, cluster=cluster)
    published = gitops.Repository().change(path, files, gitops.commit_message(
        action="publish", objects=len(files) - 1, **_provenance(alloc)))
    if published.changed:
        audit_record(actor=None, subject=alloc, tenant=alloc.tenant,
                     action="allocation.committed",
                     reason=f"Committed {published.commit[:12]} to "
                            f"{settings.PORTAL_GITOPS_REPO} ({path}).",
                     data={"commit": published.commit, "path": path, "cluster": cluster})
    return published


def _publish(alloc: Allocation, manifests: list[dict], backend: KubeBackend) -> Allocation:
    """Commit the allocation's directory (idempotent) and leave it provisioning until the
    cluster shows every object (follow_gitops), which then reserves its dedicated nodes."""
    published = _commit(alloc, alloc.pool.cluster.slug, manifests)
    Allocation.objects.filter(pk=alloc.pk).update(
        status_message=f"Committed {published.commit[:12]} to {settings.PORTAL_GITOPS_REPO} "
                       f"({published.path}); waiting for the cluster to apply it.")
    record_progress(alloc.pk, 0, len([m for m in manifests
                                      if m["kind"] not in gitops.NOT_COMMITTED]))
    return Allocation.objects.get(pk=alloc.pk)


def _publish_only(alloc: Allocation):
    return _commit(alloc, alloc.pool.cluster.slug, allocation_manifests(alloc))


def _unpublish(alloc: Allocation, cluster: str = "") -> list[str]:
    """Remove the allocation's directory (of its pool's cluster, or of `cluster`) from Git;
    [commit] if one was made."""
    path = gitops.allocation_path(alloc.tenant.slug, alloc.namespace,
                                  cluster=cluster or alloc.pool.cluster.slug)
    removed = gitops.Repository().change(path, None, gitops.commit_message(
        action="retire", objects=0, **_provenance(alloc)))
    if alloc.route in GUARDED_ROUTES:
        # The shared guards leave with the last allocation of their route (it is retiring:
        # no longer among the live); its check params left with its directory.
        _commit_guards(cluster or alloc.pool.cluster.slug, excluding=alloc.pk)
    if removed.changed:
        audit_record(actor=None, subject=alloc, tenant=alloc.tenant,
                     action="allocation.uncommitted",
                     reason=f"Removed {path} from Git in {removed.commit[:12]}.",
                     data={"commit": removed.commit, "path": path})
    return [removed.commit[:12]] if removed.changed else []


def gitops_progress(allocation_id: int, *, backend: KubeBackend | None = None) -> Allocation:
    """How much of a committed allocation the cluster has: active once every object is
    there (as Argo CD or Flux applied it)."""
    alloc = Allocation.objects.select_related("tenant", "pool__cluster").get(pk=allocation_id)
    backend = backend or backend_of(alloc.pool.cluster)
    if alloc.status != S.PROVISIONING:
        return alloc
    manifests = allocation_manifests(alloc)
    if _lacks_its_params(alloc, alloc.pool.cluster.slug, manifests):
        _publish_only(alloc)
    wanted = [m for m in manifests if m["kind"] not in gitops.NOT_COMMITTED]
    present = _present(backend, wanted)
    # A dispatched allocation's parts on its workers, each applied by the worker's own
    # GitOps tool; one that does not answer is not waited for (the others take its work).
    unreached = []
    for target in worker_targets(alloc):
        try:
            here = _present(backend_of(target.cluster), target.manifests)
        except KubeError as exc:
            unreached.append(f"{target.cluster.described}: {exc.message}")
            continue
        present, wanted = present + here, wanted + target.manifests
    record_progress(allocation_id, present, len(wanted))
    if present == len(wanted) and not _guards_answer(alloc, manifests, backend):
        return Allocation.objects.get(pk=allocation_id)
    if present == len(wanted):
        # A dedicated block's nodes are patched directly (shared with the kubelet: never in
        # Git, never forced), once its guards are in force.
        for node in manifests:
            if node["kind"] in gitops.NOT_COMMITTED:
                backend.apply(node, force=False)
        where = "the cluster" if not alloc.pool.dispatched else \
            "the manager and every worker that answers" + (
                f" (not answering: {'; '.join(unreached)})" if unreached else "")
        allocation_transition(allocation_id, from_states=(S.PROVISIONING,), to=S.ACTIVE,
                              reason=f"Applied from Git: all {len(wanted)} object(s) are in "
                                     f"{where} in namespace {alloc.namespace}.")
    else:
        _explain_waiting(alloc, present, len(wanted), backend)
    return Allocation.objects.get(pk=allocation_id)


def _lacks_its_params(alloc: Allocation, cluster: str, manifests: list[dict]) -> bool:
    """Whether the allocation's directory, as this machine's clone last saw it, lacks its
    check params: committed by a portal that kept every allocation's entry in the guards'
    directory, so the cluster would never have them (committed again, it will). A local
    read: the clone is only fetched when something is committed."""
    params = next((m for m in manifests if is_guard_params(m)), None)
    if params is None:
        return False
    target = gitops.Repository().dir / gitops.allocation_path(alloc.tenant.slug,
                                                              alloc.namespace, cluster=cluster)
    return target.is_dir() and not any(target.glob(f"*-{gitops.object_file(params)}"))


def _present(backend: KubeBackend, manifests: list[dict]) -> int:
    """How many of `manifests` the cluster has."""
    found = 0
    for m in manifests:
        key = ObjectKey.of(m)
        if backend.get(key.api_version, key.kind, key.name, key.namespace) is not None:
            found += 1
    return found


def _guards_answer(alloc: Allocation, manifests: list[dict], backend: KubeBackend) -> bool:
    """Whether the allocation's guards (if any) refuse what they must, asked once: the GitOps
    tool applied them, so the portal only says so and keeps the allocation provisioning."""
    probe = guard_probe(manifests)
    if probe is None:
        return True
    try:
        guards_in_force(backend, probe, timeout=0)
        return True
    except KubeError as exc:
        message = ("Every object is in the cluster, but its admission guards are not in "
                   f"force yet ({exc.message}); checking again.")
        Allocation.objects.filter(pk=alloc.pk, status=S.PROVISIONING).update(
            status_message=message[:2000])
        return False


def _explain_waiting(alloc: Allocation, present: int, total: int,
                     backend: KubeBackend) -> None:
    """While the cluster lacks the committed objects, say what the GitOps tool reports (a
    sync or build error, a degraded health), so the wait has a reason on the page."""
    ref = parse_ref(settings.PORTAL_GITOPS_STATUS_OBJECT)
    if ref is None:
        return
    try:
        obj = backend.get(ref.api_version, ref.kind, ref.name, ref.namespace)
    except KubeError as exc:
        obj, note = None, f"could not be read ({exc.message})"
    else:
        note = ""
    status = tool_status(ref, obj)
    words = note or status.words
    message = (f"Committed to Git; {present} of {total} object(s) in the cluster so far. "
               f"{ref.title}: {words}.")
    if status.state == "failed":
        message = (f"Committed to Git, but {ref.title} reports a problem: {words}. "
                   f"{present} of {total} object(s) are in the cluster; the portal keeps "
                   "waiting and checks again.")
    if alloc.status_message != message:
        with transaction.atomic(savepoint=False):  # the message with its audit row
            Allocation.objects.filter(pk=alloc.pk, status=S.PROVISIONING).update(
                status_message=message[:2000])
            if status.state == "failed":
                audit_record(actor=None, subject=alloc, tenant=alloc.tenant,
                             action="allocation.gitops_error", reason=message[:2000])
