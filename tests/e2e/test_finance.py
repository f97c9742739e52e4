"""Finance in Chromium: filters reach the cards, the chart, the URL and both exports; the
tenants table never clips at 1280 px; a budget set below the spend e-mails the lead and
finance through a real SMTP server."""

from __future__ import annotations

import csv
import datetime as dt
import io
import re
from decimal import Decimal

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from billing.domain import month_start
from billing.models import UsageHour
from billing.services import refresh_months
from fleet.models import Allocation, Route
from tests.factories import TenantFactory, make_lead

from .conftest import sign_in

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def billed_world(tenant, other_tenant, lead, finance_user, pools):
    """acme and globex with charges in each of the last 12 months (so 12 month columns),
    plus ten more tenants to make the table wide and long."""
    now = timezone.now()
    allocs = []
    for i, t in enumerate([tenant, other_tenant] + [TenantFactory(slug=f"team-{n:02d}")
                                                    for n in range(10)]):
        alloc = Allocation.objects.create(
            tenant=t, pool=pools[Route.SHARED_POOL], route=Route.SHARED_POOL,
            whole_devices=2, device_equivalents=Decimal(2), namespace=f"{t.slug}-a",
            status="active", starts_at=now - dt.timedelta(days=400))
        allocs.append(alloc)
        m = month_start(now)
        touched = set()
        for _ in range(12):
            hour = dt.datetime.combine(m, dt.time(0), tzinfo=dt.UTC)
            UsageHour.objects.create(allocation=alloc, tenant=t, pool=alloc.pool, hour=hour,
                                     allocated_s=Decimal(7200), used_s=Decimal(3600 + 100 * i),
                                     credit_s=0, charged_s=Decimal(7200), rate=Decimal("2.5"),
                                     amount=Decimal("1000.00") + i)
            touched.add((alloc.pk, m))
            m = month_start(m - dt.timedelta(days=1))
        refresh_months(touched)
    return allocs


def test_filters_reach_cards_chart_url_and_exports(browser, live_server, billed_world,
                                                   finance_user, shot):
    context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    page = context.new_page()
    try:
        sign_in(page, live_server.url, "fin")
        page.goto(f"{live_server.url}/billing/?months=12")
        page.locator("canvas[data-drawn=true]").wait_for()  # Chart.js drew from local files
        charged_all = page.locator(".stat .num").nth(3).inner_text()
        page.fill("input[name=q]", "globex")
        page.wait_for_url(re.compile(r"[?&]q=globex"))  # hx-push-url
        expect(page.locator("#table tbody tr")).to_have_count(1)
        assert "globex" in page.url and "months=12" in page.url  # bookmarkable
        charged_globex = page.locator(".stat .num").nth(3).inner_text()
        assert charged_globex != charged_all
        assert "12,012.00" in charged_globex  # 12 months × 1,001.00 for globex
        page.locator("canvas[data-drawn=true]").wait_for()  # redrawn after the swap
        with page.expect_download() as download:
            page.click("text=Export CSV")
        rows = list(csv.DictReader(io.StringIO(open(download.value.path()).read())))
        assert {r["tenant"] for r in rows} == {"globex"} and len(rows) == 12
        with page.expect_download() as download:
            page.click("text=Export FOCUS")
        focus = list(csv.DictReader(io.StringIO(open(download.value.path()).read())))
        assert focus and all("globex" in r["SubAccountId"] + r["SubAccountName"]
                             for r in focus)
        # A shared link opens the same view.
        page.goto(page.url)
        assert page.locator(".stat .num").nth(3).inner_text() == charged_globex
    finally:
        context.close()


