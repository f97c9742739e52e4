"""Stranded capacity's pages, API and /metrics: a lead sees and answers its tenant's findings
in one step, never another tenant's; admins see every finding and the fleet board."""

import datetime as dt
import json
import re
from decimal import Decimal
from urllib.parse import unquote_plus

import pytest
from django.test import TestCase
from django.utils import timezone
from rest_framework.test import APIClient

from billing.domain import month_start
from billing.models import StrandedFinding
from billing.services import refresh_months
from billing.stranded import Hold, idle_hold, summarise
from billing.stranded_services import findings_record
from billing.stranded_thresholds import Thresholds
from fleet.domain import Route
from intake import services
from tenants.audit import audit_for
from tests.factories import make_request, usage_hour

pytestmark = pytest.mark.django_db
TH = Thresholds()


def _active(tenant, lead, admin_user, title):
    req = make_request(tenant, lead, submit=True, title=title)
    with TestCase.captureOnCommitCallbacks(execute=True):
        services.request_approve(request=req, by=admin_user, reason="ok")
    req.refresh_from_db()
    return req.allocation


def _found(alloc, now):
    h = Hold(allocation_id=alloc.pk, tenant=alloc.tenant.slug, pool=alloc.pool.slug,
             route=Route(alloc.route), held_devices=alloc.device_equivalents,
             held_since=now - dt.timedelta(days=3), rate_per_device_hour=Decimal("2.50"))
    return idle_hold(h, summarise([], now - TH.window, now), TH)


@pytest.fixture
def findings(tenant, other_tenant, lead, other_lead, admin_user, pools):
    now = timezone.now()
    mine = _active(tenant, lead, admin_user, "Mine")
    theirs = _active(other_tenant, other_lead, admin_user, "Theirs")
    findings_record(findings=[_found(mine, now), _found(theirs, now)],
                    judged={mine.pk, theirs.pk}, now=now)
    return (StrandedFinding.objects.get(allocation=mine),
            StrandedFinding.objects.get(allocation=theirs))


def test_a_lead_sees_its_tenants_findings_only(client, lead, findings):
    mine, theirs = findings
    client.force_login(lead)
    page = client.get("/stranded/").content.decode()
    assert mine.allocation.namespace in page and theirs.allocation.namespace not in page
    assert f"{mine.cost_per_day:,.2f}" in page  # its price a day
    assert client.get(f"/stranded/{theirs.pk}/").status_code == 404
    detail = client.get(f"/stranded/{mine.pk}/").content.decode()
    assert "Your answer" in detail and "Evidence" in detail and "Release it" in detail


def test_the_lead_accepts_in_one_step_and_the_allocation_is_released(client, lead, findings):
    mine, _ = findings
    client.force_login(lead)
    with TestCase.captureOnCommitCallbacks(execute=True):
        response = client.post(f"/stranded/{mine.pk}/answer/", {"decision": "accept"})
    assert response.status_code == 302
    mine.refresh_from_db()
    mine.allocation.refresh_from_db()
    assert mine.status == "accepted" and mine.allocation.status == "retired"
    assert "Released" in client.get(response["Location"]).content.decode()


def test_keeping_needs_a_reason_and_the_page_says_so(client, lead, findings):
    mine, _ = findings
    client.force_login(lead)
    refused = client.post(f"/stranded/{mine.pk}/answer/", {"decision": "decline",
                                                            "reason": ""})
    assert refused.status_code == 400 and "Say why it is kept" in refused.content.decode()
    kept = client.post(f"/stranded/{mine.pk}/answer/", {"decision": "decline",
                                                         "reason": "quarter-end runs"})
    assert kept.status_code == 302
    mine.refresh_from_db()
    assert mine.status == "declined"
    assert audit_for(mine).filter(action="stranded.declined", actor=lead).exists()


def test_a_member_sees_but_does_not_answer(client, member, findings):
    mine, _ = findings
    client.force_login(member)
    assert "Your answer" not in client.get(f"/stranded/{mine.pk}/").content.decode()
    assert client.post(f"/stranded/{mine.pk}/answer/",
                       {"decision": "accept"}).status_code == 403


