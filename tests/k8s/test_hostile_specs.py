"""The routes' isolation promises against what tenants can really submit, tried as the
tenant's own identity against the real API server (docs/isolation.md lists the catalogue).

Each case is a spec a tenant could write; each is either refused with a message the tenant
can act on, or shown harmless (accepted, and it cannot reach what the route protects). The
platform's own DaemonSets in kube-system, which tolerate every taint, stay admitted while a
dedicated block exists. Every policy compiles: a policy whose CEL does not type-check would
refuse every pod in the cluster (failurePolicy Fail).
"""

from __future__ import annotations

import copy
import uuid

import pytest

from fleet.models import Route

from .approvals import approve
from .conftest import eventually
from .identities import as_identity, new_tenant
from .workloads import outcome, pod_spec, quota_known

pytestmark = [pytest.mark.django_db]
TAINT, LABEL = "aifactory.io/dedicated", "aifactory.io/dedicated-to"


def wrap(kind: str, namespace: str, spec: dict) -> dict:
    """The pod spec as a tenant submits it: a bare Pod or inside a workload's template."""
    name = f"h-{uuid.uuid4().hex[:8]}"
    meta = {"name": name, "namespace": namespace}
    template = {"metadata": {"labels": {"app": name}}, "spec": spec}
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    if kind == "Job":
        job_spec = copy.deepcopy(spec) | {"restartPolicy": "Never"}
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
                "spec": {"template": {"spec": job_spec}}}
    if kind == "CronJob":
        job_spec = copy.deepcopy(spec) | {"restartPolicy": "Never"}
        return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": meta,
                "spec": {"schedule": "0 0 * * *",
                         "jobTemplate": {"spec": {"template": {"spec": job_spec}}}}}
    selector = {"matchLabels": {"app": name}}
    body = {"selector": selector, "template": template}
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": meta, "spec": body}


# (case, pod-spec changes, expected: "accepted" or a phrase of the refusal)
BLOCK = "{block}"  # replaced by the dedicated node's name
DEDICATED_CASES = [
    ("plain pod", {}, "accepted"),
    # spec.nodeName skips the scheduler (and so the taint): no tenant's namespace may use it.
    ("nodeName on the block", {"nodeName": BLOCK}, "may not name its node in spec.nodeName"),
    ("nodeName elsewhere", {"nodeName": "some-other-node"},
     "may not name its node in spec.nodeName"),
    ("nodeSelector on the dedicated label", {"nodeSelector": {LABEL: "{owner}"}},
     "selects nodes dedicated to another tenant"),
    # Held off: admitted (the guards read no list of nodes), and the block's taint keeps it
    # away for good (tests/k8s/test_placement.py tries both with the real scheduler).
    ("nodeSelector on the hostname", {"nodeSelector": {"kubernetes.io/hostname": BLOCK}},
     "accepted"),
    ("nodeSelector on the block's allocation label",
     {"nodeSelector": {"aifactory.io/allocation": "{allocation}"}},
     "selects nodes dedicated to another tenant"),
    ("affinity on the block's allocation label", {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "aifactory.io/allocation", "operator": "In",
                                   "values": ["{allocation}"]}]}]}}}},
     "selects nodes dedicated to another tenant"),
    ("affinity on the dedicated label", {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": LABEL, "operator": "In", "values": ["{owner}"]}]}]}}}},
     "selects nodes dedicated to another tenant"),
    ("affinity by field, DaemonSet style", {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In",
                              "values": [BLOCK]}]}]}}}}, "accepted"),
    ("affinity that avoids the block", {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": LABEL, "operator": "NotIn",
                                   "values": ["{owner}"]}]}]}}}}, "accepted"),
    ("toleration of the owner's taint", {"tolerations": [
        {"key": TAINT, "operator": "Equal", "value": "{owner}", "effect": "NoSchedule"}]},
     "Only the tenant a dedicated block belongs to"),
    ("toleration of the taint key, any value", {"tolerations": [
        {"key": TAINT, "operator": "Exists"}]}, "Only the tenant a dedicated block belongs to"),
    ("toleration of the owner's taint, no effect", {"tolerations": [
        {"key": TAINT, "value": "{owner}"}]}, "Only the tenant a dedicated block belongs to"),
    ("toleration of some other tenant's taint", {"tolerations": [
        {"key": TAINT, "operator": "Equal", "value": "someone-else", "effect": "NoSchedule"}]},
     "Only the tenant a dedicated block belongs to"),
    ("toleration of every taint", {"tolerations": [{"operator": "Exists"}]},
     "toleration of every taint"),
    ("toleration of every NoSchedule taint", {"tolerations": [
        {"operator": "Exists", "effect": "NoSchedule"}]}, "toleration of every taint"),
    # Harmless: none of these tolerates the block's NoSchedule taint.
    ("toleration of every NoExecute taint", {"tolerations": [
        {"operator": "Exists", "effect": "NoExecute"}]}, "accepted"),
    ("toleration of an unrelated taint", {"tolerations": [
        {"key": "example.com/spot", "operator": "Exists"}]}, "accepted"),
    ("toleration of the owner's taint for NoExecute only", {"tolerations": [
        {"key": TAINT, "operator": "Equal", "value": "{owner}", "effect": "NoExecute"}]},
     "accepted"),
]
KINDS = ["Pod", "Job", "Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "CronJob"]


def _fill(value, owner: str, block: str, allocation: int = 0):
    if isinstance(value, dict):
        return {k: _fill(v, owner, block, allocation) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, owner, block, allocation) for v in value]
    if isinstance(value, str):
        return value.replace("{owner}", owner).replace(BLOCK, block).replace(
            "{allocation}", str(allocation))
    return value


