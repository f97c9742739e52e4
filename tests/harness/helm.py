"""Helm, built from the Go module proxy (helm.sh/helm/v3) and cached like the control plane,
for the chart tests of the k8s tier. `python -m tests.harness.helm` builds it alone."""

from __future__ import annotations

from pathlib import Path

from .procs import go_install_cached

HELM_VERSION = "v3.22.0"


def ensure_helm(version: str = HELM_VERSION, log=print) -> Path:
    return go_install_cached("helm.sh/helm/v3/cmd/helm", version, "helm", cache="helm",
                             log=log)


if __name__ == "__main__":
    print(ensure_helm())
