"""A demo GPU fleet for the embedded run, shaped like the Kubernetes API would return it.

seed_demo applies it to a dry-run backend and runs the real fleet sync over it, so the demo
fleet page shows what a synced cluster would: validated, unhealthy, cordoned nodes, MIG slices.
"""

from __future__ import annotations

import datetime as dt

from fleet.vocabulary import WHOLE_GPU

H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-80GB"
BALANCED = ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]  # 7 compute slices per GPU


def demo_node(name: str, pool: str, product: str, *, validated: bool = True,
              bios: str = "performance", burn_in: str = "2026-11-02", failure: str = "",
              problem: tuple[str, str] | None = None, cordoned: bool = False,
              mig: bool = False) -> dict:
    conditions = [{"type": "Ready", "status": "True"}]
    if problem:
        conditions.append({"type": problem[0], "status": "True", "message": problem[1]})
    annotations = {"aifactory.io/burn-in-date": burn_in}
    if failure:
        annotations["aifactory.io/validation-failure"] = failure
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": product,
            "nvidia.com/gpu.count": "8", "nvidia.com/gpu.memory": "81559",
            "nvidia.com/mig.capable": "true",
            "nvidia.com/mig.config": "all-balanced" if mig else "all-disabled",
            "aifactory.io/pool": pool, "aifactory.io/validated": str(validated).lower(),
            "aifactory.io/bios-profile": bios}, "annotations": annotations},
        "spec": {"unschedulable": True} if cordoned else {},
        "status": {"capacity": {WHOLE_GPU: "8"}, "conditions": conditions},
    }


def demo_slice(node: str, product: str, mig: bool) -> dict:
    devices = []
    for gpu in range(8):
        if mig:
            for i, profile in enumerate(BALANCED):
                devices.append({"name": f"gpu-{gpu}-mig-{i}", "attributes": {
                    "type": {"string": "mig"}, "profile": {"string": profile},
                    "productName": {"string": product}}})
        else:
            devices.append({"name": f"gpu-{gpu}", "attributes": {
                "type": {"string": "gpu"}, "productName": {"string": product}}})
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-gpu.nvidia.com"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": devices}}


def demo_fleet(burnt_in_by: dt.date = dt.date(2026, 11, 15)) -> list[dict]:
    """Every node's burn-in is before `burnt_in_by` (the demo's history starts then: no node
    hosts work before it was validated); the dedicated nodes' are the freshest."""
    shared = (burnt_in_by - dt.timedelta(days=10)).isoformat()
    nodes = [demo_node(f"h100-shared-{i:02d}", "shared-h100", H100, burn_in=shared)
             for i in range(1, 7)]
    nodes += [
        demo_node("h100-shared-07", "shared-h100", H100, validated=False, burn_in="",
                  failure="NCCL all-reduce 14% below the fleet baseline"),
        demo_node("h100-shared-08", "shared-h100", H100, burn_in=shared,
                  problem=("GpuXidError", "XID 79 (GPU fell off the bus) on GPU 5")),
        demo_node("h100-shared-09", "shared-h100", H100, burn_in=shared, cordoned=True),
    ]
    nodes += [demo_node(f"h100-dedicated-{i:02d}", "dedicated-h100", H100,
                        burn_in=(burnt_in_by - dt.timedelta(days=5 - i)).isoformat())
              for i in range(1, 5)]
    nodes += [demo_node(f"h100-cc-{i:02d}", "confidential-h100", H100, bios="confidential",
                        burn_in=shared) for i in range(1, 3)]
    nodes += [demo_node(f"a100-mig-{i:02d}", "mig-a100", A100, mig=True, burn_in=shared)
              for i in range(1, 3)]
    slices = [demo_slice(n["metadata"]["name"], n["metadata"]["labels"]["nvidia.com/gpu.product"],
                         n["metadata"]["labels"]["nvidia.com/mig.config"] == "all-balanced")
              for n in nodes]
    return nodes + slices
