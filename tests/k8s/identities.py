"""Tenants and the identities they act as against the test API server."""

from __future__ import annotations

import json
import subprocess
import uuid

from fleet.kube import KubernetesBackend
from tests.factories import TenantFactory, make_lead
from tests.harness.controlplane import _kubeconfig


def as_identity(control_plane, user: str, groups: list[str]) -> KubernetesBackend:
    """A client certificate with these groups (O=) signed by the test CA."""
    pki = control_plane.workdir / "pki"
    name = f"id-{uuid.uuid4().hex[:8]}"
    subject = "".join("/O=" + g.replace("/", "\\/") for g in groups) + f"/CN={user}"
    for argv in (["req", "-newkey", "rsa:2048", "-nodes", "-subj", subject, "-keyout",
                  f"{name}.key", "-out", f"{name}.csr"],
                 ["x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                  "-CAcreateserial", "-days", "1", "-out", f"{name}.crt"]):
        subprocess.run(["openssl", *argv], check=True, capture_output=True, cwd=pki)
    path = control_plane.workdir / f"{name}.kubeconfig"
    path.write_text(json.dumps(_kubeconfig(control_plane.server, pki / "ca.crt",
                                           pki / f"{name}.crt", pki / f"{name}.key", user)))
    return KubernetesBackend.from_kubeconfig(str(path), field_manager="tenant")


def new_tenant(tag: str):
    tenant = TenantFactory(slug=f"t{tag}", name=f"T{tag}")
    return tenant, make_lead(tenant, f"lead-{tag}")
