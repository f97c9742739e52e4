"""Fake GPU nodes as GPU feature discovery and NVIDIA's DRA driver would describe them.

Nodes carry the labels GFD writes and `nvidia.com/gpu` capacity; ResourceSlices advertise
whole GPUs and MIG devices with the driver's attributes. Created as the test admin.
"""

from __future__ import annotations

import uuid

DRIVER = "gpu.nvidia.com"


def gpu_node(name: str, *, product: str = "NVIDIA-H100-80GB-HBM3", count: int = 8,
             memory_mib: int = 81559, mig_config: str = "all-disabled",
             labels: dict[str, str] | None = None,
             annotations: dict[str, str] | None = None) -> dict:
    base_labels = {
        "kubernetes.io/hostname": name,
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.count": str(count),
        "nvidia.com/gpu.memory": str(memory_mib),
        "nvidia.com/gpu.family": "hopper" if "H100" in product else "ampere",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mig.config": mig_config,
        "nvidia.com/mig.strategy": "mixed",
    }
    base_labels.update(labels or {})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": base_labels, "annotations": annotations or {}},
        "spec": {},
    }


def node_status(count: int, conditions: list[dict] | None = None) -> dict:
    """The status subresource: capacity and conditions (Ready plus NPD's GPU conditions)."""
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady",
             "message": "kubelet is posting ready status"}
    return {"status": {
        "capacity": {"nvidia.com/gpu": str(count), "cpu": "96", "memory": "1Ti", "pods": "110"},
        "allocatable": {"nvidia.com/gpu": str(count), "cpu": "96", "memory": "1Ti",
                        "pods": "110"},
        "conditions": [ready, *(conditions or [])],
    }}


def _attr(value) -> dict:
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    return {"string": str(value)}


def mig_uuid(gpu_uuid: str, index: int) -> str:
    return f"MIG-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{gpu_uuid}-{index}')}"


def resource_slice(node: str, *, product: str = "NVIDIA H100 80GB HBM3", gpus: int = 8,
                   mig: dict[int, list[str]] | None = None, memory: str = "80Gi") -> dict:
    """A ResourceSlice with whole GPUs, and MIG devices on the GPUs named in `mig`."""
    devices = []
    mig = mig or {}
    for index in range(gpus):
        gpu_uuid = f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{node}-{index}')}"
        if index in mig:
            for m, profile in enumerate(mig[index]):
                devices.append({
                    "name": f"gpu-{index}-mig-{m}",
                    "attributes": {"type": _attr("mig"), "productName": _attr(product),
                                   "profile": _attr(profile), "parentUUID": _attr(gpu_uuid),
                                   "uuid": _attr(mig_uuid(gpu_uuid, m)),
                                   "index": _attr(index)},
                    "capacity": {"memory": {"value": profile.split(".")[1].upper()
                                            .replace("GB", "Gi")}},
                })
        else:
            devices.append({
                "name": f"gpu-{index}",
                "attributes": {"type": _attr("gpu"), "productName": _attr(product),
                               "uuid": _attr(gpu_uuid), "index": _attr(index)},
                "capacity": {"memory": {"value": memory}},
            })
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def create_gpu_node(admin, name: str, *, count: int = 8, conditions=None, **kw) -> dict:
    """Create (apply) the Node, then set its status as a kubelet would."""
    node = admin.apply(gpu_node(name, count=count, **kw), force=True)
    patch_node_status(admin, name, node_status(count, conditions))
    return node


def patch_node_status(admin, name: str, body: dict) -> None:
    client = admin._dynamic()
    nodes = admin._resource("v1", "Node")
    client.request("patch", nodes.path(name=name) + "/status", body=body,
                   content_type="application/merge-patch+json")


def patch_node(admin, name: str, body: dict) -> None:
    """A merge patch, as the burn-in pipeline or kubectl cordon would make it."""
    client = admin._dynamic()
    nodes = admin._resource("v1", "Node")
    client.patch(nodes, name=name, body=body, content_type="application/merge-patch+json")
