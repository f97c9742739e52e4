"""The admins' review queue: filters in the query string through one form, paging with a
constant number of queries, and "next in queue" after each kind of decision."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from intake.models import CapacityRequest
from tests.factories import make_request

pytestmark = pytest.mark.django_db

QUEUE = reverse("intake:review_queue")
MIG = {"device_fill": "small", "replicas": 2, "mig_profile": "1g.10gb", "whole_devices": 0}


def waiting_for(req: CapacityRequest, days: float) -> CapacityRequest:
    """Put a request `days` into its wait (the queue's clock is updated_at)."""
    CapacityRequest.objects.filter(pk=req.pk).update(
        updated_at=timezone.now() - dt.timedelta(days=days))
    req.refresh_from_db()
    return req


def listed(response) -> list[int]:
    """The request ids of the queue's rows, in order."""
    body = response.content.decode()
    return [int(pk) for pk in re.findall(r'href="/review/(\d+)/[^"]*">#\d+ ', body)]


@pytest.fixture
def queue(tenant, other_tenant, lead, other_lead, pools):
    """Five requests waiting (ages in days), one decided and one draft that never show."""
    reqs = {
        "acme_shared_old": waiting_for(make_request(tenant, lead, submit=True,
                                                    title="Acme shared old"), 10),
        "acme_mig": waiting_for(make_request(tenant, lead, submit=True, title="Acme MIG",
                                             **MIG), 5),
        "globex_shared": waiting_for(make_request(other_tenant, other_lead, submit=True,
                                                  title="Globex shared"), 4),
        "acme_shared_new": waiting_for(make_request(tenant, lead, submit=True,
                                                    title="Acme shared new"), 2),
        "globex_mig": waiting_for(make_request(other_tenant, other_lead, submit=True,
                                               title="Globex MIG", **MIG), 0.1),
    }
    make_request(tenant, lead, title="A draft")
    return reqs


@pytest.fixture
def admin(client, admin_user):
    client.force_login(admin_user)
    return client


def ids(queue, *names) -> list[int]:
    return [queue[n].pk for n in names]


# --- Filters -----------------------------------------------------------------------------

def test_default_is_every_waiting_request_oldest_first(admin, queue):
    response = admin.get(QUEUE)
    assert response.status_code == 200
    assert listed(response) == ids(queue, "acme_shared_old", "acme_mig", "globex_shared",
                                   "acme_shared_new", "globex_mig")
    body = response.content.decode()
    assert "<strong>5</strong> requests match · showing 1–5 · page 1 of 1 · oldest first" in body
    assert "A draft" not in body


def test_newest_first(admin, queue):
    response = admin.get(QUEUE, {"sort": "newest"})
    assert listed(response) == ids(queue, "globex_mig", "acme_shared_new", "globex_shared",
                                   "acme_mig", "acme_shared_old")
    assert "newest first" in response.content.decode()


def test_filter_by_route(admin, queue):
    assert listed(admin.get(QUEUE, {"route": "mig_vcluster"})) == ids(
        queue, "acme_mig", "globex_mig")
    assert listed(admin.get(QUEUE, {"route": "shared_pool"})) == ids(
        queue, "acme_shared_old", "globex_shared", "acme_shared_new")
    response = admin.get(QUEUE, {"route": "dedicated_block"})
    assert listed(response) == [] and "No request matches these filters." in (
        response.content.decode())


def test_filter_by_tenant(admin, queue):
    assert listed(admin.get(QUEUE, {"tenant": "globex"})) == ids(
        queue, "globex_shared", "globex_mig")
    assert listed(admin.get(QUEUE, {"tenant": "acme", "route": "shared_pool"})) == ids(
        queue, "acme_shared_old", "acme_shared_new")


@pytest.mark.parametrize(("days", "expected"), [
    ("1", ["acme_shared_old", "acme_mig", "globex_shared", "acme_shared_new"]),
    ("3", ["acme_shared_old", "acme_mig", "globex_shared"]),
    ("7", ["acme_shared_old"]), ("14", []), ("", None)])
def test_filter_by_age(admin, queue, days, expected):
    expected = expected if expected is not None else list(queue)
    assert listed(admin.get(QUEUE, {"older_than": days})) == ids(queue, *expected)


def test_filter_by_status_shows_decided_requests_too(admin, admin_user, queue):
    from intake import services

    services.request_deny(request=queue["acme_mig"], by=admin_user, reason="no")
    assert queue["acme_mig"].pk not in listed(admin.get(QUEUE))
    assert listed(admin.get(QUEUE, {"status": "denied"})) == ids(queue, "acme_mig")
    assert len(listed(admin.get(QUEUE, {"status": "all"}))) == 6  # and the draft


def test_filters_combine_and_stay_in_the_links(admin, queue):
    response = admin.get(QUEUE, {"tenant": "acme", "older_than": "3", "sort": "newest"})
    assert listed(response) == ids(queue, "acme_mig", "acme_shared_old")
    body = response.content.decode()
    # Each row opens the review inside the same queue (the canonical query string).
    assert (f'href="/review/{queue["acme_mig"].pk}/?tenant=acme&amp;older_than=3&amp;'
            'sort=newest"') in body
    # The form shows what is applied.
    assert re.search(r'<option value="acme" selected>', body)
    assert re.search(r'<option value="3" selected>', body)


def test_htmx_gets_only_the_rows(admin, queue):
    response = admin.get(QUEUE, {"route": "mig_vcluster"}, HTTP_HX_REQUEST="true")
    body = response.content.decode()
    assert response.status_code == 200
    assert body.lstrip().startswith('<div id="rows"') and "<html" not in body
    assert "Validated fleet" not in body  # the pool bars are not recomputed for a swap
    assert listed(response) == ids(queue, "acme_mig", "globex_mig")


# --- Bad values ----------------------------------------------------------------------------

@pytest.mark.parametrize(("params", "says"), [
    ({"route": "teleport"}, "Route: Select a valid choice. teleport is not one"),
    ({"status": "pending"}, "Status: Select a valid choice."),
    ({"tenant": "initech"}, "Tenant: No tenant has the slug “initech”."),
    ({"tenant": "Not a slug!"}, "Tenant: No tenant has the slug"),
    ({"tenant": "a\x00b"}, "Tenant: No tenant has the slug"),
    ({"tenant": "x" * 5000}, "Tenant: No tenant has the slug"),
    ({"older_than": "5"}, "Waiting: Select a valid choice. 5 is not one"),
    ({"older_than": "-1"}, "Waiting: Select a valid choice."),
    ({"sort": "sideways"}, "Order: Select a valid choice."),
    ({"page": "abc"}, "Page: Enter a whole number."),
    ({"page": "0"}, "Page: Ensure this value is greater than or equal to 1."),
    ({"page": "NaN"}, "Page: Enter a whole number."),
])
def test_a_bad_filter_value_is_a_clear_400_not_a_500(admin, queue, params, says):
    response = admin.get(QUEUE, params)
    assert response.status_code == 400
    body = response.content.decode()
    assert "The queue filter was not understood." in body and says in body, body
    assert listed(response) == []  # nothing is listed under a filter that was refused
    # The htmx swap gets the same message with a 200 (htmx swaps only a success).
    swap = admin.get(QUEUE, params, HTTP_HX_REQUEST="true")
    assert swap.status_code == 200 and says in swap.content.decode()


def test_a_page_past_the_end_shows_the_last_page(admin, queue, monkeypatch):
    monkeypatch.setattr("intake.views.REVIEW_PAGE_SIZE", 2)
    response = admin.get(QUEUE, {"page": "99"})
    assert response.status_code == 200
    assert listed(response) == ids(queue, "globex_mig")
    assert "showing 5–5 · page 3 of 3" in response.content.decode()


# --- Paging ---------------------------------------------------------------------------------

def test_pages_in_order_with_their_position(admin, queue, monkeypatch):
    monkeypatch.setattr("intake.views.REVIEW_PAGE_SIZE", 2)
    first = admin.get(QUEUE, {"tenant": "acme"})
    assert listed(first) == ids(queue, "acme_shared_old", "acme_mig")
    body = first.content.decode()
    assert "<strong>3</strong> requests match · showing 1–2 · page 1 of 2" in body
    assert 'href="/review/?tenant=acme&amp;page=2" rel="next"' in body
    second = admin.get(QUEUE, {"tenant": "acme", "page": "2"})
    assert listed(second) == ids(queue, "acme_shared_new")
    body = second.content.decode()
    assert "showing 3–3 · page 2 of 2" in body
    assert 'href="/review/?tenant=acme&amp;page=1" rel="prev"' in body


def test_the_real_page_size_is_25(admin, tenant, lead, pools):
    for i in range(27):
        make_request(tenant, lead, submit=True, title=f"Batch {i}")
    assert len(listed(admin.get(QUEUE))) == 25
    assert len(listed(admin.get(QUEUE, {"page": 2}))) == 2


def test_query_count_does_not_grow_with_the_rows(admin, tenant, other_tenant, lead,
                                                 other_lead, pools):
    def queries(params) -> int:
        admin.get(QUEUE, params)  # warm the session and caches
        with CaptureQueriesContext(connection) as ctx:
            assert admin.get(QUEUE, params).status_code == 200
        return len(ctx.captured_queries)

    make_request(tenant, lead, submit=True)
    few = queries({}), queries({"tenant": "acme", "older_than": "", "sort": "newest"})
    for i in range(12):
        make_request(other_tenant if i % 2 else tenant, other_lead if i % 2 else lead,
                     submit=True, title=f"More {i}", **(MIG if i % 3 else {}))
    many = queries({}), queries({"tenant": "acme", "older_than": "", "sort": "newest"})
    assert few == many


def test_paging_counts_only_the_matching_rows_and_reads_one_page(admin, queue,
                                                                 monkeypatch):
    """One COUNT under the filter and one LIMITed read of the page, in the queue's order."""
    monkeypatch.setattr("intake.views.REVIEW_PAGE_SIZE", 2)
    admin.get(QUEUE)
    with CaptureQueriesContext(connection) as ctx:
        admin.get(QUEUE, {"route": "shared_pool", "page": 2}, HTTP_HX_REQUEST="true")
    sql = [q["sql"] for q in ctx.captured_queries if '"intake_capacityrequest"' in q["sql"]]
    assert len(sql) == 2, sql
    count, rows = sql
    assert count.startswith("SELECT COUNT(*)") and "'shared_pool'" in count
    # Three shared-pool requests: page 2 of size 2 is the third one alone.
    assert '"updated_at" ASC, "intake_capacityrequest"."id" ASC LIMIT 1 OFFSET 2' in rows


# --- Who may look -----------------------------------------------------------------------

@pytest.mark.parametrize("who", ["lead", "other_lead", "member", "finance"])
def test_only_admins_see_the_queue_and_its_reviews(client, request, queue, who):
    client.force_login(request.getfixturevalue({"lead": "lead", "other_lead": "other_lead",
                                                "member": "member",
                                                "finance": "finance_user"}[who]))
    req = queue["acme_mig"]
    assert client.get(QUEUE, {"tenant": "acme"}).status_code == 403
    assert client.get(QUEUE, {"tenant": "nope"}).status_code == 403  # role before values
    review = reverse("intake:review_detail", args=[req.pk])
    assert client.get(review, {"tenant": "acme"}).status_code == 403
    assert client.post(f"{review}?tenant=acme",
                       {"action": "approve", "reason": "mine"}).status_code == 403
    req.refresh_from_db()
    assert req.status == "submitted"


def test_anonymous_is_sent_to_sign_in(client, queue):
    response = client.get(QUEUE, {"route": "mig_vcluster"})
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_a_review_that_does_not_exist_is_404(admin, queue):
    assert admin.get(reverse("intake:review_detail", args=[999999])).status_code == 404


# --- Next in queue -------------------------------------------------------------------------

def decide(client, req, action, query="", **extra):
    url = reverse("intake:review_detail", args=[req.pk]) + (f"?{query}" if query else "")
    return client.post(url, {"action": action, "reason": f"{action} for the test", **extra})


@pytest.mark.parametrize("action", ["approve", "deny", "request_changes"])
def test_each_decision_opens_the_next_in_the_same_filtered_queue(admin, queue, action):
    response = decide(admin, queue["acme_shared_old"], action, "tenant=acme")
    nxt = queue["acme_mig"]  # not globex_shared, older but another tenant
    assert response.status_code == 302
    assert response["Location"] == f"/review/{nxt.pk}/?tenant=acme"
    queue["acme_shared_old"].refresh_from_db()
    assert queue["acme_shared_old"].status == {"approve": "approved", "deny": "denied",
                                               "request_changes": "changes_requested"}[action]
    page = admin.get(response["Location"]).content.decode()
    done = queue["acme_shared_old"].pk
    assert (f'Request <a href="/review/{done}/?tenant=acme">#{done}</a>: '
            f'{action.replace("_", " ")} recorded. Next in queue: #{nxt.pk}.') in page


@pytest.mark.parametrize("action", ["approve", "deny", "request_changes"])
def test_the_last_decision_returns_to_the_queue_with_a_message(admin, queue, action):
    response = decide(admin, queue["acme_mig"], action, "route=mig_vcluster&tenant=acme")
    assert response.status_code == 302
    assert response["Location"] == "/review/?route=mig_vcluster&tenant=acme"
    page = admin.get(response["Location"]).content.decode()
    assert "recorded. Nothing else waits in this queue." in page
    assert "No request matches these filters." in page


def test_next_follows_the_queue_order_newest_first(admin, queue):
    response = decide(admin, queue["acme_shared_new"], "deny", "sort=newest")
    assert response["Location"] == f"/review/{queue['globex_shared'].pk}/?sort=newest"


def test_next_takes_the_one_after_and_comes_round_to_skipped_ones(admin, queue):
    # From the middle of acme's queue, next is the one after, not the older one at the head.
    response = decide(admin, queue["acme_mig"], "deny", "tenant=acme")
    assert response["Location"] == f"/review/{queue['acme_shared_new'].pk}/?tenant=acme"
    # The last one comes round to the one skipped at the head.
    response = decide(admin, queue["acme_shared_new"], "deny", "tenant=acme")
    assert response["Location"] == f"/review/{queue['acme_shared_old'].pk}/?tenant=acme"


def test_next_respects_the_age_filter(admin, queue):
    response = decide(admin, queue["acme_shared_old"], "deny", "older_than=3")
    assert response["Location"] == f"/review/{queue['acme_mig'].pk}/?older_than=3"
    response = decide(admin, queue["acme_mig"], "deny", "older_than=3")
    assert response["Location"] == f"/review/{queue['globex_shared'].pk}/?older_than=3"
    response = decide(admin, queue["globex_shared"], "deny", "older_than=3")
    assert response["Location"] == "/review/?older_than=3"  # acme_shared_new is too young


def test_a_bad_filter_does_not_block_the_decision(admin, queue):
    response = decide(admin, queue["acme_shared_old"], "deny", "tenant=initech")
    queue["acme_shared_old"].refresh_from_db()
    assert queue["acme_shared_old"].status == "denied"
    # The whole queue's next, with a word about the filter that was ignored.
    assert response["Location"] == f"/review/{queue['acme_mig'].pk}/"
    page = admin.get(response["Location"]).content.decode()
    assert "The queue filter in the address was not understood" in page


def test_a_refused_decision_stays_on_the_page_in_the_same_queue(admin, queue):
    response = decide(admin, queue["acme_mig"], "deny", "tenant=acme", reason="")
    body = response.content.decode()
    assert response.status_code == 200 and "Give a reason" in body
    assert f'action="/review/{queue["acme_mig"].pk}/?tenant=acme"' in body


def test_the_review_page_links_next_in_queue_and_back(admin, queue):
    url = reverse("intake:review_detail", args=[queue["acme_mig"].pk])
    body = admin.get(url, {"tenant": "acme", "status": "all"}).content.decode()
    qs = "status=all&amp;tenant=acme"
    assert (f'href="/review/{queue["acme_shared_new"].pk}/?{qs}" rel="next">'
            f'Next in queue: #{queue["acme_shared_new"].pk} →') in body
    assert f'href="/review/?{qs}">Back to the queue' in body
    assert f'<form method="post" action="{url}?{qs}"' in body
    # Alone in its queue: no next, said so.
    body = admin.get(url, {"route": "mig_vcluster", "tenant": "acme"}).content.decode()
    assert "Nothing else waits in this queue" in body and 'rel="next"' not in body


def test_next_in_queue_follows_a_decision_made_elsewhere_since_the_last_view(admin, queue):
    """"Next" is kept across views (intake.selectors.next_in_queue) until a request is
    written: one decided meanwhile, by another admin or through the API, is not offered."""
    from intake.models import CapacityRequest

    url = reverse("intake:review_detail", args=[queue["acme_mig"].pk])
    nxt = queue["acme_shared_new"].pk
    assert f"Next in queue: #{nxt} →" in admin.get(url, {"tenant": "acme"}).content.decode()
    CapacityRequest.objects.filter(pk=nxt).update(status="denied")
    body = admin.get(url, {"tenant": "acme"}).content.decode()
    assert f"#{nxt} " not in body
    assert f"Back to the start of the queue: #{queue['acme_shared_old'].pk} ↺" in body


def test_the_queue_shows_what_was_written_since_the_last_view(admin, queue, tenant, lead):
    """The queue's pages are kept across views (intake.selectors.queue_page) until a request,
    tenant or pool is written: a request filed, one decided and a renamed tenant show on
    the next view, with a route filter (counted by the database) and without."""
    from fleet.models import Route
    from intake.models import CapacityRequest
    from tests.factories import make_request

    url = reverse("intake:review_queue")
    by_route = {"route": Route.SHARED_POOL}
    assert "Acme shared old" in admin.get(url).content.decode()
    assert "Acme shared old" in admin.get(url, by_route).content.decode()
    CapacityRequest.objects.filter(pk=queue["acme_shared_old"].pk).update(status="denied")
    filed = make_request(tenant, lead, submit=True, title="Filed meanwhile")
    CapacityRequest.objects.filter(pk=filed.pk).update(route=Route.SHARED_POOL)
    tenant.name = "Acme Renamed"
    tenant.save(update_fields=["name"])
    body = admin.get(url).content.decode()
    assert "Acme shared old" not in body and "Filed meanwhile" in body
    assert "Acme Renamed" in body and "<strong>5</strong> requests match" in body
    routed = admin.get(url, by_route).content.decode()
    assert "Acme shared old" not in routed and "Filed meanwhile" in routed


def test_the_review_page_with_a_bad_filter_says_so(admin, queue):
    url = reverse("intake:review_detail", args=[queue["acme_mig"].pk])
    response = admin.get(url, {"older_than": "soon"})
    body = response.content.decode()
    assert response.status_code == 200
    assert "The queue filter in the address was not understood" in body
    assert f'href="/review/{queue["globex_shared"].pk}/" rel="next"' in body


def test_an_override_is_not_approved_blind(client, admin_user, tenant, lead, pools):
    """The review page prices and fits every other route before an admin overrides: the same
    plan approval would use (pool, devices held, price per month, fit)."""
    from fleet.inventory.pricing import money_text
    from fleet.models import Route
    from intake.domain import override_decision
    from intake.selectors import approval_plan, override_options, request_decision
    from tests.factories import make_request

    req = make_request(tenant, lead, submit=True, whole_devices=2)
    options = {o["route"]: o for o in override_options(req)}
    assert req.route not in options and Route.CONFIDENTIAL_POOL.value in options
    conf = options[Route.CONFIDENTIAL_POOL.value]
    plan = approval_plan(req, decision=override_decision(
        request_decision(req), Route.CONFIDENTIAL_POOL, "x")).plan
    assert conf["monthly"] == money_text(plan.monthly_price) and conf["pool"]
    assert "MIG profile" in options[Route.MIG_VCLUSTER.value]["why"]  # whole devices: no
    client.force_login(admin_user)
    page = client.get(f"/review/{req.pk}/").content.decode()
    assert conf["monthly"] in page


def test_with_many_tenants_the_tenant_filters_take_a_typed_slug(client, admin_user, tenant,
                                                                lead, pools):
    """Past PICKER_MAX_OPTIONS tenants a filter would be mostly its own options (5,000 at
    10x the benchmark's size): it becomes a search box for the slug, and still filters."""
    from tenants.models import Tenant
    from tenants.widgets import PICKER_MAX_OPTIONS
    from tests.factories import make_request

    client.force_login(admin_user)
    assert '<select name="tenant"' in client.get("/requests/").content.decode()
    Tenant.objects.bulk_create([Tenant(slug=f"bulk-{i}", name=f"Bulk {i}")
                                for i in range(PICKER_MAX_OPTIONS + 1)])
    make_request(tenant, lead, submit=True, title="Acme only")
    for url in ("/requests/", "/review/"):
        body = client.get(url).content.decode()
        assert 'type="search"' in body and "Bulk 17" not in body, url
        assert body.count("<option") < 60, url
    filtered = client.get("/review/", {"tenant": "acme"}).content.decode()
    assert "Acme only" in filtered and 'value="acme"' in filtered
    assert "Acme only" in client.get("/requests/", {"tenant": "acme"}).content.decode()
    assert "Acme only" not in client.get("/requests/", {"tenant": "bulk-3"}).content.decode()
