"""Provisioning and the reconcile ask whether an allocation's guards are in force before they
apply a dedicated block's nodes or anyone's access — also when nothing changed (an earlier
attempt may have stopped between the guards and the nodes) — and a guard made again changes
the check, so an old check's refusal does not pass for it.

The backend here is the dry-run record with one rule of a real API server added: the probe is
refused once the check stamped as the probe says has been applied and the params hold the
probe's allocation's check entry (compilation is instant): as the API server does, every
params object the check's binding selects is tried. What a real API
server does is tried in tests/k8s/test_hostile_specs.py and tests/k8s/test_placement.py."""

from __future__ import annotations

import pytest

from fleet.allocations import tasks
from fleet.allocations.admission import (
    CHECK_KEY,
    LEGACY_CHECK_PARAMS,
    LEGACY_GUARD_PARAMS,
    PARAMS_API,
    PARAMS_KIND,
    POD_SPEC_PATHS,
    check_params_name,
    guard_labels,
    guard_policy_name,
    param_ref,
    params_entries,
)
from fleet.allocations.apply import prune_older_guards
from fleet.allocations.guard_check import (
    GUARD_CHECK,
    GUARD_DIGEST_ANNOTATION,
    GUARD_DIGEST_LABEL,
    GUARD_FINGERPRINT_LABEL,
    GUARD_PROBE_LABEL,
)
from fleet.allocations.manifests import render_manifests
from fleet.allocations.provisioning import allocation_provision
from fleet.allocations.reconcile import allocation_reconcile
from fleet.allocations.retirement import allocation_retire
from fleet.allocations.transitions import allocation_fail
from fleet.inventory.sync import fleet_sync
from fleet.kube import DryRunBackend, KubeError, KubernetesBackend, using_backend
from fleet.models import Allocation, Pool, Route
from intake import services
from portal.demo_fleet import demo_fleet
from tenants.models import AuditEvent
from tests.factories import make_request, spec

pytestmark = pytest.mark.django_db
ADMISSION = "admissionregistration.k8s.io/v1"


class CompilingBackend(DryRunBackend):
    """Refuses a probe when the stored check is stamped with the probe's fingerprint and the
    params hold its allocation's check entry; records every call in order."""

    enforces_admission = True

    def __init__(self):
        super().__init__()
        self.calls: list[tuple[str, str]] = []

    def apply(self, manifest, *, dry_run=False, force=False, field_manager=""):
        labels = manifest.get("metadata", {}).get("labels") or {}
        if dry_run and GUARD_PROBE_LABEL in labels:
            name = manifest["metadata"]["name"]
            digest, stamp = labels[GUARD_DIGEST_LABEL], labels[GUARD_FINGERPRINT_LABEL]
            self.calls.append(("probe", digest))
            check = self.get(ADMISSION, "ValidatingAdmissionPolicy", GUARD_CHECK)
            quoted = check and check["metadata"]["annotations"][GUARD_DIGEST_ANNOTATION]
            selector = ",".join(f"{k}={v}" for k, v in
                                param_ref()["selector"]["matchLabels"].items())
            key = f"{CHECK_KEY}{labels[GUARD_PROBE_LABEL]}"
            entry = next((params_entries(p)[key] for p in self.list(
                PARAMS_API, PARAMS_KIND, label_selector=selector)
                if params_entries(p).get(key) == digest), None)
            if quoted == stamp and entry == digest:
                raise KubeError(f"Applying Namespace {name}: ValidatingAdmissionPolicy "
                                f"'{GUARD_CHECK}' with binding '{GUARD_CHECK}' denied request: "
                                f"{GUARD_CHECK} [{quoted}]: the guards of "
                                f"{labels[GUARD_PROBE_LABEL]} (digest {entry}) are in force.",
                                retriable=False, status=422)
            return manifest
        self.calls.append(("apply", manifest["kind"]))
        meta = manifest.get("metadata", {})
        there = self.get(manifest["apiVersion"], manifest["kind"], meta["name"],
                         meta.get("namespace", ""))
        # an object made (again) gets a new uid; one applied over keeps its own
        uid = (there or {}).get("metadata", {}).get("uid") or f"uid-{len(self.log)}"
        out = super().apply(manifest, dry_run=dry_run, force=force,
                            field_manager=field_manager)
        out["metadata"]["uid"] = uid
        return out


