"""A pool with no nodes promises nothing, wherever a fit is shown: the configured size is a
ceiling, never a source ("a fleet count and a validated fleet count are two different
numbers, and only one of them can be scheduled")."""

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from fleet.inventory.selectors import pool_capacity
from fleet.inventory.sync import record_node_events
from fleet.kube import DryRunBackend
from fleet.models import Pool, Route
from intake import services
from intake.models import CapacityRequest
from tests.factories import make_request, request_fields, sync_nodes

pytestmark = pytest.mark.django_db

L40S = "NVIDIA-L40S"


def new_pool_post(**kw):
    data = {"slug": "shared-l40s", "name": "Shared L40S", "route": Route.SHARED_POOL,
            "gpu_model": L40S, "gpu_memory_gb": 48, "devices_per_node": 8,
            "capacity_devices": 16, "node_selector": "{}", "device_class": "gpu.nvidia.com",
            "mig_profiles": "", "cohort": "", "borrowing_limit_devices": 0, "rate": "1.20",
            "active": "on"}
    data.update(kw)
    return data


def preview_form(tenant, **kw):
    data = {k: ("" if v is None else v) for k, v in request_fields(gpu_model=L40S, **kw).items()}
    data["tenant"] = tenant.pk
    return data


@pytest.fixture
def empty_pool(client, admin_user):
    """Created as an admin does, on the page; no node is synced into it."""
    client.force_login(admin_user)
    response = client.post(reverse("fleet:pool_new"), new_pool_post(), follow=True)
    assert response.status_code == 200
    assert "aifactory.io/pool=shared-l40s" in response.content.decode()  # what to do next
    client.logout()
    return Pool.objects.get(slug="shared-l40s")


def test_capacity_is_zero_and_says_why(empty_pool):
    cap = pool_capacity(empty_pool)
    assert cap.capacity_devices == 0 and cap.free_devices == 0 and not cap.has_fleet
    assert "promises nothing" in cap.source


def test_no_page_or_api_says_it_fits(client, tenant, lead, admin_user, empty_pool):
    client.force_login(lead)
    body = client.post(reverse("intake:preview"), preview_form(tenant, whole_devices=8),
                       HTTP_HX_REQUEST="true").content.decode()
    assert "Fits now" not in body
    assert "Nothing can be promised in Shared L40S" in body
    assert "configured pool size" not in body

    api = APIClient()
    api.force_authenticate(lead)
    fields = request_fields(gpu_model=L40S, whole_devices=8)
    answer = api.post("/api/requests/preview/", {
        **fields, "tenant": tenant.slug, "starts_on": str(fields["starts_on"]),
        "ends_on": str(fields["ends_on"])}, format="json").json()
    assert answer["fit"] == "never"
    assert answer["fit_reason"].startswith("Nothing can be promised in Shared L40S")

    req = make_request(tenant, lead, gpu_model=L40S, whole_devices=8)
    with pytest.raises(services.IntakeError, match="Nothing can be promised"):
        services.request_submit(request=req, by=lead)
    assert CapacityRequest.objects.get(pk=req.pk).status == "draft"  # nothing lost
    page = client.get(reverse("intake:detail", args=[req.pk])).content.decode()
    assert "Fits now" not in page and "Nothing can be promised in Shared L40S" in page


def test_admin_pages_tell_what_to_do(client, admin_user, empty_pool):
    client.force_login(admin_user)
    for url in (reverse("fleet:pools"), reverse("fleet:fleet")):
        body = client.get(url).content.decode()
        assert "Shared L40S promises nothing" in body, url
        assert "<code>aifactory.io/pool=shared-l40s</code>" in body, url
        assert "ceiling, not capacity" in body, url


def test_approval_of_a_pool_whose_nodes_left_promises_nothing(client, tenant, lead, admin_user,
                                                              empty_pool):
    """Submitted while the pool had nodes; the nodes are gone by review: the review page
    shows no fit, and approval refuses with the reason."""
    names = sync_nodes(empty_pool, 8)
    assert pool_capacity(empty_pool).capacity_devices == 8
    req = make_request(tenant, lead, submit=True, gpu_model=L40S, whole_devices=8)
    record_node_events([], gone=names, backend=DryRunBackend())
    assert pool_capacity(empty_pool).capacity_devices == 0
    client.force_login(admin_user)
    body = client.get(reverse("intake:review_detail", args=[req.pk])).content.decode()
    assert "Nothing can be promised in Shared L40S" in body
    with pytest.raises(services.IntakeError, match="Not approved: Nothing can be promised"):
        services.request_approve(request=req, by=admin_user, reason="ok")
    assert CapacityRequest.objects.get(pk=req.pk).status == "submitted"  # retriable


def test_the_configured_size_caps_and_never_adds(empty_pool):
    sync_nodes(empty_pool, 24)  # three nodes of 8 against a ceiling of 16
    cap = pool_capacity(empty_pool)
    assert cap.capacity_devices == 16 and "capped at the pool's configured 16" in cap.source
    Pool.objects.filter(pk=empty_pool.pk).update(capacity_devices=0)  # 0: no ceiling
    assert pool_capacity(Pool.objects.get(pk=empty_pool.pk)).capacity_devices == 24
