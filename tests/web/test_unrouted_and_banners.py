"""Pages that must not assume a route, and decision banners that must not outlive their
decision (found by a new-user pass: a 500 an admin reached by clicking; a green banner on a
request nobody had decided)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from intake import services
from tests.factories import make_request

pytestmark = pytest.mark.django_db


def test_an_unrouted_draft_opens_for_the_admin_and_the_lead(client, tenant, lead, admin_user,
                                                           pools):
    # 200 GB on a small device: no slice holds it and one device cannot, so no route.
    req = make_request(tenant, lead, device_fill="small", replicas=1, memory_gb=200,
                       mig_profile="", whole_devices=0)
    for user, url in ((admin_user, reverse("intake:review_detail", args=[req.pk])),
                      (lead, reverse("intake:detail", args=[req.pk]))):
        client.force_login(user)
        page = client.get(url)
        assert page.status_code == 200, url
        assert "Not routed yet" in page.content.decode()


def test_a_resubmitted_request_shows_no_old_decision(client, tenant, lead, admin_user, pools):
    req = make_request(tenant, lead, submit=True)
    services.request_request_changes(request=req, by=admin_user, reason="Halve it, please.")
    req.refresh_from_db()
    client.force_login(lead)
    page = client.get(reverse("intake:detail", args=[req.pk])).content.decode()
    assert "Halve it, please." in page
    services.request_update(request=req, by=lead, fields={"whole_devices": 2})
    services.request_submit(request=req, by=lead)
    for user, url in ((lead, reverse("intake:detail", args=[req.pk])),
                      (admin_user, reverse("intake:review_detail", args=[req.pk]))):
        client.force_login(user)
        body = client.get(url).content.decode()
        assert "<strong>Decision:</strong>" not in body, url  # nobody has decided this one
