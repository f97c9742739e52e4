"""Reads of the allocations room."""

from __future__ import annotations

from pathlib import Path

import yaml
from django.conf import settings

from .connect import example_workload, how_to_connect, tenant_kubeconfig
from .manifests import LOCAL_QUEUE
from .provisioning import allocation_spec


def connect_info(allocation) -> dict:
    """What a tenant needs to use an active allocation: the cluster, a kubeconfig, the
    queue, an example workload and the steps (fleet/connect.py renders them)."""
    spec = allocation_spec(allocation)
    ca = ""
    if settings.PORTAL_CLUSTER_CA_FILE:
        try:
            ca = Path(settings.PORTAL_CLUSTER_CA_FILE).read_text()
        except OSError:
            ca = ""  # said on the page: the kubeconfig then needs the CA added by hand
    server = settings.PORTAL_CLUSTER_API_URL
    kubeconfig = tenant_kubeconfig(
        spec, server=server or "https://kubernetes.invalid:6443", ca_pem=ca,
        issuer=settings.KEYCLOAK_SERVER_URL or "https://keycloak.invalid/realms/ai-factory",
        client_id=settings.PORTAL_KUBECTL_CLIENT_ID)
    example = example_workload(spec, image=settings.PORTAL_EXAMPLE_IMAGE)
    return {"server": server, "ca_configured": bool(ca), "namespace": spec.namespace,
            "local_queue": LOCAL_QUEUE, "route": spec.route, "steps": how_to_connect(spec),
            "kubeconfig": yaml.safe_dump(kubeconfig, sort_keys=False),
            "example": yaml.safe_dump(example, sort_keys=False)}
