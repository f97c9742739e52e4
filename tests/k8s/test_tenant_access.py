"""What a tenant can do with its allocation, tried as the tenant against the real API server:
a client identity whose groups are the tenant's Keycloak groups with the API server's OIDC
prefix (`oidc:/tenants/<slug>/leads`), exactly what RBAC sees after an OIDC sign-in.

The example workload the portal hands out (fleet/connect.py) runs through each route's
LocalQueue and is admitted by the real Kueue; the same workload is forbidden in another
tenant's namespace; what members and leads may not change, they cannot; and the guard rails
refuse what they must.
"""

from __future__ import annotations

import uuid

import pytest

from fleet.allocations.connect import example_workload
from fleet.allocations.desired import allocation_spec
from fleet.kube import KubeError
from fleet.models import Route

from .approvals import approve
from .conftest import eventually
from .identities import as_identity, new_tenant
from .workloads import IMAGE, quota_known, wait_workload

pytestmark = [pytest.mark.django_db]


def _provision(route, admin_user, capture):
    tenant, lead = new_tenant(uuid.uuid4().hex[:6])
    _req, alloc = approve(tenant, lead, admin_user, route, capture)
    alloc.refresh_from_db()
    assert alloc.status == "active", alloc.status_message
    return tenant, alloc


@pytest.mark.parametrize("route", [Route.SHARED_POOL, Route.DEDICATED_BLOCK,
                                   Route.CONFIDENTIAL_POOL, Route.MIG_VCLUSTER])
def test_the_example_runs_as_the_tenant_and_nowhere_else(
        route, control_plane, kueue, fleet, admin_user,
        django_capture_on_commit_callbacks):
    tenant, alloc = _provision(route, admin_user, django_capture_on_commit_callbacks)
    spec = allocation_spec(alloc)
    if route is Route.CONFIDENTIAL_POOL:  # the platform's RuntimeClass
        fleet.apply({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                     "metadata": {"name": spec.confidential_runtime_class},
                     "handler": spec.confidential_runtime_class}, force=True)
    lead = as_identity(control_plane, f"{tenant.slug}-lead",
                       [f"oidc:/tenants/{tenant.slug}/leads"])
    job = example_workload(spec, image=IMAGE)
    lead.apply(job)  # the lead's own identity, through RBAC and every admission check
    wl = wait_workload(fleet, alloc.namespace, job["metadata"]["name"], want="Admitted",
                       kueue=kueue)
    assert wl["status"]["admission"]["clusterQueue"] == alloc.namespace
    # Another tenant's namespace: forbidden, whatever the workload.
    other, other_alloc = _provision(Route.SHARED_POOL, admin_user,
                                    django_capture_on_commit_callbacks)
    elsewhere = example_workload(allocation_spec(other_alloc), image=IMAGE)
    with pytest.raises(KubeError) as refused:
        lead.apply(elsewhere, dry_run=True)
    assert refused.value.status == 403


def test_members_run_workloads_and_nobody_raises_a_quota_or_grants_access(
        control_plane, fleet, admin_user, django_capture_on_commit_callbacks):
    tenant, alloc = _provision(Route.SHARED_POOL, admin_user,
                               django_capture_on_commit_callbacks)
    member = as_identity(control_plane, f"{tenant.slug}-m",
                         [f"oidc:/tenants/{tenant.slug}/members"])
    lead = as_identity(control_plane, f"{tenant.slug}-l", [f"oidc:/tenants/{tenant.slug}/leads"])
    member.apply(example_workload(allocation_spec(alloc), image=IMAGE), dry_run=True)
    quota = {"apiVersion": "v1", "kind": "ResourceQuota",
             "metadata": {"name": "gpu-quota", "namespace": alloc.namespace},
             "spec": {"hard": {"requests.nvidia.com/gpu": "64"}}}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "friend", "namespace": alloc.namespace},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                           "name": "edit"},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                             "name": "oidc:/tenants/someone-else/members"}]}
    for who in (member, lead):
        with pytest.raises(KubeError) as refused:
            who.apply(quota, dry_run=True, force=True)
        assert refused.value.status == 403  # a quota is the platform's to set
    with pytest.raises(KubeError) as refused:
        member.apply(binding, dry_run=True)
    assert refused.value.status == 403  # members grant nothing
    open_door = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                 "metadata": {"name": "allow-all", "namespace": alloc.namespace},
                 "spec": {"podSelector": {}, "ingress": [{}], "egress": [{}],
                          "policyTypes": ["Ingress", "Egress"]}}
    with pytest.raises(KubeError) as refused:
        member.apply(open_door, dry_run=True)
    assert refused.value.status == 403  # nor open what the platform closed


