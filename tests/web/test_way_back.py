"""The lead's way back: withdraw a filed request, delete a draft, release an allocation
early (billing stops then); each audited, each refused where it makes no sense, in the pages
and the API alike."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from billing.domain import floor_hour
from billing.services import rollup_usage
from fleet.models import Allocation
from intake import services
from intake.models import CapacityRequest
from tenants.models import AuditEvent
from tests.factories import make_request

pytestmark = pytest.mark.django_db


def test_a_lead_withdraws_a_filed_request_and_deletes_a_draft(client, tenant, lead, member,
                                                               admin_user, pools):
    filed = make_request(tenant, lead, submit=True, title="Filed")
    draft = make_request(tenant, lead, title="Draft")
    client.force_login(member)
    assert client.post(f"/requests/{filed.pk}/withdraw/").status_code == 403
    client.force_login(lead)
    assert client.post(f"/requests/{filed.pk}/withdraw/",
                       {"reason": "Budget moved to Q2"}).status_code == 302
    filed.refresh_from_db()
    assert filed.status == "withdrawn"
    assert AuditEvent.objects.get(action="request.withdrawn").reason == "Budget moved to Q2"
    with pytest.raises(services.IntakeError, match="approve"):
        services.request_approve(request=filed, by=admin_user, reason="too late")
    # A draft is deleted; a filed request is not (it is withdrawn instead).
    assert client.post(f"/requests/{filed.pk}/delete/").status_code == 302
    assert CapacityRequest.objects.filter(pk=filed.pk).exists()
    assert client.post(f"/requests/{draft.pk}/delete/").status_code == 302
    assert not CapacityRequest.objects.filter(pk=draft.pk).exists()
    assert AuditEvent.objects.filter(action="request.deleted", subject_id=draft.pk).exists()


def test_the_api_withdraws_and_deletes_like_the_pages(client, tenant, lead, pools):
    filed = make_request(tenant, lead, submit=True)
    draft = make_request(tenant, lead)
    client.force_login(lead)
    answer = client.post(f"/api/requests/{filed.pk}/withdraw/", {"reason": "no longer"},
                         content_type="application/json")
    assert answer.status_code == 200 and answer.json()["status"] == "withdrawn"
    assert client.delete(f"/api/requests/{filed.pk}/").status_code == 400  # not a draft
    assert client.delete(f"/api/requests/{draft.pk}/").status_code == 204
    assert not CapacityRequest.objects.filter(pk=draft.pk).exists()


def test_releasing_early_stops_billing_at_that_moment(client, settings, tenant, lead,
                                                      admin_user, pools,
                                                      django_capture_on_commit_callbacks):
    settings.PORTAL_USAGE_SOURCE = "portal.demo_usage.used_device_seconds"
    req = make_request(tenant, lead, submit=True)
    with django_capture_on_commit_callbacks(execute=True):
        req = services.request_approve(request=req, by=admin_user, reason="Fits.")
    alloc = req.allocation
    alloc.refresh_from_db()
    assert alloc.status == "active"
    start = floor_hour(timezone.now()) - dt.timedelta(hours=3)
    Allocation.objects.filter(pk=alloc.pk).update(starts_at=start, ends_at=None)
    client.force_login(lead)
    with django_capture_on_commit_callbacks(execute=True):
        assert client.post(f"/requests/{req.pk}/release/",
                           {"reason": "Training finished early"}).status_code == 302
    alloc.refresh_from_db()
    assert alloc.status == "retired" and alloc.ends_at <= timezone.now()
    req.refresh_from_db()
    assert req.status == "retired"  # the request follows its allocation
    rollup_usage(start=start, end=timezone.now() + dt.timedelta(hours=2))
    assert all(h.hour < alloc.ends_at for h in alloc.hours.all())
    assert AuditEvent.objects.filter(action="allocation.released").exists()
    # Nothing left to release.
    answer = client.post(f"/requests/{req.pk}/release/")
    assert answer.status_code == 302
    assert AuditEvent.objects.filter(action="allocation.released").count() == 1


def test_the_api_releases_for_the_lead_and_the_admin_only(client, tenant, lead, member,
                                                           other_lead, admin_user, pools,
                                                           django_capture_on_commit_callbacks):
    req = make_request(tenant, lead, submit=True)
    with django_capture_on_commit_callbacks(execute=True):
        req = services.request_approve(request=req, by=admin_user, reason="Fits.")
    url = f"/api/allocations/{req.allocation_id}/release/"
    client.force_login(other_lead)
    assert client.post(url, {}, content_type="application/json").status_code == 404
    client.force_login(member)
    assert client.post(url, {}, content_type="application/json").status_code == 403
    client.force_login(lead)
    with django_capture_on_commit_callbacks(execute=True):
        answer = client.post(url, {"reason": "done"}, content_type="application/json")
    assert answer.status_code == 200 and answer.json()["status"] == "retired"
    again = client.post(url, {}, content_type="application/json")
    assert again.status_code == 400 and "nothing to release" in again.json()["message"]


def test_a_reason_too_long_is_refused_alike_by_page_and_api(client, tenant, lead, pools):
    """One rule for reasons (tenants.audit.reason_error): the page no longer cuts what the API
    refuses."""
    from tenants.audit import REASON_MAX

    filed = make_request(tenant, lead, submit=True)
    client.force_login(lead)
    long = "x" * (REASON_MAX + 1)
    client.post(f"/requests/{filed.pk}/withdraw/", {"reason": long})
    filed.refresh_from_db()
    assert filed.status == "submitted"
    api = client.post(f"/api/requests/{filed.pk}/withdraw/", {"reason": long},
                      content_type="application/json")
    assert api.status_code == 400
    filed.refresh_from_db()
    assert filed.status == "submitted"
