"""Provisioning, expiry, retirement and reconcile of allocations through the Kubernetes API.

Tasks call these with ids. Each step is idempotent (server-side apply; conditional status
updates) so a retry or a second run never duplicates or orphans anything.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from typing import Protocol

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from tenants.audit import audit_record
from tenants.models import AuditEvent, Tenant

from ..kube import (
    LABEL_ALLOCATION,
    MANAGED_BY,
    MANAGER,
    DryRunBackend,
    KubeBackend,
    KubeError,
    ObjectKey,
    get_backend,
    prune,
)
from ..models import Allocation, Pool, Route
from ..signals import allocation_status_changed
from . import gitops, lifecycle
from .gitops_status import parse_ref, tool_status
from .manifests import (
    AFTER_GUARDS_KINDS,
    GUARD_KINDS,
    OWNED_KINDS,
    AllocationSpec,
    apply_waves,
    drift,
    guard_check_answer,
    guard_probe,
    guards_content_digest,
    guards_fingerprint,
    is_guard_check,
    node_release,
    refused_by_admission,
    render_manifests,
    stamp_guard_check,
)

S = Allocation.Status
log = logging.getLogger(__name__)


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
        nodes=tuple(sorted(allocation.nodes.values_list("name", flat=True))))


def allocation_manifests(allocation: Allocation) -> list[dict]:
    return render_manifests(allocation_spec(allocation))


# ---------------------------------------------------------------------------------------
# Preview: what the API server would say before anything is applied


@dataclass(frozen=True)
class PreviewRow:
    key: ObjectKey
    accepted: bool
    message: str
    manifest: dict


def preview(manifests: list[dict], *, backend: KubeBackend | None = None) -> list[PreviewRow]:
    """Dry-run every object (`dryRun=All`). Objects for a namespace that does not exist yet
    are dry-run in the portal's own namespace, so schema, CEL and admission still run."""
    backend = backend or get_backend()
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


# ---------------------------------------------------------------------------------------
# Status changes


def allocation_transition(allocation_id: int, *, from_states, to: str, reason: str, by=None,
                          message: str = "", action: str = "",
                          data: dict | None = None) -> Allocation | None:
    """Conditional status change with its audit row; None if another worker moved it."""
    with transaction.atomic():
        alloc = (Allocation.objects.select_for_update(of=("self",)).select_related("tenant")
                 .get(pk=allocation_id))
        if alloc.status not in from_states:
            return None
        if not lifecycle.can_move(alloc.status, to):
            raise ValueError(f"an allocation cannot go from {alloc.status} to {to}")
        old = alloc.status
        alloc.status, alloc.status_message = to, message
        alloc.save(update_fields=["status", "status_message"])
        audit_record(actor=by, subject=alloc, tenant=alloc.tenant,
                     action=action or f"allocation.{to}", from_state=old, to_state=to,
                     reason=reason, data=data)
        if old != to:  # a renewal of an active allocation stays active: nobody to tell
            transaction.on_commit(lambda: allocation_status_changed.send(
                sender=Allocation, allocation_id=allocation_id, old=old, new=to,
                reason=reason))
    return alloc


def _progress(allocation_id: int, done: int, total: int) -> None:
    Allocation.objects.filter(pk=allocation_id).update(progress_done=done, progress_total=total,
                                                       progress_at=timezone.now())


def stalled_provisioning(now: dt.datetime, stall: dt.timedelta) -> list[int]:
    """Allocations whose provisioning task is lost: approved but never started (the task
    queue was away at approval), or started and silent for longer than `stall` (its worker
    died). Queuing them again is safe: provisioning is idempotent, and the status changes
    are conditional, so a late duplicate changes nothing."""
    waiting = Allocation.objects.filter(status=S.PENDING, created_at__lt=now - stall)
    silent = Allocation.objects.filter(status=S.PROVISIONING).filter(
        Q(progress_at__lt=now - stall) | Q(progress_at__isnull=True, created_at__lt=now - stall))
    return sorted(set(waiting.values_list("pk", flat=True)) |
                  set(silent.values_list("pk", flat=True)))


