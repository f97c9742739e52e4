"""Provisioning and the reconcile ask whether an allocation's guards are in force before they
apply a dedicated block's nodes or anyone's access — also when nothing changed (an earlier
attempt may have stopped between the guards and the nodes) — and a guard made again changes
the check, so an old check's refusal does not pass for it.

The backend here is the dry-run record with one rule of a real API server added: the probe is
refused once the check naming it has been applied (compilation is instant). What a real API
server does is tried in tests/k8s/test_hostile_specs.py and tests/k8s/test_placement.py."""

from __future__ import annotations

import pytest

from fleet.allocations.manifests import (
    GUARD_CHECK_SUFFIX,
    GUARD_DIGEST_ANNOTATION,
    GUARD_PROBE_LABEL,
    guard_check_name,
)
from fleet.allocations.provisioning import allocation_reconcile, allocation_spec
from fleet.inventory.sync import fleet_sync
from fleet.kube import DryRunBackend, KubeError, using_backend
from fleet.models import Allocation, Pool, Route
from intake import services
from portal.demo_fleet import demo_fleet
from tests.factories import make_request

pytestmark = pytest.mark.django_db
ADMISSION = "admissionregistration.k8s.io/v1"


class CompilingBackend(DryRunBackend):
    """Refuses a probe whose digest the stored check quotes; records every call in order."""

    enforces_admission = True

    def __init__(self):
        super().__init__()
        self.calls: list[tuple[str, str]] = []

    def apply(self, manifest, *, dry_run=False, force=False):
        labels = manifest.get("metadata", {}).get("labels") or {}
        if dry_run and GUARD_PROBE_LABEL in labels:
            name = manifest["metadata"]["name"]
            digest = manifest["metadata"]["annotations"][GUARD_DIGEST_ANNOTATION]
            self.calls.append(("probe", digest))
            check = self.get(ADMISSION, "ValidatingAdmissionPolicy", name)
            quoted = check and check["metadata"]["annotations"][GUARD_DIGEST_ANNOTATION]
            if quoted:
                raise KubeError(f"Applying Namespace {name}: ValidatingAdmissionPolicy "
                                f"'{name}' with binding '{name}' denied request: {name}: the "
                                f"guards applied before this check (digest {quoted}) are "
                                "in force.", retriable=False, status=422)
            return manifest
        self.calls.append(("apply", manifest["kind"]))
        meta = manifest.get("metadata", {})
        there = self.get(manifest["apiVersion"], manifest["kind"], meta["name"],
                         meta.get("namespace", ""))
        # an object made (again) gets a new uid; one applied over keeps its own
        uid = (there or {}).get("metadata", {}).get("uid") or f"uid-{len(self.log)}"
        out = super().apply(manifest, dry_run=dry_run, force=force)
        out["metadata"]["uid"] = uid
        return out


@pytest.fixture
def block(pools, tenant, lead, admin_user, django_capture_on_commit_callbacks):
    Pool.objects.filter(pk=pools[Route.DEDICATED_BLOCK].pk).update(slug="dedicated-h100")
    backend = CompilingBackend()
    for obj in demo_fleet():
        backend.apply(obj)
    fleet_sync(backend=backend)
    backend.calls.clear()
    req = make_request(tenant, lead, submit=True, whole_devices=8,
                       isolation_origin="contractual", isolation_reference="MSA-77")
    with using_backend(backend), django_capture_on_commit_callbacks(execute=True):
        req = services.request_approve(request=req, by=admin_user, reason="ok")
    alloc = Allocation.objects.get(pk=req.allocation_id)
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
    check = guard_check_name(allocation_spec(alloc))
    before = backend.get(ADMISSION, "ValidatingAdmissionPolicy", check)
    guard = next(k for k in backend.objects
                 if k.kind == "ValidatingAdmissionPolicyBinding"
                 and not k.name.endswith(GUARD_CHECK_SUFFIX))
    backend.delete(ADMISSION, guard.kind, guard.name)  # someone deleted a guard
    found = allocation_reconcile(alloc.pk, backend=backend)
    after = backend.get(ADMISSION, "ValidatingAdmissionPolicy", check)
    assert any("was deleted" in f for f in found)
    d = GUARD_DIGEST_ANNOTATION
    assert before["metadata"]["annotations"][d] != after["metadata"]["annotations"][d]
    # and a reconcile with nothing changed leaves the check as it is (no drift every time)
    assert allocation_reconcile(alloc.pk, backend=backend) == []


def test_one_allocations_trouble_does_not_hold_up_the_reconcile_of_the_others(
        block, monkeypatch):
    """The beat's reconcile goes on past an allocation whose guards are not in force yet (or
    whose apply was refused) and says which it left for the next pass."""
    from fleet.allocations import provisioning
    from fleet.allocations.tasks import reconcile_allocations
    from fleet.kube import KubernetesBackend

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

    monkeypatch.setattr(provisioning, "allocation_reconcile", reconcile)
    monkeypatch.setattr(provisioning, "prune_leftovers", lambda: [])
    # the task skips the dry-run record; any real-cluster backend object will do (not called)
    monkeypatch.setattr("fleet.kube.get_backend", lambda: KubernetesBackend.__new__(
        KubernetesBackend))
    summary = reconcile_allocations()
    assert sorted(seen) == sorted([alloc.pk, second.pk])
    assert f"not reconciled (tried again next time): [{seen[0]}]" in summary