def _approve_a_block(backend, pools, tenant, lead, admin_user, capture, *, provision: bool):
    """A dedicated block approved against `backend`, its provisioning run or not."""
    Pool.objects.filter(pk=pools[Route.DEDICATED_BLOCK].pk).update(slug="dedicated-h100")
    for obj in demo_fleet():
        backend.apply(obj)
    fleet_sync(backend=backend)
    backend.calls.clear()
    req = make_request(tenant, lead, submit=True, whole_devices=8,
                       isolation_origin="contractual", isolation_reference="MSA-77")
    with using_backend(backend), capture(execute=provision):
        req = services.request_approve(request=req, by=admin_user, reason="ok")
    return Allocation.objects.get(pk=req.allocation_id)


@pytest.fixture
def block(pools, tenant, lead, admin_user, django_capture_on_commit_callbacks):
    backend = CompilingBackend()
    alloc = _approve_a_block(backend, pools, tenant, lead, admin_user,
                             django_capture_on_commit_callbacks, provision=True)
    assert alloc.status == "active", alloc.status_message
    return alloc, backend


def _first(calls, what) -> int:
    return next(i for i, c in enumerate(calls) if c == what)


def test_provisioning_asks_before_the_nodes_and_the_access(block):
    alloc, backend = block
    calls = backend.calls
    probe = next(i for i, c in enumerate(calls) if c[0] == "probe")
    assert probe < _first(calls, ("apply", "Node")) < _first(calls, ("apply", "RoleBinding"))
    assert probe > _first(calls, ("apply", "ResourceQuota"))  # inert objects went first
    assert probe > max(i for i, c in enumerate(calls)
                       if c == ("apply", "ValidatingAdmissionPolicyBinding"))


def test_the_reconcile_asks_even_when_nothing_changed(block):
    alloc, backend = block
    backend.calls.clear()
    assert allocation_reconcile(alloc.pk, backend=backend) == []
    calls = backend.calls
    assert [c for c in calls if c[0] == "probe"], "no probe before the nodes"
    assert next(i for i, c in enumerate(calls) if c[0] == "probe") < \
        _first(calls, ("apply", "Node"))


def test_a_guard_made_again_changes_the_check(block):
    alloc, backend = block
    before = backend.get(ADMISSION, "ValidatingAdmissionPolicy", GUARD_CHECK)
    guard = next(k for k in backend.objects
                 if k.kind == "ValidatingAdmissionPolicyBinding" and k.name != GUARD_CHECK)
    backend.delete(ADMISSION, guard.kind, guard.name)  # someone deleted a shared guard
    found = allocation_reconcile(alloc.pk, backend=backend)
    after = backend.get(ADMISSION, "ValidatingAdmissionPolicy", GUARD_CHECK)
    assert any("was deleted" in f for f in found)
    d = GUARD_DIGEST_ANNOTATION
    assert before["metadata"]["annotations"][d] != after["metadata"]["annotations"][d]
    # and a reconcile with nothing changed leaves the check as it is (no drift every time)
    assert allocation_reconcile(alloc.pk, backend=backend) == []


def test_the_entries_of_one_allocation_are_its_own(block, pools, tenant, lead, admin_user,
                                                   django_capture_on_commit_callbacks):
    """Each block's check entry sits in a params object of its own; retiring one removes
    that object (and leaves the shared policies and every other entry to the others)."""
    alloc, backend = block
    second = Allocation.objects.get(pk=alloc.pk)
    second.pk = second.id = None
    second.namespace = f"{alloc.namespace}-2"
    second.save()
    allocation_reconcile(second.pk, backend=backend)

    def data():
        return {key: entry for p in backend.list(PARAMS_API, PARAMS_KIND)
                for key, entry in params_entries(p).items()}
    assert {f"{CHECK_KEY}{alloc.pk}", f"{CHECK_KEY}{second.pk}"} <= set(data())
    before = data()
    allocation_retire(alloc.pk, backend=backend)
    assert data() == {k: v for k, v in before.items() if k != f"{CHECK_KEY}{alloc.pk}"}
    assert backend.get(ADMISSION, "ValidatingAdmissionPolicy", GUARD_CHECK) is not None


