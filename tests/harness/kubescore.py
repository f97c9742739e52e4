"""kube-score, built from the Go module proxy (github.com/zegl/kube-score) and cached like
Helm, for the chart's static checks in the k8s tier. `python -m tests.harness.kubescore`
builds it alone."""

from __future__ import annotations

from pathlib import Path

from .procs import go_install_cached

KUBE_SCORE_VERSION = "v1.20.0"


def ensure_kube_score(version: str = KUBE_SCORE_VERSION, log=print) -> Path:
    return go_install_cached("github.com/zegl/kube-score/cmd/kube-score", version,
                             "kube-score", cache="kube-score", log=log)


if __name__ == "__main__":
    print(ensure_kube_score())
