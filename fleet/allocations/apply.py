"""The apply sink: an allocation's objects server-side applied to the cluster in waves (the
guards before its nodes and its tenant's access), its drift read and repaired object by
object, and the objects of retired allocations pruned."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from django.db import transaction
from django.utils import timezone

from tenants.audit import audit_record

from ..inventory.connections import backend_of
from ..kube import (
    LABEL_ALLOCATION,
    MANAGED_BY,
    MANAGER,
    KubeBackend,
    KubeError,
    ObjectKey,
    prune,
)
from ..models import Allocation, Route
from .admission import (
    GROUP,
    GUARD_BINDING_KIND,
    GUARD_POLICY_KIND,
    GUARDS_LABEL,
    LEGACY_CHECK_PARAMS,
    LEGACY_GUARD_PARAMS,
    PARAMS_API,
    PARAMS_KIND,
    older_guards,
)
from .guard_check import (
    GUARD_DIGEST_LABEL,
    entries_digest,
    guard_probe,
    guards_fingerprint,
    is_guard_check,
    is_shared_guard,
    stamp_guard_check,
)
from .guards import GuardsPending, ask_guards_deferring, guards_in_force
from .manifests import AFTER_GUARDS_KINDS, OWNED_KINDS, apply_waves, drift, node_release
from .repair import Repair
from .transitions import Progress, allocation_transition

S = Allocation.Status


class ApplySink:
    """Server-side apply to the cluster, in waves; drift read and repaired object by object."""

    def publish(self, alloc, manifests, backend, defer=None):
        waves, total = apply_waves(manifests), len(manifests)
        progress = Progress(alloc.pk, total)
        done, probe, live_guards = 0, None, []
        for k, wave in enumerate(waves):
            if any(is_guard_check(m) for m in wave):
                fingerprint = guards_fingerprint(live_guards)
                wave = [stamp_guard_check(m, fingerprint) for m in wave]
                probe = guard_probe(manifests, fingerprint) or probe
            if probe and any(m["kind"] in AFTER_GUARDS_KINDS for m in wave):
                # The block's nodes and the tenant's access only once the guards are in
                # force (the waves before were applied while the API server compiled them).
                progress.advance(done, force=True)  # where it stands while the guards load
                return self._after_guards(alloc, waves[k:], total, backend, defer,
                                          GuardsPending(probe, time.time(), done, asked=0),
                                          progress)
            applied = apply_together(backend, wave)
            # The guards as the API server holds them name the check (its fingerprint).
            live_guards += [a for m, a in zip(wave, applied, strict=True)
                            if is_shared_guard(m)]
            done += len(wave)
            progress.advance(done)
        return _provisioned(alloc, total, None)

    def publish_part(self, alloc, cluster, manifests):
        backend = backend_of(cluster)
        for wave in apply_waves(manifests):
            apply_together(backend, wave)

    def withdraw_part(self, alloc, cluster):
        return withdraw_from(alloc, backend_of(cluster))

    def repair_part(self, alloc, cluster, manifests):
        return reapply(alloc, manifests, backend_of(cluster)).on(cluster.slug)

    def resume(self, alloc, manifests, backend, pending, defer=None):
        waves = apply_waves(manifests)
        now = entries_digest(manifests)
        if not now or pending.probe["metadata"]["labels"].get(GUARD_DIGEST_LABEL) != now:
            # The allocation changed since (its guards would differ): start over.
            return self.publish(alloc, manifests, backend, defer)
        first = next(k for k, w in enumerate(waves)
                     if any(m["kind"] in AFTER_GUARDS_KINDS for m in w))
        return self._after_guards(alloc, waves[first:], len(manifests), backend, defer,
                                  pending)

    def _after_guards(self, alloc, rest, total, backend, defer, pending, progress=None):
        """Ask whether the guards are in force; once they are, apply the rest (nodes,
        access) and the allocation is active. Not yet: wait here, or with `defer` hand the
        wait back to the caller, who resumes later (the worker process takes other work
        meanwhile)."""
        try:
            if defer is None or not backend.enforces_admission:
                guarded = guards_in_force(backend, pending.probe)
            else:
                guarded = ask_guards_deferring(backend, pending, defer)
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
        progress = progress or Progress(alloc.pk, total, done)  # a resume: where it stands
        for wave in rest:
            apply_together(backend, wave)
            done += len(wave)
            progress.advance(done)
        return _provisioned(alloc, total, guarded)

    def withdraw(self, alloc, backend):
        return withdraw_from(alloc, backend)

    def withdrawn_words(self, withdrawn):
        return f"Retired: removed {len(withdrawn)} object(s)"

    def repair(self, alloc, manifests, backend, cause=""):
        return repair_in_cluster(alloc, manifests, backend, cause=cause)

    def prune_leftovers(self, backend):
        return prune_in_cluster(backend)


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


def apply_one(backend: KubeBackend, manifest: dict) -> dict:
    """Apply one object as the portal does: nodes, shared with the kubelet and others,
    never forced."""
    return backend.apply(manifest, force=manifest["kind"] != "Node")


def withdraw_from(alloc: Allocation, backend: KubeBackend) -> list[ObjectKey]:
    """Delete the allocation's objects in one cluster, its check params among them (the
    shared policies stay: other allocations' namespaces are judged by them)."""
    return prune(backend, label_selector=f"{LABEL_ALLOCATION}={alloc.pk}", kinds=OWNED_KINDS)


