"""The upgrades to this portal's guards, on the real API server, with no moment unguarded: a
dedicated block guarded the way an older portal left it is reconciled by this portal, which
applies the current shared guards and the block's check entry, waits for its check, and only
then removes the old objects. Meanwhile an intruder's pod pinned to the block is tried again
and again, and never admitted. Two older shapes: ten objects per block (legacy_guards.py),
and shared policies reading one params object that listed every block (legacy_shared_guards.
py), whose params must outlive the last policy that reads them. And the check's own upgrade:
from one object holding every block's check entry (legacy_check_entries.py) to one per block."""

from __future__ import annotations

import threading
import time

import pytest

from fleet.allocations.admission import (
    GUARD_SHAPE,
    LEGACY_CHECK_PARAMS,
    LEGACY_GUARD_PARAMS,
    PARAMS_API,
    PARAMS_KIND,
    check_params_name,
    is_guard_params,
    param_ref,
    params_entries,
)
from fleet.allocations.desired import allocation_manifests, allocation_spec
from fleet.allocations.guard_check import GUARD_CHECK, GUARD_DIGEST_ANNOTATION, guard_probe
from fleet.allocations.reconcile import allocation_reconcile
from fleet.kube import LABEL_ALLOCATION, KubeError
from fleet.models import Route

from .approvals import provisioned
from .conftest import eventually
from .legacy_check_entries import entries_manager, one_object_check, one_object_params
from .legacy_guards import legacy_guards, legacy_probe
from .legacy_shared_guards import (
    block_params,
    legacy_check,
    legacy_shared_probe,
    shared_policies,
)
from .workloads import pod_spec

pytestmark = [pytest.mark.django_db]
GROUP = "admissionregistration.k8s.io/v1"
CURRENT = f"aifactory-dedicated-{GUARD_SHAPE}-"


def _refused(admin, pod) -> str:
    try:
        admin.apply(pod, dry_run=True)
    except KubeError as exc:
        return exc.message
    return ""


@pytest.fixture
def block_left_unguarded(admin_kube, kube, fleet, tenant, lead, admin_user,
                         django_capture_on_commit_callbacks):
    """A dedicated block, with the cluster as an older portal left it: none of this shape's
    dedicated guards, and no check entry of the block (each test applies the old guards)."""
    alloc = provisioned(tenant, lead, admin_user, Route.DEDICATED_BLOCK,
                        django_capture_on_commit_callbacks)
    for kind in ("ValidatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy"):
        for obj in admin_kube.list(GROUP, kind,
                                   label_selector="app.kubernetes.io/managed-by=aifactory-portal"):
            if obj["metadata"]["name"].startswith("aifactory-dedicated-"):
                admin_kube.delete(GROUP, kind, obj["metadata"]["name"])
    kube.delete(PARAMS_API, PARAMS_KIND, check_params_name(alloc.pk))
    return alloc, alloc.nodes.get().name, allocation_spec(alloc)


def _reconciled_under_fire(admin_kube, alloc, block: str, old_name: str) -> tuple[list, list]:
    """Reconcile the block while an intruder's pod pinned to it is tried without pause;
    (what reconcile found, every answer the intruder got)."""
    pinned = {"apiVersion": "v1", "kind": "Pod",
              "metadata": {"name": "pinned-intruder", "namespace": "default"},
              "spec": pod_spec(nodeName=block)}
    # What refuses now is the old guard alone.
    eventually(lambda: old_name in _refused(admin_kube, pinned), timeout=30,
               what="only the old guard refusing")
    tries, admitted, stop = [], [], threading.Event()

    def intruder():
        while not stop.is_set():
            said = _refused(admin_kube, pinned)
            tries.append(said)
            if "spec.nodeName" not in said:
                admitted.append(said or "admitted")
            time.sleep(0.01)

    thread = threading.Thread(target=intruder, daemon=True)
    thread.start()
    try:
        found = allocation_reconcile(alloc.pk)
        # The API server takes a moment to drop a deleted policy: go on trying through it.
        eventually(lambda: old_name not in _refused(admin_kube, pinned) and
                   CURRENT in _refused(admin_kube, pinned),
                   timeout=30, what="the current guard refusing alone")
        time.sleep(2)
    finally:
        stop.set()
        thread.join(timeout=10)
    assert admitted == [], admitted[:3]
    assert len(tries) > 50, len(tries)
    return found, tries


def _in_force(admin_kube, kube, old: list[dict], probe: dict) -> None:
    """Apply an older portal's guards and wait until its check answers that they are in force."""
    for obj in old:
        kube.apply(obj, force=True)
    eventually(lambda: "are in force" in _refused(admin_kube, probe), timeout=30,
               what="the old guards in force")


def test_an_upgrade_from_guards_per_block_without_a_moment_unguarded(
        admin_kube, kube, tenant, block_left_unguarded):
    alloc, block, spec = block_left_unguarded
    old = legacy_guards(spec)
    _in_force(admin_kube, kube, old, legacy_probe(spec))

    found, tries = _reconciled_under_fire(admin_kube, alloc, block, "aifactory-a")
    names = {o["metadata"]["name"] for o in old}
    assert any(name in f for f in found for name in names), found  # said what it removed
    for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
        assert kube.list(GROUP, kind, label_selector=f"{LABEL_ALLOCATION}={alloc.pk}") == []
    live = params_entries(admin_kube.get(PARAMS_API, PARAMS_KIND, check_params_name(alloc.pk)))
    assert f"check.{alloc.pk}" in live
    # Its refusal says which rule, never whose block (the old names said neither either).
    assert tenant.slug not in tries[-1] and block not in tries[-1]


