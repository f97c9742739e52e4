"""Helm, built from the Go module proxy (helm.sh/helm/v3) and cached like the control plane,
for the chart tests of the k8s tier. `python -m tests.harness.helm` builds it alone."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from .procs import CACHE_ROOT

HELM_VERSION = "v3.22.0"


def ensure_helm(version: str = HELM_VERSION, log=print) -> Path:
    root = CACHE_ROOT / "helm" / version
    binary = root / "helm"
    if binary.exists():
        return binary
    root.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOBIN": str(root / "bin.tmp"), "CGO_ENABLED": "0"}
    env.setdefault("GOFLAGS", "-buildvcs=false")
    started = time.monotonic()
    log(f"helm: building helm.sh/helm/v3/cmd/helm@{version} from the Go module proxy")
    subprocess.run(["go", "install", "-trimpath", f"helm.sh/helm/v3/cmd/helm@{version}"],
                   check=True, env=env, cwd=root)
    os.replace(root / "bin.tmp" / "helm", binary)
    log(f"helm: built in {time.monotonic() - started:.0f}s")
    return binary


if __name__ == "__main__":
    print(ensure_helm())
