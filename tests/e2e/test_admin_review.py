"""An admin works the review queue in Chromium: filters it, decides, lands on the next
request; the decision sits beside the route and the fit; the admin tables do not clip at
1280 px."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from intake.models import CapacityRequest
from tests.factories import make_request

from .conftest import sign_in

pytestmark = pytest.mark.django_db(transaction=True)

MIG = {"device_fill": "small", "replicas": 2, "mig_profile": "1g.10gb", "whole_devices": 0}


def waiting(req: CapacityRequest, days: float) -> CapacityRequest:
    CapacityRequest.objects.filter(pk=req.pk).update(
        updated_at=timezone.now() - dt.timedelta(days=days))
    return req


@pytest.fixture
def admin_page(browser, live_server, admin_user):
    """An admin signed in, in a window of the given width."""
    contexts = []

    def open_at(width: int, height: int = 900, **options):
        context = browser.new_context(viewport={"width": width, "height": height}, **options)
        contexts.append(context)
        page = context.new_page()
        sign_in(page, live_server.url, "padmin")
        return page

    yield open_at
    for context in contexts:
        context.close()


def box(locator) -> dict:
    b = locator.bounding_box()
    assert b is not None, locator
    return b


def inside(inner: dict, outer: dict) -> bool:
    return (inner["x"] >= outer["x"] - 0.5 and inner["y"] >= outer["y"] - 0.5
            and inner["x"] + inner["width"] <= outer["x"] + outer["width"] + 0.5
            and inner["y"] + inner["height"] <= outer["y"] + outer["height"] + 0.5)


def not_clipped(locator) -> bool:
    """Nothing hidden sideways: the element's content is as wide as the element."""
    return locator.evaluate("el => el.scrollWidth <= el.clientWidth")


def test_admin_filters_decides_and_lands_on_the_next(live_server, admin_page, shot, tenant,
                                                     other_tenant, lead, other_lead, pools):
    old = waiting(make_request(tenant, lead, submit=True, title="Acme shared old"), 9)
    waiting(make_request(other_tenant, other_lead, submit=True, title="Globex shared"), 6)
    waiting(make_request(tenant, lead, submit=True, title="Acme MIG", **MIG), 4)
    new = waiting(make_request(tenant, lead, submit=True, title="Acme shared new"), 2)
    base = live_server.url
    page = admin_page(1280)
    page.goto(f"{base}/review/")
    rows = page.locator("#rows")
    expect(rows).to_contain_text("4 requests match")

    # Each filter change swaps the list and puts the filter in the address (bookmarkable).
    page.select_option("select[name=tenant]", "acme")
    expect(rows).not_to_contain_text("Globex shared")
    expect(rows).to_contain_text("3 requests match")
    page.select_option("select[name=route]", "shared_pool")
    expect(rows).to_contain_text("2 requests match · showing 1–2 · page 1 of 1 · oldest first")
    expect(page).to_have_url(re.compile(r"route=shared_pool"))
    expect(page).to_have_url(re.compile(r"tenant=acme"))
    expect(rows.locator("tbody tr")).to_have_count(2)
    expect(rows.locator("tbody tr").first).to_contain_text("Acme shared old")
    assert not_clipped(rows)
    shot(page, "review-queue-filtered-1280")

    page.reload()  # the address alone gives the same queue
    expect(page.locator("select[name=tenant]")).to_have_value("acme")
    expect(rows.locator("tbody tr")).to_have_count(2)

    rows.get_by_text("Acme shared old").click()
    expect(page).to_have_url(f"{base}/review/{old.pk}/?route=shared_pool&tenant=acme")
    expect(page.get_by_role("link", name=re.compile("Next in queue"))).to_have_attribute(
        "href", f"/review/{new.pk}/?route=shared_pool&tenant=acme")
    page.get_by_role("radio", name="Approve").check()
    page.get_by_role("textbox", name="Reason").fill("Fits the shared pool.")
    page.get_by_role("button", name="Record decision").click()

    # The next oldest in the same filtered queue opens, with what was recorded.
    expect(page).to_have_url(f"{base}/review/{new.pk}/?route=shared_pool&tenant=acme")
    expect(page.locator(".messages")).to_contain_text(
        f"Request #{old.pk}: approve recorded. Next in queue: #{new.pk}.")
    expect(page.locator("h1")).to_contain_text("Acme shared new")
    shot(page, "review-next-in-queue")
    page.get_by_role("radio", name="Request changes").check()
    page.get_by_role("textbox", name="Reason").fill("Say what the run is for.")
    page.get_by_role("button", name="Record decision").click()

    # Nothing else waits in that queue: back to it, filters kept, and said so.
    expect(page).to_have_url(f"{base}/review/?route=shared_pool&tenant=acme")
    expect(page.locator(".messages")).to_contain_text("Nothing else waits in this queue.")
    expect(page.locator("#rows")).to_contain_text("No request matches these filters.")
    page.locator(".messages").get_by_role("link", name=f"#{new.pk}").click()
    expect(page.locator("h1 .status")).to_have_text("Changes requested")
    # Tasks run inline on the dry-run backend: the approval provisioned at once.
    assert CapacityRequest.objects.get(pk=old.pk).status == "active"


def test_the_queue_filters_and_pages_without_javascript(live_server, admin_page, tenant,
                                                        other_tenant, lead, other_lead,
                                                        pools):
    waiting(make_request(tenant, lead, submit=True, title="Acme one"), 3)
    waiting(make_request(other_tenant, other_lead, submit=True, title="Globex one"), 2)
    page = admin_page(1280, java_script_enabled=False)
    page.goto(f"{live_server.url}/review/")
    page.select_option("select[name=tenant]", "globex")
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"tenant=globex"))
    expect(page.locator("#rows tbody tr")).to_have_count(1)
    expect(page.locator("#rows")).to_contain_text("Globex one")


