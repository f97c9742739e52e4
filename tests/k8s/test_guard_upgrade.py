"""The upgrade from per-allocation guards to the shared ones, on the real API server, with
no moment unguarded: a dedicated block guarded the old way (ten objects of its own, as an
older portal left it) is reconciled by this portal, which applies the shared guards and the
block's entries, waits for its check, and only then removes the old objects. Meanwhile an
intruder's pod pinned to the block is tried again and again, and never admitted."""

from __future__ import annotations

import threading
import time

import pytest

from fleet.allocations.admission import GUARD_PARAMS, PARAMS_API, PARAMS_KIND, params_entries
from fleet.allocations.apply import withdraw_entries
from fleet.allocations.desired import allocation_spec
from fleet.allocations.reconcile import allocation_reconcile
from fleet.kube import LABEL_ALLOCATION, KubeError
from fleet.models import Route

from .approvals import provisioned
from .conftest import eventually
from .legacy_guards import legacy_guards, legacy_probe
from .workloads import pod_spec

pytestmark = [pytest.mark.django_db]
GROUP = "admissionregistration.k8s.io/v1"


def _refused(admin, pod) -> str:
    try:
        admin.apply(pod, dry_run=True)
    except KubeError as exc:
        return exc.message
    return ""


def test_an_upgrade_replaces_the_old_guards_without_a_moment_unguarded(
        admin_kube, kube, fleet, tenant, lead, admin_user, django_capture_on_commit_callbacks):
    alloc = provisioned(tenant, lead, admin_user, Route.DEDICATED_BLOCK,
                        django_capture_on_commit_callbacks)
    block = alloc.nodes.get().name
    spec = allocation_spec(alloc)
    # The cluster as an older portal left it: the block's own guards and check, no shared
    # guards, no entries.
    for kind in ("ValidatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy"):
        for obj in admin_kube.list(GROUP, kind,
                                   label_selector="app.kubernetes.io/managed-by=aifactory-portal"):
            if obj["metadata"]["name"].startswith("aifactory-dedicated-"):
                admin_kube.delete(GROUP, kind, obj["metadata"]["name"])
    withdraw_entries(kube, alloc.pk)
    old = legacy_guards(spec)
    for obj in old:
        kube.apply(obj, force=True)
    probe = legacy_probe(spec)
    eventually(lambda: "are in force" in _refused(admin_kube, probe), timeout=30,
               what="the old guards in force")
    pinned = {"apiVersion": "v1", "kind": "Pod",
              "metadata": {"name": "pinned-intruder", "namespace": "default"},
              "spec": pod_spec(nodeName=block)}
    # The shared guards are gone: what refuses now is the block's own old guard.
    eventually(lambda: "aifactory-a" in _refused(admin_kube, pinned), timeout=30,
               what="only the old guard refusing")

    tries, admitted, stop = [], [], threading.Event()

    def intruder():
        while not stop.is_set():
            said = _refused(admin_kube, pinned)
            tries.append(said)
            if "may not name it in spec.nodeName" not in said:
                admitted.append(said or "admitted")
            time.sleep(0.01)

    thread = threading.Thread(target=intruder, daemon=True)
    thread.start()
    try:
        found = allocation_reconcile(alloc.pk)
        # The API server takes a moment to drop a deleted policy: go on trying through it.
        eventually(lambda: "aifactory-dedicated-" in _refused(admin_kube, pinned),
                   timeout=30, what="the shared guard refusing")
        time.sleep(2)
    finally:
        stop.set()
        thread.join(timeout=10)
    assert admitted == [], admitted[:3]
    assert len(tries) > 50, len(tries)
    names = {o["metadata"]["name"] for o in old}
    assert any(name in f for f in found for name in names), found  # said what it removed
    for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
        assert kube.list(GROUP, kind, label_selector=f"{LABEL_ALLOCATION}={alloc.pk}") == []
    live = params_entries(admin_kube.get(PARAMS_API, PARAMS_KIND, GUARD_PARAMS))
    assert live[f"node.{block}"] == tenant.slug and f"check.{alloc.pk}" in live
    # Its refusal says which rule, never whose block (the old names said neither either).
    assert tenant.slug not in tries[-1] and block not in tries[-1]
