"""Every page for every role: lead of the tenant, lead elsewhere, member, admin, finance."""

import datetime as dt
import re

import pytest
from django.urls import reverse
from django.utils import timezone

from intake import services
from intake.models import CapacityRequest
from tenants.models import Membership, Tenant
from tests.factories import form_data, make_request

pytestmark = pytest.mark.django_db


@pytest.fixture
def users(lead, other_lead, member, admin_user, finance_user):
    return {"lead": lead, "other_lead": other_lead, "member": member, "admin": admin_user,
            "finance": finance_user}


@pytest.fixture
def draft(tenant, lead, pools):
    return make_request(tenant, lead, title="Draft one")


@pytest.fixture
def submitted(tenant, lead, pools):
    return make_request(tenant, lead, submit=True, title="Submitted one")


@pytest.mark.parametrize(("who", "status"), [
    ("lead", 200), ("other_lead", 404), ("member", 200), ("admin", 200), ("finance", 200),
    (None, 302)])
def test_request_detail(client, users, draft, who, status):
    if who:
        client.force_login(users[who])
    response = client.get(reverse("intake:detail", args=[draft.pk]))
    assert response.status_code == status
    if status == 200:
        assert b"Draft one" in response.content
        assert b"Timeline" in response.content


@pytest.mark.parametrize(("who", "sees"), [
    ("lead", True), ("other_lead", False), ("member", True), ("admin", True), ("finance", True)])
def test_request_list_is_scoped_to_the_tenant(client, users, draft, who, sees):
    client.force_login(users[who])
    response = client.get(reverse("intake:list"))
    assert response.status_code == 200
    assert (b"Draft one" in response.content) is sees


def test_the_request_list_shows_what_was_written_since_the_last_view(client, lead, draft,
                                                                     other_lead, tenant):
    """A page of the list is kept across views (intake.selectors.request_list_rows): a
    rename, a new request and a status change written behind a view show on the next, in
    each status and tenant filter; another tenant's lead still sees none of them."""
    from tests.factories import make_request

    url = reverse("intake:list")
    client.force_login(lead)
    assert "Draft one" in client.get(url).content.decode()
    assert "Draft one" in client.get(url, {"status": "draft"}).content.decode()
    CapacityRequest.objects.filter(pk=draft.pk).update(title="Draft one, renamed")
    make_request(tenant, lead, submit=True, title="Filed later")
    every = client.get(url).content.decode()
    assert "Draft one, renamed" in every and "Filed later" in every
    assert every.index("Filed later") < every.index("Draft one, renamed")  # newest first
    drafts = client.get(url, {"status": "draft"}).content.decode()
    assert "Draft one, renamed" in drafts and "Filed later" not in drafts
    assert "Filed later" in client.get(url, {"tenant": tenant.slug}).content.decode()
    client.force_login(other_lead)
    theirs = client.get(url).content.decode()
    assert "Draft one" not in theirs and "Filed later" not in theirs


