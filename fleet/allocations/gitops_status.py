"""What the GitOps tool says about the path the portal commits to (pure parsing).

In GitOps mode the portal learns that an allocation is live when its objects appear in the
cluster. When they do not, the reason is usually in the tool's own object: an Argo CD
Application (`argoproj.io/v1alpha1`) or a Flux Kustomization
(`kustomize.toolkit.fluxcd.io/v1`) that failed to sync, build or become healthy.
PORTAL_GITOPS_STATUS_OBJECT names it — `argocd:<namespace>/<name>` or
`flux:<namespace>/<name>` — and the portal reads it while an allocation waits, to say why.
"""

from __future__ import annotations

from dataclasses import dataclass

TOOLS = {
    "argocd": ("argoproj.io/v1alpha1", "Application", "Argo CD application"),
    "flux": ("kustomize.toolkit.fluxcd.io/v1", "Kustomization", "Flux Kustomization"),
}


@dataclass(frozen=True)
class ToolRef:
    tool: str
    api_version: str
    kind: str
    namespace: str
    name: str
    label: str

    @property
    def title(self) -> str:
        return f"{self.label} {self.namespace}/{self.name}"


def parse_ref(value: str) -> ToolRef | None:
    """`argocd:argocd/tenants` → the object to read; None when unset. ValueError if malformed
    (settings refuse it at start)."""
    value = (value or "").strip()
    if not value:
        return None
    tool, _, rest = value.partition(":")
    namespace, _, name = rest.partition("/")
    if tool not in TOOLS or not namespace or not name:
        raise ValueError("PORTAL_GITOPS_STATUS_OBJECT is argocd:<namespace>/<name> or "
                         "flux:<namespace>/<name>")
    api_version, kind, label = TOOLS[tool]
    return ToolRef(tool, api_version, kind, namespace, name, label)


@dataclass(frozen=True)
class ToolStatus:
    state: str  # ok | progressing | failed | unknown
    words: str


def _d(v) -> dict:
    return v if isinstance(v, dict) else {}


def _l(v) -> list:
    return [x for x in v if isinstance(x, dict)] if isinstance(v, list) else []


def argocd_status(app: dict) -> ToolStatus:
    """An Application's sync and health, with the message of a failure."""
    status = _d(app.get("status"))
    sync = str(_d(status.get("sync")).get("status") or "Unknown")
    health = str(_d(status.get("health")).get("status") or "Unknown")
    operation = _d(status.get("operationState"))
    phase = str(operation.get("phase") or "")
    errors = [f"{c.get('type')}: {c.get('message')}" for c in _l(status.get("conditions"))
              if str(c.get("type", "")).endswith("Error")]
    if phase in ("Failed", "Error"):
        return ToolStatus("failed", f"its last sync {phase.lower()}: "
                                    f"{operation.get('message') or 'no message'}"
                          + (f" ({'; '.join(errors)})" if errors else ""))
    if errors:
        return ToolStatus("failed", "; ".join(errors))
    if health == "Degraded":
        return ToolStatus("failed", f"synced {sync.lower()}, health degraded: "
                                    f"{_d(status.get('health')).get('message') or 'no message'}")
    if sync == "Synced" and health == "Healthy":
        return ToolStatus("ok", "synced and healthy")
    return ToolStatus("progressing" if sync != "Unknown" else "unknown",
                      f"sync {sync}, health {health}"
                      + (f", operation {phase.lower()}" if phase else ""))


def flux_status(kustomization: dict) -> ToolStatus:
    """A Kustomization's Ready condition (and Reconciling), with its reason and message."""
    conditions = {str(c.get("type")): c for c in _l(_d(kustomization.get("status")).get(
        "conditions"))}
    ready = conditions.get("Ready")
    if ready is None:
        return ToolStatus("unknown", "not reconciled yet")
    reason, message = ready.get("reason") or "", ready.get("message") or ""
    if ready.get("status") == "True":
        return ToolStatus("ok", f"ready ({reason})" if reason else "ready")
    if ready.get("status") == "False":
        return ToolStatus("failed", f"{reason}: {message}" if reason else str(message))
    return ToolStatus("progressing", f"reconciling: {message or reason or 'in progress'}")


def tool_status(ref: ToolRef, obj: dict | None) -> ToolStatus:
    if obj is None:
        return ToolStatus("unknown", f"{ref.title} was not found in the cluster")
    return argocd_status(obj) if ref.tool == "argocd" else flux_status(obj)