@dataclass(frozen=True)
class GuardsPending:
    """Where provisioning stopped while the API server compiles the allocation's guards:
    the probe to ask with, when the asking began (seconds since the epoch), how many objects
    were applied and how often it asked. Plain data, so a task can carry it."""

    probe: dict
    since: float
    done: int
    asked: int = 1
    other: str = ""  # another admission control's refusal of the probe, quoted if it lasts

    def as_task_kwargs(self) -> dict:
        return asdict(self)

    def pause(self) -> float:
        return min(0.05 * 2 ** (self.asked - 1), 0.25)


# Called instead of sleeping while the guards compile: it must arrange for
# allocation_provision(id, resume=pending) to run again (the task queues itself with a short
# countdown, so the worker process takes other work meanwhile). Without one, provisioning
# waits in place (the embedded run, tests, the reconcile loop).
Defer = Callable[[GuardsPending], None]


def allocation_provision(allocation_id: int, *, backend: KubeBackend | None = None,
                         defer: Defer | None = None,
                         resume: GuardsPending | dict | None = None) -> Allocation:
    """Apply the allocation's desired state. Raises KubeError for the task to retry or fail.
    With `resume`, go on where an earlier call deferred to let the guards compile."""
    backend = backend or get_backend()
    alloc = Allocation.objects.select_related("tenant", "pool").get(pk=allocation_id)
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
    return provisioning_sink().publish(alloc, allocation_manifests(alloc), backend, defer)


# ---------------------------------------------------------------------------------------
# Provisioning sinks: where desired state goes. One interface, two implementations, chosen
# by PORTAL_PROVISIONING; the lifecycle code above and below never asks which.


class ProvisioningSink(Protocol):
    def publish(self, alloc: Allocation, manifests: list[dict],
                backend: KubeBackend, defer: Defer | None = None) -> Allocation:
        """Make the desired state real (or committed); the allocation as it stands after."""

    def resume(self, alloc: Allocation, manifests: list[dict], backend: KubeBackend,
               pending: GuardsPending, defer: Defer | None = None) -> Allocation:
        """Go on from where publish deferred."""

    def withdraw(self, alloc: Allocation, backend: KubeBackend) -> list:
        """Remove the allocation's objects (or its directory); what was removed."""

    def withdrawn_words(self, withdrawn: list) -> str: ...

    def repair(self, alloc: Allocation, manifests: list[dict],
               backend: KubeBackend, cause: str = "") -> list[str]:
        """Bring desired state back; what had drifted (or, with a cause, what the portal's
        own change altered), in words."""

    def prune_leftovers(self, backend: KubeBackend) -> list: ...


class ApplySink:
    """Server-side apply to the cluster, in waves; drift read and repaired object by object."""

    def publish(self, alloc, manifests, backend, defer=None):
        waves, total = apply_waves(manifests), len(manifests)
        _progress(alloc.pk, 0, total)
        done, probe, live_guards = 0, None, []
        for k, wave in enumerate(waves):
            if any(is_guard_check(m) for m in wave):
                wave = [stamp_guard_check(m, guards_fingerprint(live_guards)) for m in wave]
                probe = guard_probe(wave) or probe
            if probe and any(m["kind"] in AFTER_GUARDS_KINDS for m in wave):
                # The block's nodes and the tenant's access only once the guards are in
                # force (the waves before were applied while the API server compiled them).
                return self._after_guards(alloc, waves[k:], total, backend, defer,
                                          GuardsPending(probe, time.time(), done, asked=0))
            applied = apply_together(backend, wave)
            # The guards as the API server holds them name the check (its fingerprint).
            live_guards += [a for m, a in zip(wave, applied, strict=True)
                            if m["kind"] in GUARD_KINDS and not is_guard_check(m)]
            done += len(wave)
            _progress(alloc.pk, done, total)
        return _provisioned(alloc, total, None)

    def resume(self, alloc, manifests, backend, pending, defer=None):
        waves = apply_waves(manifests)
        now = guard_probe(manifests)
        if now is None or guards_content_digest(pending.probe) != guards_content_digest(now):
            # The allocation changed since (its guards would differ): start over.
            return self.publish(alloc, manifests, backend, defer)
        first = next(k for k, w in enumerate(waves)
                     if any(m["kind"] in AFTER_GUARDS_KINDS for m in w))
        return self._after_guards(alloc, waves[first:], len(manifests), backend, defer,
                                  pending)

    def _after_guards(self, alloc, rest, total, backend, defer, pending):
        """Ask whether the guards are in force; once they are, apply the rest (nodes,
        access) and the allocation is active. Not yet: wait here, or with `defer` hand the
        wait back to the caller, who resumes later (the worker process takes other work
        meanwhile)."""
        try:
            if defer is None or not backend.enforces_admission:
                guarded = guards_in_force(backend, pending.probe)
            else:
                guarded = _ask_guards_deferring(backend, pending, defer)
                if guarded is None:
                    # Handed on: nothing after this may fail (no query), or a retry would
                    # start a second chain beside the queued one.
                    return alloc
        except KubeError as exc:
            if not exc.retriable:
                raise
            raise KubeError(f"{exc.message}; neither its nodes nor anyone's access "
                            "were applied, and provisioning will try again.",
                            retriable=True, status=exc.status) from exc
        done = pending.done
        for wave in rest:
            apply_together(backend, wave)
            done += len(wave)
            _progress(alloc.pk, done, total)
        return _provisioned(alloc, total, guarded)

    def withdraw(self, alloc, backend):
        return prune(backend, label_selector=f"{LABEL_ALLOCATION}={alloc.pk}",
                     kinds=OWNED_KINDS)

    def withdrawn_words(self, withdrawn):
        return f"Retired: removed {len(withdrawn)} object(s)"

    def repair(self, alloc, manifests, backend, cause=""):
        return _repair_in_cluster(alloc, manifests, backend, cause=cause)

    def prune_leftovers(self, backend):
        return _prune_leftovers(backend)