def test_request_list_htmx_returns_only_the_rows(client, lead, draft):
    client.force_login(lead)
    response = client.get(reverse("intake:list"), {"status": "draft"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    assert b'id="rows"' in response.content and b"<html" not in response.content


@pytest.mark.parametrize(("who", "status"), [
    ("lead", 200), ("other_lead", 200), ("member", 403), ("admin", 403), ("finance", 403)])
def test_new_request_form_is_for_leads(client, users, pools, who, status):
    client.force_login(users[who])
    assert client.get(reverse("intake:new")).status_code == status


def test_new_request_saves_a_draft(client, tenant, lead, pools):
    client.force_login(lead)
    response = client.post(reverse("intake:new"), {**form_data(tenant), "intent": "draft"})
    req = CapacityRequest.objects.get()
    assert response.status_code == 302 and response["Location"].endswith(f"/requests/{req.pk}/")
    assert req.status == "draft" and req.requester == lead


def test_new_request_can_be_submitted_at_once(client, tenant, lead, pools):
    client.force_login(lead)
    client.post(reverse("intake:new"), {**form_data(tenant), "intent": "submit"})
    assert CapacityRequest.objects.get().status == "submitted"


def test_invalid_form_keeps_every_answer_and_says_what_is_wrong(client, tenant, lead, pools):
    client.force_login(lead)
    data = {**form_data(tenant, isolation_origin="contractual", title="Keep me",
                        justification="Typed with care"), "intent": "submit"}
    response = client.post(reverse("intake:new"), data)
    assert response.status_code == 200
    body = response.content.decode()
    assert "needs evidence" in body
    assert 'value="Keep me"' in body and "Typed with care" in body
    assert not CapacityRequest.objects.exists()


def test_a_submit_refused_by_the_service_leaves_no_draft_behind(client, tenant, lead, pools):
    """The form is valid and a draft could be saved, but submitting is refused (no active
    pool serves the route): the answers come back with the reason, and no draft is left
    behind per attempt."""
    from fleet.models import Pool

    Pool.objects.update(active=False)
    client.force_login(lead)
    data = {**form_data(tenant, title="Nowhere to go"), "intent": "submit"}
    for _attempt in range(3):
        response = client.post(reverse("intake:new"), data)
        body = response.content.decode()
        assert response.status_code == 200 and 'value="Nowhere to go"' in body
        assert "No active pool serves" in body
    assert not CapacityRequest.objects.exists()
    client.post(reverse("intake:new"), {**data, "intent": "draft"})
    assert CapacityRequest.objects.get().status == "draft"  # a draft is still allowed


def test_lead_cannot_file_for_another_tenant(client, other_tenant, lead, pools):
    client.force_login(lead)
    response = client.post(reverse("intake:new"), {**form_data(other_tenant), "intent": "draft"})
    assert response.status_code == 200
    assert b"Select a valid choice" in response.content
    assert not CapacityRequest.objects.exists()


def test_preview_shows_route_price_and_fit(client, tenant, lead, pools):
    client.force_login(lead)
    response = client.post(reverse("intake:preview"), form_data(tenant, whole_devices=2),
                           HTTP_HX_REQUEST="true")
    body = response.content.decode()
    assert response.status_code == 200 and "<html" not in body
    assert 'id="preview"' in body and "Shared pool" in body
    assert "3,650.00" in body  # 2 devices × 730 h × 2.50
    assert "Fits now" in body
    assert 'class="active"' in body


def test_small_answers_that_become_whole_nodes_show_both_prices(client, tenant, lead, pools):
    """70 GB per replica fits no MIG slice of an 80 GB device: behind a contractual boundary
    that is a dedicated block of whole nodes. The preview says so before submit, with the
    price of the confidential pool the answers were given for, and the reason does not
    pretend the tenant asked for whole devices."""
    client.force_login(lead)
    data = form_data(tenant, isolation_origin="contractual", isolation_reference="MSA-77 §4",
                     device_fill="small", whole_devices=0, replicas=2, memory_gb=70)
    body = client.post(reverse("intake:preview"), data, HTTP_HX_REQUEST="true"
                       ).content.decode()
    assert "Dedicated block" in body and "Whole devices, not slices" in body
    assert "11,680.00" in body  # one 8-device node × 730 h × 2.00
    assert "4,380.00" in body  # the confidential pool: 2 devices × 730 h × 3.00
    assert "2 whole device(s) fill whole nodes" not in body
    assert "no MIG slice holds them" in body


def test_preview_changes_with_the_answers(client, tenant, lead, pools):
    client.force_login(lead)
    body = client.post(reverse("intake:preview"), form_data(
        tenant, isolation_origin="regulatory", isolation_reference="HIPAA PHI",
        whole_devices=2)).content.decode()
    assert "Dedicated block" in body and "(HIPAA PHI)" in body
    assert "reserves whole nodes" in body


@pytest.mark.parametrize(("who", "status"), [
    ("member", 403), ("finance", 403), ("other_lead", 200), ("admin", 200)])
def test_preview_roles(client, users, tenant, pools, who, status):
    client.force_login(users[who])
    assert client.post(reverse("intake:preview"), form_data(tenant)).status_code == status


@pytest.mark.parametrize(("who", "status"), [
    ("lead", 200), ("other_lead", 404), ("member", 403), ("admin", 403), ("finance", 403)])
def test_edit_request(client, users, draft, who, status):
    client.force_login(users[who])
    assert client.get(reverse("intake:edit", args=[draft.pk])).status_code == status


def test_edit_then_submit(client, tenant, lead, draft):
    client.force_login(lead)
    response = client.post(reverse("intake:edit", args=[draft.pk]),
                           {**form_data(tenant, title="Renamed"), "intent": "submit"})
    assert response.status_code == 302
    draft.refresh_from_db()
    assert (draft.title, draft.status) == ("Renamed", "submitted")


@pytest.mark.parametrize(("who", "status", "after"), [
    ("lead", 302, "submitted"), ("other_lead", 404, "draft"), ("member", 403, "draft"),
    ("admin", 403, "draft")])
def test_submit_button(client, users, draft, who, status, after):
    client.force_login(users[who])
    response = client.post(reverse("intake:submit", args=[draft.pk]))
    assert response.status_code == status
    draft.refresh_from_db()
    assert draft.status == after


@pytest.mark.parametrize(("who", "status"), [
    ("lead", 403), ("other_lead", 403), ("member", 403), ("admin", 200), ("finance", 403)])
def test_review_queue_is_for_admins(client, users, submitted, who, status):
    client.force_login(users[who])
    response = client.get(reverse("intake:review_queue"))
    assert response.status_code == status
    if status == 200:
        assert b"Submitted one" in response.content


@pytest.mark.parametrize(("who", "status"), [
    ("lead", 403), ("other_lead", 403), ("member", 403), ("admin", 200), ("finance", 403)])
def test_review_detail_is_for_admins(client, users, submitted, who, status):
    client.force_login(users[who])
    assert client.get(reverse("intake:review_detail", args=[submitted.pk])).status_code == status


def test_admin_approves_from_the_review_page(client, admin_user, submitted):
    client.force_login(admin_user)
    response = client.post(reverse("intake:review_detail", args=[submitted.pk]),
                           {"action": "approve", "reason": "Fits the shared pool"})
    assert response.status_code == 302
    submitted.refresh_from_db()
    assert submitted.status == "approved" and submitted.allocation is not None


def test_review_decision_without_reason_is_refused(client, admin_user, submitted):
    client.force_login(admin_user)
    response = client.post(reverse("intake:review_detail", args=[submitted.pk]),
                           {"action": "deny", "reason": ""})
    assert response.status_code == 200 and b"Give a reason" in response.content
    submitted.refresh_from_db()
    assert submitted.status == "submitted"


def test_second_approval_shows_who_won(client, admin_user, submitted):
    from intake import services
    from tenants.models import PlatformRole
    from tests.factories import make_platform_user

    winner = make_platform_user("winner", PlatformRole.Role.PLATFORM_ADMIN)
    services.request_approve(request=submitted, by=winner, reason="mine")
    client.force_login(admin_user)
    response = client.post(reverse("intake:review_detail", args=[submitted.pk]),
                           {"action": "approve", "reason": "also mine"})
    assert response.status_code == 200
    assert b"winner decided it at" in response.content


@pytest.mark.parametrize("who", ["lead", "member", "admin", "finance", "other_lead"])
def test_dashboard_for_every_role(client, users, draft, who):
    client.force_login(users[who])
    response = client.get(reverse("home"))
    assert response.status_code == 200
    assert b"Pool capacity" in response.content
    assert (b"Draft one" in response.content) is (who != "other_lead")


def test_anonymous_home_and_login_page(client):
    assert b"Sign in" in client.get(reverse("home")).content
    response = client.get(reverse("account_login"))
    assert response.status_code == 200 and b"Demo accounts" in response.content


def test_signup_is_closed(client):
    response = client.get("/accounts/signup/")
    assert response.status_code == 200 and b"closed" in response.content.lower()


def test_csrf_is_enforced(tenant, lead, pools):
    from django.test import Client

    strict = Client(enforce_csrf_checks=True)
    strict.force_login(lead)
    response = strict.post(reverse("intake:new"), {**form_data(tenant), "intent": "draft"})
    assert response.status_code == 403
    assert not CapacityRequest.objects.exists()


@pytest.fixture
def approved(tenant, lead, admin_user, pools, django_capture_on_commit_callbacks):
    from intake import services

    req = make_request(tenant, lead, submit=True, title="Approved one")
    with django_capture_on_commit_callbacks(execute=True):
        services.request_approve(request=req, by=admin_user, reason="ok")
    req.refresh_from_db()
    return req


def test_approval_provisions_through_the_dry_run_backend(approved):
    assert approved.status == "active"
    assert approved.allocation.status == "active"
    assert approved.allocation.progress_done == approved.allocation.progress_total > 0


@pytest.mark.parametrize(("who", "status"), [
    ("lead", 200), ("member", 200), ("other_lead", 404), ("admin", 200), ("finance", 200)])
def test_allocation_panel_and_manifests(client, users, approved, who, status):
    client.force_login(users[who])
    panel = client.get(reverse("intake:allocation", args=[approved.pk]))
    assert panel.status_code == status
    manifests = client.get(reverse("intake:manifests", args=[approved.pk]))
    assert manifests.status_code == status
    if status == 200:
        assert b"<html" not in panel.content and b"acme-r" in panel.content
        assert b"kind: ResourceQuota" in manifests.content


def test_the_request_page_shows_what_was_written_to_its_allocation_since_the_last_view(
        client, lead, admin_user, approved):
    """The allocation panel's extras are kept across views (intake.selectors.allocation_panel);
    a resize, a trace and a node reservation written meanwhile show on the next view."""
    from django.utils import timezone

    from fleet.models import AllocationResize, GpuNode
    from intake.models import AllocationTrace

    alloc = approved.allocation
    url = reverse("intake:detail", args=[approved.pk])
    client.force_login(admin_user)
    first = client.get(url).content.decode()
    assert "Resized" not in first and "Reserved nodes" not in first and "spans" not in first
    AllocationResize.objects.create(
        allocation=alloc, at=timezone.now(), whole_devices_before=1, whole_devices_after=2,
        mig_count_before=0, mig_count_after=0, devices_before=1, devices_after=2,
        reason="grown for the long run")
    AllocationTrace.objects.create(allocation=alloc, trace_id="ab" * 16, spans=9,
                                   exported_at=timezone.now())
    node = GpuNode.objects.filter(pool=alloc.pool).first()
    alloc.nodes.add(node)
    then = client.get(url).content.decode()
    assert "grown for the long run" in then and "resized since approval" in then
    assert "ab" * 16 in then and "9 spans" in then
    assert f"<code>{node.name}</code>" in then
    client.force_login(lead)  # a tenant is told how many nodes, not which
    theirs = client.get(url).content.decode()
    assert "1 whole validated node" in theirs and f"<code>{node.name}</code>" not in theirs


def test_timeline_includes_the_allocation(client, lead, approved):
    client.force_login(lead)
    body = client.get(reverse("intake:detail", args=[approved.pk])).content.decode()
    assert "Provisioned:" in body and "Provisioning started." in body


def test_the_timeline_shows_what_was_recorded_since_the_last_view(client, lead, admin_user,
                                                                  approved):
    """The timeline is kept across views (intake.selectors.request_events) until an audit
    row is written: an event recorded about the request, or about its allocation, shows on
    the next view of both pages; a node reservation's event stays the admin's."""
    from tenants.audit import audit_record as record

    alloc = approved.allocation
    lead_url = reverse("intake:detail", args=[approved.pk])
    review_url = reverse("intake:review_detail", args=[approved.pk])
    client.force_login(lead)
    assert "Renewal asked for by finance" not in client.get(lead_url).content.decode()
    client.force_login(admin_user)
    assert "Renewal asked for by finance" not in client.get(review_url).content.decode()
    record(actor=admin_user, subject=approved, tenant=approved.tenant,
           action="request.commented", reason="Renewal asked for by finance")
    record(actor=admin_user, subject=alloc, tenant=approved.tenant,
           action="allocation.nodes_reserved", reason="Reserved gpu-node-zz for it")
    review = client.get(review_url).content.decode()
    assert "Renewal asked for by finance" in review and "gpu-node-zz" in review
    client.force_login(lead)
    theirs = client.get(lead_url).content.decode()
    assert "Renewal asked for by finance" in theirs and "gpu-node-zz" not in theirs


def test_habitual_request_drops_a_stale_reference(client, tenant, lead, pools):
    client.force_login(lead)
    client.post(reverse("intake:new"), {**form_data(tenant, isolation_reference="MSA-1"),
                                        "intent": "draft"})
    assert CapacityRequest.objects.get().isolation_reference == ""


@pytest.mark.parametrize(("who", "status"), [
    ("lead", 403), ("member", 403), ("other_lead", 403), ("finance", 403)])
def test_retry_is_for_admins(client, users, approved, who, status):
    client.force_login(users[who])
    assert client.post(reverse("intake:retry", args=[approved.pk])).status_code == status


def test_retry_of_an_active_allocation_is_refused(client, admin_user, approved):
    client.force_login(admin_user)
    response = client.post(reverse("intake:retry", args=[approved.pk]), follow=True)
    assert b"Only a failed allocation can be retried" in response.content


@pytest.mark.parametrize("who", ["lead", "admin"])
def test_the_allocation_panel_speaks_to_each_status(client, users, tenant, lead, admin_user,
                                                    pools, who):
    """A failed allocation's message reads as a failure and admins get Retry; an expiring
    one says when it ends and how to keep it (the template names the statuses)."""
    from fleet.allocations.transitions import allocation_transition
    from fleet.models import Allocation
    from intake import services

    req = make_request(tenant, lead, submit=True)
    req = services.request_approve(request=req, by=admin_user, reason="ok")  # not provisioned
    S = Allocation.Status
    allocation_transition(req.allocation_id, from_states={S.PENDING}, to=S.FAILED,
                          reason="test", message="The API server said no.")
    client.force_login(users[who])
    panel = client.get(reverse("intake:allocation", args=[req.pk])).content.decode()
    assert '<p class="fit fit-never">The API server said no.</p>' in panel
    assert ("Retry provisioning" in panel) is (who == "admin")
    assert "File a renewal request before then" not in panel
    for to in (S.PENDING, S.PROVISIONING, S.ACTIVE, S.EXPIRING):
        allocation_transition(req.allocation_id, from_states=set(S.values), to=to,
                              reason="test", message="ok")
    panel = client.get(reverse("intake:allocation", args=[req.pk])).content.decode()
    assert "File a renewal request before then" in panel
    assert "Retry provisioning" not in panel and "fit fit-never" not in panel


def test_admin_preview_of_a_submitted_request_shows_dry_run_rows(client, admin_user,
                                                                submitted):
    client.force_login(admin_user)
    body = client.get(reverse("intake:manifests", args=[submitted.pk])).content.decode()
    assert "the embedded dry-run backend has no API server" in body
    assert "kind: ClusterQueue" in body


def test_dashboard_warns_the_lead_of_an_expiring_allocation(client, lead, other_lead,
                                                            approved):
    import datetime as dt

    from django.utils import timezone

    from fleet.models import Allocation

    client.force_login(lead)
    # Viewed before and after: the overview's rows are kept across views until a write.
    before = client.get(reverse("home")).content.decode()
    assert "Renew it" not in before and f"#{approved.pk} Approved one" in before
    Allocation.objects.filter(pk=approved.allocation_id).update(
        status="expiring", ends_at=timezone.now() + dt.timedelta(days=3))
    CapacityRequest.objects.filter(pk=approved.pk).update(title="Renamed since")
    body = client.get(reverse("home")).content.decode()
    assert "ends" in body and "Renew it" in body
    assert f'href="{reverse("intake:detail", args=[approved.pk])}">Renew it' in body
    assert f"#{approved.pk} Renamed since" in body
    client.force_login(other_lead)
    assert "Renew it" not in client.get(reverse("home")).content.decode()


def test_lead_renews_from_the_request_page(client, lead, member, approved):
    client.force_login(member)
    client.post(reverse("intake:renew", args=[approved.pk]))
    assert not CapacityRequest.objects.filter(renews__isnull=False).exists()
    client.force_login(lead)
    response = client.post(reverse("intake:renew", args=[approved.pk]))
    renewal = CapacityRequest.objects.get(renews__isnull=False)
    assert response["Location"].endswith(f"/requests/{renewal.pk}/edit/")
    assert renewal.title.startswith("Renewal:")


def test_tenants_never_see_node_names(client, lead, admin_user, tenant, pools,
                                      django_capture_on_commit_callbacks):
    from fleet.inventory.sync import fleet_sync
    from fleet.kube import DryRunBackend
    from fleet.models import Pool, Route
    from intake import services
    from portal.demo_fleet import demo_fleet

    Pool.objects.filter(pk=pools[Route.DEDICATED_BLOCK].pk).update(slug="dedicated-h100")
    backend = DryRunBackend()
    for obj in demo_fleet():
        backend.apply(obj)
    fleet_sync(backend=backend)
    req = make_request(tenant, lead, submit=True, whole_devices=8,
                       isolation_origin="contractual", isolation_reference="MSA-5")
    with django_capture_on_commit_callbacks(execute=True):
        services.request_approve(request=req, by=admin_user, reason="ok")
    client.force_login(lead)
    for url in (reverse("intake:detail", args=[req.pk]),
                reverse("intake:manifests", args=[req.pk])):
        body = client.get(url).content.decode()
        assert "h100-dedicated" not in body, url
    assert "1 whole validated node" in client.get(
        reverse("intake:detail", args=[req.pk])).content.decode()
    client.force_login(admin_user)
    body = client.get(reverse("intake:manifests", args=[req.pk])).content.decode()
    assert "h100-dedicated" in body


def test_review_page_loads_the_dry_run_as_a_fragment(client, admin_user, submitted):
    client.force_login(admin_user)
    page = client.get(reverse("intake:review_detail", args=[submitted.pk])).content.decode()
    assert "What approval creates" in page and "Asking the API server" in page
    fragment = client.get(reverse("intake:manifests", args=[submitted.pk]),
                          HTTP_HX_REQUEST="true").content.decode()
    assert '<div id="objects">' in fragment and "<html" not in fragment
    assert "kind: ResourceQuota" in fragment


def test_choosing_an_override_route_previews_that_routes_objects(client, admin_user,
                                                                 submitted, lead):
    """Issue #46: the override select asks for the objects of the route chosen, and the
    fragment it gets is that route's (a dedicated block's guards and nodes), not the
    matrix route's; a lead asking the same is shown the request's own objects."""
    client.force_login(admin_user)
    url = reverse("intake:manifests", args=[submitted.pk])
    page = client.get(reverse("intake:review_detail", args=[submitted.pk])).content.decode()
    select = page[page.index('name="override_route"') - 200:page.index('name="override_route"')
                  + 300]
    assert f'hx-get="{url}"' in select and 'hx-target="#objects"' in select
    matrix = client.get(url, HTTP_HX_REQUEST="true").content.decode()
    chosen = client.get(url, {"override_route": "dedicated_block"},
                        HTTP_HX_REQUEST="true").content.decode()
    assert "kind: ValidatingAdmissionPolicy" not in matrix and "Under the override" not in matrix
    assert "Under the override to Dedicated block" in chosen
    assert "kind: ValidatingAdmissionPolicy" in chosen and "kind: Node" in chosen
    client.force_login(lead)
    own = client.get(url, {"override_route": "dedicated_block"}).content.decode()
    assert "kind: ValidatingAdmissionPolicy" not in own and "Under the override" not in own


def waiting_behind_an_allocation(tenant, lead, admin_user):
    """A request that fits later: 8 devices waiting behind an approved 30 that ends in 20
    days. Returns it and that end."""
    ends = timezone.localdate() + dt.timedelta(days=20)
    big = make_request(tenant, lead, submit=True, whole_devices=30, ends_on=ends)
    services.request_approve(request=big, by=admin_user, reason="ok")
    return make_request(tenant, lead, submit=True, whole_devices=8), ends


def test_why_not_yet_names_the_day_capacity_frees_up(client, lead, admin_user, tenant,
                                                     pools):
    waiting, ends = waiting_behind_an_allocation(tenant, lead, admin_user)
    client.force_login(lead)
    body = client.get(reverse("intake:detail", args=[waiting.pk])).content.decode()
    assert "Does not fit now" in body
    assert f"frees up on {ends + dt.timedelta(days=1):%Y-%m-%d}" in body


def test_the_overview_counts_what_matters(client, tenant, lead, other_lead, admin_user, pools,
                                          django_capture_on_commit_callbacks):
    """Active allocations, pending review, expiring soon — each tenant its own."""
    import re

    from fleet.models import Allocation
    from intake import services

    for _ in range(2):
        req = make_request(tenant, lead, submit=True, whole_devices=1)
        with django_capture_on_commit_callbacks(execute=True):
            services.request_approve(request=req, by=admin_user, reason="ok")
    make_request(tenant, lead, submit=True, whole_devices=1)  # waiting for review
    Allocation.objects.filter(pk=Allocation.objects.first().pk).update(status="expiring")

    def stat(body: str, label: str) -> int:
        found = re.search(r'<span class="num">(\d+)</span><span class="lbl">' + label, body)
        assert found, label
        return int(found[1])

    client.force_login(lead)
    body = client.get(reverse("home")).content.decode()
    assert (stat(body, "Active allocations"), stat(body, "Pending review"),
            stat(body, "Expiring soon")) == (2, 1, 1)
    client.force_login(other_lead)
    body = client.get(reverse("home")).content.decode()
    assert (stat(body, "Active allocations"), stat(body, "Pending review")) == (0, 0)


def test_the_form_offers_only_the_profiles_the_mig_pools_offer(client, lead, pools):
    from fleet.models import Pool, Route

    Pool.objects.filter(route=Route.MIG_VCLUSTER).update(mig_profiles=["2g.20gb"])
    client.force_login(lead)
    body = client.get(reverse("intake:new")).content.decode()
    assert 'value="2g.20gb"' in body
    assert 'value="1g.10gb"' not in body and 'value="3g.40gb"' not in body


def test_a_submit_that_can_never_pass_is_disabled_with_its_reason(client, tenant, lead, pools):
    """The preview that says "never" also disables Submit (out of band, beside the buttons);
    a draft can still be saved, and the server refuses the submit all the same."""
    client.force_login(lead)
    never = client.post(reverse("intake:preview"), form_data(tenant, whole_devices=400),
                        HTTP_HX_REQUEST="true").content.decode()
    assert 'id="form-actions" hx-swap-oob="true"' in never
    assert re.search(r'value="submit" class="button" disabled aria-describedby="submit-blocked"',
                     never)
    assert "Cannot be submitted as it is" in never and "save a draft" in never
    fits = client.post(reverse("intake:preview"), form_data(tenant, whole_devices=2),
                       HTTP_HX_REQUEST="true").content.decode()
    assert 'hx-swap-oob="true"' in fits and "disabled" not in fits
    response = client.post(reverse("intake:new"), {**form_data(tenant, whole_devices=400),
                                                  "intent": "submit"})
    assert not CapacityRequest.objects.exists()  # refused whole: no draft left behind either
    assert "Cannot be submitted as it is" in response.content.decode()


def test_editing_a_saved_request_previews_it_and_blocks_a_never_fitting_submit(client, tenant,
                                                                               lead, pools):
    client.force_login(lead)
    client.post(reverse("intake:new"), {**form_data(tenant, whole_devices=400),
                                        "intent": "draft"})
    draft = CapacityRequest.objects.get()
    body = client.get(reverse("intake:edit", args=[draft.pk])).content.decode()
    assert "Not routed yet" not in body and "Shared pool" in body  # the saved answers, routed
    assert "Cannot be submitted as it is" in body
    assert re.search(r'value="submit" class="button" disabled', body)
    fits = make_request(tenant, lead, whole_devices=2)
    body = client.get(reverse("intake:edit", args=[fits.pk])).content.decode()
    assert "Fits now" in body and "Cannot be submitted" not in body


def test_a_retired_allocation_shows_no_applied_bar(client, lead, approved):
    from fleet.allocations.retirement import allocation_retire

    alloc = approved.allocation
    client.force_login(lead)
    live = client.get(reverse("intake:allocation", args=[approved.pk])).content.decode()
    applied = f"{alloc.progress_done} of {alloc.progress_total} object(s) applied"
    assert applied in live and 'role="progressbar"' in live
    allocation_retire(alloc.pk)
    gone = client.get(reverse("intake:allocation", args=[approved.pk])).content.decode()
    assert applied not in gone and 'role="progressbar"' not in gone
    assert "Retired: nothing of it is left in the cluster." in gone


def test_the_form_offers_the_leads_tenants_as_they_are_now(client, tenant, other_tenant, lead,
                                                           pools):
    """The tenant choice offers every tenant the lead leads and no other, pre-selects the
    one a link names among them, and shows a tenant's new name on the next view."""
    third = Tenant.objects.create(slug="initech", name="Initech")
    client.force_login(lead)
    body = client.get(reverse("intake:new")).content.decode()
    assert f'<option value="{tenant.pk}" selected>{tenant.name}</option>' in body
    assert f'value="{other_tenant.pk}"' not in body and f'value="{third.pk}"' not in body
    Membership.objects.create(user=lead, tenant=other_tenant, role=Membership.Role.LEAD)
    body = client.get(reverse("intake:new"), {"tenant": other_tenant.pk}).content.decode()
    assert f'<option value="{other_tenant.pk}" selected>{other_tenant.name}</option>' in body
    assert f'<option value="{tenant.pk}">' in body and f'value="{third.pk}"' not in body
    # A link naming a tenant the lead does not lead pre-selects the first of theirs.
    body = client.get(reverse("intake:new"), {"tenant": third.pk}).content.decode()
    assert f'value="{third.pk}"' not in body and " selected>" in body
    Tenant.objects.filter(pk=other_tenant.pk).update(name="Globex Renamed")
    body = client.get(reverse("intake:new")).content.decode()
    assert ">Globex Renamed</option>" in body


def test_not_yet_is_said_only_of_a_request_still_waiting(client, lead, admin_user, tenant,
                                                        pools):
    """The request page and the review page tell "not yet" by one rule: a request still
    wanted that holds nothing yet; not once it is withdrawn."""
    waiting, _ = waiting_behind_an_allocation(tenant, lead, admin_user)
    client.force_login(admin_user)
    review = client.get(reverse("intake:review_detail", args=[waiting.pk])).content.decode()
    assert "Not running yet: enough capacity frees up on" in review
    services.request_withdraw(request=waiting, by=lead, reason="not needed")
    for page in (reverse("intake:review_detail", args=[waiting.pk]),
                 reverse("intake:detail", args=[waiting.pk])):
        assert "Not running yet" not in client.get(page).content.decode(), page
    client.force_login(lead)
    assert "Not running yet" not in client.get(
        reverse("intake:detail", args=[waiting.pk])).content.decode()