def test_admins_see_every_finding_and_the_fleet_board(client, admin_user, findings):
    mine, theirs = findings
    client.force_login(admin_user)
    page = client.get("/stranded/").content.decode()
    assert mine.allocation.namespace in page and theirs.allocation.namespace in page
    board = client.get("/stranded/board/").content.decode()
    assert mine.pool.slug in board and "stranded (device-hours) in 90 days" in board
    assert "open finding(s)" in board


def test_the_board_counts_given_back_devices(client, lead, admin_user, findings):
    mine, _ = findings
    client.force_login(lead)
    with TestCase.captureOnCommitCallbacks(execute=True):
        client.post(f"/stranded/{mine.pk}/answer/", {"decision": "accept"})
    client.force_login(admin_user)
    board = client.get("/stranded/board/").content.decode()
    assert "Given back" in board and lead.username in board


def test_the_api_lists_a_tenants_own_and_answers(lead, other_lead, findings):
    mine, theirs = findings
    api = APIClient()
    api.force_authenticate(lead)
    body = api.get("/api/stranded/").json()
    rows = body["results"] if isinstance(body, dict) else body
    assert [r["id"] for r in rows] == [mine.pk]
    assert rows[0]["kind"] == "idle_hold" and rows[0]["evidence"]["series"]["samples"] == 0
    assert api.get(f"/api/stranded/{theirs.pk}/").status_code == 404
    refused = api.post(f"/api/stranded/{mine.pk}/answer/", {"decision": "decline"},
                       format="json")
    assert refused.status_code == 400 and "reason" in refused.json()["extra"]["fields"]
    kept = api.post(f"/api/stranded/{mine.pk}/answer/",
                    {"decision": "decline", "reason": "needed"}, format="json")
    assert kept.status_code == 200 and kept.json()["status"] == "declined"
    assert api.get("/api/stranded/?status=open").json() in ([], {"count": 0, "next": None,
                                                                 "previous": None,
                                                                 "results": []})


def test_metrics_export_the_open_findings(client, findings):
    mine, _ = findings
    text = client.get("/metrics").content.decode()
    assert "# TYPE aifactory_stranded_device_hours gauge" in text
    line = next(ln for ln in text.splitlines() if ln.startswith(
        f'aifactory_stranded_devices{{tenant="{mine.tenant.slug}"'))
    assert line.endswith(f"{mine.stranded_devices:.4f}")
    hours = next(ln for ln in text.splitlines() if ln.startswith(
        f'aifactory_stranded_device_hours{{tenant="{mine.tenant.slug}"'))
    assert float(hours.rsplit(" ", 1)[1]) >= float(mine.stranded_devices) * 24 - 0.01


def test_a_lead_sets_the_grace_policy_on_the_page(client, lead, tenant, findings):
    from billing.models import StrandedPolicy

    client.force_login(lead)
    page = client.get("/stranded/").content.decode()
    assert "when nobody answers" in page and "Remind the leads only" in page
    refused = client.post(f"/stranded/policy/{tenant.slug}/",
                          {"when_unanswered": "release", "grace_days": "0"})
    assert refused.status_code == 400 and 'id="grace-acme-error"' in refused.content.decode()
    saved = client.post(f"/stranded/policy/{tenant.slug}/",
                        {"when_unanswered": "release", "grace_days": "5"})
    assert saved.status_code == 302
    policy = StrandedPolicy.objects.get(tenant=tenant)
    assert (policy.when_unanswered, policy.grace_days, policy.updated_by) == ("release", 5,
                                                                              lead)


