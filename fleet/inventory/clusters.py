"""Clusters, decided as plain data: where a cluster's credential is, and what its answers
say about it (reachable, versions, MultiKueue's view of a worker). Pure: the services read
the API servers and write what these functions decide."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..vocabulary import ClusterRoles

# file:/path  or  secret:<namespace>/<name>[#key]; a kubeconfig in either.
_FILE = re.compile(r"file:(/\S+)\Z")
_SECRET = re.compile(
    r"secret:([a-z0-9]([-a-z0-9]*[a-z0-9])?)/([a-z0-9]([-a-z0-9.]*[a-z0-9])?)"
    r"(#([-._a-zA-Z0-9]+))?\Z")
DEFAULT_SECRET_KEY = "kubeconfig"
REFERENCE_HELP = ("file:/path/to/kubeconfig (a mounted file) or secret:<namespace>/<name>"
                  f"[#key] (a Secret in the portal's own cluster; key {DEFAULT_SECRET_KEY!r} "
                  "unless given)")


@dataclass(frozen=True)
class CredentialRef:
    kind: str  # file | secret
    path: str = ""
    namespace: str = ""
    name: str = ""
    key: str = DEFAULT_SECRET_KEY

    def __str__(self) -> str:
        if self.kind == "file":
            return f"file:{self.path}"
        return f"secret:{self.namespace}/{self.name}#{self.key}"


def parse_credential_ref(text: str) -> CredentialRef:
    """The reference as typed, or ValueError saying what a reference looks like. A pasted
    kubeconfig or token is refused here: the database never holds the credential."""
    text = (text or "").strip()
    if m := _FILE.match(text):
        if "/../" in m.group(1) + "/":
            raise ValueError("A file reference is an absolute path without '..': "
                             + REFERENCE_HELP + ".")
        return CredentialRef("file", path=m.group(1))
    if m := _SECRET.match(text):
        return CredentialRef("secret", namespace=m.group(1), name=m.group(3),
                             key=m.group(6) or DEFAULT_SECRET_KEY)
    if "apiVersion" in text or "client-key-data" in text or "token" in text.lower():
        raise ValueError("That looks like a credential itself. Store it in a Secret or a "
                         "mounted file and give its reference: " + REFERENCE_HELP + ".")
    raise ValueError("Give where the kubeconfig is: " + REFERENCE_HELP + ".")


def retire_refusal(*, name: str, home: bool, holding: int) -> str:
    """Why a cluster cannot be retired now ('' when it can): nothing may be orphaned unseen."""
    if home:
        return "The home cluster is the portal's own; it cannot be retired."
    if holding:
        return f"{name} still holds {holding} allocation(s); retire or move them first."
    return ""


@dataclass(frozen=True)
class ClusterHealth:
    """What one check found. `answers` None: nothing to ask (a dry run)."""

    answers: bool | None
    message: str
    server: str = ""
    kubernetes_version: str = ""
    kueue_version: str = ""
    multikueue_active: bool | None = None
    multikueue_reason: str = ""


def kueue_version_of(group: dict | None, deployment: dict | None) -> str:
    """Kueue's version as the cluster shows it: the controller's image tag where Kueue runs
    as the usual Deployment, else only which API version is served (that much is certain)."""
    if deployment:
        for c in deployment.get("spec", {}).get("template", {}).get("spec", {}).get(
                "containers", []):
            image = c.get("image", "")
            if "kueue" in image and ":" in image.rsplit("/", 1)[-1]:
                return image.rsplit(":", 1)[1].split("@")[0]
    if group:
        preferred = (group.get("preferredVersion") or {}).get("groupVersion", "")
        if preferred:
            return f"serves {preferred}"
    return ""


def multikueue_state(obj: dict | None) -> tuple[bool | None, str]:
    """A worker as the manager sees it: its MultiKueueCluster's `Active` condition."""
    if obj is None:
        return False, "The manager has no MultiKueueCluster for this worker."
    for cond in obj.get("status", {}).get("conditions", []):
        if cond.get("type") == "Active":
            words = cond.get("message") or cond.get("reason") or ""
            return cond.get("status") == "True", words
    return None, "The manager has not judged this worker yet (no Active condition)."


def cluster_health(*, dry_run: bool, version: dict | None, error: str = "",
                   server: str = "", kueue_group: dict | None = None,
                   kueue_deployment: dict | None = None, role: str = "",
                   multikueue: tuple[bool | None, str] | None = None) -> ClusterHealth:
    """One check's verdict from what the cluster (and, for a worker, the manager) said."""
    mk_active, mk_reason = multikueue if multikueue is not None else (None, "")
    if dry_run:
        return ClusterHealth(None, "Dry run: the portal records what it would apply here and "
                                   "talks to no API server.")
    if error or version is None:
        return ClusterHealth(False, f"Does not answer: {error or 'no version from /version'}",
                             server=server, multikueue_active=mk_active,
                             multikueue_reason=mk_reason)
    k8s = version.get("gitVersion", "")
    kueue = kueue_version_of(kueue_group, kueue_deployment)
    said = f"Answers: Kubernetes {k8s}" + (f", Kueue {kueue}" if kueue else ", no Kueue API")
    if role == ClusterRoles.WORKER and mk_active is not None:
        said += ("; MultiKueue: active" if mk_active else
                 f"; MultiKueue: not active ({mk_reason or 'no reason given'})")
    return ClusterHealth(True, said + ".", server=server, kubernetes_version=k8s,
                         kueue_version=kueue, multikueue_active=mk_active,
                         multikueue_reason=mk_reason)
