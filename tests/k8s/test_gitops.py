"""GitOps mode end to end: approval commits the allocation's objects to a real Git server
(a bare repository served by `git daemon` on loopback), a GitOps agent (here: this test,
applying what the repository holds, as Argo CD or Flux would) applies them to the real API
server, the portal sees them and marks the allocation active; retirement removes the
directory and the agent prunes. Pushing fails while the server is down and succeeds on retry,
never twice."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from fleet.allocations.manifests import OWNED_KINDS
from fleet.allocations.provisioning import allocation_provision
from fleet.allocations.retirement import allocation_retire
from fleet.allocations.services import allocation_retry
from fleet.kube import LABEL_ALLOCATION, set_backend
from fleet.models import Allocation, Route
from fleet.tasks import follow_gitops
from intake import services
from tenants.models import AuditEvent
from tests.factories import make_request
from tests.harness.procs import ManagedProcess, free_port, port_open, wait_until
from tests.harness.waiting import eventually

from .approvals import ROUTE_REQUESTS

pytestmark = pytest.mark.django_db


def git(*args: str, cwd: Path) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True,
                          text=True).stdout


class GitServer:
    """A bare repository with one commit on main, served read-write by git daemon."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bare = root / "repos" / "platform.git"
        self.bare.mkdir(parents=True)
        git("init", "-q", "--bare", "-b", "main", cwd=self.bare)
        seed = root / "seed"
        seed.mkdir()
        git("init", "-q", "-b", "main", cwd=seed)
        (seed / "README.md").write_text("Cluster state, written by the AI Factory Portal.\n")
        git("add", "-A", cwd=seed)
        git("commit", "-q", "-m", "Start", cwd=seed)
        git("push", "-q", str(self.bare), "main", cwd=seed)
        self.port = free_port()
        self.proc: ManagedProcess | None = None

    @property
    def url(self) -> str:
        return f"git://127.0.0.1:{self.port}/platform.git"

    def start(self) -> None:
        self.proc = ManagedProcess("git-daemon", [
            "git", "daemon", "--reuseaddr", f"--base-path={self.root / 'repos'}",
            "--export-all", "--enable=receive-pack", "--listen=127.0.0.1",
            f"--port={self.port}", str(self.root / "repos")],
            log_path=self.root / "git-daemon.log").start()
        wait_until(lambda: port_open(self.port), timeout=20, what="git daemon")

    def stop(self) -> None:
        if self.proc:
            self.proc.stop()

    def log(self) -> list[str]:
        return git("log", "--format=%B%x00", "main", cwd=self.bare).split("\x00")[:-1]

    def files(self, path: str) -> list[str]:
        out = git("ls-tree", "-r", "--name-only", "main", "--", path, cwd=self.bare)
        return [line.split("/")[-1] for line in out.splitlines()]


def agent_sync(server: GitServer, admin, work: Path) -> set[str]:
    """What Argo CD / Flux do: apply every allocation directory in kustomization order, and
    prune the portal's objects whose allocation Git no longer holds."""
    shutil.rmtree(work, ignore_errors=True)
    git("clone", "-q", server.url, str(work), cwd=server.root)
    in_git: set[str] = set()
    for kustomization in sorted(work.glob("tenants/*/*/kustomization.yaml")):
        for name in yaml.safe_load(kustomization.read_text())["resources"]:
            doc = yaml.safe_load((kustomization.parent / name).read_text())
            admin.apply(doc, force=True)
            owner = (doc["metadata"].get("labels") or {}).get(LABEL_ALLOCATION)
            if owner:  # shared objects (a pool's flavor) carry no allocation
                in_git.add(owner)
    for api_version, kind in OWNED_KINDS:
        for obj in admin.list(api_version, kind, label_selector=LABEL_ALLOCATION):
            meta = obj["metadata"]
            if meta["labels"][LABEL_ALLOCATION] not in in_git:
                admin.delete(api_version, kind, meta["name"], meta.get("namespace", ""))
    return in_git