def test_reconcile_replaces_the_old_member_binding(
        kube, fleet, admin_user, django_capture_on_commit_callbacks):
    """Allocations provisioned before members got their own role carry `tenant-members`
    bound to `edit`; a roleRef cannot change, so the new binding has a new name and the
    reconcile removes the old one (and says so)."""
    from fleet.allocations.reconcile import allocation_reconcile
    from fleet.kube import LABEL_ALLOCATION, MANAGED_BY, MANAGER

    tenant, alloc = _provision(Route.SHARED_POOL, admin_user,
                               django_capture_on_commit_callbacks)
    fleet.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                 "metadata": {"name": "tenant-members", "namespace": alloc.namespace,
                              "labels": {MANAGED_BY: MANAGER,
                                         LABEL_ALLOCATION: str(alloc.pk)}},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                             "name": "edit"},
                 "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                               "name": f"oidc:/tenants/{tenant.slug}/members"}]}, force=True)
    found = allocation_reconcile(alloc.pk, backend=kube)
    assert any("tenant-members is no longer part of it" in f for f in found), found
    assert fleet.get("rbac.authorization.k8s.io/v1", "RoleBinding", "tenant-members",
                     alloc.namespace) is None
    assert fleet.get("rbac.authorization.k8s.io/v1", "RoleBinding",
                     "tenant-members-workloads", alloc.namespace) is not None


def test_the_guard_rails_refuse_what_they_must(
        control_plane, fleet, admin_user, django_capture_on_commit_callbacks):
    def pod(namespace: str, **spec) -> dict:
        base = {"containers": [{"name": "main", "image": IMAGE, "resources": {
            "requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "1Gi"}},
            "securityContext": {"allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]}}}],
            "securityContext": {"runAsNonRoot": True, "runAsUser": 1000,
                                "seccompProfile": {"type": "RuntimeDefault"}}}
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"p-{uuid.uuid4().hex[:6]}", "namespace": namespace},
                "spec": base | spec}

    conf_tenant, conf = _provision(Route.CONFIDENTIAL_POOL, admin_user,
                                   django_capture_on_commit_callbacks)
    lead = as_identity(control_plane, "conf-lead", [f"oidc:/tenants/{conf_tenant.slug}/leads"])
    def refused(manifest, who) -> KubeError:
        try:
            who.apply(manifest, dry_run=True)
        except KubeError as err:
            return err
        raise AssertionError("accepted")  # eventually() tries again

    # An admission policy takes the API server a moment to load (see the closing note).
    err = eventually(lambda: refused(pod(conf.namespace), lead), timeout=15)
    assert "RuntimeClass" in err.message  # no confidential RuntimeClass
    ded_tenant, ded = _provision(Route.DEDICATED_BLOCK, admin_user,
                                 django_capture_on_commit_callbacks)
    other_tenant, other = _provision(Route.SHARED_POOL, admin_user,
                                     django_capture_on_commit_callbacks)
    intruder = as_identity(control_plane, "intruder",
                           [f"oidc:/tenants/{other_tenant.slug}/leads"])
    sneaky = pod(other.namespace, tolerations=[{
        "key": "aifactory.io/dedicated", "operator": "Equal", "value": ded_tenant.slug,
        "effect": "NoSchedule"}])
    err = eventually(lambda: refused(sneaky, intruder), timeout=15)
    assert "Only the tenant a dedicated block belongs to may tolerate" in err.message
    assert ded_tenant.slug not in err.message  # the owner is not named to others
    # Over the namespace quota, and a device class the MIG namespace has no quota for.
    eventually(lambda: quota_known(fleet, other.namespace), timeout=60)
    too_many = pod(other.namespace)
    too_many["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "999"
    too_many["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "999"
    with pytest.raises(KubeError, match="exceeded quota"):
        intruder.apply(too_many)
    mig_tenant, mig = _provision(Route.MIG_VCLUSTER, admin_user,
                                 django_capture_on_commit_callbacks)
    eventually(lambda: quota_known(fleet, mig.namespace), timeout=60)
    mig_lead = as_identity(control_plane, "mig-lead", [f"oidc:/tenants/{mig_tenant.slug}/leads"])
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "whole-gpu", "namespace": mig.namespace},
             "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                 "deviceClassName": "gpu.nvidia.com", "count": 1}}]}}}
    with pytest.raises(KubeError, match="exceeded quota"):
        mig_lead.apply(claim)
