"""The portal's Kubernetes adapter against a real kube-apiserver, as the restricted identity."""

from __future__ import annotations

import pytest

from fleet.kube import (
    LABEL_ALLOCATION,
    LABEL_TENANT,
    KubeError,
    KubernetesBackend,
    ObjectKey,
    prune,
)

from .conftest import applied_state, eventually
from .gpu_nodes import create_gpu_node, resource_slice

KUEUE = "kueue.x-k8s.io/v1beta2"


def labels(alloc: str) -> dict:
    return {LABEL_TENANT: "acme", LABEL_ALLOCATION: alloc,
            "app.kubernetes.io/managed-by": "aifactory-portal"}


def tenant_objects(ns: str, alloc: str) -> list[dict]:
    meta = lambda name, namespaced=True: {  # noqa: E731 - small local shorthand
        "name": name, "labels": labels(alloc), **({"namespace": ns} if namespaced else {})}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": meta(ns, False)},
        {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": meta("gpu-quota"),
         "spec": {"hard": {"requests.nvidia.com/gpu": "4",
                           "mig.nvidia.com.deviceclass.resource.k8s.io/devices": "7"}}},
        {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": meta(f"{ns}-h100", False),
         "spec": {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}},
        {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": meta(f"{ns}-cq", False),
         "spec": {"cohortName": "shared-h100", "namespaceSelector": {
             "matchLabels": {"kubernetes.io/metadata.name": ns}},
             "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
                 {"name": f"{ns}-h100", "resources": [
                     {"name": "nvidia.com/gpu", "nominalQuota": 4, "borrowingLimit": 4}]}]}]}},
        {"apiVersion": KUEUE, "kind": "LocalQueue", "metadata": meta("gpu"),
         "spec": {"clusterQueue": f"{ns}-cq"}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
         "metadata": meta("mig-1g-10gb"),
         "spec": {"spec": {"devices": {"requests": [{"name": "mig", "exactly": {
             "deviceClassName": "mig.nvidia.com", "count": 1,
             "selectors": [{"cel": {"expression":
                 "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"}}]}}]}}}},
    ]


def test_apply_creates_everything_as_the_portal_identity(portal_kube):
    objs = tenant_objects("acme-apply", "a1")
    for obj in objs:
        stored = portal_kube.apply(obj)
        assert stored["metadata"]["name"] == obj["metadata"]["name"]
        managers = {m["manager"] for m in stored["metadata"]["managedFields"]}
        assert "aifactory-portal" in managers
    cq = portal_kube.get(KUEUE, "ClusterQueue", "acme-apply-cq")
    assert cq["spec"]["cohortName"] == "shared-h100"
    # (str: with Kueue's conversion webhook in the path, quantities come back as strings)
    assert str(cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0][
        "borrowingLimit"]) == "4"
    quota = portal_kube.get("v1", "ResourceQuota", "gpu-quota", "acme-apply")
    assert quota["spec"]["hard"]["mig.nvidia.com.deviceclass.resource.k8s.io/devices"] == "7"


def test_applying_twice_changes_nothing(portal_kube):
    objs = tenant_objects("acme-twice", "a2")
    first = [applied_state(portal_kube.apply(o)) for o in objs]
    second = [applied_state(portal_kube.apply(o)) for o in objs]
    assert first == second


def test_dry_run_answers_without_storing(portal_kube):
    objs = tenant_objects("acme-dry", "a3")
    for o in objs:
        portal_kube.apply(o)
    quota = next(o for o in objs if o["kind"] == "ResourceQuota")
    changed = {**quota, "spec": {"hard": {"requests.nvidia.com/gpu": "8"}}}
    answer = portal_kube.apply(changed, dry_run=True)
    assert answer["spec"]["hard"]["requests.nvidia.com/gpu"] == "8"
    stored = portal_kube.get("v1", "ResourceQuota", "gpu-quota", "acme-dry")
    assert stored["spec"]["hard"]["requests.nvidia.com/gpu"] == "4"
    # A dry-run of an object that does not exist yet creates nothing either.
    new = {**quota, "metadata": {**quota["metadata"], "name": "not-yet"}}
    assert portal_kube.apply(new, dry_run=True)["metadata"]["name"] == "not-yet"
    assert portal_kube.get("v1", "ResourceQuota", "not-yet", "acme-dry") is None


