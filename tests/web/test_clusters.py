"""Clusters as data: registered, inspected and retired by platform admins on pages and in the
API; pools, nodes and provisioning per cluster; the credential only ever by reference."""

from __future__ import annotations

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from fleet.inventory.connections import backend_of, home_cluster
from fleet.inventory.selectors import pool_capacity
from fleet.inventory.sync import record_node_events
from fleet.kube import DryRunBackend
from fleet.models import Allocation, Cluster, GpuNode
from intake import services as intake
from intake.selectors import approval_plan
from portal.demo_fleet import demo_node
from tenants.models import AuditEvent
from tests.factories import ClusterFactory, PoolFactory, make_request, sync_nodes

pytestmark = pytest.mark.django_db
L40S = "NVIDIA-L40S"


def register_post(**kw):
    data = {"slug": "gpu-eu", "name": "GPU EU", "role": "standalone", "region": "eu-west-1",
            "provider": "aws", "connection": "kubeconfig",
            "credential_ref": "secret:aifactory-portal/gpu-eu", "api_server": "",
            "multikueue_name": ""}
    data.update(kw)
    return data


def test_the_home_cluster_is_there_with_no_configuration(client, admin_user, pools):
    home = home_cluster()
    assert (home.slug, home.connection) == ("local", Cluster.Connection.CONFIGURED)
    assert {p.cluster_id for p in pools.values()} == {home.pk}
    client.force_login(admin_user)
    page = client.get(reverse("fleet:clusters")).content.decode()
    assert "Local cluster" in page and "not checked yet" in page


def test_an_admin_registers_a_cluster_by_reference(client, admin_user, lead):
    client.force_login(lead)
    assert client.post(reverse("fleet:cluster_new"), register_post()).status_code == 403
    client.force_login(admin_user)
    response = client.post(reverse("fleet:cluster_new"), register_post())
    assert response.status_code == 302
    cluster = Cluster.objects.get(slug="gpu-eu")
    assert cluster.credential_ref == "secret:aifactory-portal/gpu-eu#kubeconfig"
    assert cluster.labels == {"region": "eu-west-1", "provider": "aws"}
    event = AuditEvent.objects.get(action="cluster.registered")
    assert "GPU EU (Stand-alone, region eu-west-1, provider aws)" in event.reason


@pytest.mark.parametrize(("field", "value", "said"), [
    ("credential_ref", "apiVersion: v1\nkind: Config", "looks like a credential itself"),
    ("credential_ref", "kubeconfig.yaml", "file:/path/to/kubeconfig"),
    ("credential_ref", "", "needs its reference"),
    ("credential_ref", "secret:kube-system/admin", "from its own namespace only"),
    ("connection", "configured", "Only the home cluster"),
    ("slug", "GPU EU", "lowercase letters"),
    ("region", "EU West", "Lowercase letters"),
    ("api_server", "not a url", "Enter a valid URL"),
])
def test_a_bad_registration_is_refused_on_its_field_and_nothing_is_saved(
        client, admin_user, field, value, said):
    client.force_login(admin_user)
    response = client.post(reverse("fleet:cluster_new"), register_post(**{field: value}))
    assert response.status_code == 200
    assert said.lower() in response.content.decode().lower()
    assert not Cluster.objects.filter(slug__in=["gpu-eu", "GPU EU"]).exists()


def test_one_manager_only(client, admin_user):
    ClusterFactory(slug="hub", role=Cluster.Role.MANAGER)
    client.force_login(admin_user)
    response = client.post(reverse("fleet:cluster_new"), register_post(role="manager"))
    assert "is the MultiKueue manager already" in response.content.decode()


