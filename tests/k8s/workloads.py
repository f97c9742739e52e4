"""What tenants submit in the k8s tests (Kueue Jobs, restricted pods) and how the tests
read Kueue's answer (the Job's Workload, its conditions, the namespace's quota)."""

from __future__ import annotations

import uuid

from fleet.allocations.desired import allocation_spec
from fleet.allocations.manifests import LOCAL_QUEUE, claim_template_name
from fleet.kube import KubeError
from fleet.models import Route

from .conftest import eventually

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


def quota_known(backend, namespace: str) -> None:
    quota = backend.get("v1", "ResourceQuota", "gpu-quota", namespace)
    assert (quota.get("status") or {}).get("hard"), "quota status not computed yet"


IMAGE = "registry.example/cuda:12"


def pod_spec(**extra) -> dict:
    """A pod fit for the restricted Pod Security level, with resources within any quota."""
    spec = {"containers": [{"name": "main", "image": IMAGE, "resources": {
        "requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "64Mi"}},
        "securityContext": {"allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]}}}],
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000,
                            "seccompProfile": {"type": "RuntimeDefault"}}}
    spec.update(extra)
    return spec


def outcome(who, manifest) -> str:
    """'accepted', or the API server's refusal message (dry run: nothing is stored)."""
    try:
        who.apply(manifest, dry_run=True)
        return "accepted"
    except KubeError as err:
        return err.message
