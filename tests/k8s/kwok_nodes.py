"""Simulated GPU nodes that kwok runs (the placement tests' fleet)."""

from __future__ import annotations

from fleet.kube import KubeError
from tests.harness.placement import KWOK_ANNOTATION
from tests.harness.waiting import eventually

from .gpu_nodes import create_gpu_node, patch_node

VALID = {"aifactory.io/validated": "true"}
FAKE = {KWOK_ANNOTATION: "fake"}


def kwok_node(admin, name: str, labels: dict, **kw) -> None:
    create_gpu_node(admin, name, labels={**VALID, **labels}, annotations=FAKE, **kw)
    untaint(admin, name)


def untaint(admin, name: str) -> None:
    # The API server taints a new Node not-ready; only the node-lifecycle controller (off
    # here: no kubelets) would lift it once kwok reports the node Ready.
    def ready() -> None:
        node = admin.get("v1", "Node", name)
        conditions = {c["type"]: c["status"] for c in node["status"].get("conditions") or []}
        assert conditions.get("Ready") == "True", conditions
        taints = [t for t in node["spec"].get("taints") or []
                  if not t["key"].startswith("node.kubernetes.io/")]
        if taints != (node["spec"].get("taints") or []):
            patch_node(admin, name, {"spec": {"taints": taints or None}})

    eventually(ready, timeout=30, retry_on=(AssertionError, KubeError))