def test_same_node_name_in_two_clusters_is_two_nodes(client, admin_user, db):
    eu = ClusterFactory(slug="gpu-eu")
    home_pool = PoolFactory(slug="shared", capacity_devices=0)
    eu_pool = PoolFactory(slug="shared-eu", capacity_devices=0, cluster=eu)
    record_node_events([demo_node("gpu-01", "shared", home_pool.gpu_model)],
                       backend=DryRunBackend())
    record_node_events([demo_node("gpu-01", "shared-eu", eu_pool.gpu_model)],
                       backend=DryRunBackend(), cluster=eu)
    rows = GpuNode.objects.filter(name="gpu-01").select_related("cluster", "pool")
    assert {(n.cluster.slug, n.pool.slug) for n in rows} == {("local", "shared"),
                                                             ("gpu-eu", "shared-eu")}
    # A node labelled for a pool of another cluster does not join it.
    record_node_events([demo_node("gpu-02", "shared", eu_pool.gpu_model)],
                       backend=DryRunBackend(), cluster=eu)
    assert GpuNode.objects.get(cluster=eu, name="gpu-02").pool is None
    # A full read of one cluster marks nothing of another gone.
    record_node_events([], gone=["gpu-01"], backend=DryRunBackend(), cluster=eu)
    assert GpuNode.objects.get(cluster=home_pool.cluster, name="gpu-01").present
    assert not GpuNode.objects.get(cluster=eu, name="gpu-01").present
    client.force_login(admin_user)
    page = client.get(reverse("fleet:node", args=["gpu-eu", "gpu-01"])).content.decode()
    assert "<dt>Cluster</dt><dd><a href=\"/clusters/gpu-eu/\">Cluster gpu-eu</a>" in page
    assert client.get(reverse("fleet:node", args=["nowhere", "gpu-01"])).status_code == 404
    response = client.get(reverse("fleet:fleet"))
    # The sum over clusters is the fleet's: 8 devices at home, eu's node gone.
    views = {v.cluster.slug: v.promisable_devices for v in response.context["clusters"]}
    assert views == {"local": 8, "gpu-eu": 0}
    assert response.context["across"]["promisable"] == 8
    fleet = response.content.decode()
    assert "Per cluster" in fleet and "Cluster gpu-eu" in fleet
    assert "<th scope=\"row\">All clusters</th>" in fleet


def test_approval_provisions_in_the_cluster_of_the_pool(tenant, lead, admin_user, pools,
                                                       django_capture_on_commit_callbacks):
    eu = ClusterFactory(slug="gpu-eu")
    pool = PoolFactory(slug="shared-l40s", gpu_model=L40S, capacity_devices=0, cluster=eu)
    sync_nodes(pool, 16)
    assert pool_capacity(pool).capacity_devices == 16
    request = make_request(tenant, lead, submit=True, gpu_model=L40S)
    plan = approval_plan(request)
    assert plan.ok
    assert ("Lands in Cluster gpu-eu: shared-l40s lives there, so its objects, guards and "
            "queues are made in that cluster.") in plan.plan.notes
    with django_capture_on_commit_callbacks(execute=True):
        intake.request_approve(request=request, by=admin_user, reason="Fits.")
    alloc = Allocation.objects.get(request=request)
    assert alloc.pool == pool and alloc.status == Allocation.Status.ACTIVE
    applied_eu = {key.namespace for op, key in backend_of(eu).log if op == "apply"}
    applied_home = {key.namespace for op, key in backend_of(home_cluster()).log
                    if op == "apply"}
    assert alloc.namespace in applied_eu
    assert alloc.namespace not in applied_home


def test_a_cluster_with_allocations_is_not_retired(client, tenant, lead, admin_user, pools):
    eu = ClusterFactory(slug="gpu-eu")
    pool = PoolFactory(slug="shared-l40s", gpu_model=L40S, capacity_devices=0, cluster=eu)
    sync_nodes(pool, 8)
    intake.request_approve(request=make_request(tenant, lead, submit=True, gpu_model=L40S,
                                                whole_devices=2), by=admin_user, reason="ok")
    client.force_login(admin_user)
    url = reverse("fleet:cluster_retire", args=["gpu-eu"])
    page = client.post(url, {"reason": "moving to gpu-eu-2"}, follow=True).content.decode()
    assert "still holds 1 allocation(s)" in page
    eu.refresh_from_db()
    assert eu.live
    Allocation.objects.filter(pool=pool).update(status=Allocation.Status.RETIRED)
    client.post(url, {"reason": "moving to gpu-eu-2"})
    eu.refresh_from_db()
    pool.refresh_from_db()
    assert not eu.live and not pool.active
    assert AuditEvent.objects.filter(action="cluster.retired",
                                     reason__contains="moving to gpu-eu-2").exists()
    page = client.post(reverse("fleet:cluster_retire", args=["local"]), {"reason": "x"},
                       follow=True).content.decode()
    assert "cannot be retired" in page


