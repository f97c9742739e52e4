"""API writes with an Idempotency-Key: a client that lost the answer (a web worker killed after
the write committed) retries and gets the first answer, never a second request."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from intake.models import CapacityRequest
from tenants.models import AuditEvent, IdempotentResponse
from tests.factories import payload

pytestmark = pytest.mark.django_db


@pytest.fixture
def api():
    return APIClient()


def test_a_retried_create_returns_the_first_answer(api, tenant, lead, pools):
    api.force_authenticate(lead)
    body = payload(tenant, title="Retried")
    first = api.post("/api/requests/", body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    again = api.post("/api/requests/", body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert first.status_code == again.status_code == 201
    assert first.json() == again.json()
    assert again["Idempotent-Replayed"] == "true" and "Idempotent-Replayed" not in first
    assert CapacityRequest.objects.filter(title="Retried").count() == 1
    # Without a key, or with a new one, a write is a new write.
    assert api.post("/api/requests/", body, format="json",
                    HTTP_IDEMPOTENCY_KEY="k-2").json()["id"] != first.json()["id"]
    assert CapacityRequest.objects.filter(title="Retried").count() == 2


def test_the_same_key_for_another_write_is_refused(api, tenant, lead, pools):
    api.force_authenticate(lead)
    api.post("/api/requests/", payload(tenant, title="One"), format="json",
             HTTP_IDEMPOTENCY_KEY="same")
    other = api.post("/api/requests/", payload(tenant, title="Two"), format="json",
                     HTTP_IDEMPOTENCY_KEY="same")
    assert other.status_code == 422
    assert "already used for a different request" in other.json()["message"]
    assert not CapacityRequest.objects.filter(title="Two").exists()


def test_keys_are_per_user_and_checked(api, tenant, lead, other_tenant, other_lead, pools):
    api.force_authenticate(lead)
    mine = api.post("/api/requests/", payload(tenant), format="json", HTTP_IDEMPOTENCY_KEY="x")
    api.force_authenticate(other_lead)
    theirs = api.post("/api/requests/", payload(other_tenant), format="json",
                      HTTP_IDEMPOTENCY_KEY="x")
    assert theirs.status_code == 201 and theirs.json()["id"] != mine.json()["id"]
    for bad in ("a" * 256, "with space", "ünïcode"):
        refused = api.post("/api/requests/", payload(other_tenant), format="json",
                           HTTP_IDEMPOTENCY_KEY=bad)
        assert refused.status_code == 400, bad
        assert "Idempotency-Key" in refused.json()["message"]


def test_a_retried_action_does_not_act_twice(api, tenant, lead, admin_user, pools,
                                             django_capture_on_commit_callbacks):
    api.force_authenticate(lead)
    rid = api.post("/api/requests/", payload(tenant), format="json").json()["id"]
    api.post(f"/api/requests/{rid}/submit/")
    api.force_authenticate(admin_user)
    with django_capture_on_commit_callbacks(execute=True):
        first = api.post(f"/api/requests/{rid}/approve/", {"reason": "ok"}, format="json",
                         HTTP_IDEMPOTENCY_KEY="approve-1")
        again = api.post(f"/api/requests/{rid}/approve/", {"reason": "ok"}, format="json",
                         HTTP_IDEMPOTENCY_KEY="approve-1")
    assert first.status_code == again.status_code == 200
    assert again.json()["allocation"] == first.json()["allocation"]
    assert AuditEvent.objects.filter(subject_type="capacityrequest", subject_id=rid,
                                     action="request.approved").count() == 1
    # Without the key the same retry is what it always was: refused, nothing done twice.
    assert api.post(f"/api/requests/{rid}/approve/", {"reason": "ok"},
                    format="json").status_code == 400


def test_a_refused_write_is_replayed_and_a_failed_one_is_not_kept(api, tenant, lead, pools):
    api.force_authenticate(lead)
    bad = payload(tenant, title="")
    first = api.post("/api/requests/", bad, format="json", HTTP_IDEMPOTENCY_KEY="bad-1")
    assert first.status_code == 400
    again = api.post("/api/requests/", bad, format="json", HTTP_IDEMPOTENCY_KEY="bad-1")
    assert again.status_code == 400 and again.json() == first.json()
    assert IdempotentResponse.objects.filter(key="bad-1").get().status_code == 400


def test_the_schema_documents_the_header(api, lead):
    api.force_authenticate(lead)
    schema = api.get("/api/schema/?format=json").json()
    post = schema["paths"]["/api/requests/"]["post"]
    names = [p["name"] for p in post.get("parameters", [])]
    assert "Idempotency-Key" in names and "422" in post["responses"]
    get = schema["paths"]["/api/requests/"]["get"]
    assert "Idempotency-Key" not in [p["name"] for p in get.get("parameters", [])]
