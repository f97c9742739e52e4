"""kube-score, built from the Go module proxy (github.com/zegl/kube-score) and cached like
Helm, for the chart's static checks in the k8s tier. `python -m tests.harness.kubescore`
builds it alone."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from .procs import CACHE_ROOT

KUBE_SCORE_VERSION = "v1.20.0"


def ensure_kube_score(version: str = KUBE_SCORE_VERSION, log=print) -> Path:
    root = CACHE_ROOT / "kube-score" / version
    binary = root / "kube-score"
    if binary.exists():
        return binary
    root.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOBIN": str(root / "bin.tmp"), "CGO_ENABLED": "0"}
    env.setdefault("GOFLAGS", "-buildvcs=false")
    started = time.monotonic()
    log(f"kube-score: building github.com/zegl/kube-score/cmd/kube-score@{version}")
    subprocess.run(["go", "install", "-trimpath",
                    f"github.com/zegl/kube-score/cmd/kube-score@{version}"],
                   check=True, env=env, cwd=root)
    os.replace(root / "bin.tmp" / "kube-score", binary)
    log(f"kube-score: built in {time.monotonic() - started:.0f}s")
    return binary


if __name__ == "__main__":
    print(ensure_kube_score())
