"""Two real clusters, one portal: a second kube-apiserver (with its own etcd) registered by
reference, its fleet synced beside the home cluster's, a dedicated block provisioned there and
nowhere else, and what the portal says and does while that cluster is away.

MultiKueue (a manager dispatching to workers) is not here yet: see docs/clusters.md."""

from __future__ import annotations

import base64

import pytest
from django.urls import reverse

from fleet.allocations.tasks import reconcile_allocations
from fleet.forms import ClusterCreateForm
from fleet.inventory.services import cluster_check, cluster_register
from fleet.inventory.sync import fleet_sync_all
from fleet.models import Allocation, Cluster, GpuNode, Route
from intake import services
from tests.factories import PoolFactory, make_request
from tests.harness.controlplane import ControlPlane, ensure_binaries

from .conftest import install_platform
from .gpu_nodes import create_gpu_node

pytestmark = pytest.mark.django_db
H200 = "NVIDIA-H200"
DEDICATED = {"whole_devices": 8, "isolation_origin": "contractual",
             "isolation_reference": "MSA-2201", "gpu_model": H200}


@pytest.fixture(scope="module")
def second(tmp_path_factory, control_plane):
    """A second cluster from the same builds: API server and etcd of its own, the same CRDs
    and the portal's RBAC (deploy/rbac.yaml), no controllers (nothing here needs them)."""
    cp = ControlPlane(tmp_path_factory.mktemp("second-cluster")).start(ensure_binaries())
    cp.admin = install_platform(cp)
    yield cp
    cp.stop()


def register(slug: str, *, by, **fields) -> Cluster:
    data = {"slug": slug, "name": f"GPU {slug}", "role": "standalone", "region": "eu-west-1",
            "provider": "on-prem", "connection": "kubeconfig", "api_server": "",
            "multikueue_name": "", **fields}
    form = ClusterCreateForm(data=data)
    assert form.is_valid(), form.errors
    return cluster_register(form=form, by=by)


def test_a_cluster_registered_by_reference_answers(kube, admin_kube, second, admin_user):
    by_file = register("eu", credential_ref=f"file:{second.portal_kubeconfig}",
                       api_server=second.server, by=admin_user)
    by_file = cluster_check(cluster=by_file, by=admin_user)
    assert by_file.answers is True, by_file.health_message
    assert by_file.kubernetes_version == "v1.37.2"
    # The portal may not read kueue-system's Deployments: only what is certain is claimed.
    assert by_file.kueue_version == "serves kueue.x-k8s.io/v1beta2"
    assert by_file.server_seen == second.server
    # A kubeconfig that points elsewhere than the registration is refused, said so.
    wrong = register("eu-wrong", credential_ref=f"file:{second.portal_kubeconfig}",
                     api_server="https://127.0.0.1:1", by=admin_user)
    wrong = cluster_check(cluster=wrong)
    assert wrong.answers is False
    assert f"points at {second.server}, not at the registered API server" in \
        wrong.health_message
    # In a Secret of the portal's namespace, read by the portal's restricted identity.
    admin_kube.apply({"apiVersion": "v1", "kind": "Secret", "metadata": {
        "name": "eu-kubeconfig", "namespace": "aifactory-portal"}, "data": {
        "kubeconfig": base64.b64encode(second.portal_kubeconfig.read_bytes()).decode()}},
        force=True)
    by_secret = cluster_check(cluster=register(
        "eu-secret", credential_ref="secret:aifactory-portal/eu-kubeconfig", by=admin_user))
    assert by_secret.answers is True, by_secret.health_message
    missing = cluster_check(cluster=register(
        "eu-missing", credential_ref="secret:aifactory-portal/nothing-here", by=admin_user))
    assert missing.answers is False
    assert "Secret aifactory-portal/nothing-here is not in the portal's cluster" in \
        missing.health_message


def test_each_cluster_its_fleet_and_a_block_only_where_its_pool_is(
        kube, fleet, admin_kube, second, tenant, lead, admin_user, client,
        django_capture_on_commit_callbacks):
    eu = register("eu", credential_ref=f"file:{second.portal_kubeconfig}", by=admin_user)
    pool = PoolFactory(slug="dedicated-eu", route=Route.DEDICATED_BLOCK, gpu_model=H200,
                       capacity_devices=0, cluster=eu)
    for node in second.admin.list("v1", "Node"):
        second.admin.delete("v1", "Node", node["metadata"]["name"])
    # The same node name as one of the home cluster's (the fleet fixture's blk-0).
    for name in ("blk-0", "blk-eu-1"):
        create_gpu_node(second.admin, name, product=H200, labels={
            "aifactory.io/validated": "true", "aifactory.io/pool": pool.slug})
    said = dict((c.slug, words) for c, words in fleet_sync_all())
    assert said["eu"].startswith("Read 2 GPU node(s)"), said
    assert said["local"].startswith("Read "), said
    blk = {n.cluster.slug: n.pool.slug for n in GpuNode.objects.filter(name="blk-0")
           .select_related("cluster", "pool")}
    assert blk == {"local": "dedicated", "eu": "dedicated-eu"}

    req = make_request(tenant, lead, submit=True, **DEDICATED)
    with django_capture_on_commit_callbacks(execute=True):
        req = services.request_approve(request=req, by=admin_user, reason="ok")
    alloc = Allocation.objects.get(pk=req.allocation_id)
    assert alloc.pool == pool and alloc.status == "active", alloc.status_message
    assert second.admin.get("v1", "Namespace", alloc.namespace) is not None
    assert admin_kube.get("v1", "Namespace", alloc.namespace) is None
    reserved = [n.name for n in alloc.nodes.all()]
    assert len(reserved) == 1
    there = second.admin.get("v1", "Node", reserved[0])
    assert there["metadata"]["labels"]["aifactory.io/dedicated-to"] == tenant.slug
    if reserved[0] == "blk-0":  # the home cluster's node of that name stays untouched
        home = admin_kube.get("v1", "Node", "blk-0")
        assert "aifactory.io/dedicated-to" not in home["metadata"]["labels"]

    # The cluster goes away: said on its page, the others go on, nothing is retried blindly.
    second.stop_apiserver()
    try:
        eu = cluster_check(cluster=eu)
        assert eu.answers is False and eu.health_message.startswith("Does not answer")
        said = dict((c.slug, words) for c, words in fleet_sync_all())
        assert said["eu"].startswith("not read:"), said
        assert said["local"].startswith("Read "), said
        summary = reconcile_allocations()
        assert f"not reconciled (tried again next time): [{alloc.pk}]" in summary
        assert "reconcile skipped for eu's leftovers (not reachable: Listing" in summary
        alloc.refresh_from_db()
        assert alloc.status == "active"  # kept: an unreachable cluster is not a failure
        assert GpuNode.objects.get(cluster=eu, name="blk-0").present  # not marked gone
        client.force_login(admin_user)
        page = client.get(reverse("fleet:cluster", args=["eu"]))
        assert page.status_code == 200 and "does not answer" in page.content.decode()
        assert client.get(reverse("fleet:fleet")).status_code == 200
    finally:
        second.start_apiserver()
    assert cluster_check(cluster=eu).answers is True