def apply_together(backend: KubeBackend, manifests: list[dict]) -> list[dict]:
    """Apply objects that do not depend on each other in parallel; every one is attempted,
    then the first failure (in render order) is raised for the task to retry or fail. The
    objects as the API server returned them, in the same order."""
    def one(manifest: dict) -> dict:
        return apply_one(backend, manifest)

    if len(manifests) == 1 or threading.current_thread() is not threading.main_thread():
        # Already on a thread of someone's pool (a threads worker, runserver): one by one.
        # (Seen: a threads worker sharing this pool left 2 of 20 allocations hanging.)
        return [one(manifest) for manifest in manifests]
    futures = [_apply_pool().submit(one, m) for m in manifests]
    for future in futures:
        future.exception()  # waits for every one, whatever the others did
    return [future.result() for future in futures]  # the first KubeError, in render order


def repair_in_cluster(alloc: Allocation, manifests: list[dict],
                       backend: KubeBackend, *, cause: str = "") -> list[str]:
    """Apply every desired object again in the allocation's own cluster, reading each one
    first, and record what the round found (`record_repair`); what had drifted, in words."""
    repair = reapply(alloc, manifests, backend)
    record_repair(alloc, repair, cause=cause)
    return repair.found


def reapply(alloc: Allocation, manifests: list[dict], backend: KubeBackend) -> Repair:
    """Re-apply `manifests` in one cluster, reading each first; what differed (no database
    write: the caller records one round, over one cluster or several)."""
    repair = Repair(applied=len(manifests))
    probe, checked, live_guards = None, False, []
    for manifest in manifests:
        if is_guard_check(manifest):  # names the guards as they live now (see admission)
            fingerprint = guards_fingerprint(live_guards)
            manifest = stamp_guard_check(manifest, fingerprint)
            probe = guard_probe(manifests, fingerprint) or probe
        if probe and not checked and manifest["kind"] in AFTER_GUARDS_KINDS:
            # The guards in force before a node is (again) reserved or access (re)granted:
            # one dry-run when nothing changed; a wait after a guard was made again, after a
            # move, or when an earlier attempt stopped between the guards and the nodes.
            guards_in_force(backend, probe)
            checked = True
        key = ObjectKey.of(manifest)
        live = backend.get(key.api_version, key.kind, key.name, key.namespace)
        if live is None:
            if backend.was_deleted(key):  # not merely unrecorded (a dry run's restart)
                repair.missing.append(str(key))
        else:
            paths = [p for p in drift({k: v for k, v in manifest.items()
                                       if k not in ("apiVersion", "kind")}, live)]
            if paths:
                repair.changed.append((str(key), ", ".join(paths)))
        applied = apply_one(backend, manifest)
        if is_shared_guard(manifest):
            live_guards.append(applied)
    if probe and not checked:
        guards_in_force(backend, probe)  # before anything below removes an older guard
    if probe:
        repair.removed += [str(key) for key in prune_older_guards(backend, manifests)]
    # Objects of this allocation it no longer renders (e.g. a binding replaced by one with
    # another role, or the guards a portal before shared guards rendered per allocation:
    # only now that the shared ones are in force) are removed; the namespace itself is
    # always among the desired.
    desired = {ObjectKey.of(m) for m in manifests}
    for key in prune(backend, label_selector=f"{LABEL_ALLOCATION}={alloc.pk}",
                     kinds=[k for k in OWNED_KINDS if k[1] not in ("Namespace", "Node")],
                     keep=desired):
        repair.removed.append(str(key))
    # Nodes still labelled for it that it no longer reserves (a block moved off a node) lose
    # the labels and taint: otherwise its flavor would still select them.
    reserved = {m["metadata"]["name"] for m in manifests if m["kind"] == "Node"}
    for node in backend.list("v1", "Node", label_selector=f"{LABEL_ALLOCATION}={alloc.pk}"):
        name = node["metadata"]["name"]
        if name not in reserved:
            backend.apply(node_release(name))
            repair.released.append(name)
    return repair