def test_one_allocations_trouble_does_not_hold_up_the_reconcile_of_the_others(
        block, monkeypatch):
    """The beat's reconcile goes on past an allocation whose guards are not in force yet (or
    whose apply was refused) and says which it left for the next pass."""
    alloc, backend = block
    second = Allocation.objects.get(pk=alloc.pk)
    second.pk = second.id = None
    second.namespace = f"{alloc.namespace}-2"
    second.save()
    seen = []

    def reconcile(pk, **kw):
        seen.append(pk)
        if len(seen) == 1:  # the first one fails
            raise KubeError("guards not in force yet", retriable=True)
        return []

    monkeypatch.setattr(tasks, "allocation_reconcile", reconcile)
    monkeypatch.setattr(tasks, "prune_leftovers", lambda **kw: [])
    # the task skips the dry-run record; any real-cluster backend object will do (not called)
    monkeypatch.setattr(tasks, "backend_of", lambda cluster: KubernetesBackend.__new__(
        KubernetesBackend))
    summary = tasks.reconcile_allocations()
    assert sorted(seen) == sorted([alloc.pk, second.pk])
    assert f"not reconciled (tried again next time): [{seen[0]}]" in summary


class SlowCompilingBackend(CompilingBackend):
    """Compilation takes `asks` probes: the check's refusal comes from the asks-th on."""

    def __init__(self, asks: int):
        super().__init__()
        self.asks, self.asked = asks, 0

    def apply(self, manifest, *, dry_run=False, force=False, field_manager=""):
        labels = manifest.get("metadata", {}).get("labels") or {}
        if dry_run and GUARD_PROBE_LABEL in labels:
            self.asked += 1
            if self.asked < self.asks:
                self.calls.append(("probe", "not yet"))
                return manifest
        return super().apply(manifest, dry_run=dry_run, force=force,
                             field_manager=field_manager)


@pytest.fixture
def approved(pools, tenant, lead, admin_user, django_capture_on_commit_callbacks):
    """A dedicated block approved, its provisioning task not run yet."""
    backend = SlowCompilingBackend(asks=3)
    return _approve_a_block(backend, pools, tenant, lead, admin_user,
                            django_capture_on_commit_callbacks, provision=False), backend


def test_the_worker_hands_the_guards_wait_back_and_resumes(approved):
    """With `defer` (the real worker) provisioning never sleeps for the guards: it hands the
    next ask back and is resumed from where it stopped — nodes and access only after the
    check refused the probe, the wait on the audit row, nothing applied twice."""

    alloc, backend = approved
    deferred = []
    out = allocation_provision(alloc.pk, backend=backend, defer=deferred.append)
    assert out.status == "provisioning" and len(deferred) == 1
    assert ("apply", "Node") not in backend.calls and ("apply", "RoleBinding") not in backend.calls
    assert deferred[0].done == Allocation.objects.get(pk=alloc.pk).progress_done > 0
    assert deferred[0].asked == 1
    assert deferred[0].pause() == 0.05
    applied_before = [c for c in backend.calls if c[0] == "apply"]
    while out.status == "provisioning":
        assert len(deferred) < 10, "never resumed to the end"
        out = allocation_provision(alloc.pk, backend=backend, defer=deferred.append,
                                   resume=deferred[-1].as_task_kwargs())
    assert out.status == "active" and len(deferred) == 2  # asked 3 times in all
    assert [p.asked for p in deferred] == [1, 2]
    calls = backend.calls
    last_probe = max(i for i, c in enumerate(calls) if c[0] == "probe")
    assert last_probe < _first(calls, ("apply", "Node")) < _first(calls, ("apply", "RoleBinding"))
    applied = [c for c in calls if c[0] == "apply"]
    assert applied[:len(applied_before)] == applied_before  # resumed, not started over
    assert out.progress_done == out.progress_total == len(applied)
    row = AuditEvent.objects.get(subject_type="allocation", subject_id=alloc.pk,
                                 action="allocation.active")
    assert row.data["guards_in_force_seconds"] >= 0
    assert Allocation.objects.get(pk=alloc.pk).attempts == 1  # resuming is no new attempt


