"""Resizing on the request page and through the API: one service behind both, the same
refusals in words, the history shown where the allocation is."""

import pytest
from django.test import TestCase
from rest_framework.test import APIClient

from fleet.models import AllocationResize
from intake import services
from tests.factories import make_request

pytestmark = pytest.mark.django_db


@pytest.fixture
def req(tenant, lead, admin_user, pools):
    request = make_request(tenant, lead, submit=True, whole_devices=8, title="Resizable")
    with TestCase.captureOnCommitCallbacks(execute=True):
        services.request_approve(request=request, by=admin_user, reason="ok")
    request.refresh_from_db()
    assert request.allocation.status == "active"
    return request


def test_the_lead_shrinks_on_the_page_and_sees_it_in_the_history(client, lead, req):
    client.force_login(lead)
    page = client.get(f"/requests/{req.pk}/").content.decode()
    assert "Resize…" in page and 'name="size"' in page and 'value="8"' in page
    response = client.post(f"/requests/{req.pk}/resize/", {"size": "3", "reason": "smaller"},
                           follow=True)
    text = response.content.decode()
    assert "now holds 3 devices" in text
    assert "Resized 8 devices → 3 devices" in text and "smaller" in text  # the history
    req.allocation.refresh_from_db()
    assert req.allocation.whole_devices == 3


@pytest.mark.parametrize("size", ["", "three", "4.5", "٣", "-1", "0", "9" * 5000])
def test_a_size_that_is_no_whole_number_is_refused_in_words(client, lead, req, size):
    client.force_login(lead)
    text = client.post(f"/requests/{req.pk}/resize/", {"size": size},
                       follow=True).content.decode()
    assert "whole number" in text or "at least 1" in text
    assert not AllocationResize.objects.exists()


def test_a_lead_growing_is_told_who_may(client, lead, req):
    client.force_login(lead)
    text = client.post(f"/requests/{req.pk}/resize/", {"size": "12"},
                       follow=True).content.decode()
    assert "only a platform admin can" in text
    assert not AllocationResize.objects.exists()


def test_the_api_resizes_and_lists_the_history(lead, other_lead, admin_user, req):
    api = APIClient()
    api.force_authenticate(lead)
    url = f"/api/allocations/{req.allocation_id}/resize/"
    for bad in ({"size": "4.0"}, {"size": True}, {"size": 0}, {}):
        refused = api.post(url, bad, format="json")
        assert refused.status_code == 400, bad
        assert "size" in refused.json()["extra"]["fields"], bad
    done = api.post(url, {"size": 4, "reason": "half"}, format="json")
    assert done.status_code == 200, done.json()
    body = done.json()
    assert (body["size"], body["size_unit"], body["whole_devices"]) == (4, "devices", 4)
    assert [(r["devices_before"], r["devices_after"]) for r in body["resizes"]] == [
        ("8.0000", "4.0000")]
    grow = api.post(url, {"size": 9}, format="json")
    assert grow.status_code == 400 and "platform admin" in str(grow.json())
    listed = api.get("/api/allocations/").json()
    rows = listed["results"] if isinstance(listed, dict) else listed
    assert rows[0]["resizes"][0]["reason"].startswith("Resized 8 devices → 4 devices")
    outsider = APIClient()
    outsider.force_authenticate(other_lead)
    assert outsider.post(url, {"size": 2}, format="json").status_code == 404
    admin = APIClient()
    admin.force_authenticate(admin_user)
    assert admin.post(url, {"size": 9}, format="json").status_code == 200
