"""The Helm chart: `helm lint`, `helm template` with the default and a full set of values,
the rendered objects accepted by the real API server (server-side dry run), bad values
refused by values.schema.json, and the chart's RBAC identical to deploy/rbac.yaml.
Helm is built from the Go module proxy and cached (tests/harness/helm.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.harness.helm import ensure_helm
from tests.harness.waiting import eventually

from .conftest import load_all

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "aifactory-portal"
NAMESPACE = "aifactory-portal"
FULL_VALUES = {
    "image": {"repository": "registry.example.com/platform/aifactory-portal", "tag": "1.2.3",
              "pullPolicy": "Always"},
    "imagePullSecrets": [{"name": "registry"}],
    "settings": {
        "allowedHosts": "portal.example.com", "csrfTrustedOrigins": "https://portal.example.com",
        "baseUrl": "https://portal.example.com", "kubeBackend": "in-cluster", "currency": "USD",
        "keycloak": {"serverUrl": "https://sso.example.com/realms/aifactory",
                     "clientId": "aifactory-portal"},
        "prometheusUrl": "http://prometheus.monitoring:9090",
        "otlpEndpoint": "http://jaeger-collector.tracing:4318",
        "traceUrl": "https://jaeger.example.com/trace/{trace_id}",
        "email": {"host": "smtp.example.com", "port": 587, "useTls": True,
                  "from": "Portal <portal@example.com>"},
        "extraEnv": {"PORTAL_CLUSTER_API_URL": "https://k8s.example.com:6443",
                     "PORTAL_QUEUE_SYNC_SECONDS": 30},
    },
    "secretEnv": {"SECRET_KEY": "x" * 60, "DATABASE_URL": "postgres://p:q@db:5432/portal",
                  "CELERY_BROKER_URL": "redis://redis:6379/0",
                  "KEYCLOAK_CLIENT_SECRET": "s", "PORTAL_METRICS_TOKEN": "t"},
    "web": {"replicas": 3, "gunicornWorkers": 4,
            "autoscaling": {"enabled": True, "minReplicas": 3, "maxReplicas": 9,
                            "targetCPUUtilizationPercentage": 60},
            "podDisruptionBudget": {"enabled": True, "minAvailable": 2}},
    "worker": {"replicas": 3, "concurrency": 4},
    "ingress": {"enabled": True, "className": "nginx", "host": "portal.example.com",
                "tlsSecretName": "portal-tls", "annotations": {"a": "b"}},
    "httpRoute": {"enabled": True, "parentRefs": [{"name": "gw", "namespace": "gateway"}],
                  "hostnames": ["portal.example.com"]},
    "gitops": {"enabled": True, "repo": "ssh://git@git.example.com/platform/cluster.git",
               "statusObject": "argocd:argocd/tenants",
               "credentials": {"existingSecret": "portal-git"}},
    "rbac": {"create": True, "multikueueManager": True, "kueueNamespace": "kueue-system"},
    "nodeSelector": {"node-role.kubernetes.io/platform": ""},
    "tolerations": [{"key": "platform", "operator": "Exists", "effect": "NoSchedule"}],
}


@pytest.fixture(scope="module")
def helm() -> str:
    return str(ensure_helm())


def render(helm: str, tmp_path: Path, values: dict | None, *extra: str
           ) -> subprocess.CompletedProcess:
    args = [helm, "template", "portal", str(CHART), "--namespace", NAMESPACE, *extra]
    if values is not None:
        path = tmp_path / "values.yaml"
        path.write_text(yaml.safe_dump(values))
        args += ["-f", str(path)]
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


def docs_of(result: subprocess.CompletedProcess) -> list[dict]:
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


@pytest.mark.parametrize("values", [None, FULL_VALUES], ids=["default", "full"])
def test_lint_is_clean(helm, tmp_path, values):
    args = [helm, "lint", "--strict", str(CHART)]
    if values is not None:
        (tmp_path / "v.yaml").write_text(yaml.safe_dump(values))
        args += ["-f", str(tmp_path / "v.yaml")]
    result = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


@pytest.mark.parametrize("values", [None, FULL_VALUES], ids=["default", "full"])
def test_rendered_objects_pass_a_server_dry_run(helm, admin_kube, tmp_path, values):
    admin_kube.apply({"apiVersion": "v1", "kind": "Namespace",
                      "metadata": {"name": NAMESPACE}}, force=True)
    docs = docs_of(render(helm, tmp_path, values))
    kinds = sorted(d["kind"] for d in docs)
    for kind in ("ConfigMap", "Deployment", "Job", "Service", "ServiceAccount",
                 "ClusterRole", "ClusterRoleBinding", "PodDisruptionBudget", "NetworkPolicy"):
        assert kind in kinds, kind
    if values is FULL_VALUES:
        for kind in ("Ingress", "HTTPRoute", "HorizontalPodAutoscaler", "Secret"):
            assert kind in kinds, kind
        # GitOps: the workers get the repository's credentials, read-only, owner-readable.
        worker = next(d for d in docs if d["kind"] == "Deployment"
                      and d["metadata"]["name"].endswith("-worker"))
        pod = worker["spec"]["template"]["spec"]
        (vol,) = [v for v in pod["volumes"] if v["name"] == "git-credentials"]
        assert vol["secret"] == {"secretName": "portal-git", "defaultMode": 0o400}
        assert {"name": "git-credentials", "mountPath": "/var/run/secrets/aifactory/git",
                "readOnly": True} in pod["containers"][0]["volumeMounts"]
        config = next(d for d in docs if d["kind"] == "ConfigMap")["data"]
        assert config["PORTAL_PROVISIONING"] == "gitops"
        assert config["PORTAL_GITOPS_SSH_KEY_FILE"].startswith("/var/run/secrets/aifactory/git/")
        assert config["PORTAL_OTLP_ENDPOINT"] == "http://jaeger-collector.tracing:4318"
        assert config["PORTAL_TRACE_URL"] == "https://jaeger.example.com/trace/{trace_id}"
    for doc in docs:
        if doc["kind"] not in ("ClusterRole", "ClusterRoleBinding", "Namespace"):
            doc["metadata"].setdefault("namespace", NAMESPACE)
        answer = admin_kube.apply(doc, dry_run=True, force=True)
        assert answer["metadata"]["name"] == doc["metadata"]["name"]
    for deploy in (d for d in docs if d["kind"] in ("Deployment", "Job")):
        pod = deploy["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        for c in pod["containers"]:
            assert c["securityContext"] == {"allowPrivilegeEscalation": False,
                                            "readOnlyRootFilesystem": True,
                                            "capabilities": {"drop": ["ALL"]}}
    deployments = {d["metadata"]["name"].rsplit("-aifactory-portal-", 1)[-1]
                   for d in docs if d["kind"] == "Deployment"}
    assert deployments == {"web", "worker", "beat", "fleet-watch"}
    watchers = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"]
                    .endswith("-fleet-watch"))["spec"]["template"]["spec"]["containers"]
    assert [c["command"][-1] for c in watchers] == ["watch_fleet", "watch_queues"]
    web = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"]
               .endswith("-web"))
    container = web["spec"]["template"]["spec"]["containers"][0]
    # Readiness asks for the database; liveness only that the process answers.
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert container["startupProbe"]["httpGet"]["path"] == "/readyz"
    anti = web["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"][
        "topologyKey"] == "kubernetes.io/hostname"
    for workload in (d for d in docs if d["kind"] in ("Deployment", "Job")):
        for c in workload["spec"]["template"]["spec"]["containers"]:
            res = c.get("resources") or {}
            for part in ("requests", "limits"):
                for what in ("memory", "ephemeral-storage"):
                    assert what in res.get(part, {}), (workload["metadata"]["name"], part,
                                                       what)
    budgets = {d["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"]
               for d in docs if d["kind"] == "PodDisruptionBudget"}
    assert budgets == {"web", "worker"}  # every Deployment with more than one replica
    policies = {d["metadata"]["name"]: d["spec"] for d in docs
                if d["kind"] == "NetworkPolicy"}
    default = policies["portal-aifactory-portal-default"]
    assert default["policyTypes"] == ["Ingress", "Egress"] and "ingress" not in default
    ports = {p["port"] for rule in default["egress"] for p in rule["ports"]}
    assert ports == {53, 5432, 6379, 443, 6443, 8443, 9090, 4318, 25, 465, 587, 22}
    web_in = policies["portal-aifactory-portal-web-ingress"]
    assert web_in["ingress"][0]["ports"] == [{"port": "http", "protocol": "TCP"}]
    hooks = {d["metadata"]["name"]: d["metadata"].get("annotations", {}).get("helm.sh/hook")
             for d in docs}
    assert hooks["portal-aifactory-portal-migrate"] == "pre-install,pre-upgrade"


@pytest.mark.parametrize(("override", "word"), [
    ("settings.kubeBackend=kubeconfig", "kubeBackend"),
    ("web.replicas=0", "replicas"),
    ("settings.currency=euro", "currency"),
    ("settings.baseUrl=portal.example.com", "baseUrl"),
    ("settings.traceUrl=https://jaeger.example.com/trace/", "traceUrl"),
    ("image.pullPolicy=Sometimes", "pullPolicy"),
    ("unknownKey=1", "unknownKey"),
])
def test_bad_values_fail_at_install(helm, tmp_path, override, word):
    result = render(helm, tmp_path, None, "--set", override)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr
    assert word in result.stderr


def test_chart_rbac_is_deploy_rbac(helm, tmp_path):
    """One source of truth for the portal's permissions: the plain manifest's ClusterRoles and
    the chart's must not drift apart."""
    def roles(docs):
        return {(d["kind"], d["metadata"]["name"]): d["rules"] for d in docs
                if d["kind"] in ("ClusterRole", "Role")}

    plain = roles(load_all(ROOT / "deploy" / "rbac.yaml"))
    charted = roles(docs_of(render(helm, tmp_path, None)))
    assert plain.keys() == charted.keys() == {
        ("ClusterRole", "aifactory-portal"), ("ClusterRole", "aifactory-tenant-member"),
        ("Role", "aifactory-portal-cluster-credentials")}
    assert charted == plain
    # On a MultiKueue manager, the Role in Kueue's namespace is the plain manifest's too.
    manager = roles(load_all(ROOT / "deploy" / "rbac-multikueue-manager.yaml"))
    charted = roles(docs_of(render(helm, tmp_path, None,
                                   "--set", "rbac.multikueueManager=true")))
    assert set(manager) == {("Role", "aifactory-portal-multikueue")}
    assert charted == plain | manager


