"""The objects each route renders, acted on by the real Kueue controller: a Job submitted
through the allocation's LocalQueue is admitted within quota, held beyond it, and the
namespace ceiling lets a borrowing workload run up to its borrowing limit and no further.

Regression tests for the three ways the first rendering failed against a real Kueue:
nothing admitted (CPU and memory not covered), borrowing refused by the namespace quota,
and the MIG claim template refused (CEL selectors) or not counted (no device-class mapping).
"""

from __future__ import annotations

import uuid

import pytest

from fleet.allocations.desired import allocation_spec
from fleet.allocations.manifests import (
    ceiling_devices,
    claim_template_name,
    mig_device_class,
    mig_resource,
)
from fleet.kube import KubeError
from fleet.models import Route

from .approvals import provisioned
from .conftest import eventually
from .workloads import condition, first_job, job, quota_known, wait_workload

pytestmark = [pytest.mark.django_db]


@pytest.mark.parametrize("route", [Route.SHARED_POOL, Route.DEDICATED_BLOCK,
                                   Route.CONFIDENTIAL_POOL, Route.MIG_VCLUSTER])
def test_kueue_admits_a_job_through_each_routes_local_queue(
        route, kueue, fleet, tenant, lead, admin_user,
        django_capture_on_commit_callbacks):
    alloc = provisioned(tenant, lead, admin_user, route, django_capture_on_commit_callbacks)
    spec = allocation_spec(alloc)
    body = first_job(alloc, fleet)
    created = fleet.apply(body)
    # Kueue's webhook took the Job (it is stored suspended until admitted)...
    assert created["spec"]["suspend"] is True
    wl = wait_workload(fleet, alloc.namespace, body["metadata"]["name"], want="Admitted",
                       kueue=kueue)
    # ... and admitted it on the allocation's own queue, counting what the route promises.
    assert wl["status"]["admission"]["clusterQueue"] == alloc.namespace
    usage = {name: total for ps in wl["status"]["admission"]["podSetAssignments"]
             for name, total in (ps.get("resourceUsage") or {}).items()}
    device = mig_resource(spec.mig_profile) if route is Route.MIG_VCLUSTER else \
        "nvidia.com/gpu"
    assert str(usage.get(device)) == "1", usage
    assert "cpu" in usage and "memory" in usage
    # kube-controller-manager acts on what Kueue released: the Job's pod is created, and on
    # the MIG route its claim is made from the template, for the profile's DeviceClass.
    name = body["metadata"]["name"]
    pods = eventually(lambda: _pods_of(fleet, alloc.namespace, name), timeout=60)
    if route is Route.MIG_VCLUSTER:
        claims = eventually(lambda: _claims_of(fleet, alloc.namespace, pods[0]), timeout=60)
        exactly = claims[0]["spec"]["devices"]["requests"][0]["exactly"]
        assert exactly["deviceClassName"] == mig_device_class(spec.mig_profile)


def test_a_job_beyond_the_quota_waits_and_says_why(kueue, fleet, tenant, lead,
                                                   admin_user,
                                                   django_capture_on_commit_callbacks):
    alloc = provisioned(tenant, lead, admin_user, Route.CONFIDENTIAL_POOL,
                        django_capture_on_commit_callbacks)
    rc = allocation_spec(alloc).confidential_runtime_class  # the guard asks for it
    fleet.apply({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                 "metadata": {"name": rc}, "handler": rc}, force=True)
    too_big = job(alloc.namespace, devices=alloc.whole_devices + 1, runtime_class=rc)
    fleet.apply(too_big)
    wl = wait_workload(fleet, alloc.namespace, too_big["metadata"]["name"], want="pending",
                       kueue=kueue)
    # Kueue's words, whether or not the cohort could lend: "insufficient [unused] quota
    # for nvidia.com/gpu in flavor ...": it says both what is short and of what.
    message = condition(wl, "QuotaReserved")["message"]
    assert "insufficient" in message and "quota for nvidia.com/gpu" in message, message


def test_the_namespace_ceiling_allows_the_borrowing_limit_and_no_more(
        fleet, tenant, lead, admin_user,
        django_capture_on_commit_callbacks):
    """Kueue may admit a shared-pool workload up to nominal + borrowing limit; the pods it
    then releases must pass the namespace ResourceQuota (the old ceiling was the nominal
    quota, so every borrowing workload's pods were refused)."""
    alloc = provisioned(tenant, lead, admin_user, Route.SHARED_POOL,
                        django_capture_on_commit_callbacks)
    spec = allocation_spec(alloc)
    ceiling = ceiling_devices(spec)
    assert ceiling == alloc.whole_devices + spec.borrowing_limit > alloc.whole_devices
    # Quota is enforced once kube-controller-manager has computed its status.
    eventually(lambda: quota_known(fleet, alloc.namespace), timeout=60)

    def pod(devices: int) -> dict:
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"p-{uuid.uuid4().hex[:6]}",
                             "namespace": alloc.namespace},
                "spec": {"containers": [{"name": "main", "image": "x", "resources": {
                    "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": str(devices)},
                    "limits": {"memory": "1Gi", "nvidia.com/gpu": str(devices)}}}]}}

    fleet.apply(pod(ceiling))  # borrowing up to the limit: its pods may run
    with pytest.raises(KubeError, match="exceeded quota"):
        fleet.apply(pod(1))  # one device past nominal + borrowing limit: refused


def test_mig_claims_name_a_profile_class_without_cel(fleet, tenant, lead,
                                                     admin_user,
                                                     django_capture_on_commit_callbacks):
    alloc = provisioned(tenant, lead, admin_user, Route.MIG_VCLUSTER,
                        django_capture_on_commit_callbacks)
    spec = allocation_spec(alloc)
    template = fleet.get("resource.k8s.io/v1", "ResourceClaimTemplate",
                         claim_template_name(spec.mig_profile), alloc.namespace)
    request = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert request["deviceClassName"] == mig_device_class(spec.mig_profile)
    assert "selectors" not in request
    device_class = fleet.get("resource.k8s.io/v1", "DeviceClass",
                             mig_device_class(spec.mig_profile))
    assert spec.mig_profile in device_class["spec"]["selectors"][0]["cel"]["expression"]


def _pods_of(backend, namespace: str, job_name: str) -> list[dict]:
    pods = backend.list("v1", "Pod", namespace=namespace, label_selector=f"job-name={job_name}")
    assert pods, f"no pod of job {job_name} yet"
    return pods


def _claims_of(backend, namespace: str, pod: dict) -> list[dict]:
    owned = [c for c in backend.list("resource.k8s.io/v1", "ResourceClaim", namespace=namespace)
             if any(o.get("name") == pod["metadata"]["name"]
                    for o in c["metadata"].get("ownerReferences") or [])]
    assert owned, "no claim made from the template yet"
    return owned