def _provisioned(alloc: Allocation, total: int, guarded: float | None) -> Allocation:
    reason = f"Provisioned: {total} object(s) applied in namespace {alloc.namespace}."
    data = {}
    if guarded is not None:
        reason += (f" Its admission guards refused the check's probe {guarded:.1f} s after "
                   "they were applied, before "
                   + ("its nodes were reserved and " if alloc.route == Route.DEDICATED_BLOCK
                      else "") + "anyone had access.")
        data["guards_in_force_seconds"] = round(guarded, 3)
    allocation_transition(alloc.pk, from_states=(S.PROVISIONING,), to=S.ACTIVE,
                          reason=reason, data=data or None)
    return Allocation.objects.get(pk=alloc.pk)


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


SINKS: dict[str, ProvisioningSink] = {"apply": ApplySink(), "gitops": GitSink()}


def provisioning_sink() -> ProvisioningSink:
    return SINKS[settings.PORTAL_PROVISIONING]


# ---------------------------------------------------------------------------------------
# GitOps mode (PORTAL_PROVISIONING=gitops): commit instead of apply, then follow the cluster


def gitops_mode() -> bool:
    return settings.PORTAL_PROVISIONING == "gitops"


def _provenance(alloc: Allocation) -> dict[str, str]:
    """Request and approver of an allocation: its origin field and who created it."""
    created = AuditEvent.objects.filter(subject_type="allocation", subject_id=alloc.pk,
                                        action="allocation.created").first()
    return {"tenant": alloc.tenant.slug, "namespace": alloc.namespace,
            "route": alloc.get_route_display(), "request": alloc.origin or "—",
            "approver": created.actor_name if created else "—"}


def _publish(alloc: Allocation, manifests: list[dict], backend: KubeBackend) -> Allocation:
    """Commit the allocation's directory (idempotent) and leave it provisioning until the
    cluster shows every object (follow_gitops), which then reserves its dedicated nodes."""
    files = gitops.directory_files(manifests)
    info = _provenance(alloc)
    path = gitops.allocation_path(alloc.tenant.slug, alloc.namespace)
    published = gitops.Repository().change(path, files, gitops.commit_message(
        action="publish", objects=len(files) - 1, **info))
    note = (f"Committed {published.commit[:12]} to {settings.PORTAL_GITOPS_REPO} "
            f"({path}); waiting for the cluster to apply it.")
    with transaction.atomic():
        Allocation.objects.filter(pk=alloc.pk).update(status_message=note)
        if published.changed:
            audit_record(actor=None, subject=alloc, tenant=alloc.tenant,
                         action="allocation.committed", reason=note,
                         data={"commit": published.commit, "path": path})
    _progress(alloc.pk, 0, len(files) - 1)
    return Allocation.objects.get(pk=alloc.pk)