def test_prune_by_label_deletes_only_what_is_not_kept(portal_kube):
    objs = tenant_objects("acme-prune", "a4")
    for o in objs:
        portal_kube.apply(o)
    extra = {"apiVersion": KUEUE, "kind": "LocalQueue", "metadata": {
        "name": "stale", "namespace": "acme-prune", "labels": labels("a4")},
        "spec": {"clusterQueue": "acme-prune-cq"}}
    portal_kube.apply(extra)
    keep = [ObjectKey.of(o) for o in objs]
    deleted = prune(portal_kube, label_selector=f"{LABEL_ALLOCATION}=a4",
                    kinds=[(KUEUE, "LocalQueue"), ("v1", "ResourceQuota")], keep=keep)
    assert deleted == [ObjectKey(KUEUE, "LocalQueue", "acme-prune", "stale")]
    assert portal_kube.get(KUEUE, "LocalQueue", "stale", "acme-prune") is None
    assert portal_kube.get(KUEUE, "LocalQueue", "gpu", "acme-prune") is not None
    # Pruning everything of the allocation removes the cluster-scoped objects too.
    deleted = prune(portal_kube, label_selector=f"{LABEL_ALLOCATION}=a4",
                    kinds=[(KUEUE, "ClusterQueue"), (KUEUE, "ResourceFlavor")])
    assert {k.kind for k in deleted} == {"ClusterQueue", "ResourceFlavor"}
    # (Kueue holds a deleted ClusterQueue by a finalizer until nothing uses it.)
    eventually(lambda: _gone(portal_kube.list(KUEUE, "ClusterQueue",
                                              label_selector=f"{LABEL_ALLOCATION}=a4")))


def test_bad_cel_expression_is_rejected_by_the_server(portal_kube):
    portal_kube.apply(tenant_objects("acme-cel", "a5")[0])
    bad = tenant_objects("acme-cel", "a5")[-1]
    bad["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"][0]["cel"][
        "expression"] = "device.attributes['gpu.nvidia.com'].profile =="
    with pytest.raises(KubeError) as err:
        portal_kube.apply(bad)
    assert err.value.status == 422 and not err.value.retriable
    assert "compilation failed" in err.value.message
    assert "ResourceClaimTemplate" in err.value.message


def test_borrowing_limit_without_a_cohort_is_rejected(portal_kube):
    cq = next(o for o in tenant_objects("acme-nocohort", "a6") if o["kind"] == "ClusterQueue")
    del cq["spec"]["cohortName"]
    with pytest.raises(KubeError) as err:
        portal_kube.apply(cq)
    assert err.value.status == 422 and not err.value.retriable
    assert "borrowingLimit" in err.value.message and "cohort" in err.value.message


def test_a_resource_outside_the_cluster_role_is_forbidden(portal_kube):
    portal_kube.apply(tenant_objects("acme-rbac", "a7")[0])
    secret = {"apiVersion": "v1", "kind": "Secret",
              "metadata": {"name": "x", "namespace": "acme-rbac"}, "stringData": {"a": "b"}}
    with pytest.raises(KubeError) as err:
        portal_kube.apply(secret)
    assert err.value.status == 403 and not err.value.retriable
    assert 'cannot patch resource "secrets"' in err.value.message
    assert "system:serviceaccount:aifactory-portal:portal" in err.value.message


def test_an_identity_without_the_binding_can_do_nothing(outsider_kube):
    with pytest.raises(KubeError) as err:
        outsider_kube.apply(tenant_objects("acme-outsider", "a8")[0])
    assert err.value.status == 403 and "forbidden" in err.value.message