def prune_older_guards(backend: KubeBackend, manifests: list[dict]) -> list[ObjectKey]:
    """An earlier portal's shared guards of the rule sets `manifests` render, called once
    these are in force (their check refused its probe): bindings first, then policies. That
    portal's params go in a later call, one that finds no earlier policy of any route left:
    the API server keeps enforcing a deleted binding for a moment, and a binding whose params
    are gone refuses every pod in the cluster. The one object an earlier check read every
    allocation's entry from goes at once: only that check read it, and only for probes."""
    rules = {m["metadata"]["labels"][GUARDS_LABEL] for m in manifests if is_shared_guard(m)}
    if not rules:
        return []
    live = [(kind, obj) for kind in (GUARD_BINDING_KIND, GUARD_POLICY_KIND)
            for obj in backend.list(GROUP, kind, label_selector=f"{MANAGED_BY}={MANAGER}")]
    remove, seen = older_guards(live, rules)
    removed = [ObjectKey(GROUP, kind, "", name) for kind, name in remove
               if backend.delete(GROUP, kind, name)]
    if not seen and backend.get(PARAMS_API, PARAMS_KIND, LEGACY_GUARD_PARAMS) is not None \
            and backend.delete(PARAMS_API, PARAMS_KIND, LEGACY_GUARD_PARAMS):
        removed.append(ObjectKey(PARAMS_API, PARAMS_KIND, "", LEGACY_GUARD_PARAMS))
    return removed + _without_the_previous_check_params(backend)


def _without_the_previous_check_params(backend: KubeBackend) -> list[ObjectKey]:
    """The previous check's one object of every allocation's entry deleted, if it is there:
    only that check read it, and only for its probes."""
    if backend.get(PARAMS_API, PARAMS_KIND, LEGACY_CHECK_PARAMS) is not None \
            and backend.delete(PARAMS_API, PARAMS_KIND, LEGACY_CHECK_PARAMS):
        return [ObjectKey(PARAMS_API, PARAMS_KIND, "", LEGACY_CHECK_PARAMS)]
    return []


def record_repair(alloc: Allocation, repair: Repair, *, cause: str = "",
                  append: bool = False) -> None:
    """A round's findings as the allocation's drift report with its audit row (after the API
    calls). Without a cause what differed is drift; with one (a change the portal made, such
    as a move) the same reads say what carrying it out did, in one sentence. `append` adds
    to the report of the same round (the workers' after the manager's)."""
    found = repair.found
    if append and not found:
        return
    report = "; ".join(found)
    if append:
        earlier = Allocation.objects.values_list("drift_report", flat=True).get(pk=alloc.pk)
        report = "; ".join(x for x in (earlier, report) if x)
    with transaction.atomic():  # the report and its audit row together, after the API calls
        Allocation.objects.filter(pk=alloc.pk).update(drift_report="" if cause else report,
                                                      drift_checked_at=timezone.now())
        if cause:
            audit_record(actor=None, subject=alloc, tenant=alloc.tenant,
                         action="allocation.applied", reason=repair.brought_in_line(cause),
                         data=repair.data)
        elif found:
            audit_record(actor=None, subject=alloc, tenant=alloc.tenant,
                         action="allocation.drift",
                         reason=f"Drift repaired by reconcile: {'; '.join(found)}.")


def prune_in_cluster(backend: KubeBackend) -> list[ObjectKey]:
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
    # (also when no guarded allocation's reconcile took it: the last one retired first)
    return removed + _without_the_previous_check_params(backend)
