"""The REST API: same services, same tenant scoping, errors as {"message", "extra"}."""

import pytest
from rest_framework.test import APIClient

from intake.models import CapacityRequest
from tests.factories import make_request, payload

pytestmark = pytest.mark.django_db


@pytest.fixture
def api():
    return APIClient()


def test_anonymous_is_refused(api):
    assert api.get("/api/requests/").status_code == 401  # the bearer scheme is offered


def test_list_is_scoped(api, tenant, lead, other_lead, pools):
    make_request(tenant, lead, title="Mine")
    api.force_authenticate(other_lead)
    assert api.get("/api/requests/").json()["count"] == 0
    api.force_authenticate(lead)
    rows = api.get("/api/requests/").json()["results"]
    assert [r["title"] for r in rows] == ["Mine"]


def test_other_tenant_request_is_404(api, tenant, lead, other_lead, pools):
    req = make_request(tenant, lead)
    api.force_authenticate(other_lead)
    assert api.get(f"/api/requests/{req.pk}/").status_code == 404
    assert api.post(f"/api/requests/{req.pk}/submit/").status_code == 404


def test_create_submit_approve_round_trip(api, tenant, lead, admin_user, pools):
    api.force_authenticate(lead)
    created = api.post("/api/requests/", payload(tenant), format="json")
    assert created.status_code == 201, created.json()
    rid = created.json()["id"]
    submitted = api.post(f"/api/requests/{rid}/submit/")
    assert submitted.json()["status"] == "submitted"
    assert submitted.json()["route"] == "shared_pool"
    assert api.post(f"/api/requests/{rid}/approve/", {"reason": "me"}).status_code == 403
    api.force_authenticate(admin_user)
    approved = api.post(f"/api/requests/{rid}/approve/", {"reason": "ok"}, format="json")
    assert approved.status_code == 200 and approved.json()["status"] == "approved"
    assert approved.json()["allocation"] is not None


def test_deny_and_request_changes(api, tenant, lead, admin_user, pools):
    r1 = make_request(tenant, lead, submit=True)
    r2 = make_request(tenant, lead, submit=True)
    api.force_authenticate(admin_user)
    assert api.post(f"/api/requests/{r1.pk}/deny/", {"reason": "no"}).json()["status"] == \
        "denied"
    assert api.post(f"/api/requests/{r2.pk}/request-changes/",
                    {"reason": "smaller"}).json()["status"] == "changes_requested"
    refused = api.post(f"/api/requests/{r1.pk}/deny/", {"reason": "again"})
    assert refused.status_code == 400 and "denied" in refused.json()["message"]


def test_validation_errors_are_per_field_and_nothing_is_saved(api, tenant, lead, pools):
    api.force_authenticate(lead)
    response = api.post("/api/requests/", payload(
        tenant, isolation_origin="regulatory", device_fill="small", replicas=0), format="json")
    assert response.status_code == 400
    fields = response.json()["extra"]["fields"]
    assert "isolation_reference" in fields and "replicas" in fields
    assert not CapacityRequest.objects.exists()


def test_cannot_create_for_a_tenant_you_do_not_lead(api, tenant, other_tenant, lead, member,
                                                    pools):
    api.force_authenticate(lead)
    response = api.post("/api/requests/", payload(other_tenant), format="json")
    assert response.status_code == 400
    assert response.json()["extra"]["fields"]["tenant"] == ["No such tenant."]
    api.force_authenticate(member)
    response = api.post("/api/requests/", payload(tenant), format="json")
    assert response.status_code == 403 and "team lead" in response.json()["message"]
    assert not CapacityRequest.objects.exists()


def test_finance_reads_but_cannot_act(api, tenant, lead, finance_user, pools):
    req = make_request(tenant, lead, submit=True)
    api.force_authenticate(finance_user)
    assert api.get(f"/api/requests/{req.pk}/").status_code == 200
    assert api.post(f"/api/requests/{req.pk}/approve/", {"reason": "x"}).status_code == 403
    req.refresh_from_db()
    assert req.status == "submitted"


def test_preview_endpoint(api, tenant, lead, pools):
    api.force_authenticate(lead)
    response = api.post("/api/requests/preview/", payload(
        tenant, device_fill="small", replicas=7, mig_profile="1g.10gb", whole_devices=0),
        format="json")
    body = response.json()
    assert body["route"] == "mig_vcluster" and body["held_devices"] == "1.0000"
    assert body["fit"] == "fits_now" and not CapacityRequest.objects.exists()


def test_openapi_schema_lists_the_actions(api, lead):
    api.force_authenticate(lead)
    schema = api.get("/api/schema/", HTTP_ACCEPT="application/json").content.decode()
    for path in ("/api/requests/{id}/approve/", "/api/requests/{id}/deny/",
                 "/api/requests/{id}/submit/", "/api/requests/{id}/request-changes/",
                 "/api/stranded/", "/api/stranded/{id}/", "/api/stranded/{id}/answer/"):
        assert path in schema


def test_allocations_are_listed_per_tenant(api, tenant, lead, other_lead, finance_user,
                                           admin_user, pools):
    from intake import services

    req = make_request(tenant, lead, submit=True)
    req = services.request_approve(request=req, by=admin_user, reason="ok")
    api.force_authenticate(lead)
    rows = api.get("/api/allocations/").json()["results"]
    assert [r["namespace"] for r in rows] == [f"acme-r{req.pk}"]
    assert rows[0]["route"] == "shared_pool" and rows[0]["device_equivalents"] == "4.0000"
    api.force_authenticate(other_lead)
    assert api.get("/api/allocations/").json()["count"] == 0
    assert api.get(f"/api/allocations/{req.allocation_id}/").status_code == 404
    api.force_authenticate(finance_user)
    assert api.get(f"/api/allocations/{req.allocation_id}/").status_code == 200
    assert api.post("/api/allocations/", {}).status_code == 405