def test_back_puts_the_filters_back_with_the_report(browser, live_server, billed_world,
                                                    finance_user):
    """Back restores the report and the filters it was made with, so the next change sends
    what the page shows (the restored form once kept its first-loaded values and the next
    change dropped the route)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    try:
        sign_in(page, live_server.url, "fin")
        page.goto(f"{live_server.url}/billing/")
        page.select_option("select[name=route]", "shared_pool")
        page.wait_for_url(re.compile(r"route=shared_pool"))
        expect(page.locator("#report")).to_contain_text("route Shared pool")
        page.select_option("select[name=months]", "3")
        page.wait_for_url(re.compile(r"months=3"))
        expect(page.locator("#report")).to_contain_text("3 months")
        page.go_back()
        page.wait_for_url(re.compile(r"months=6"))
        expect(page.locator("#report")).to_contain_text("route Shared pool · 6 months")
        expect(page.locator("select[name=route]")).to_have_value("shared_pool")
        expect(page.locator("select[name=months]")).to_have_value("6")
        page.select_option("select[name=sort]", "used")
        page.wait_for_url(re.compile(r"sort=used"))
        assert "route=shared_pool" in page.url and "months=6" in page.url, page.url
        page.go_back()
        page.go_back()  # the first load, which named no filter: every field at its default
        page.wait_for_url(re.compile(r"/billing/$"))
        expect(page.locator("select[name=route]")).to_have_value("")
        expect(page.locator("select[name=months]")).to_have_value("6")
    finally:
        context.close()


@pytest.mark.parametrize("width", [1280, 1920])
def test_the_tenants_table_scrolls_never_clips(browser, live_server, billed_world, finance_user,
                                               shot, width):
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    try:
        sign_in(page, live_server.url, "fin")
        page.goto(f"{live_server.url}/billing/?months=12")
        page.locator("canvas[data-drawn=true]").wait_for()
        shot(page, f"finance-overview-{width}")
        box = page.evaluate("""() => {
            const wrap = document.querySelector('#table');
            const table = wrap.querySelector('table');
            const style = getComputedStyle(wrap);
            return {wrapRight: wrap.getBoundingClientRect().right, viewport: innerWidth,
                    overflowX: style.overflowX, scrollW: wrap.scrollWidth,
                    clientW: wrap.clientWidth, tableW: table.getBoundingClientRect().width};
        }""")
        assert box["wrapRight"] <= box["viewport"]  # the card itself stays on screen
        # Never hidden: at every width the card scrolls what does not fit (.scroll).
        assert box["overflowX"] == "auto", box
        # The money is on screen without scrolling: Charged and Util. come right after the
        # tenant's name; only the months scroll (the name column stays put).
        for name in ("charged", "util."):
            header = page.locator("#table thead th", has_text=name.capitalize()).first
            right = header.evaluate("el => el.getBoundingClientRect().right")
            assert header.is_visible() and right <= box["wrapRight"], (name, right)
        last_header = page.locator("#table thead th").last
        last_header.scroll_into_view_if_needed()
        assert last_header.is_visible()
    finally:
        context.close()


def test_a_budget_crossing_mails_the_lead_and_finance(browser, live_server, billed_world,
                                                      tenant, lead, finance_user, smtp_server):
    other = make_lead(tenant, "lead-two")
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    try:
        sign_in(page, live_server.url, "fin")
        page.goto(f"{live_server.url}/billing/budgets/")
        page.fill(f"#budget-{tenant.slug}", "abc")
        page.locator(f"#budget-{tenant.slug} ~ button").click()
        assert "must be a number" in page.locator(f"#budget-{tenant.slug}-error").inner_text()
        page.fill(f"#budget-{tenant.slug}", "1100")  # this month's 1,000.00 is 90.9 %
        page.locator(f"#budget-{tenant.slug} ~ button").click()
        page.wait_for_url(f"{live_server.url}/billing/budgets/?page=1")
        assert "Budget for Acme set to" in page.content()
        assert "1,100.00 a month." in page.content()
        mails = smtp_server.wait_for(lambda m: lead.email in m["to"] and "90.9%" in m["subject"])
        assert mails and "1,000.00 of its EUR 1,100.00" in mails[0]["body"]
        assert smtp_server.wait_for(lambda m: other.email in m["to"] and "90.9%" in m["subject"])
        assert smtp_server.wait_for(lambda m: finance_user.email in m["to"])
        # One notice for the highest threshold crossed, not one per threshold.
        assert len([m for m in smtp_server.to(lead.email) if "budget" in m["subject"]]) == 1
        # The lead sees the budget beside the spend.
        page.context.clear_cookies()
        sign_in(page, live_server.url, "lead")
        page.goto(f"{live_server.url}/billing/")
        assert "90.9% spent" in page.locator(".budget").inner_text()
    finally:
        context.close()
