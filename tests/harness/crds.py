"""The real CRDs of the APIs the portal writes, fetched from their Go modules at test time.

Nothing fetched here is committed. Where a module is not served by the proxy, the k8s tier
uses a minimal structural CRD of ours from tests/k8s/crds/ (marked as such in the file).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

# (module, version, paths inside the module zip)
UPSTREAM_CRDS = [
    ("sigs.k8s.io/kueue", os.environ.get("PORTAL_TEST_KUEUE_VERSION", "v0.17.0"), [
        "config/components/crd/bases/kueue.x-k8s.io_resourceflavors.yaml",
        "config/components/crd/bases/kueue.x-k8s.io_clusterqueues.yaml",
        "config/components/crd/bases/kueue.x-k8s.io_localqueues.yaml",
        "config/components/crd/bases/kueue.x-k8s.io_cohorts.yaml",
        "config/components/crd/bases/kueue.x-k8s.io_workloads.yaml",
    ]),
    ("sigs.k8s.io/cluster-api", os.environ.get("PORTAL_TEST_CAPI_VERSION", "v1.14.2"), [
        "core/config/crd/bases/cluster.x-k8s.io_clusters.yaml",
    ]),
    # The Helm chart's optional HTTPRoute (tests/k8s/test_helm_chart.py).
    ("sigs.k8s.io/gateway-api", os.environ.get("PORTAL_TEST_GATEWAY_API_VERSION", "v1.6.3"), [
        "config/crd/standard/gateway.networking.k8s.io_httproutes.yaml",
    ]),
]
OWN_CRDS = Path(__file__).resolve().parents[1] / "k8s" / "crds"
ROOT = Path(__file__).resolve().parents[2]


def module_dir(module: str, version: str) -> Path:
    out = subprocess.run(["go", "mod", "download", "-json", f"{module}@{version}"],
                         capture_output=True, text=True, env={**os.environ, "GOFLAGS": "-mod=mod"},
                         cwd="/")
    info = json.loads(out.stdout or "{}")
    if out.returncode != 0 or "Dir" not in info:
        raise RuntimeError(f"cannot download {module}@{version}: "
                           f"{info.get('Error') or out.stderr.strip()}")
    return Path(info["Dir"])


def crd_files() -> list[Path]:
    files: list[Path] = []
    for module, version, paths in UPSTREAM_CRDS:
        root = module_dir(module, version)
        files += [root / p for p in paths]
    files.append(OWN_CRDS / "vcluster-minimal.yaml")
    files.append(ROOT / "deploy" / "crds" / "guardparams.yaml")  # the portal's own kind
    return files
