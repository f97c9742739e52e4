"""The manifests that run the portal itself are accepted by the real API server."""

from pathlib import Path

from .conftest import load_all

ROOT = Path(__file__).resolve().parents[2]


def test_portal_deployment_manifests_pass_a_server_dry_run(admin_kube):
    docs = load_all(ROOT / "deploy" / "kubernetes" / "portal.yaml")
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["Deployment", "Deployment", "Deployment", "Service"]
    for doc in docs:
        answer = admin_kube.apply(doc, dry_run=True)
        assert answer["metadata"]["namespace"] == "aifactory-portal"
    web = next(d for d in docs if d["metadata"]["name"] == "portal-web")
    spec = web["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == "portal"  # the identity of deploy/rbac.yaml
    assert spec["containers"][0]["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert spec["containers"][0]["livenessProbe"]["httpGet"]["path"] == "/livez"
