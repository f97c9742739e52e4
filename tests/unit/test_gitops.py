"""GitOps mode's pure parts: the directory an allocation becomes, and the commit message."""

import pytest
import yaml

from fleet.allocations.gitops import NOT_COMMITTED, allocation_path, commit_message, directory_files
from fleet.allocations.manifests import render_manifests
from fleet.domain import Route
from tests.factories import spec

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("route", list(Route))
def test_one_file_per_object_in_apply_order_with_its_kustomization(route):
    manifests = render_manifests(spec(route, nodes=("gpu-a",))
                                 if route == Route.DEDICATED_BLOCK else spec(route))
    files = directory_files(manifests)
    kustomization = yaml.safe_load(files.pop("kustomization.yaml"))
    assert kustomization["resources"] == list(files) == sorted(files)  # numbered in order
    committed = [m for m in manifests if m["kind"] not in NOT_COMMITTED]
    assert [yaml.safe_load(files[name]) for name in kustomization["resources"]] == committed
    # Nodes are shared with the kubelet: a GitOps tool that prunes must never own one.
    assert all(yaml.safe_load(t)["kind"] != "Node" for t in files.values())
    assert directory_files(manifests) == {**files, "kustomization.yaml": yaml.safe_dump(
        kustomization, sort_keys=False)}  # the same input writes the same bytes


def test_paths_and_messages_read_well():
    assert allocation_path("acme", "acme-r7", root="tenants") == "tenants/acme/acme-r7"
    assert allocation_path("acme", "acme-r7", root="") .startswith(("tenants/", "acme/"))
    # Each cluster's tree apart: the home cluster's tool applies tenants/, worker w1's
    # clusters/w1/tenants/, so neither applies the other's objects.
    assert allocation_path("acme", "acme-r7", cluster="local", root="tenants") == \
        "tenants/acme/acme-r7"
    assert allocation_path("acme", "acme-r7", cluster="w1", root="tenants") == \
        "clusters/w1/tenants/acme/acme-r7"
    assert not allocation_path("acme", "acme-r7", cluster="w1", root="tenants").startswith(
        "tenants/")
    text = commit_message(action="publish", tenant="acme", namespace="acme-r7",
                          route="Shared pool", request="request #12", approver="Ada",
                          objects=11)
    assert text.splitlines()[0] == "Provision acme-r7 for acme"
    assert "Request: request #12" in text and "Approved by: Ada" in text
    assert "Objects: 11" in text
    assert commit_message(action="retire", tenant="acme", namespace="acme-r7", route="r",
                          request="q", approver="a", objects=0).startswith("Retire acme-r7")
