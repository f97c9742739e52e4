"""How a tenant uses an allocation, the pure part: a kubeconfig (OIDC, no secrets) and a
ready example workload per route, rendered beside `render_manifests` from the same spec.

The example is what the guard rails let through and Kueue admits: a batch Job labelled with
the allocation's LocalQueue, requests within the quota, a pod fit for the restricted Pod
Security level, the confidential RuntimeClass on the confidential route, the tenant's
toleration and node selector on a dedicated block, a claim from the allocation's
ResourceClaimTemplate on the MIG route, and a declared time limit (so the queue page can
estimate when the next job starts).
"""

from __future__ import annotations

import base64

from ..domain import Route
from ..vocabulary import KUEUE_MAX_EXEC_LABEL, KUEUE_QUEUE_LABEL
from .manifests import (
    DEDICATED_LABEL,
    DEDICATED_TAINT,
    LOCAL_QUEUE,
    WHOLE_GPU,
    AllocationSpec,
    claim_template_name,
)

EXAMPLE_NAME = "gpu-example"
TIME_LIMIT_LABEL = KUEUE_MAX_EXEC_LABEL
VCLUSTER_NAME = "vcluster"


def example_workload(spec: AllocationSpec, *, image: str, time_limit_seconds: int = 3600
                     ) -> dict:
    """One pod, one device (or one slice of the allocation's MIG profile)."""
    container: dict = {
        "name": "main", "image": image, "command": ["nvidia-smi"],
        "resources": {"requests": {"cpu": "1", "memory": "4Gi"},
                      "limits": {"memory": "4Gi"}},
        "securityContext": {"allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]}},
    }
    pod: dict = {
        "restartPolicy": "Never", "containers": [container],
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000,
                            "seccompProfile": {"type": "RuntimeDefault"}},
    }
    if spec.route == Route.MIG_VCLUSTER:
        pod["resourceClaims"] = [{"name": "mig", "resourceClaimTemplateName":
                                  claim_template_name(spec.mig_profile)}]
        container["resources"]["claims"] = [{"name": "mig"}]
    else:
        container["resources"]["requests"][WHOLE_GPU] = "1"
        container["resources"]["limits"][WHOLE_GPU] = "1"
    if spec.route == Route.CONFIDENTIAL_POOL:
        pod["runtimeClassName"] = spec.confidential_runtime_class
    if spec.route == Route.DEDICATED_BLOCK:
        pod["nodeSelector"] = {DEDICATED_LABEL: spec.tenant}
        pod["tolerations"] = [{"key": DEDICATED_TAINT, "operator": "Equal",
                               "value": spec.tenant, "effect": "NoSchedule"}]
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": EXAMPLE_NAME, "namespace": spec.namespace,
                     "labels": {KUEUE_QUEUE_LABEL: LOCAL_QUEUE,
                                TIME_LIMIT_LABEL: str(time_limit_seconds)}},
        "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0,
                 "template": {"spec": pod}},
    }


def tenant_kubeconfig(spec: AllocationSpec, *, server: str, ca_pem: str, issuer: str,
                      client_id: str, cluster_name: str = "ai-factory") -> dict:
    """The allocation's namespace as the context, signing in through the portal's Keycloak
    realm with the `kubectl oidc-login` plugin: no token, key or secret in the file."""
    cluster: dict = {"server": server}
    if ca_pem:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem.encode()).decode()
    user = f"oidc@{cluster_name}"
    return {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": cluster_name, "cluster": cluster}],
        "users": [{"name": user, "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": "kubectl",
            "args": ["oidc-login", "get-token", f"--oidc-issuer-url={issuer}",
                     f"--oidc-client-id={client_id}", "--oidc-extra-scope=openid",
                     "--oidc-extra-scope=groups"],
            "interactiveMode": "IfAvailable",
            "provideClusterInfo": False}}}],
        "contexts": [{"name": spec.namespace, "context": {
            "cluster": cluster_name, "namespace": spec.namespace, "user": user}}],
        "current-context": spec.namespace,
    }


def how_to_connect(spec: AllocationSpec) -> list[str]:
    """The steps, in order, as plain sentences (commands in backticks)."""
    steps = ["Install kubectl and the oidc-login plugin (`kubectl krew install oidc-login`), "
             "then download the kubeconfig below and run "
             f"`export KUBECONFIG=$PWD/{spec.namespace}-kubeconfig.yaml`: "
             "the first command opens the portal's sign-in."]
    if spec.route == Route.MIG_VCLUSTER:
        steps.append(
            "This allocation is a virtual cluster of your own: `vcluster connect "
            f"{VCLUSTER_NAME} -n {spec.namespace}` (or the Cluster API secret "
            f"`{VCLUSTER_NAME}-kubeconfig` in `{spec.namespace}`). Workloads you create "
            f"inside it are synced to the host namespace `{spec.namespace}`, where its quota "
            "and queue apply.")
    steps.append(f"Submit batch Jobs to the LocalQueue `{LOCAL_QUEUE}` (label "
                 f"`{KUEUE_QUEUE_LABEL}: {LOCAL_QUEUE}`): `kubectl apply -f "
                 "example.yaml`, then watch the Queue section of this page.")
    if spec.route == Route.CONFIDENTIAL_POOL:
        steps.append(f"Every pod here must use the `{spec.confidential_runtime_class}` "
                     "RuntimeClass; pods without it are refused.")
    if spec.route == Route.DEDICATED_BLOCK:
        steps.append(f"Your nodes carry the taint `{DEDICATED_TAINT}={spec.tenant}`; pods "
                     "tolerate it as in the example (Kueue adds it when it admits them).")
    return steps