def _publish_only(alloc: Allocation):
    files = gitops.directory_files(allocation_manifests(alloc))
    return gitops.Repository().change(
        gitops.allocation_path(alloc.tenant.slug, alloc.namespace), files,
        gitops.commit_message(action="publish", objects=len(files) - 1, **_provenance(alloc)))


def _unpublish(alloc: Allocation) -> list[str]:
    """Remove the allocation's directory from Git; [commit] if one was made."""
    path = gitops.allocation_path(alloc.tenant.slug, alloc.namespace)
    removed = gitops.Repository().change(path, None, gitops.commit_message(
        action="retire", objects=0, **_provenance(alloc)))
    if removed.changed:
        audit_record(actor=None, subject=alloc, tenant=alloc.tenant,
                     action="allocation.uncommitted",
                     reason=f"Removed {path} from Git in {removed.commit[:12]}.",
                     data={"commit": removed.commit, "path": path})
    return [removed.commit[:12]] if removed.changed else []


def gitops_progress(allocation_id: int, *, backend: KubeBackend | None = None) -> Allocation:
    """How much of a committed allocation the cluster has: active once every object is
    there (as Argo CD or Flux applied it)."""
    backend = backend or get_backend()
    alloc = Allocation.objects.select_related("tenant", "pool").get(pk=allocation_id)
    if alloc.status != S.PROVISIONING:
        return alloc
    manifests = allocation_manifests(alloc)
    wanted = [m for m in manifests if m["kind"] not in gitops.NOT_COMMITTED]
    present = 0
    for m in wanted:
        key = ObjectKey.of(m)
        if backend.get(key.api_version, key.kind, key.name, key.namespace) is not None:
            present += 1
    _progress(allocation_id, present, len(wanted))
    if present == len(wanted) and not _guards_answer(alloc, manifests, backend):
        return Allocation.objects.get(pk=allocation_id)
    if present == len(wanted):
        # A dedicated block's nodes are patched directly (shared with the kubelet: never in
        # Git, never forced), once its guards are in force.
        for node in manifests:
            if node["kind"] in gitops.NOT_COMMITTED:
                backend.apply(node, force=False)
        allocation_transition(allocation_id, from_states=(S.PROVISIONING,), to=S.ACTIVE,
                              reason=f"Applied from Git: all {len(wanted)} object(s) are in "
                                     f"the cluster in namespace {alloc.namespace}.")
    else:
        _explain_waiting(alloc, present, len(wanted), backend)
    return Allocation.objects.get(pk=allocation_id)


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
        Allocation.objects.filter(pk=alloc.pk, status=S.PROVISIONING).update(
            status_message=message[:2000])
        if status.state == "failed":
            audit_record(actor=None, subject=alloc, tenant=alloc.tenant,
                         action="allocation.gitops_error", reason=message[:2000])


def ask_guards_once(backend: KubeBackend, probe: dict) -> tuple[bool, str]:
    """One dry-run of the guard check's probe: (whether the allocation's own check refused
    it, another admission control's refusal if one answered instead). An answer that is
    neither — RBAC, the server away — is raised as it came."""
    try:
        backend.apply(probe, dry_run=True)
    except KubeError as exc:
        answer = guard_check_answer(probe, exc.status, exc.message)
        if answer == "current":
            return True, ""
        if answer == "other" and not refused_by_admission(exc.status, exc.message):
            raise  # the portal may not ask (RBAC), or the server is away: as it came
        # "older": the check as it was before these guards is still in force. Another
        # admission control refusing the probe namespace (e.g. a policy requiring labels)
        # answers before the check is compiled, and may be quoted instead of it after:
        # not yet, and said if it lasts.
        return False, exc.message if answer == "other" else ""
    return False, ""


def _not_in_force(waited: float, other: str) -> KubeError:
    also = f"; another admission control refused it: {other}" if other else ""
    return KubeError(
        f"The allocation's admission guards were not in force {waited:.0f} s after they "
        f"were applied (the API server did not give the refusal only they give{also})",
        retriable=True)


