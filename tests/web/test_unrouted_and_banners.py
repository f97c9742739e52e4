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


def test_a_retired_node_is_told_as_a_retirement_and_not_credited(
        client, tenant, lead, admin_user, pools, mailoutbox, django_capture_on_commit_callbacks):
    """Marking a healthy node for retirement is planned work, not a failure: the tenant is
    told so (page, API and an e-mail to its leads) and no outage credit is opened."""
    from fleet.inventory.services import node_set_retiring
    from fleet.models import GpuNode, NodeOutage, Pool, Route

    dedicated = Pool.objects.get(route=Route.DEDICATED_BLOCK)
    node = GpuNode.objects.create(name="blk-a", pool=dedicated, gpu_count=8, validated=True,
                                  ready=True, present=True, state="schedulable")
    req = make_request(tenant, lead, submit=True, whole_devices=8,
                       isolation_origin="contractual", isolation_reference="MSA-42")
    with django_capture_on_commit_callbacks(execute=True):
        services.request_approve(request=req, by=admin_user, reason="ok")
    req.refresh_from_db()
    alloc = req.allocation
    alloc.nodes.set([node])
    with django_capture_on_commit_callbacks(execute=True):
        node_set_retiring(node=node, by=admin_user, retiring=True, reason="Warranty ends")
    alloc.refresh_from_db()
    assert "being retired" in alloc.flag_words and "failed" not in alloc.flag_words
    assert not NodeOutage.objects.filter(node=node).exists()  # no credit for planned work
    client.force_login(lead)
    page = client.get(reverse("intake:detail", args=[req.pk])).content.decode()
    assert "being retired" in page and "blk-a" not in page
    assert any("being retired" in m.body for m in mailoutbox if lead.email in m.to)