def test_unreachable_server_is_retriable(control_plane, tmp_path):
    import json

    from tests.harness.procs import free_port

    config = json.loads(control_plane.portal_kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{free_port()}"
    path = tmp_path / "dead.kubeconfig"
    path.write_text(json.dumps(config))
    dead = KubernetesBackend.from_kubeconfig(str(path), request_timeout=3)
    with pytest.raises(KubeError) as err:
        dead.apply(tenant_objects("acme-dead", "a9")[0])
    assert err.value.retriable and err.value.status is None


def test_fake_gpu_nodes_and_resource_slices_are_readable_by_the_portal(admin_kube,
                                                                       portal_kube):
    create_gpu_node(admin_kube, "gpu-node-a", count=8,
                    labels={"aifactory.io/pool": "shared-h100"})
    admin_kube.apply(resource_slice("gpu-node-a", mig={0: ["1g.10gb", "1g.10gb", "3g.40gb"]}),
                     force=True)
    node = portal_kube.get("v1", "Node", "gpu-node-a")
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "8"
    slices = portal_kube.list("resource.k8s.io/v1", "ResourceSlice")
    devices = next(s for s in slices if s["spec"]["nodeName"] == "gpu-node-a")["spec"]["devices"]
    kinds = [d["attributes"]["type"]["string"] for d in devices]
    assert kinds.count("gpu") == 7 and kinds.count("mig") == 3
    profiles = {d["attributes"].get("profile", {}).get("string") for d in devices}
    assert {"1g.10gb", "3g.40gb"} <= profiles
    # The portal may label existing nodes (dedicated blocks) but never create one.
    with pytest.raises(KubeError) as err:
        portal_kube.apply({"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": "no-such-node", "labels": {"x": "y"}}})
    assert err.value.status == 403 and 'cannot create resource "nodes"' in err.value.message


def _gone(found: list) -> None:
    assert found == []


def _stress_crd(n: int) -> dict:
    plural = f"stresses{n}"
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.stress.aifactory.test"},
            "spec": {"group": "stress.aifactory.test", "scope": "Namespaced",
                     "names": {"plural": plural, "singular": f"stress{n}",
                               "kind": f"Stress{n}", "listKind": f"Stress{n}List"},
                     "versions": [{"name": "v1", "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": {
                                       "type": "object",
                                       "x-kubernetes-preserve-unknown-fields": True}}}]}}


def test_parallel_apply_survives_crds_appearing(control_plane, admin_kube):
    """The parallel apply shares one backend between threads while the API server's
    discovery changes under it (CRDs being installed, as right after Kueue's appear). The
    client's discovery cache was cleared without a lock and raised KeyError('resources') in
    2 of 16 rounds; every failure must now be a KubeError at worst, and here none at all."""
    from concurrent.futures import ThreadPoolExecutor

    rounds = 16
    failures: list[str] = []
    for r in range(rounds):
        backend = KubernetesBackend.from_kubeconfig(str(control_plane.admin_kubeconfig),
                                                    field_manager="stress")
        ns = f"stress-{r}"
        objs = tenant_objects(ns, f"s{r}")
        def install(r=r):
            for k in range(3):  # CRDs appear while the lookups run
                admin_kube.apply(_stress_crd(r * 10 + k), force=True)

        def lookup_new(r=r, backend=backend):
            # An unknown kind forces a discovery refresh (the path that raced).
            for k in range(3):
                try:
                    backend._resource("stress.aifactory.test/v1", f"Stress{r * 10 + k}")
                except KubeError:
                    pass  # not served yet: a clean, retriable-or-not answer is fine

        with ThreadPoolExecutor(max_workers=8) as pool:
            futures = [pool.submit(install)]
            futures += [pool.submit(lookup_new) for _ in range(3)]
            futures += [pool.submit(backend.apply, obj, force=True) for obj in objs[:1]]
            futures += [pool.submit(backend._resource, o["apiVersion"], o["kind"])
                        for o in objs for _ in range(2)]
            for f in futures:
                try:
                    f.result(timeout=60)
                except Exception as exc:  # noqa: BLE001 - the point is to see every kind
                    failures.append(f"round {r}: {exc.__class__.__name__}: {exc}")
        for obj in objs[1:]:  # and the rest of the allocation applies on the same backend
            backend.apply(obj, force=True)
        admin_kube.delete("v1", "Namespace", ns)
    for r in range(rounds):
        for k in range(3):
            admin_kube.delete("apiextensions.k8s.io/v1", "CustomResourceDefinition",
                              f"stresses{r * 10 + k}.stress.aifactory.test")
    print(f"\nBENCHMARK parallel-apply-stress rounds={rounds} failures={len(failures)}")
    assert failures == []