def test_a_resumed_wait_ends_in_a_retriable_error_after_the_limit(approved, settings):

    alloc, backend = approved
    deferred = []
    allocation_provision(alloc.pk, backend=backend, defer=deferred.append)
    backend.asks = 10**6  # never in force
    late = {**deferred[0].as_task_kwargs(), "since": deferred[0].since - 60}
    settings.PORTAL_GUARD_WAIT_SECONDS = 20
    with pytest.raises(KubeError) as caught:
        allocation_provision(alloc.pk, backend=backend, defer=deferred.append, resume=late)
    assert caught.value.retriable
    assert "not in force" in caught.value.message and "anyone's access" in caught.value.message
    assert ("apply", "Node") not in backend.calls and len(deferred) == 1
    assert Allocation.objects.get(pk=alloc.pk).status == "provisioning"


def test_a_resume_for_guards_that_changed_starts_over(approved):
    """A continuation whose probe names other guards than the allocation has now (it was
    changed meanwhile) is not trusted: provisioning starts again from the first wave."""

    alloc, backend = approved
    deferred = []
    allocation_provision(alloc.pk, backend=backend, defer=deferred.append)
    stale = deferred[0].as_task_kwargs()
    stale["probe"]["metadata"]["labels"][GUARD_DIGEST_LABEL] = "000011112222"
    backend.calls.clear()
    allocation_provision(alloc.pk, backend=backend, defer=deferred.append, resume=stale)
    assert ("apply", "ValidatingAdmissionPolicy") in backend.calls  # the guards again
    assert ("apply", "Node") not in backend.calls


def test_a_resume_of_an_allocation_no_longer_provisioning_does_nothing(approved):

    alloc, backend = approved
    deferred = []
    allocation_provision(alloc.pk, backend=backend, defer=deferred.append)
    allocation_fail(alloc.pk, "given up by hand")
    backend.calls.clear()
    out = allocation_provision(alloc.pk, backend=backend, defer=deferred.append,
                               resume=deferred[0].as_task_kwargs())
    assert out.status == "failed" and backend.calls == []


def test_a_broker_that_cannot_take_the_continuation_means_waiting_in_place(approved):
    """Redis away at the moment of handing the wait back: provisioning waits for the guards
    where it is, as before, instead of failing the allocation or losing the task."""

    alloc, backend = approved

    def broker_away(pending):
        raise ConnectionError("Error 111 connecting to redis:6379. Connection refused.")

    out = allocation_provision(alloc.pk, backend=backend, defer=broker_away)
    assert out.status == "active"
    calls = backend.calls
    last_probe = max(i for i, c in enumerate(calls) if c[0] == "probe")
    assert last_probe < _first(calls, ("apply", "Node"))
    assert backend.asked >= backend.asks