@pytest.fixture
def dedicated_world(control_plane, fleet, admin_user,
                    django_capture_on_commit_callbacks):
    """A dedicated block of one tenant, and an intruder tenant with a shared allocation."""
    intruder, ilead = new_tenant(uuid.uuid4().hex[:6])
    _req, other = approve(intruder, ilead, admin_user, Route.SHARED_POOL,
                          django_capture_on_commit_callbacks)
    assert other.status == "active", other.status_message
    who = as_identity(control_plane, f"{intruder.slug}-lead",
                      [f"oidc:/tenants/{intruder.slug}/leads"])
    owner, lead = new_tenant(uuid.uuid4().hex[:6])
    owner_id = as_identity(control_plane, f"{owner.slug}-lead",
                           [f"oidc:/tenants/{owner.slug}/leads"])
    _req, ded = approve(owner, lead, admin_user, Route.DEDICATED_BLOCK,
                        django_capture_on_commit_callbacks)
    assert ded.status == "active", ded.status_message
    block = ded.nodes.get().name
    # Active means in force, for every kind, at once: no waiting here. (The API server
    # compiles new policies about once a second; provisioning waited for the guards' check
    # before it tainted the block. A policy of the same name left by an earlier test would
    # refuse its own old tenant's label and node, not these.)
    for kind in KINDS:
        said = outcome(who, wrap(kind, other.namespace, pod_spec(
            nodeSelector={LABEL: owner.slug})))
        assert "selects nodes dedicated to another tenant" in said, (kind, said)
        if kind != "DaemonSet":
            said = outcome(who, wrap(kind, other.namespace, pod_spec(nodeName=block)))
            assert "spec.nodeName" in said, (kind, said)
    from tenants.models import AuditEvent
    active = AuditEvent.objects.get(subject_type="allocation", subject_id=ded.pk,
                                    action="allocation.active")
    assert "admission guards refused the check's probe" in active.reason, active.reason
    eventually(lambda: quota_known(fleet, other.namespace), timeout=60)
    eventually(lambda: quota_known(fleet, ded.namespace), timeout=60)
    return {"owner": owner.slug, "block": block, "ded": ded, "other": other,
            "intruder": who, "owner_id": owner_id}


def _refused(who, manifest) -> str:
    said = outcome(who, manifest)
    assert said != "accepted", "not refused yet"
    return said


def test_every_guard_policy_compiles(fleet, dedicated_world):
    """A policy with a CEL type error denies every matching request (failurePolicy Fail):
    the API server's own type check of each must come back clean."""
    policies = [p for p in fleet.list("admissionregistration.k8s.io/v1",
                                      "ValidatingAdmissionPolicy",
                                      label_selector="app.kubernetes.io/managed-by="
                                                     "aifactory-portal")]
    assert policies

    def checked(p):
        live = fleet.get("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy",
                         p["metadata"]["name"])
        status = live.get("status") or {}
        assert status.get("observedGeneration") == live["metadata"]["generation"], status
        return status

    for p in policies:
        status = eventually(lambda p=p: checked(p), timeout=20)
        warnings = (status.get("typeChecking") or {}).get("expressionWarnings") or []
        assert warnings == [], (p["metadata"]["name"], warnings)


