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
    LOCAL_QUEUE,
    ceiling_devices,
    claim_template_name,
    mig_device_class,
    mig_resource,
)
from fleet.kube import KubeError
from fleet.models import Route

from .conftest import eventually
from .test_provisioning import approve

pytestmark = [pytest.mark.django_db]

WORKLOADS = ("kueue.x-k8s.io/v1beta2", "Workload")


def job(namespace: str, *, devices: int = 1, claim_template: str = "", pods: int = 1,
        name: str = "", runtime_class: str = "") -> dict:
    """A batch Job as a tenant would submit it: suspended by Kueue until admitted, its pod
    fit for the restricted Pod Security level of dedicated and confidential namespaces."""
    container: dict = {"name": "main", "image": "registry.example/trainer:1",
                       "resources": {"requests": {"cpu": "1", "memory": "1Gi"},
                                     "limits": {"memory": "1Gi"}},
                       "securityContext": {"allowPrivilegeEscalation": False,
                                           "capabilities": {"drop": ["ALL"]}}}
    pod_spec: dict = {"restartPolicy": "Never", "containers": [container],
                      "securityContext": {"runAsNonRoot": True, "runAsUser": 1000,
                                          "seccompProfile": {"type": "RuntimeDefault"}}}
    if runtime_class:
        pod_spec["runtimeClassName"] = runtime_class
    if claim_template:
        pod_spec["resourceClaims"] = [{"name": "mig", "resourceClaimTemplateName":
                                       claim_template}]
        container["resources"]["claims"] = [{"name": "mig"}]
    else:
        container["resources"]["requests"]["nvidia.com/gpu"] = str(devices)
        container["resources"]["limits"]["nvidia.com/gpu"] = str(devices)
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name or f"train-{uuid.uuid4().hex[:6]}",
                         "namespace": namespace,
                         "labels": {"kueue.x-k8s.io/queue-name": LOCAL_QUEUE}},
            "spec": {"parallelism": pods, "completions": pods, "suspend": False,
                     "template": {"spec": pod_spec}}}


def workload_of(admin, namespace: str, job_name: str) -> dict | None:
    for wl in admin.list(*WORKLOADS, namespace=namespace):
        owners = wl["metadata"].get("ownerReferences") or []
        if any(o.get("kind") == "Job" and o.get("name") == job_name for o in owners):
            return wl
    return None


def condition(wl: dict | None, kind: str) -> dict:
    for c in ((wl or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == kind:
            return c
    return {}


def wait_workload(admin, namespace: str, job_name: str, *, want: str, kueue,
                  timeout: float = 30) -> dict:
    """Until the Job's Workload is admitted ('Admitted') or held ('pending')."""
    def reached() -> dict:
        wl = workload_of(admin, namespace, job_name)
        admitted = condition(wl, "Admitted").get("status") == "True"
        if want == "Admitted" and admitted:
            return wl
        if want == "pending" and wl and not admitted and \
                condition(wl, "QuotaReserved").get("status") == "False":
            return wl
        raise AssertionError(f"workload of {namespace}/{job_name} not {want}: {wl}")

    return eventually(reached, timeout=timeout, interval=0.3,
                      detail=lambda: f"--- kueue log ---\n{kueue.log_tail()}")


def first_job(alloc, admin) -> dict:
    """A one-device Job for the allocation's LocalQueue, as its route needs it: a MIG claim
    from the allocation's template, or the confidential RuntimeClass (the platform's object,
    made here if missing)."""
    spec = allocation_spec(alloc)
    if alloc.route == Route.MIG_VCLUSTER:
        return job(alloc.namespace, claim_template=claim_template_name(spec.mig_profile))
    if alloc.route == Route.CONFIDENTIAL_POOL:
        admin.apply({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                     "metadata": {"name": spec.confidential_runtime_class},
                     "handler": spec.confidential_runtime_class}, force=True)
        return job(alloc.namespace, devices=1, runtime_class=spec.confidential_runtime_class)
    return job(alloc.namespace, devices=1)


def provisioned(tenant, lead, admin_user, route, capture, **extra):
    req, alloc = approve(tenant, lead, admin_user, route, capture, **extra)
    alloc.refresh_from_db()
    assert alloc.status == "active", alloc.status_message
    return alloc


@pytest.mark.parametrize("route", [Route.SHARED_POOL, Route.DEDICATED_BLOCK,
                                   Route.CONFIDENTIAL_POOL, Route.MIG_VCLUSTER])
def test_kueue_admits_a_job_through_each_routes_local_queue(
        route, kueue, fleet, tenant, lead, admin_user,  # noqa: F811
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


def test_a_job_beyond_the_quota_waits_and_says_why(kueue, fleet, tenant, lead,  # noqa: F811
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
        fleet, tenant, lead, admin_user,  # noqa: F811
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
    eventually(lambda: _quota_known(fleet, alloc.namespace), timeout=60)

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


def test_mig_claims_name_a_profile_class_without_cel(fleet, tenant, lead,  # noqa: F811
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


def _quota_known(backend, namespace: str) -> None:
    quota = backend.get("v1", "ResourceQuota", "gpu-quota", namespace)
    assert (quota.get("status") or {}).get("hard"), "quota status not computed yet"


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
