"""GitOps provisioning: an allocation's objects are committed to a Git repository instead of
applied, one directory per tenant and allocation, for Argo CD or Flux to apply.

The directory holds one YAML file per object, numbered in apply order, and a
`kustomization.yaml` listing them in that order (both tools read it). Node labels and taints
of a dedicated block are not committed: nodes are shared with the kubelet, and a GitOps tool
that prunes would delete a Node removed from Git; the portal patches them directly.

Publishing is idempotent: the directory is written from the rendered objects onto the
branch's latest commit, and a commit is made only when that changes something — a retried
task never writes the same commit twice. A push that loses a race is redone from the new
tip; one that cannot reach the server raises a retriable error, like a failed apply.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import shlex
import shutil
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml
from django.conf import settings

from ..kube import KubeError
from ..vocabulary import HOME_CLUSTER

NOT_COMMITTED = frozenset({"Node"})


def credential_env() -> dict[str, str]:
    """How git authenticates to the repository, from files mounted from a Secret (read at
    each call, so a rotated key or token is used at once; never on a command line):
    PORTAL_GITOPS_SSH_KEY_FILE (+ PORTAL_GITOPS_KNOWN_HOSTS_FILE, hosts checked strictly) for
    ssh:// and git@ URLs; PORTAL_GITOPS_TOKEN_FILE (+ PORTAL_GITOPS_USERNAME) for https://."""
    env: dict[str, str] = {}
    key = settings.PORTAL_GITOPS_SSH_KEY_FILE
    if key:
        parts = ["ssh", "-i", key, "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes"]
        known = settings.PORTAL_GITOPS_KNOWN_HOSTS_FILE
        parts += (["-o", f"UserKnownHostsFile={known}", "-o", "StrictHostKeyChecking=yes"]
                  if known else ["-o", "StrictHostKeyChecking=accept-new"])
        env["GIT_SSH_COMMAND"] = " ".join(shlex.quote(p) for p in parts)
    token_file = settings.PORTAL_GITOPS_TOKEN_FILE
    if token_file:
        try:
            token = Path(token_file).read_text().strip()
        except OSError as exc:
            raise GitOpsError(f"The Git token file {token_file} cannot be read: {exc}",
                              retriable=False) from None
        basic = base64.b64encode(f"{settings.PORTAL_GITOPS_USERNAME}:{token}".encode()).decode()
        env.update({"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "http.extraHeader",
                    "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}"})
    return env


class GitOpsError(KubeError):
    def __init__(self, message: str, *, retriable: bool = True) -> None:
        super().__init__(message, retriable=retriable)


@dataclass(frozen=True)
class Publication:
    commit: str      # the branch's commit that holds the change (or already held it)
    changed: bool    # False: the repository already said this; nothing was committed
    path: str


# ---------------------------------------------------------------------------------------
# Pure parts


def allocation_path(tenant_slug: str, namespace: str, *, cluster: str = HOME_CLUSTER,
                    root: str = "") -> str:
    """An allocation's directory in one cluster: the home cluster's under the root, any
    other's under `clusters/<slug>/` (each cluster's GitOps tool applies its own tree, so
    no object is applied where it does not belong)."""
    root = root if root else settings.PORTAL_GITOPS_PATH
    where = () if cluster == HOME_CLUSTER else ("clusters", cluster)
    return "/".join(p for p in (*where, root, tenant_slug, namespace) if p)


# The shared admission guards of a cluster (the policies and their check) are one directory
# beside the tenants' (no tenant slug starts with "_"): one object each, never one per
# allocation's directory (each allocation's check params are in its own).
GUARDS_DIRECTORY = ("_platform", "admission-guards")


def guards_path(*, cluster: str = HOME_CLUSTER, root: str = "") -> str:
    return allocation_path(*GUARDS_DIRECTORY, cluster=cluster, root=root)


def object_file(manifest: dict) -> str:
    """An object's file name in a directory, after its number in apply order."""
    return f"{manifest['kind'].lower()}-{manifest['metadata']['name']}.yaml"


def directory_files(manifests: list[dict]) -> dict[str, str]:
    """File name → YAML for one allocation's directory, numbered in apply order, with the
    kustomization that lists them in that order."""
    files: dict[str, str] = {}
    # Through JSON: plain types only (a str enum in a label would not be YAML-safe).
    committed = [json.loads(json.dumps(m)) for m in manifests if m["kind"] not in NOT_COMMITTED]
    for i, m in enumerate(committed, start=1):
        files[f"{i:02d}-{object_file(m)}"] = yaml.safe_dump(m, sort_keys=False,
                                                          default_flow_style=False)
    files["kustomization.yaml"] = yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": list(files)}, sort_keys=False)
    return files