def test_check_says_what_it_found(client, admin_user, tmp_path):
    client.force_login(admin_user)
    missing = tmp_path / "nowhere.kubeconfig"
    ClusterFactory(slug="gpu-eu", connection=Cluster.Connection.KUBECONFIG,
                   credential_ref=f"file:{missing}")
    page = client.post(reverse("fleet:cluster_check", args=["gpu-eu"]),
                       follow=True).content.decode()
    assert "does not answer" in page.lower()
    eu = Cluster.objects.get(slug="gpu-eu")
    assert eu.answers is False and "kubeconfig cannot be used" in eu.health_message
    client.post(reverse("fleet:cluster_check", args=["local"]))
    assert home_cluster().answers is None  # the embedded dry run: nothing to ask
    assert AuditEvent.objects.filter(action="cluster.checked").count() == 2


@pytest.fixture
def api(admin_user):
    client = APIClient()
    client.force_authenticate(admin_user)
    return client


def test_the_api_registers_changes_checks_and_retires(api, lead):
    created = api.post("/api/clusters/", register_post(), format="json")
    assert created.status_code == 201, created.content
    assert created.json()["credential_ref"] == "secret:aifactory-portal/gpu-eu#kubeconfig"
    refused = api.post("/api/clusters/", register_post(slug="gpu-us",
                       credential_ref="client-key-data: abc"), format="json")
    assert refused.status_code == 400
    assert "credential itself" in refused.json()["extra"]["fields"]["credential_ref"][0]
    changed = api.patch("/api/clusters/gpu-eu/", {"region": "eu-central-1"}, format="json")
    assert changed.status_code == 200 and changed.json()["labels"]["region"] == "eu-central-1"
    assert Cluster.objects.get(slug="gpu-eu").provider == "aws"  # not given: kept
    renamed = api.patch("/api/clusters/gpu-eu/", {"slug": "gpu-eu-2"}, format="json")
    assert renamed.status_code == 400 and "Fixed once registered" in \
        renamed.json()["extra"]["fields"]["slug"][0]
    listed = api.get("/api/clusters/").json()
    assert [c["slug"] for c in listed] == ["gpu-eu", "local"]
    checked = api.post("/api/clusters/gpu-eu/check/")
    assert checked.status_code == 200 and checked.json()["answers"] is False
    retired = api.post("/api/clusters/gpu-eu/retire/", {"reason": "test"}, format="json")
    assert retired.status_code == 200 and retired.json()["retired_at"]
    again = api.patch("/api/clusters/gpu-eu/", {"name": "x"}, format="json")
    assert again.status_code == 400 and "retired" in again.json()["message"]
    api.force_authenticate(lead)
    assert api.get("/api/clusters/").status_code == 403


def test_the_clusters_page_costs_the_same_for_more_clusters(client, admin_user, pools):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client.force_login(admin_user)

    def queries() -> int:
        with CaptureQueriesContext(connection) as seen:
            assert client.get(reverse("fleet:clusters")).status_code == 200
        return len(seen)

    ClusterFactory(slug="gpu-eu")
    queries()  # the first view of the session reads what later ones have cached
    two = queries()
    for slug in ("gpu-us", "gpu-ap", "gpu-sa"):
        cluster = ClusterFactory(slug=slug)
        sync_nodes(PoolFactory(slug=f"shared-{slug}", cluster=cluster, capacity_devices=8))
    assert queries() == two
