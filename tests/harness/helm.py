"""Helm, built from the Go module proxy (helm.sh/helm/v3) and cached like the control plane,
for the chart tests of the k8s tier, beside the API server's Kubernetes libraries (63–114 s
cold here beside other builds; 96 s with its own).
`python -m tests.harness.helm` builds it alone."""

from __future__ import annotations

from pathlib import Path

from .controlplane import build_beside_control_plane

HELM_VERSION = "v3.22.0"


def ensure_helm(version: str = HELM_VERSION, log=print) -> Path:
    return build_beside_control_plane("helm.sh/helm/v3/cmd/helm", version, "helm",
                                      cache="helm", log=log)


if __name__ == "__main__":
    print(ensure_helm())