def guards_in_force(backend: KubeBackend, probe: dict, *,
                    timeout: float | None = None) -> float | None:
    """Dry-run the guard check's probe until the API server refuses it: the seconds that
    took, or None for a backend that runs no admission (the dry-run record). Not refused in
    time is a retriable error: the task tries again, and nobody has access meanwhile."""
    if not backend.enforces_admission:
        return None
    timeout = settings.PORTAL_GUARD_WAIT_SECONDS if timeout is None else timeout
    start, pause, other = time.monotonic(), 0.05, ""
    while True:
        in_force, said = ask_guards_once(backend, probe)
        if in_force:
            return time.monotonic() - start
        other = said or other
        waited = time.monotonic() - start
        if waited >= timeout:
            raise _not_in_force(waited, other)
        time.sleep(min(pause, max(timeout - waited, 0.01)))
        pause = min(pause * 2, 0.25)


def _ask_guards_deferring(backend: KubeBackend, pending: GuardsPending,
                          defer: Defer) -> float | None:
    """guards_in_force without sleeping: the seconds since the asking began once they are
    in force, else None after handing `defer` the next ask (a retriable error once
    PORTAL_GUARD_WAIT_SECONDS have passed)."""
    in_force, said = ask_guards_once(backend, pending.probe)
    limit = settings.PORTAL_GUARD_WAIT_SECONDS
    waited = max(time.time() - pending.since, 0.0)
    if in_force:
        return waited
    other = said or pending.other
    # Also bounded by the number of asks: `since` is another process's clock.
    if waited >= limit or pending.asked > limit / 0.05:
        raise _not_in_force(waited, other)
    try:
        defer(replace(pending, asked=pending.asked + 1, other=other))
    except Exception as exc:  # the broker away: wait here as before rather than fail
        log.warning("could not hand the guards' wait back (%s); waiting in place", exc)
        return waited + guards_in_force(backend, pending.probe,
                                        timeout=max(limit - waited, 0.0))
    return None


APPLY_THREADS = 8  # requests in flight per allocation: the work is waiting on the API server


_pool = None
_pool_pid = 0
_pool_lock = threading.Lock()


def _apply_pool():
    """One thread pool per process, kept (starting threads per wave cost more than the
    requests); a forked worker process makes its own."""
    global _pool, _pool_pid
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool = ThreadPoolExecutor(max_workers=APPLY_THREADS, thread_name_prefix="apply")
            _pool_pid = os.getpid()
        return _pool


def apply_together(backend: KubeBackend, manifests: list[dict]) -> list[dict]:
    """Apply objects that do not depend on each other in parallel; every one is attempted,
    then the first failure (in render order) is raised for the task to retry or fail. The
    objects as the API server returned them, in the same order."""
    def one(manifest: dict) -> dict:
        # Nodes are shared with the kubelet and others: never force on them.
        return backend.apply(manifest, force=manifest["kind"] != "Node")

    if len(manifests) == 1 or threading.current_thread() is not threading.main_thread():
        # Already on a thread of someone's pool (a threads worker, runserver): one by one.
        # (Seen: a threads worker sharing this pool left 2 of 20 allocations hanging.)
        return [one(manifest) for manifest in manifests]
    futures = [_apply_pool().submit(one, m) for m in manifests]
    for future in futures:
        future.exception()  # waits for every one, whatever the others did
    return [future.result() for future in futures]  # the first KubeError, in render order


def allocation_fail(allocation_id: int, message: str) -> None:
    allocation_transition(allocation_id, from_states=(S.PENDING, S.PROVISIONING), to=S.FAILED,
                          reason=f"Provisioning failed: {message}", message=message)


# ---------------------------------------------------------------------------------------
# Expiry and retirement


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
    backend = backend or get_backend()
    alloc = Allocation.objects.select_related("tenant", "pool").get(pk=allocation_id)
    if alloc.status == S.RETIRED:
        return alloc
    deleted = provisioning_sink().withdraw(alloc, backend)
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


# ---------------------------------------------------------------------------------------
# Reconcile


def allocation_reconcile(allocation_id: int, *, backend: KubeBackend | None = None,
                         cause: str = "") -> list[str]:
    """Re-apply desired state; report what had drifted (changed or deleted outside us).
    With a cause (a move the portal itself made), the differences are the change being
    carried out, not drift, and are recorded as such.
    In GitOps mode the repository is the desired state: the directory is re-published
    (a commit only if it differs) and the GitOps tool repairs the cluster."""
    backend = backend or get_backend()
    alloc = Allocation.objects.select_related("tenant", "pool").get(pk=allocation_id)
    if alloc.status not in lifecycle.RECONCILED:
        return []
    return provisioning_sink().repair(alloc, allocation_manifests(alloc), backend, cause=cause)