def test_the_controllers_act_on_what_the_chart_renders(helm, admin_kube, tmp_path):
    """Not only accepted: applied for real, kube-controller-manager makes each Deployment's
    ReplicaSet and pods, the migration Job's pod and the PodDisruptionBudget's status (there
    are no kubelets: the pods stay pending), and finishes deleting the namespace."""

    namespace = "portal-acted"
    result = subprocess.run([helm, "template", "acted", str(CHART), "--namespace", namespace],
                            capture_output=True, text=True, timeout=120)
    docs = docs_of(result)
    admin_kube.apply({"apiVersion": "v1", "kind": "Namespace",
                      "metadata": {"name": namespace}}, force=True)
    for doc in docs:
        if doc["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            continue  # cluster-wide and already there (deploy/rbac.yaml): rules compared above
        doc["metadata"]["namespace"] = namespace
        admin_kube.apply(doc, force=True)
    deployments = [d["metadata"]["name"] for d in docs if d["kind"] == "Deployment"]

    def acted() -> bool:
        pods = admin_kube.list("v1", "Pod", namespace=namespace)
        owners = {o["name"] for p in pods for o in p["metadata"].get("ownerReferences", [])}
        sets = admin_kube.list("apps/v1", "ReplicaSet", namespace=namespace)
        made = {o["name"] for s in sets for o in s["metadata"].get("ownerReferences", [])}
        pdb = admin_kube.get("policy/v1", "PodDisruptionBudget", "acted-aifactory-portal-web",
                             namespace)
        return (set(deployments) <= made and "acted-aifactory-portal-migrate" in owners
                and len(owners) >= len(deployments) + 1
                and (pdb.get("status") or {}).get("observedGeneration") == 1)

    eventually(acted, timeout=90, interval=0.5, retry_on=(),
               what="kube-controller-manager acting on the chart")
    admin_kube.delete("v1", "Namespace", namespace)
    # kube-controller-manager deletes every object first (a busy machine: minutes); the
    # budget is the one the two waits used to share, so never shorter than before.
    eventually(lambda: admin_kube.get("v1", "Namespace", namespace) is None, timeout=390,
               interval=0.5, retry_on=(), what="the namespace deleted")


@pytest.mark.parametrize("values", [None, FULL_VALUES], ids=["default", "full"])
def test_kube_score_finds_nothing_left_unexplained(helm, tmp_path, values):
    """kube-score (built from the Go module proxy, cached) over the default and the full
    render: no critical finding and no warning. What the chart answers otherwise is written
    in it: CPU is requested, not limited (values.yaml: no throttling while the node has
    CPU to spare, so the check runs with --ignore-container-cpu-limit), and the image pull
    policy is ignored per object with its reason (_helpers.tpl: portal.scoreAnnotations)."""
    from tests.harness.kubescore import ensure_kube_score

    kube_score = str(ensure_kube_score())
    rendered = render(helm, tmp_path, values)
    assert rendered.returncode == 0, rendered.stderr
    (tmp_path / "render.yaml").write_text(rendered.stdout)
    result = subprocess.run([kube_score, "score", str(tmp_path / "render.yaml"),
                             "--ignore-container-cpu-limit", "--output-format", "ci"],
                            capture_output=True, text=True, timeout=120)
    findings = [line for line in result.stdout.splitlines()
                if line.startswith(("[CRITICAL]", "[WARNING]"))]
    assert findings == [], "\n".join(findings)
    assert result.stdout.count("[OK]") > 20, result.stdout[:2000]  # it did score the objects
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    ignored = helpers.split('define "portal.scoreAnnotations"')[1].split("{{- end -}}")[0]
    assert "kube-score/ignore: container-image-pull-policy" in ignored
    reason = helpers.split('define "portal.scoreAnnotations"')[0].rsplit("{{/*", 1)[1]
    assert "registry" in reason and "pinned" in reason  # the why sits with the ignore