@pytest.mark.parametrize("width", [1280, 1920])
def test_the_decision_sits_beside_the_route_and_the_fit(live_server, admin_page, shot,
                                                        tenant, lead, pools, width):
    req = make_request(tenant, lead, submit=True, title="Layout check")
    page = admin_page(width)
    page.goto(f"{live_server.url}/review/{req.pk}/")
    expect(page.locator("#objects")).to_contain_text("object(s) accepted")
    route = box(page.locator(".review-route"))
    decision = box(page.locator(".review-decision"))
    request_card = box(page.locator(".review-request"))
    objects = box(page.locator("section.card", has_text="What approval creates"))
    # Beside the route and fit, under the request, above every object card, and on screen.
    assert decision["x"] + decision["width"] <= route["x"]
    assert decision["y"] >= request_card["y"] + request_card["height"]
    assert decision["y"] < route["y"] + route["height"]
    assert decision["y"] + decision["height"] < objects["y"]
    assert decision["y"] < 900  # it starts in the first screen
    fit = box(page.locator(".review-route .fit").first)
    assert fit["y"] < decision["y"] + decision["height"]
    shot(page, f"review-page-{width}")


def test_a_refused_decision_says_so_in_the_first_screen(live_server, admin_page, shot,
                                                        tenant, lead, pools):
    """Record decision without a reason: the error summary is at the top, in view, focused,
    and its link leads to the field; the request is still waiting."""
    req = make_request(tenant, lead, submit=True, title="No reason given")
    page = admin_page(1280)
    page.set_viewport_size({"width": 1280, "height": 720})
    page.goto(f"{live_server.url}/review/{req.pk}/")
    page.get_by_role("radio", name="Deny").check()
    page.get_by_role("button", name="Record decision").click()
    summary = page.locator("[data-error-summary]")
    expect(summary).to_contain_text("The decision was not recorded")
    expect(summary).to_be_focused()
    expect(summary).to_be_in_viewport()
    expect(summary.locator("li")).to_have_count(1)  # one error per fault, said once
    summary.get_by_role("link", name="Reason").click()
    expect(page).to_have_url(re.compile(r"#id_reason$"))
    shot(page, "review-refused-1280")
    assert CapacityRequest.objects.get(pk=req.pk).status == "submitted"


def test_admin_tables_fit_at_1280(live_server, admin_page, shot, tenant, lead, pools):
    from fleet.models import Pool

    # Names and cohorts as long as the demo's.
    for pool in Pool.objects.all():
        pool.name = f"{pool.slug.title()} {pool.gpu_model.split('-')[1]}"
        pool.cohort = f"{pool.slug}-{pool.gpu_model.split('-')[1].lower()}"
        pool.borrowing_limit_devices = 16
        pool.save()
    for i in range(3):
        make_request(tenant, lead, submit=True, title=f"A request with a long title, #{i}")
    page = admin_page(1280)
    page.goto(f"{live_server.url}/pools/")
    card = page.locator("section.card", has=page.locator("table.pools-table"))
    buttons = card.locator("td.row-actions .button")
    expect(buttons).to_have_count(Pool.objects.count())
    card_box = box(card)
    for i in range(buttons.count()):
        button = box(buttons.nth(i))
        assert inside(button, card_box), (button, card_box)
        assert button["x"] + button["width"] <= 1280
    assert not_clipped(card)
    shot(page, "pools-1280")

    page.goto(f"{live_server.url}/review/")
    rows = page.locator("#rows")
    expect(rows.locator("tbody tr")).to_have_count(3)
    rows_box = box(rows)
    for cell in rows.locator("tbody tr td:last-child").all():
        assert inside(box(cell), rows_box)
    assert not_clipped(rows)
    shot(page, "review-queue-1280")


def test_the_seams_per_day_draw_for_admins(live_server, admin_page, shot, tenant, lead, pools):
    """The cohorts page charts every queue's seams, p95 per day, from the portal's own
    Chart.js (log scale), with the figures in a table under it."""
    import datetime as dt
    from decimal import Decimal

    from django.utils import timezone

    from fleet.models import Allocation, ClusterQueueState, QueueEvent, Route

    alloc = Allocation.objects.create(
        tenant=tenant, pool=pools[Route.SHARED_POOL], route=Route.SHARED_POOL,
        whole_devices=2, device_equivalents=Decimal(2), namespace="acme-seams",
        status="active", starts_at=timezone.now() - dt.timedelta(days=20))
    ClusterQueueState.objects.create(name="acme-seams", allocation=alloc,
                                     observed_at=timezone.now())
    now = timezone.now()
    for day in range(10):
        for kind, seconds in (("admitted", 40.0 * (day + 1)), ("pods", 0.4), ("running", 3.0)):
            QueueEvent.objects.create(allocation=alloc, workload_uid=f"w{day}", workload="train",
                                      kind=kind, seam_seconds=seconds, reason="recorded",
                                      at=now - dt.timedelta(days=day, minutes=5))
    page = admin_page(1280)
    page.goto(f"{live_server.url}/fleet/cohorts/")
    canvas = page.locator("canvas[data-chart=seams]")
    expect(canvas).to_have_attribute("data-drawn", "true")
    page.get_by_text("p95 per day, seam by seam").click()
    expect(page.locator("details.figures table").last).to_contain_text("Queue wait")
    shot(page, "cohorts-seams-1280")