def _repair_in_cluster(alloc: Allocation, manifests: list[dict],
                       backend: KubeBackend, *, cause: str = "") -> list[str]:
    found, probe, checked, live_guards = [], None, False, []
    for manifest in manifests:
        if is_guard_check(manifest):  # names the guards as they live now (see manifests)
            manifest = stamp_guard_check(manifest, guards_fingerprint(live_guards))
            probe = guard_probe([manifest]) or probe
        if probe and not checked and manifest["kind"] in AFTER_GUARDS_KINDS:
            # The guards in force before a node is (again) reserved or access (re)granted:
            # one dry-run when nothing changed; a wait after a guard was made again, after a
            # move, or when an earlier attempt stopped between the guards and the nodes.
            guards_in_force(backend, probe)
            checked = True
        key = ObjectKey.of(manifest)
        live = backend.get(key.api_version, key.kind, key.name, key.namespace)
        if live is None:
            found.append(f"{key} was deleted")
        else:
            paths = [p for p in drift({k: v for k, v in manifest.items()
                                       if k not in ("apiVersion", "kind")}, live)]
            if paths:
                found.append(f"{key} changed at {', '.join(paths)}")
        applied = backend.apply(manifest, force=manifest["kind"] != "Node")
        if manifest["kind"] in GUARD_KINDS and not is_guard_check(manifest):
            live_guards.append(applied)
    # Objects of this allocation it no longer renders (e.g. a binding replaced by one with
    # another role) are removed; the namespace itself is always among the desired.
    desired = {ObjectKey.of(m) for m in manifests}
    for key in prune(backend, label_selector=f"{LABEL_ALLOCATION}={alloc.pk}",
                     kinds=[k for k in OWNED_KINDS if k[1] not in ("Namespace", "Node")],
                     keep=desired):
        found.append(f"{key} is no longer part of it and was removed")
    # Nodes still labelled for it that it no longer reserves (a block moved off a node) lose
    # the labels and taint: otherwise its flavor would still select them.
    reserved = {m["metadata"]["name"] for m in manifests if m["kind"] == "Node"}
    for node in backend.list("v1", "Node", label_selector=f"{LABEL_ALLOCATION}={alloc.pk}"):
        name = node["metadata"]["name"]
        if name not in reserved:
            backend.apply(node_release(name))
            found.append(f"node {name} is no longer reserved and was released")
    report = "; ".join(found)
    with transaction.atomic():  # the report and its audit row together, after the API calls
        Allocation.objects.filter(pk=alloc.pk).update(drift_report="" if cause else report,
                                                      drift_checked_at=timezone.now())
        if found and cause:
            audit_record(actor=None, subject=alloc, tenant=alloc.tenant,
                         action="allocation.applied",
                         reason=f"Cluster brought in line after {cause}: {report}.")
        elif found:
            audit_record(actor=None, subject=alloc, tenant=alloc.tenant,
                         action="allocation.drift",
                         reason=f"Drift repaired by reconcile: {report}.")
    return found


def prune_leftovers(*, backend: KubeBackend | None = None) -> list[ObjectKey]:
    """Objects the portal manages whose allocation is retired or unknown (the GitOps tool
    prunes for itself what Git no longer holds)."""
    return provisioning_sink().prune_leftovers(backend or get_backend())


def _prune_leftovers(backend: KubeBackend) -> list[ObjectKey]:
    live_ids = {str(pk) for pk in Allocation.objects.exclude(status=S.RETIRED)
                .values_list("pk", flat=True)}
    removed = []
    for api_version, kind in OWNED_KINDS:
        for obj in backend.list(api_version, kind, label_selector=f"{MANAGED_BY}={MANAGER}"):
            labels = obj.get("metadata", {}).get("labels") or {}
            alloc = labels.get(LABEL_ALLOCATION)
            if alloc is None or alloc in live_ids:
                continue  # pool-level objects (no allocation label) are kept
            key = ObjectKey.of({**obj, "apiVersion": api_version, "kind": kind})
            if backend.delete(api_version, kind, key.name, key.namespace):
                removed.append(key)
    return removed