@pytest.mark.parametrize("kind", KINDS)
def test_dedicated_block_against_the_catalogue(kind, dedicated_world):
    w = dedicated_world
    for case, changes, expected in DEDICATED_CASES:
        if kind == "DaemonSet" and "nodeName" in changes:
            continue  # a DaemonSet template with nodeName is refused by the API itself
        spec = pod_spec(**_fill(changes, w["owner"], w["block"], w["ded"].pk))
        said = outcome(w["intruder"], wrap(kind, w["other"].namespace, spec))
        if expected == "accepted":
            assert said == "accepted", (kind, case, said)
        else:
            assert expected in said, (kind, case, said)
            # Told to another tenant: neither the owner nor its nodes are named.
            assert w["owner"] not in said and w["block"] not in said, said


def test_the_owner_and_the_platform_keep_their_access(admin_kube, dedicated_world):
    w = dedicated_world
    own = pod_spec(nodeSelector={LABEL: w["owner"]}, tolerations=[
        {"key": TAINT, "operator": "Equal", "value": w["owner"], "effect": "NoSchedule"}])
    assert outcome(w["owner_id"], wrap("Pod", w["ded"].namespace, own)) == "accepted"
    assert outcome(w["owner_id"], wrap("Job", w["ded"].namespace, own)) == "accepted"
    # kube-system: a DaemonSet's pod as its controller makes it (tolerates everything,
    # pinned to the node by field) and a static-style pod naming the node.
    system = pod_spec(tolerations=[{"operator": "Exists"}], affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In",
                              "values": [w["block"]]}]}]}}})
    assert outcome(admin_kube, wrap("Pod", "kube-system", system)) == "accepted"
    assert outcome(admin_kube, wrap("DaemonSet", "kube-system", system)) == "accepted"
    pinned = pod_spec(nodeName=w["block"], tolerations=[{"operator": "Exists"}])
    assert outcome(admin_kube, wrap("Pod", "kube-system", pinned)) == "accepted"
    # A namespace the portal does not own is guarded like any other tenant's.
    said = outcome(admin_kube, wrap("Pod", "default", pod_spec(nodeName=w["block"])))
    assert "may not name its node in spec.nodeName" in said
    said = outcome(admin_kube, wrap("Pod", "default",
                                    pod_spec(tolerations=[{"operator": "Exists"}])))
    assert "toleration of every taint" in said


def test_updates_and_bindings_cannot_walk_around_the_guard(admin_kube, dedicated_world):
    w = dedicated_world
    ns = w["other"].namespace
    pod = wrap("Pod", ns, pod_spec())
    w["intruder"].apply(pod)  # a real pod (Pending: it has nowhere to run here)
    name = pod["metadata"]["name"]
    try:
        # Adding a toleration to a running pod is an allowed pod update in Kubernetes.
        widened = copy.deepcopy(pod)
        widened["spec"]["tolerations"] = [{"operator": "Exists", "effect": "NoSchedule"}]
        said = outcome(w["intruder"], widened)
        assert "toleration of every taint" in said, said
        # Binding it to the block by hand (what the scheduler does) is not the tenant's to do.
        from kubernetes.client.exceptions import ApiException

        client = w["intruder"].api_client
        with pytest.raises(ApiException) as refused:
            client.call_api(f"/api/v1/namespaces/{ns}/pods/{name}/binding", "POST",
                            body={"apiVersion": "v1", "kind": "Binding",
                                  "metadata": {"name": name},
                                  "target": {"apiVersion": "v1", "kind": "Node",
                                             "name": w["block"]}},
                            header_params={"Content-Type": "application/json"},
                            auth_settings=["BearerToken"], _preload_content=False)
        assert refused.value.status == 403
    finally:
        admin_kube.delete("v1", "Pod", name, ns)