def test_findings_are_shown_where_people_already_look(client, lead, admin_user, tenant,
                                                      finance_user, findings):
    mine, theirs = findings
    found = f"{mine.stranded_devices:.0f} device(s) held and unused"
    client.force_login(lead)
    home = client.get("/").content.decode()  # the lead's overview: its own tenant's only
    assert "Stranded capacity:" in home and found in home and f"/stranded/{mine.pk}/" in home
    assert f"/stranded/{theirs.pk}/" not in home
    request_page = client.get(f"/requests/{mine.allocation.request.pk}/").content.decode()
    assert f"/stranded/{mine.pk}/" in request_page and "Idle hold" in request_page
    # A new request from a tenant with a standing idle hold says so to the reviewer.
    new = make_request(tenant, lead, submit=True, title="More")
    client.force_login(admin_user)
    review = client.get(f"/review/{new.pk}/").content.decode()
    assert "already holds" in review and f"/stranded/{mine.pk}/" in review
    home = client.get("/").content.decode()  # the admin's: the fleet's
    assert "across the fleet" in home and "2 open findings" in home
    month = month_start(timezone.now())
    hour = dt.datetime.combine(month, dt.time(), tzinfo=dt.UTC)
    usage_hour(mine.allocation, hour, 3600, 0, Decimal("2.50"))
    refresh_months({(mine.allocation_id, month)})
    client.force_login(finance_user)
    statement = client.get(f"/billing/{tenant.slug}/{month:%Y-%m}/").content.decode()
    assert f"/stranded/{mine.pk}/" in statement  # the line's idle hours lead to the finding
    client.force_login(admin_user)
    board = client.get("/stranded/board/").content.decode()
    series = json.loads(re.search(r'<script id="trend-[^"]+" type="application/json">(.*?)'
                                  r"</script>", board, re.S).group(1))
    assert len(series["labels"]) == 90 and sum(series["stranded_h"]) > 0
    assert 'data-chart="stranded"' in board


def test_metrics_count_what_was_given_back(client, lead, findings):
    mine, _ = findings
    before = client.get("/metrics").content.decode()  # kept until a finding is written
    assert "aifactory_stranded_given_back_devices{" not in before
    assert f'aifactory_stranded_devices{{tenant="{mine.tenant.slug}"' in before
    client.force_login(lead)
    with TestCase.captureOnCommitCallbacks(execute=True):
        client.post(f"/stranded/{mine.pk}/answer/", {"decision": "accept"})
    text = client.get("/metrics").content.decode()
    assert (f'aifactory_stranded_given_back_devices{{tenant="{mine.tenant.slug}",'
            f'pool="{mine.pool.slug}"}} {mine.stranded_devices:.4f}') in text
    assert f'aifactory_stranded_devices{{tenant="{mine.tenant.slug}"' not in text  # answered


def test_a_move_to_mig_is_converted_into_a_new_request_the_lead_files(client, lead, tenant,
                                                                      findings):
    mine, _ = findings
    StrandedFinding.objects.filter(pk=mine.pk).update(
        action="move_to_mig", proposal="8 whole device(s) → 2 × MIG 3g.40gb in mig",
        proposal_data={"action": "move_to_mig", "mig_profile_after": "3g.40gb",
                       "mig_count_after": 2, "pool_after": "mig"})
    client.force_login(lead)
    page = client.get(f"/stranded/{mine.pk}/").content.decode()
    link = next(part for part in page.split('"') if part.startswith("/requests/new/?"))
    form = client.get(link.replace("&amp;", "&")).content.decode()
    assert 'value="3g.40gb" selected' in form  # the profile chosen, as the finding says
    assert f"From stranded finding #{mine.pk}" in unquote_plus(link)
    assert 'name="replicas"' in form and 'value="2"' in form
    assert "Not routed yet" not in form and "MIG under vCluster" in form  # previewed at once
    # Nothing is filed for the lead: the form only shows the answers.
    assert not tenant.requests.filter(title__startswith="MIG slices").exists()


def test_the_review_queue_says_which_tenants_hold_unused_devices(client, admin_user, lead,
                                                                 tenant, findings):
    mine, _ = findings
    new = make_request(tenant, lead, submit=True, title="Wants more")
    client.force_login(admin_user)
    page = client.get("/review/").content.decode()
    row = next(r for r in page.split("<tr>") if f"#{new.pk} Wants more" in r)
    assert f"holds {mine.stranded_devices:.0f} unused device(s)" in row