def commit_message(*, action: str, tenant: str, namespace: str, route: str, request: str,
                   approver: str, objects: int) -> str:
    """What a reviewer of the repository reads: which allocation, why, who approved it."""
    title = {"publish": f"Provision {namespace} for {tenant}",
             "retire": f"Retire {namespace} of {tenant}"}[action]
    lines = [title, "", f"Route: {route}", f"Request: {request}", f"Approved by: {approver}"]
    if action == "publish":
        lines.append(f"Objects: {objects}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------
# The working copy


class Repository:
    """A clone of the configured repository in the portal's var directory, used under a
    file lock (workers of one machine share it; other machines have their own)."""

    def __init__(self, url: str | None = None, branch: str | None = None,
                 workdir: Path | None = None) -> None:
        self.url = url or settings.PORTAL_GITOPS_REPO
        self.branch = branch or settings.PORTAL_GITOPS_BRANCH
        base = Path(workdir or settings.PORTAL_GITOPS_WORKDIR)
        self.dir = base / hashlib.sha1(self.url.encode(), usedforsecurity=False).hexdigest()[:12]

    def git(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        name, _, email = settings.PORTAL_GITOPS_AUTHOR.partition("<")
        env = {"GIT_AUTHOR_NAME": name.strip() or "AI Factory Portal",
               "GIT_AUTHOR_EMAIL": email.rstrip(">").strip() or "portal@localhost",
               "GIT_TERMINAL_PROMPT": "0", "PATH": "/usr/bin:/bin:/usr/local/bin"}
        env["GIT_COMMITTER_NAME"], env["GIT_COMMITTER_EMAIL"] = (env["GIT_AUTHOR_NAME"],
                                                                 env["GIT_AUTHOR_EMAIL"])
        env.update(credential_env())
        result = subprocess.run(["git", *args], cwd=self.dir, env=env, capture_output=True,
                                text=True, timeout=120)
        if check and result.returncode != 0:
            raise GitOpsError(f"git {args[0]} failed: {(result.stderr or result.stdout).strip()}")
        return result

    @contextmanager
    def locked(self):
        self.dir.parent.mkdir(parents=True, exist_ok=True)
        with open(self.dir.parent / f"{self.dir.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield self
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def sync(self) -> None:
        """The branch's latest commit, checked out clean (a clone the first time)."""
        if not (self.dir / ".git").exists():
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir.mkdir(parents=True)
            self.git("init", "-q", "-b", self.branch)
            self.git("remote", "add", "origin", self.url)
        self.git("fetch", "-q", "origin", self.branch)
        self.git("checkout", "-q", "-B", self.branch, f"origin/{self.branch}")
        self.git("reset", "-q", "--hard", f"origin/{self.branch}")
        self.git("clean", "-q", "-fdx")

    def head(self) -> str:
        return self.git("rev-parse", "HEAD").stdout.strip()

    def change(self, path: str, files, message: str) -> Publication:
        """Make `path` hold exactly `files` (None: remove it), commit if that changed
        anything, and push; redone from the new tip when another writer pushed first.
        `files` may be a function, called under the lock at every attempt (what the path
        holds is then made from what is true at that moment, not before the wait)."""
        with self.locked():
            for _ in range(5):
                self.sync()
                wanted = files() if callable(files) else files
                target = self.dir / path
                shutil.rmtree(target, ignore_errors=True)
                if wanted is not None:
                    target.mkdir(parents=True)
                    for name, text in wanted.items():
                        (target / name).write_text(text)
                self.git("add", "-A", "--", path)
                if not self.git("status", "--porcelain", "--", path).stdout.strip():
                    return Publication(self.head(), False, path)  # already so: no commit
                self.git("commit", "-q", "-m", message)
                pushed = self.git("push", "-q", "origin", f"HEAD:{self.branch}", check=False)
                if pushed.returncode == 0:
                    return Publication(self.head(), True, path)
                if "rejected" not in pushed.stderr and "fetch first" not in pushed.stderr:
                    raise GitOpsError(f"git push failed: {pushed.stderr.strip()}")
            raise GitOpsError("git push kept losing the race with other writers; will retry")