def test_an_older_pod_with_a_broad_toleration_stays_updatable(
        admin_kube, fleet, admin_user, django_capture_on_commit_callbacks):
    """A pod that tolerated everything before a block existed must stay updatable (labels,
    finalizers): only the tolerations a write adds are checked. Guards left by earlier tests
    are removed first, so the old pod really is made while nothing guards its namespace."""
    group = "admissionregistration.k8s.io/v1"
    for kind in ("ValidatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy"):
        for obj in admin_kube.list(group, kind,
                                   label_selector="app.kubernetes.io/managed-by=aifactory-portal"):
            admin_kube.delete(group, kind, obj["metadata"]["name"])
    ns = f"legacy-{uuid.uuid4().hex[:6]}"
    admin_kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    old = wrap("Pod", ns, pod_spec(tolerations=[{"operator": "Exists"}]))
    eventually(lambda: admin_kube.apply(old), timeout=20)  # the deletions take a moment
    try:
        owner, lead = new_tenant(uuid.uuid4().hex[:6])
        _req, ded = approve(owner, lead, admin_user, Route.DEDICATED_BLOCK,
                            django_capture_on_commit_callbacks)
        assert ded.status == "active", ded.status_message
        like_it = wrap("Pod", ns, pod_spec(tolerations=[{"operator": "Exists"}]))
        said = eventually(lambda: _refused(admin_kube, like_it), timeout=20)
        assert "toleration of every taint" in said  # a new pod like it: refused
        labelled = copy.deepcopy(old)
        labelled["metadata"]["labels"] = {"touched": "yes"}
        admin_kube.apply(labelled)  # the old one: still updatable
        assert admin_kube.get("v1", "Pod", old["metadata"]["name"], ns)["metadata"][
            "labels"]["touched"] == "yes"
    finally:
        admin_kube.delete("v1", "Namespace", ns)


CONFIDENTIAL_CASES = [
    ("no RuntimeClass", {}, "RuntimeClass"),
    ("another RuntimeClass", {"runtimeClassName": "runc"}, "RuntimeClass"),
    ("RuntimeClass but pinned by nodeName", {"runtimeClassName": "{rc}", "nodeName": "n1",
                                             "nodeSelector": {"aifactory.io/bios-profile":
                                                              "confidential"}},
     "spec.nodeName is not allowed"),
    ("RuntimeClass, no confidential nodes selected", {"runtimeClassName": "{rc}"},
     "must run on confidential nodes"),
    ("RuntimeClass on confidential nodes", {"runtimeClassName": "{rc}", "nodeSelector": {
        "aifactory.io/bios-profile": "confidential"}}, "accepted"),
]


def test_confidential_namespace_against_the_catalogue(control_plane, fleet, admin_user,
                                                      django_capture_on_commit_callbacks):
    from fleet.allocations.desired import allocation_spec

    tenant, lead = new_tenant(uuid.uuid4().hex[:6])
    _req, conf = approve(tenant, lead, admin_user, Route.CONFIDENTIAL_POOL,
                         django_capture_on_commit_callbacks)
    rc = allocation_spec(conf).confidential_runtime_class
    fleet.apply({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",  # as other tests
                 "metadata": {"name": rc}, "handler": rc}, force=True)
    fleet.apply({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                 "metadata": {"name": "runc"}, "handler": "runc"}, force=True)
    who = as_identity(control_plane, f"{tenant.slug}-lead", [f"oidc:/tenants/{tenant.slug}/leads"])
    # Active means in force, every kind at once: no waiting (provisioning waited for the
    # guards' check before it granted the tenant access).
    for kind in KINDS:
        said = outcome(who, wrap(kind, conf.namespace, pod_spec()))
        assert "RuntimeClass" in said, (kind, said)
    eventually(lambda: quota_known(fleet, conf.namespace), timeout=60)
    for case, changes, expected in CONFIDENTIAL_CASES:
        spec = pod_spec(**{k: (v.replace("{rc}", rc) if isinstance(v, str) else v)
                           for k, v in changes.items()})
        said = outcome(who, wrap("Pod", conf.namespace, spec))
        assert (said == "accepted") if expected == "accepted" else (expected in said), \
            (case, said)
    # Templates: the RuntimeClass and no nodeName at submit time; the node selector is
    # Kueue's to add when it admits the Job, so a Job without one is accepted.
    job_ok = wrap("Job", conf.namespace, pod_spec(runtimeClassName=rc))
    assert outcome(who, job_ok) == "accepted"

