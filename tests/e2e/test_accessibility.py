"""axe-core (npm, pinned) over every page of every role, in Chromium: zero serious or
critical violations. The pages come from the authorization matrix (every named URL has a
row there), so a new page is checked without anyone remembering to add it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.factories import session_cookie
from tests.web.test_authorization_matrix import MATRIX, _args, build_world

pytestmark = pytest.mark.django_db(transaction=True)

AXE = Path(__file__).resolve().parents[2] / "node_modules" / "axe-core" / "axe.min.js"
# Not pages: JSON, files, metrics, and the htmx fragments (checked inside their pages).
NOT_PAGES = ("api-", "request-", "allocation-", "billing-", "cluster-", "stranded-",
             "healthz", "livez", "readyz", "metrics",
             "fleet:kubeconfig", "fleet:example", "fleet:queue", "fleet:connect",
             "intake:allocation")
ROLES = ("anonymous", "member", "lead", "admin", "finance")


def pages_for(role: str) -> list[str]:
    return sorted(name for name, row in MATRIX.items()
                  if row.method == "get" and row.expect[role] == 200
                  and not name.startswith(NOT_PAGES))


def serious_violations(page) -> list[str]:
    # Evaluated in the page, not added as a <script>: the portal's Content-Security-Policy
    # (rightly) refuses inline scripts, and the check must not need it lowered.
    page.evaluate(AXE.read_text())
    result = page.evaluate("""async () => {
        const r = await axe.run(document, {resultTypes: ["violations"]});
        return r.violations.filter(v => v.impact === "serious" || v.impact === "critical")
            .map(v => `${v.impact} ${v.id}: ${v.help} — ${v.nodes.slice(0, 3)
                .map(n => n.target.join(" ")).join(", ")}`);
    }""")
    return result


def test_axe_is_installed():
    assert AXE.exists(), "scripts/assets.sh test installs axe-core from npm"


@pytest.fixture
def richer_world(transactional_db):
    """The authorization matrix's world (committed: the live server reads it from its own
    connection) and more states on the pages: a budget nearly spent (warning colours), a
    request waiting for review, a draft, an e-mail in the lead's list."""
    from decimal import Decimal

    from billing.models import Budget
    from tenants.models import Notification
    from tests.factories import make_request

    world = build_world()
    tenant, lead = world["request"].tenant, world["users"]["lead"]
    Budget.objects.create(tenant=tenant, monthly_amount=Decimal("2.6"))
    make_request(tenant, lead, submit=True, title="Waiting")
    make_request(tenant, lead, title="Draft")
    Notification.objects.create(user=lead, kind="request_decided", subject="Request approved",
                                body="ok")
    return world


@pytest.mark.parametrize("role", ROLES)
def test_no_serious_accessibility_violations(browser, live_server, richer_world, role):
    from django.urls import reverse

    assert AXE.exists()
    names = pages_for(role) + (["account_login"] if role == "anonymous" else [])
    assert len(names) >= (2 if role == "anonymous" else 6), names
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    if role != "anonymous":
        context.add_cookies([{"name": "sessionid", "url": live_server.url,
                              "value": session_cookie(richer_world["users"][role])}])
    page = context.new_page()
    found: dict[str, list[str]] = {}
    try:
        for name in names:
            url = live_server.url + reverse(name, args=_args(MATRIX[name].args, richer_world)
                                            if name in MATRIX else [])
            response = page.goto(url)
            assert response.status == 200, f"{name} as {role}: {response.status}"
            page.wait_for_load_state("networkidle")  # htmx panels loaded, charts drawn
            problems = serious_violations(page)
            if problems:
                found[f"{name} ({url})"] = problems
    finally:
        context.close()
    assert found == {}, "\n".join(f"{k}:\n  " + "\n  ".join(v) for k, v in found.items())


