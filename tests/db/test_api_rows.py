"""The API lists' rows (tenants.plain_rows) equal DRF's own serialization of the same rows,
through the real endpoints, for a lead and an admin: requests in every state with and
without allocations, allocations with resizes and a flagged reason (whose words depend on
who reads them)."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext
from rest_framework import serializers

from fleet.allocations.resize import allocation_resize
from fleet.api import AllocationSerializer
from fleet.models import Allocation
from intake import services
from intake.api import CapacityRequestSerializer
from intake.models import CapacityRequest
from tests.factories import make_request

pytestmark = pytest.mark.django_db


def _drf(child, rows, user) -> list:
    request = RequestFactory().get("/")
    request.user = user
    data = serializers.ListSerializer(rows, child=child, context={"request": request}).data
    return json.loads(json.dumps(data, default=str))


@pytest.fixture
def world(tenant, lead, admin_user, pools, django_capture_on_commit_callbacks):
    make_request(tenant, lead, title="draft")
    make_request(tenant, lead, submit=True, title="waiting")
    approved = make_request(tenant, lead, submit=True, whole_devices=8, title="approved")
    with django_capture_on_commit_callbacks(execute=True):
        approved = services.request_approve(request=approved, by=admin_user, reason="ok")
    alloc = Allocation.objects.get(pk=approved.allocation_id)
    with django_capture_on_commit_callbacks(execute=True):
        allocation_resize(allocation=alloc, size=4, by=lead, reason="smaller")
    Allocation.objects.filter(pk=alloc.pk).update(flagged_reason="node gpu-7 lost")
    return alloc


@pytest.mark.parametrize("who", ["lead", "admin_user"])
def test_the_api_lists_read_as_drf_would_serialize_them(client, world, who, request):
    user = request.getfixturevalue(who)
    client.force_login(user)
    requests = client.get("/api/requests/").json()["results"]
    rows = (CapacityRequest.objects.select_related("tenant", "requester", "pool",
                                                   "allocation__trace")
            .filter(pk__in=[r["id"] for r in requests]))
    by_id = {r["id"]: r for r in _drf(CapacityRequestSerializer(), rows, user)}
    assert len(requests) == 3 and requests == [by_id[r["id"]] for r in requests]
    allocations = client.get("/api/allocations/").json()["results"]
    rows = (Allocation.objects.select_related("tenant", "pool").prefetch_related("resizes")
            .order_by("-created_at", "-id"))
    assert allocations == _drf(AllocationSerializer(), rows, user)
    assert allocations[0]["resizes"][0]["devices_after"] == "4.0000"
    # The flagged reason's words differ by reader: DRF's method field ran for each.
    flagged = allocations[0]["flagged_reason"]
    assert ("gpu-7" in flagged) == (who == "admin_user") and flagged


def test_the_lists_read_a_fixed_number_of_queries_whatever_their_rows(client, world, lead,
                                                                         tenant):
    """The list reads only the columns its rows show: a column left out would be read row
    by row, one query each."""
    client.force_login(lead)

    def queries(url: str) -> int:
        client.get(url)  # the first read after a write also refreshes what the user may do
        with CaptureQueriesContext(connection) as captured:
            assert client.get(url).status_code == 200
        return len(captured)

    before = [queries("/api/requests/"), queries("/api/allocations/")]
    for i in range(4):
        make_request(tenant, lead, submit=i % 2 == 0, title=f"more {i}")
    assert [queries("/api/requests/"), queries("/api/allocations/")] == before


def test_pages_of_requests_filed_at_the_same_instant_list_each_once(client, tenant, lead):
    for i in range(5):
        make_request(tenant, lead, title=f"same instant {i}")
    CapacityRequest.objects.update(created_at=CapacityRequest.objects.first().created_at)
    client.force_login(lead)
    seen = [row["id"] for offset in range(5)
            for row in client.get(f"/api/requests/?limit=1&offset={offset}").json()["results"]]
    assert sorted(seen) == sorted(CapacityRequest.objects.values_list("id", flat=True))
    assert seen == sorted(seen, reverse=True)  # ties newest id first


def test_the_requests_list_shows_what_was_written_since_the_last_read(client, world, lead,
                                                                      other_lead):
    """The list's windows are kept across reads (intake.api.listed_requests): a rename, a
    trace and a new request written behind a read show on the next, per status filter; and
    another tenant's lead still lists none of them."""
    from django.utils import timezone

    from intake.models import AllocationTrace

    client.force_login(lead)
    before = client.get("/api/requests/").json()
    drafts = client.get("/api/requests/?status=draft").json()
    assert before["count"] == 3 and [r["title"] for r in drafts["results"]] == ["draft"]
    draft = CapacityRequest.objects.get(title="draft")
    CapacityRequest.objects.filter(pk=draft.pk).update(title="draft, renamed")
    AllocationTrace.objects.create(allocation=world, trace_id="cd" * 16, spans=3,
                                   exported_at=timezone.now())
    make_request(world.tenant, lead, title="another draft")
    after = client.get("/api/requests/").json()
    assert after["count"] == 4
    assert {r["title"] for r in after["results"]} == {
        "draft, renamed", "waiting", "approved", "another draft"}
    traced = next(r for r in after["results"] if r["title"] == "approved")
    assert traced["trace_id"] == "cd" * 16
    drafts = client.get("/api/requests/?status=draft").json()
    assert sorted(r["title"] for r in drafts["results"]) == ["another draft", "draft, renamed"]
    assert client.get("/api/requests/?limit=1&offset=1").json()["results"] == \
        after["results"][1:2]
    client.force_login(other_lead)
    assert client.get("/api/requests/").json() == {
        "count": 0, "next": None, "previous": None, "results": []}


def test_the_allocations_list_shows_what_was_written_since_the_last_read(
        client, world, lead, admin_user, other_lead, django_capture_on_commit_callbacks):
    """The allocations list's count and windows are kept across reads (fleet.api): a resize
    and a new flag written behind a read show on the next; a flag's node names only to a
    platform admin; another tenant's lead lists none."""
    client.force_login(admin_user)
    assert client.get("/api/allocations/").json()["results"][0]["flagged_reason"] == \
        "node gpu-7 lost"
    client.force_login(lead)
    before, = client.get("/api/allocations/").json()["results"]
    assert "gpu-7" not in before["flagged_reason"] and len(before["resizes"]) == 1
    with django_capture_on_commit_callbacks(execute=True):
        allocation_resize(allocation=world, size=2, by=lead, reason="smaller still")
    Allocation.objects.filter(pk=world.pk).update(flagged_reason="node gpu-9 lost")
    after = client.get("/api/allocations/").json()
    assert after["count"] == 1 and after["results"][0]["size"] == 2
    reasons = [r["reason"] for r in after["results"][0]["resizes"]]
    assert len(reasons) == 2 and reasons[0].endswith(" smaller")
    assert reasons[1].endswith(" smaller still")
    assert "gpu-9" not in after["results"][0]["flagged_reason"]
    assert client.get("/api/allocations/?status=retired").json()["count"] == 0
    client.force_login(admin_user)
    assert client.get("/api/allocations/").json()["results"][0]["flagged_reason"] == \
        "node gpu-9 lost"
    client.force_login(other_lead)
    assert client.get("/api/allocations/").json()["count"] == 0