@pytest.fixture
def git_server(tmp_path):
    server = GitServer(tmp_path / "git")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def gitops(settings, git_server, portal_kube, tmp_path, pools):
    settings.PORTAL_PROVISIONING = "gitops"
    settings.PORTAL_GITOPS_REPO = git_server.url
    settings.PORTAL_GITOPS_WORKDIR = tmp_path / "portal-worktree"
    settings.PORTAL_PROVISION_MAX_RETRIES = 1
    settings.PORTAL_PROVISION_RETRY_SECONDS = 0
    set_backend(portal_kube)
    yield git_server
    set_backend(None)


def approve(tenant, lead, admin_user, capture):
    req = make_request(tenant, lead, submit=True, title="Fine-tune",
                       **ROUTE_REQUESTS[Route.SHARED_POOL])
    with capture(execute=True):
        req = services.request_approve(request=req, by=admin_user, reason="Fits the pool.")
    return req, Allocation.objects.get(pk=req.allocation_id)


def test_approve_commit_apply_active_retire_removed(gitops, admin_kube, tenant, lead,
                                                   admin_user, tmp_path,
                                                   django_capture_on_commit_callbacks):
    server = gitops
    req, alloc = approve(tenant, lead, admin_user, django_capture_on_commit_callbacks)
    # Committed, not applied: the cluster has nothing yet, the allocation waits.
    assert alloc.status == "provisioning", alloc.status_message
    assert alloc.status_message.startswith("Committed ")
    assert admin_kube.get("v1", "Namespace", alloc.namespace) is None
    message = server.log()[0]
    assert f"Provision {alloc.namespace} for {tenant.slug}" in message
    assert f"Request: request #{req.pk}" in message and "Route: Shared pool" in message
    assert f"Approved by: {admin_user.get_full_name() or admin_user.username}" in message
    path = f"tenants/{tenant.slug}/{alloc.namespace}"
    files = server.files(path)
    assert "kustomization.yaml" in files and any(f.endswith(f"namespace-{alloc.namespace}.yaml")
                                                 for f in files)
    commits = len(server.log())
    # A retried task writes no second commit.
    allocation_provision(alloc.pk)
    assert len(server.log()) == commits
    assert AuditEvent.objects.filter(subject_id=alloc.pk, action="allocation.committed"
                                     ).count() == 1
    # Nothing applied yet: following changes nothing.
    follow_gitops()
    alloc.refresh_from_db()
    assert alloc.status == "provisioning" and alloc.progress_done < alloc.progress_total
    # The GitOps agent applies what Git holds; the portal sees it and the allocation is active.
    assert agent_sync(server, admin_kube, tmp_path / "agent") == {str(alloc.pk)}
    with django_capture_on_commit_callbacks(execute=True):
        follow_gitops()
    alloc.refresh_from_db()
    assert alloc.status == "active", alloc.status_message
    assert alloc.progress_done == alloc.progress_total == len(files) - 1
    assert admin_kube.get("v1", "Namespace", alloc.namespace) is not None
    # Retirement removes the directory in a readable commit; the agent prunes the objects.
    allocation_retire(alloc.pk)
    alloc.refresh_from_db()
    assert alloc.status == "retired"
    assert "directory is removed from Git" in AuditEvent.objects.get(
        subject_type="allocation", subject_id=alloc.pk, to_state="retired").reason
    assert server.log()[0].startswith(f"Retire {alloc.namespace} of {tenant.slug}")
    assert server.files(path) == []
    assert agent_sync(server, admin_kube, tmp_path / "agent") == set()
    # kube-controller-manager finishes the deletion
    eventually(lambda: admin_kube.get("v1", "Namespace", alloc.namespace) is None,
               timeout=120, interval=0.5, retry_on=(), what="the pruned namespace deleted")
    assert admin_kube.list(*OWNED_KINDS[0], label_selector=f"{LABEL_ALLOCATION}={alloc.pk}"
                           ) == []