def test_an_upgrade_from_guards_reading_every_block_without_a_moment_unguarded(
        admin_kube, kube, tenant, block_left_unguarded):
    alloc, block, spec = block_left_unguarded
    # As that portal applied them: the block's keys, then the shared policies and its check.
    kube.apply(block_params(spec), force=True,
               field_manager=entries_manager(kube.field_manager, alloc.pk))
    old = [*shared_policies(spec.platform_namespaces), *legacy_check()]
    _in_force(admin_kube, kube, old, legacy_shared_probe(spec))

    found, tries = _reconciled_under_fire(admin_kube, alloc, block, "'aifactory-dedicated-pods'")
    assert any("aifactory-dedicated-pods" in f for f in found), found  # said what it removed
    live = {o["metadata"]["name"] for kind in ("ValidatingAdmissionPolicy",
                                               "ValidatingAdmissionPolicyBinding")
            for o in admin_kube.list(GROUP, kind,
                                     label_selector="aifactory.io/guards=dedicated")}
    assert live and all(name.startswith(CURRENT) for name in live), live
    # The old params outlive the last policy that read them by one pass (the API server
    # enforces a deleted binding for a moment, and without its params it would refuse every
    # pod); the next reconcile takes them, and every pod is judged by the current guards.
    assert admin_kube.get(PARAMS_API, PARAMS_KIND, LEGACY_GUARD_PARAMS) is not None
    assert any(LEGACY_GUARD_PARAMS in f for f in allocation_reconcile(alloc.pk))
    assert admin_kube.get(PARAMS_API, PARAMS_KIND, LEGACY_GUARD_PARAMS) is None
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plain", "namespace": "default"},
           "spec": pod_spec()}
    assert _refused(admin_kube, pod) == ""
    check = admin_kube.get(GROUP, "ValidatingAdmissionPolicyBinding", "aifactory-guard-check")
    assert check["spec"]["paramRef"] == param_ref()
    assert f"check.{alloc.pk}" in params_entries(
        admin_kube.get(PARAMS_API, PARAMS_KIND, check_params_name(alloc.pk)))
    assert tenant.slug not in tries[-1] and block not in tries[-1]


def test_an_upgrade_from_one_object_of_every_check_entry_to_one_per_block(
        admin_kube, kube, fleet, tenant, lead, admin_user, django_capture_on_commit_callbacks):
    """The guards themselves are the same in both shapes; only the check's params move. The
    reconcile applies the block's own params and the check's binding selecting them, waits
    for its check, and removes the one object; the check then answers from the block's own."""
    alloc = provisioned(tenant, lead, admin_user, Route.DEDICATED_BLOCK,
                        django_capture_on_commit_callbacks)
    manifests = allocation_manifests(alloc)
    params = next(m for m in manifests if is_guard_params(m))
    live = admin_kube.get(GROUP, "ValidatingAdmissionPolicy", GUARD_CHECK)
    fingerprint = live["metadata"]["annotations"][GUARD_DIGEST_ANNOTATION]
    # The cluster as the previous portal left it.
    kube.apply(one_object_params(params), force=True,
               field_manager=entries_manager(kube.field_manager, alloc.pk))
    for obj in one_object_check(fingerprint):
        kube.apply(obj, force=True)
    kube.delete(PARAMS_API, PARAMS_KIND, check_params_name(alloc.pk))
    probe = guard_probe(manifests, fingerprint)
    eventually(lambda: "are in force" in _refused(admin_kube, probe), timeout=30,
               what="the previous check answering from the one object")

    found = allocation_reconcile(alloc.pk)
    assert any(LEGACY_CHECK_PARAMS in f for f in found), found  # said what it removed
    assert admin_kube.get(PARAMS_API, PARAMS_KIND, LEGACY_CHECK_PARAMS) is None
    own = admin_kube.get(PARAMS_API, PARAMS_KIND, check_params_name(alloc.pk))
    assert params_entries(own) == params_entries(params)
    binding = admin_kube.get(GROUP, "ValidatingAdmissionPolicyBinding", GUARD_CHECK)
    assert binding["spec"]["paramRef"] == param_ref()
    # With the one object gone, only the block's own can make the check refuse its probe.
    eventually(lambda: "are in force" in _refused(admin_kube, probe), timeout=30,
               what="the check answering from the block's own params")
    pinned = {"apiVersion": "v1", "kind": "Pod",
              "metadata": {"name": "pinned-intruder", "namespace": "default"},
              "spec": pod_spec(nodeName=alloc.nodes.get().name)}
    assert "spec.nodeName" in _refused(admin_kube, pinned)
    # and nothing is found again (the quota's 1024Gi, read back as 1Ti, is no drift)
    assert allocation_reconcile(alloc.pk) == []
