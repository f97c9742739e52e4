"""Stranded capacity's pages in Chromium at a desk's and a phone's width: the finding's
figures and the lead's answer in the first screen, the fleet board; screenshots kept."""

import pytest

from tests.factories import session_cookie
from tests.web.test_authorization_matrix import build_world

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("width", [1280, 390])
def test_the_lead_answers_from_the_first_screen(browser, live_server, shot, width):
    world = build_world()
    finding = world["finding"]
    context = browser.new_context(viewport={"width": width, "height": 900})
    context.add_cookies([{"name": "sessionid", "url": live_server.url,
                          "value": session_cookie(world["users"]["lead"])}])
    page = context.new_page()
    try:
        assert page.goto(f"{live_server.url}/stranded/").status == 200
        shot(page, f"stranded-list-{width}")
        assert page.goto(f"{live_server.url}/stranded/{finding.pk}/").status == 200
        accept = page.get_by_role("button", name="Accept: release")
        keep = page.get_by_role("button", name="Keep it")
        assert accept.is_visible() and keep.is_visible()
        shot(page, f"stranded-finding-{width}")
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        page.fill("#id_reason", "")
        keep.click()  # no reason: refused on the page, the message beside the field
        assert page.locator("#reason-error").is_visible()
        page.fill("#id_reason", "needed for the quarter's runs")
        page.get_by_role("button", name="Keep it").click()
        page.wait_for_load_state()
        assert "Kept as it is" in page.content()
    finally:
        context.close()


def test_the_fleet_board_at_a_phones_width(browser, live_server, shot):
    world = build_world()
    context = browser.new_context(viewport={"width": 390, "height": 900})
    context.add_cookies([{"name": "sessionid", "url": live_server.url,
                          "value": session_cookie(world["users"]["admin"])}])
    page = context.new_page()
    try:
        assert page.goto(f"{live_server.url}/stranded/board/").status == 200
        assert world["pool"].slug in page.content()
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        shot(page, "stranded-board-390")
    finally:
        context.close()
