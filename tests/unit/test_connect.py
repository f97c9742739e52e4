"""The example workload and kubeconfig of each route, as plain data."""

from __future__ import annotations

import pytest

from fleet.allocations.connect import example_workload, how_to_connect, tenant_kubeconfig
from fleet.domain import Route
from tests.factories import spec

IMAGE = "registry.example/cuda:12"


@pytest.mark.parametrize("route", list(Route))
def test_every_example_is_a_restricted_job_for_the_allocations_queue(route):
    job = example_workload(spec(route), image=IMAGE)
    assert job["kind"] == "Job" and job["metadata"]["namespace"] == "acme-r7"
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu"
    assert job["metadata"]["labels"]["kueue.x-k8s.io/max-exec-time-seconds"] == "3600"
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"] == {"allowPrivilegeEscalation": False,
                                            "capabilities": {"drop": ["ALL"]}}
    assert container["image"] == IMAGE


def test_each_route_adds_what_its_guard_rails_require():
    mig = example_workload(spec(Route.MIG_VCLUSTER), image=IMAGE)["spec"]["template"]["spec"]
    assert mig["resourceClaims"] == [{"name": "mig",
                                      "resourceClaimTemplateName": "mig-2g-20gb"}]
    assert "nvidia.com/gpu" not in mig["containers"][0]["resources"]["requests"]
    conf = example_workload(spec(Route.CONFIDENTIAL_POOL), image=IMAGE)
    assert conf["spec"]["template"]["spec"]["runtimeClassName"] == "kata-qemu-nvidia-gpu-snp"
    ded = example_workload(spec(Route.DEDICATED_BLOCK), image=IMAGE)["spec"]["template"]["spec"]
    assert ded["nodeSelector"] == {"aifactory.io/dedicated-to": "acme"}
    assert ded["tolerations"][0]["value"] == "acme"
    shared = example_workload(spec(Route.SHARED_POOL), image=IMAGE)["spec"]["template"]["spec"]
    assert shared["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert "runtimeClassName" not in shared and "tolerations" not in shared


def test_the_kubeconfig_signs_in_through_the_realm_and_holds_no_secret():
    cfg = tenant_kubeconfig(spec(Route.SHARED_POOL), server="https://k8s.example:6443",
                            ca_pem="-----BEGIN CERTIFICATE-----\nx\n", client_id="kubectl",
                            issuer="https://sso.example/realms/ai-factory")
    assert cfg["current-context"] == "acme-r7"
    assert cfg["contexts"][0]["context"]["namespace"] == "acme-r7"
    exec_ = cfg["users"][0]["user"]["exec"]
    assert exec_["args"][:2] == ["oidc-login", "get-token"]
    assert "--oidc-issuer-url=https://sso.example/realms/ai-factory" in exec_["args"]
    text = str(cfg)
    for secret in ("token:", "client-key-data", "client-secret", "password"):
        assert secret not in text


def test_the_mig_route_says_how_to_reach_its_virtual_cluster():
    steps = " ".join(how_to_connect(spec(Route.MIG_VCLUSTER)))
    assert "vcluster connect vcluster -n acme-r7" in steps and "vcluster-kubeconfig" in steps
    assert "synced to the host namespace" in steps


def test_commands_in_steps_are_code_and_nothing_else_is_markup():
    from portal.templatetags.portal_extras import backticks

    html = backticks("Run `kubectl get pods` then <script>alert(1)</script> `a<b`")
    assert "<code>kubectl get pods</code>" in html and "<code>a&lt;b</code>" in html
    assert "<script>" not in html and "&lt;script&gt;" in html