def test_the_blocked_submit_and_a_filtered_report_pass_too(browser, live_server, richer_world):
    """States reached by interaction: the request form after a "never fits" preview, and the
    finance report after an htmx filter swap."""
    lead = richer_world["users"]["lead"]
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_cookies([{"name": "sessionid", "url": live_server.url,
                          "value": session_cookie(lead)}])
    page = context.new_page()
    try:
        page.goto(f"{live_server.url}/requests/new/")
        page.fill("input[name=title]", "Too big")
        page.check("input[name=isolation_origin][value=habitual]")
        page.check("input[name=device_fill][value=full]")
        page.fill("input[name=whole_devices]", "400")
        page.locator("#submit-blocked").wait_for()
        assert page.locator("button[value=submit]").is_disabled()
        assert serious_violations(page) == []
        page.goto(f"{live_server.url}/billing/")
        page.select_option("select[name=months]", "12")
        page.wait_for_url(re.compile(r"[?&]months=12"))
        page.wait_for_load_state("networkidle")
        assert serious_violations(page) == []
    finally:
        context.close()


@pytest.mark.parametrize("role", ROLES)
def test_every_page_fits_a_phone_screen(browser, live_server, richer_world, role):
    """At 390 px wide no page scrolls sideways as a whole (a wide table scrolls in its own
    box) and the top bar's links, name and sign-out stay on its dark background."""
    from django.urls import reverse

    context = browser.new_context(viewport={"width": 390, "height": 800})
    if role != "anonymous":
        context.add_cookies([{"name": "sessionid", "url": live_server.url,
                              "value": session_cookie(richer_world["users"][role])}])
    page = context.new_page()
    found: dict[str, str] = {}
    names = pages_for(role) + (["account_login"] if role == "anonymous" else [])
    try:
        for name in names:
            url = live_server.url + reverse(name, args=_args(MATRIX[name].args, richer_world)
                                            if name in MATRIX else [])
            assert page.goto(url).status == 200, name
            page.wait_for_load_state("networkidle")
            # Folded sections count too (the review's override table opens in place).
            page.evaluate("document.querySelectorAll('main details').forEach(d => d.open = true)")
            wide, outside, past = page.evaluate(r"""() => {
                const bar = document.querySelector("header.topbar").getBoundingClientRect();
                const out = [...document.querySelectorAll("header.topbar a, header.topbar button")]
                    .map(e => [e.textContent.trim(), e.getBoundingClientRect()])
                    .filter(([, r]) => r.right > innerWidth || r.bottom > bar.bottom ||
                                       r.left < 0)
                    .map(([t]) => t);
                // The outermost elements reaching past the right edge (not inside a box
                // that scrolls or clips them), to say what to fix.
                const clipped = e => { for (let p = e.parentElement; p; p = p.parentElement) {
                    const o = getComputedStyle(p).overflowX;
                    if (o === "auto" || o === "scroll" || o === "hidden") return true; }
                    return false; };
                const past = [...document.querySelectorAll("main *")]
                    .filter(e => e.getBoundingClientRect().right > innerWidth + 0.5 &&
                                 !clipped(e) &&
                                 !(e.parentElement.getBoundingClientRect().right >
                                   innerWidth + 0.5 && !clipped(e.parentElement)))
                    .slice(0, 3).map(e => e.tagName.toLowerCase() +
                        (e.id ? "#" + e.id : "") +
                        (e.className && typeof e.className === "string" ?
                         "." + e.className.trim().split(/\s+/).join(".") : ""));
                return [document.documentElement.scrollWidth - innerWidth, out, past];
            }""")
            if wide > 0 or outside:
                found[name] = (f"{wide}px wider than the screen ({', '.join(past)}); "
                               f"outside the bar: {outside}")
    finally:
        context.close()
    assert found == {}, found


@pytest.mark.parametrize("width", [1280, 1024])
def test_the_admins_top_bar_fits_a_laptop_screen(browser, live_server, richer_world, width):
    """The admin's menu is the longest: it wraps, and the name and "Sign out" stay whole and
    on screen (at 1280 px "Sign out" was pushed 5 px past the edge, broken over two lines)."""
    context = browser.new_context(viewport={"width": width, "height": 800})
    context.add_cookies([{"name": "sessionid", "url": live_server.url,
                          "value": session_cookie(richer_world["users"]["admin"])}])
    page = context.new_page()
    try:
        page.goto(live_server.url + "/")
        wide, sign_out = page.evaluate("""() => {
            const b = [...document.querySelectorAll("header.topbar button, header.topbar a")]
                .find(e => e.textContent.trim() === "Sign out").getBoundingClientRect();
            return [document.documentElement.scrollWidth - innerWidth,
                    [b.right <= innerWidth, b.height < 30]]; }""")
        assert wide <= 0 and sign_out == [True, True], (wide, sign_out)
    finally:
        context.close()
