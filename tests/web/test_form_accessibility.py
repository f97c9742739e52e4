"""Forms a screen reader can follow: radio groups are fieldsets named by a legend, and every
aria-describedby names elements that exist on the page (help and errors)."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from django.urls import reverse

from tests.factories import form_data, make_request

pytestmark = pytest.mark.django_db

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}


class FormAudit(HTMLParser):
    """Ids, aria-describedby references, and each radio's enclosing legend."""

    def __init__(self, html: str):
        super().__init__()
        self.ids: set[str] = set()
        self.described: list[tuple[str, str, list[str]]] = []  # (tag, name or id, ids)
        self.radios: dict[str, str | None] = {}  # radio group name -> legend text
        self.empty_for = 0
        self.stack: list[dict] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if "aria-describedby" in a:
            self.described.append((tag, a.get("name") or a.get("id") or "",
                                   (a["aria-describedby"] or "").split()))
        if tag == "label" and a.get("for") == "":
            self.empty_for += 1
        if tag == "input" and a.get("type") == "radio":
            fieldsets = [e for e in self.stack if e["tag"] == "fieldset"]
            self.radios.setdefault(a["name"], fieldsets[-1]["legend"] if fieldsets else None)
        if tag not in VOID:
            self.stack.append({"tag": tag, "legend": None, "text": ""})

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        while self.stack:
            element = self.stack.pop()
            if element["tag"] == tag:
                break
        if tag == "legend":
            fieldsets = [e for e in self.stack if e["tag"] == "fieldset"]
            if fieldsets:
                fieldsets[-1]["legend"] = " ".join(element["text"].split())

    def handle_data(self, data):
        for element in self.stack:
            if element["tag"] == "legend":
                element["text"] += data

    def dangling(self) -> list[tuple[str, str, str]]:
        return [(tag, name, ref) for tag, name, refs in self.described for ref in refs
                if ref not in self.ids]

    def described_by(self, name: str) -> list[str]:
        return next(refs for _, n, refs in self.described if n == name)


def audit(response, status: int = 200) -> FormAudit:
    assert response.status_code == status, response.status_code
    page = FormAudit(response.content.decode())
    assert page.dangling() == [], page.dangling()
    assert page.empty_for == 0
    return page


INTAKE_GROUPS = {"isolation_origin": "Where does the need for separation come from? *",
                 "device_fill": "How much of one device does one replica fill? *"}


def test_the_new_request_form(client, tenant, lead, pools):
    client.force_login(lead)
    page = audit(client.get(reverse("intake:new")))
    assert page.radios == INTAKE_GROUPS
    assert page.described_by("ends_on") == ["id_ends_on_helptext"]
    assert page.described_by("isolation_reference") == ["id_isolation_reference_helptext"]
    # Fields without help or errors name nothing.
    assert "title" not in [n for _, n, _ in page.described]


def test_the_new_request_form_with_errors(client, tenant, lead, pools):
    client.force_login(lead)
    data = {**form_data(tenant, title="", isolation_origin="contractual"), "intent": "submit"}
    data.pop("device_fill")
    page = audit(client.post(reverse("intake:new"), data))
    assert page.radios == INTAKE_GROUPS
    assert page.described_by("title") == ["id_title_error"]
    assert page.described_by("isolation_reference") == ["id_isolation_reference_helptext",
                                                        "id_isolation_reference_error"]
    # A radio group's help and errors describe its fieldset.
    assert ("fieldset", "", ["id_device_fill_error"]) in page.described


def test_the_edit_form(client, tenant, lead, pools):
    req = make_request(tenant, lead)
    client.force_login(lead)
    page = audit(client.get(reverse("intake:edit", args=[req.pk])))
    assert page.radios == INTAKE_GROUPS


def test_the_review_decision_form(client, tenant, lead, admin_user, pools):
    req = make_request(tenant, lead, submit=True)
    client.force_login(admin_user)
    url = reverse("intake:review_detail", args=[req.pk])
    page = audit(client.get(url))
    assert page.radios == {"action": "Action *"}
    assert page.described_by("reason") == ["id_reason_helptext"]
    page = audit(client.post(url, {"action": "deny", "reason": "",
                                   "override_route": "dedicated_block"}))
    assert page.described_by("reason") == ["id_reason_helptext", "id_reason_error"]
    assert page.described_by("override_route") == ["id_override_route_error"]
    page = audit(client.post(url, {"reason": "no action chosen"}))
    assert ("fieldset", "", ["id_action_error"]) in page.described


def test_the_sign_in_form_leaves_out_help_it_does_not_show(client):
    page = audit(client.get(reverse("account_login")))
    assert "password" not in [n for _, n, _ in page.described]


def test_the_pool_form(client, admin_user, pools):
    client.force_login(admin_user)
    audit(client.get(reverse("fleet:pool_edit", args=["shared"])))


def test_the_queue_filters_name_their_error(client, admin_user, pools):
    client.force_login(admin_user)
    page = audit(client.get(reverse("intake:review_queue"), {"route": "teleport"}), 400)
    assert page.described_by("route") == ["id_route_error"]