def test_the_previous_shared_guards_go_route_by_route_and_their_params_last(block):
    """A cluster upgraded from shared guards that read a list of every block: the reconcile
    of a block removes the old dedicated policies (bindings first) and keeps another route's
    old ones (their allocations are not reconciled yet) and the old params they read; the
    params go only in a pass that finds no old policy left (the API server enforces a
    deleted binding for a moment, and one without its params refuses every pod)."""
    alloc, backend = block
    old = {rules: [{"apiVersion": ADMISSION, "kind": kind,
                    "metadata": {"name": f"aifactory-{rules}-pods", "labels": guard_labels(rules)},
                    "spec": {}}
                   for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")]
           for rules in ("dedicated", "confidential")}
    for obj in [*old["dedicated"], *old["confidential"]]:
        backend.apply(obj)
    backend.apply({"apiVersion": PARAMS_API, "kind": PARAMS_KIND,
                   "metadata": {"name": LEGACY_GUARD_PARAMS}, "spec": {"entries": {"x": "y"}}})
    backend.log.clear()
    found = allocation_reconcile(alloc.pk, backend=backend)
    assert sum("aifactory-dedicated-pods is no longer part of it" in f for f in found) == 2
    deletes = [key.kind for what, key in backend.log if what == "delete"
               and key.name == "aifactory-dedicated-pods"]
    assert deletes == ["ValidatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy"]
    for obj in old["confidential"]:
        assert backend.get(ADMISSION, obj["kind"], obj["metadata"]["name"]) is not None
    # The current guards stand, named with the shape, and the check reads its own params.
    live = {k.name for k in backend.objects if k.kind == "ValidatingAdmissionPolicy"}
    assert {n for n in live if n.startswith("aifactory-dedicated-")} == {
        guard_policy_name("dedicated", suffix) for *_, suffix in POD_SPEC_PATHS}
    # A confidential allocation's turn (its manifests as rendered): its old guards go, the
    # params stay for this pass, and the next pass (any route's) takes them.
    confidential = render_manifests(spec(Route.CONFIDENTIAL_POOL))
    removed = prune_older_guards(backend, confidential)
    assert {(k.kind, k.name) for k in removed} == {
        (o["kind"], o["metadata"]["name"]) for o in old["confidential"]}
    assert backend.get(PARAMS_API, PARAMS_KIND, LEGACY_GUARD_PARAMS) is not None
    found = allocation_reconcile(alloc.pk, backend=backend)
    assert any(LEGACY_GUARD_PARAMS in f and "removed" in f for f in found), found
    assert backend.get(PARAMS_API, PARAMS_KIND, LEGACY_GUARD_PARAMS) is None
    assert backend.get(PARAMS_API, PARAMS_KIND, check_params_name(alloc.pk)) is not None
    assert allocation_reconcile(alloc.pk, backend=backend) == []  # and nothing after


def test_the_one_object_of_every_check_entry_goes_once_the_check_reads_its_own(block):
    """A cluster upgraded from the check that read every allocation's entry from one object:
    the first reconcile of a guarded allocation, its check in force with this shape, removes
    that object (nothing reads it any more, and it only ever answered probes)."""
    alloc, backend = block
    backend.apply({"apiVersion": PARAMS_API, "kind": PARAMS_KIND,
                   "metadata": {"name": LEGACY_CHECK_PARAMS, "labels": guard_labels("params")},
                   "spec": {"entries": {f"{CHECK_KEY}{alloc.pk}": "0123456789ab"}}})
    found = allocation_reconcile(alloc.pk, backend=backend)
    assert any(LEGACY_CHECK_PARAMS in f and "removed" in f for f in found), found
    assert backend.get(PARAMS_API, PARAMS_KIND, LEGACY_CHECK_PARAMS) is None
    assert backend.get(PARAMS_API, PARAMS_KIND, check_params_name(alloc.pk)) is not None
    assert allocation_reconcile(alloc.pk, backend=backend) == []


def test_the_one_object_of_every_check_entry_goes_with_the_leftovers_too(block):
    """Also when no guarded allocation's reconcile takes it (the last one retired first):
    the pruning of leftovers does."""
    alloc, backend = block
    backend.apply({"apiVersion": PARAMS_API, "kind": PARAMS_KIND,
                   "metadata": {"name": LEGACY_CHECK_PARAMS, "labels": guard_labels("params")},
                   "spec": {"entries": {f"{CHECK_KEY}{alloc.pk}": "0123456789ab"}}})
    allocation_retire(alloc.pk, backend=backend)
    removed = tasks.prune_leftovers(backend=backend)
    assert (PARAMS_KIND, LEGACY_CHECK_PARAMS) in {(k.kind, k.name) for k in removed}
    assert backend.get(PARAMS_API, PARAMS_KIND, LEGACY_CHECK_PARAMS) is None
    assert backend.get(PARAMS_API, PARAMS_KIND, check_params_name(alloc.pk)) is None