def test_a_push_that_cannot_reach_the_server_is_retried_and_loses_nothing(
        gitops, tenant, lead, admin_user, django_capture_on_commit_callbacks):
    server = gitops
    commits = len(server.log())
    server.stop()
    req, alloc = approve(tenant, lead, admin_user, django_capture_on_commit_callbacks)
    alloc.refresh_from_db()
    # Like a failed apply: the approval stands, the allocation says why it waits, the task
    # retries with back-off (PORTAL_PROVISION_MAX_RETRIES) and then fails retriably.
    assert req.status == "approved" and alloc.status == "provisioning"
    assert "Retrying after a transient error: git fetch failed" in alloc.status_message
    assert len(server.log()) == commits
    server.start()
    allocation_provision(alloc.pk)  # what the task's next retry runs
    alloc.refresh_from_db()
    assert alloc.status == "provisioning" and alloc.status_message.startswith("Committed ")
    assert len(server.log()) == commits + 1  # exactly one commit for it
    allocation_provision(alloc.pk)
    assert len(server.log()) == commits + 1
    # Given up: the admin's retry button commits nothing twice either.
    Allocation.objects.filter(pk=alloc.pk).update(status="failed")
    with django_capture_on_commit_callbacks(execute=True):
        allocation_retry(allocation=Allocation.objects.get(pk=alloc.pk), by=admin_user)
    assert len(server.log()) == commits + 1


def _tool_crd(group: str, version: str, kind: str, plural: str) -> dict:
    """A stand-in for the tool's CRD: the same group, version and kind (the tool itself is not
    run here; this test plays it by writing the status it would write)."""
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
                     "versions": [{"name": version, "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": {
                                       "type": "object",
                                       "x-kubernetes-preserve-unknown-fields": True}}}]}}


TOOLS = {
    "argocd": (_tool_crd("argoproj.io", "v1alpha1", "Application", "applications"),
               {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
                "metadata": {"name": "tenants", "namespace": "argocd"},
                "spec": {"source": {"repoURL": "git://example/platform.git",
                                    "path": "tenants"}},
                "status": {"sync": {"status": "OutOfSync"}, "health": {"status": "Missing"},
                           "operationState": {"phase": "Failed", "message":
                                              "one or more objects failed to apply, reason: "
                                              "admission webhook denied the request"}}},
               "its last sync failed: one or more objects failed to apply"),
    "flux": (_tool_crd("kustomize.toolkit.fluxcd.io", "v1", "Kustomization", "kustomizations"),
             {"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
              "metadata": {"name": "tenants", "namespace": "flux-system"},
              "spec": {"path": "./tenants", "interval": "1m"},
              "status": {"conditions": [{"type": "Ready", "status": "False",
                                         "reason": "BuildFailed",
                                         "message": "kustomize build failed: accumulating "
                                                    "resources"}]}},
             "BuildFailed: kustomize build failed"),
}


@pytest.mark.parametrize("tool", list(TOOLS))
def test_a_sync_error_of_the_gitops_tool_is_explained_on_the_allocation(
        tool, gitops, settings, admin_kube, client, tenant, lead, admin_user,
        django_capture_on_commit_callbacks):
    """Argo CD or Flux failing to apply the path: the allocation waits with the tool's own
    reason, on its page and in its history — read by the portal's restricted identity."""
    crd, obj, words = TOOLS[tool]
    admin_kube.apply(crd, force=True)
    admin_kube.apply({"apiVersion": "v1", "kind": "Namespace",
                      "metadata": {"name": obj["metadata"]["namespace"]}}, force=True)
    eventually(lambda: admin_kube.apply(obj, force=True), timeout=30)  # CRD established
    settings.PORTAL_GITOPS_STATUS_OBJECT = f"{tool}:{obj['metadata']['namespace']}/tenants"
    req, alloc = approve(tenant, lead, admin_user, django_capture_on_commit_callbacks)
    follow_gitops()
    alloc.refresh_from_db()
    assert alloc.status == "provisioning"
    assert "reports a problem" in alloc.status_message and words in alloc.status_message, \
        alloc.status_message
    assert AuditEvent.objects.filter(subject_id=alloc.pk,
                                     action="allocation.gitops_error").count() == 1
    follow_gitops()  # read again, unchanged: no second history row
    assert AuditEvent.objects.filter(subject_id=alloc.pk,
                                     action="allocation.gitops_error").count() == 1
    client.force_login(lead)
    page = client.get(f"/requests/{req.pk}/").content.decode()
    assert words in page
