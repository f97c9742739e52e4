"""Sign-in through the real Keycloak login page, roles from its claims, bearer tokens."""

from __future__ import annotations

import base64
import json
import time

import pytest
import requests
from playwright.sync_api import expect

from tenants.models import AuditEvent, Membership, PlatformRole
from tests.harness.waiting import eventually

from .conftest import client_id

pytestmark = pytest.mark.django_db(transaction=True)


def keycloak_sign_in(page, base: str, username: str) -> None:
    page.goto(f"{base}/accounts/login/")
    expect(page.locator("input[name=password]")).to_have_count(0)  # no local login
    page.click("text=Sign in with Keycloak")
    page.wait_for_selector("#kc-login")  # the real Keycloak login page
    page.fill("#username", username)
    page.fill("#password", "demo")
    page.click("#kc-login")
    try:
        page.wait_for_url(f"{base}/", timeout=15000)
    except Exception:
        raise AssertionError(f"stuck at {page.url}: {page.inner_text('body')[:500]}") from None


def sign_out(page, base: str) -> None:
    page.click("text=Sign out")
    # Straight back to the portal: the Keycloak session ends server to server, so there is
    # no "log out?" page to click through.
    page.wait_for_url(f"{base}/")
    expect(page.locator("#kc-logout")).to_have_count(0)
    expect(page.locator(".who")).to_contain_text("Sign in")


@pytest.mark.parametrize(("username", "chip", "sees"), [
    ("lead-acme", "Team lead", "New request"),
    ("admin", "Platform admin", "Fleet"),
    ("finance", "Finance", "Requests"),
])
def test_browser_sign_in_and_out_through_keycloak(portal_redirects, demo_tenants, page,
                                                  username, chip, sees):
    base = portal_redirects.url
    keycloak_sign_in(page, base, username)
    expect(page.locator(".who")).to_contain_text(chip)
    expect(page.locator("header nav")).to_contain_text(sees)
    if username == "lead-acme":
        m = Membership.objects.get(user__username="lead-acme")
        assert (m.tenant.slug, m.role, m.source) == ("acme-research", "lead", "keycloak")
        page.goto(f"{base}/requests/new/")
        expect(page.locator("select[name=tenant]")).to_contain_text("Acme Research")
    else:
        role = {"admin": "platform_admin", "finance": "finance"}[username]
        assert PlatformRole.objects.filter(user__username=username, role=role).exists()
    sign_out(page, base)
    # The Keycloak session ended too: signing in again asks for the password.
    page.goto(f"{base}/accounts/login/")
    page.click("text=Sign in with Keycloak")
    page.wait_for_selector("#kc-login")


def test_group_change_in_keycloak_changes_the_role_at_next_login(sso, portal_redirects,
                                                                  demo_tenants, page):
    kc, base = sso, portal_redirects.url
    keycloak_sign_in(page, base, "lead-globex")
    expect(page.locator(".who")).to_contain_text("Team lead")
    sign_out(page, base)

    user = kc.admin("GET", "/users?username=lead-globex&exact=true")[0]
    groups = {g["path"]: g["id"] for g in kc.admin("GET", f"/users/{user['id']}/groups")}
    all_groups = {}
    for top in kc.admin("GET", "/groups?briefRepresentation=false&max=100"):
        stack = [top]
        while stack:
            g = stack.pop()
            all_groups[g["path"]] = g["id"]
            stack += g.get("subGroups") or kc.admin("GET", f"/groups/{g['id']}/children") or []
    kc.admin("DELETE", f"/users/{user['id']}/groups/{groups['/tenants/globex-ml/leads']}")
    kc.admin("PUT", f"/users/{user['id']}/groups/{all_groups['/tenants/acme-research/members']}")

    keycloak_sign_in(page, base, "lead-globex")
    expect(page.locator(".who")).to_contain_text("Member")
    expect(page.locator(".who")).not_to_contain_text("Team lead")
    memberships = {(m.tenant.slug, m.role) for m in
                   Membership.objects.filter(user__username="lead-globex")}
    assert memberships == {("acme-research", "member")}
    event = AuditEvent.objects.filter(action="user.roles_synced").last()
    assert "removed from globex-ml" in event.reason


# --- bearer tokens on the API


def api(live_server, token: str | None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return requests.get(f"{live_server.url}/api/requests/", headers=headers, timeout=10)


def test_api_accepts_a_valid_keycloak_token_and_scopes_it(sso, live_server, demo_tenants):
    from tests.factories import make_lead, make_request

    other = make_lead(demo_tenants[1], "someone-at-globex")
    make_request(demo_tenants[1], other, title="Globex only")
    token = sso.password_token("lead-acme")
    response = api(live_server, token)
    assert response.status_code == 200, response.text
    assert response.json()["count"] == 0  # nothing of Acme's yet, nothing of Globex's ever
    assert Membership.objects.get(user__username="lead-acme").role == "lead"


def test_api_refuses_missing_and_tampered_tokens(sso, live_server, demo_tenants):
    assert api(live_server, None).status_code == 401
    token = sso.password_token("lead-acme")
    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["groups"] = ["/tenants/globex-ml/leads"]
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    response = api(live_server, f"{header}.{forged}.{signature}")
    assert response.status_code == 401
    assert "not valid" in response.json()["message"]


def test_api_refuses_an_expired_token(sso, live_server, demo_tenants):
    cid = client_id(sso, "aifactory-cli")
    rep = sso.admin("GET", f"/clients/{cid}")
    rep["attributes"]["access.token.lifespan"] = "1"
    sso.admin("PUT", f"/clients/{cid}", json=rep)
    try:
        token = sso.password_token("lead-acme")
    finally:
        rep["attributes"]["access.token.lifespan"] = ""
        sso.admin("PUT", f"/clients/{cid}", json=rep)
    payload = token.split(".")[1]
    expires = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))["exp"]
    # The portal allows no leeway here (conftest): past `exp` on this machine's clock, which
    # Keycloak shares, the token has expired.
    eventually(lambda: time.time() > expires, timeout=10, interval=0.1, retry_on=(),
               what="the token's expiry")
    response = api(live_server, token)
    assert response.status_code == 401 and "expired" in response.json()["message"]


def test_api_refuses_a_token_for_another_audience(sso, live_server, demo_tenants):
    sso.admin("POST", "/clients", json={
        "clientId": "some-other-app", "publicClient": True, "directAccessGrantsEnabled": True,
        "standardFlowEnabled": False})
    token = sso.password_token("lead-acme", client="some-other-app")
    response = api(live_server, token)
    assert response.status_code == 401
    payload = token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    # Keycloak adds an audience only when the client has one to name: the answer follows.
    assert response.json()["message"] == (
        "The token is not meant for this API." if "aud" in claims else
        'The token is not valid: Token is missing the "aud" claim')


def test_api_refuses_a_token_from_another_issuer(sso, live_server, demo_tenants):
    # Same keys, other issuer: Keycloak names the issuer after the host it was asked on.
    r = requests.post(f"http://localhost:{sso.port}/realms/aifactory/protocol/openid-connect/"
                      "token", data={"grant_type": "password", "client_id": "aifactory-cli",
                                     "username": "lead-acme", "password": "demo"}, timeout=10)
    token = r.json()["access_token"]
    response = api(live_server, token)
    assert response.status_code == 401 and "another issuer" in response.json()["message"]
    # And a realm that is not ours at all: its keys are unknown here.
    stranger = sso.password_token("stranger", realm="elsewhere")
    assert api(live_server, stranger).status_code == 401


# --- the embedded demo and the realm together (the README's own steps)


def test_after_seed_demo_every_realm_user_signs_in_as_a_new_account(portal_redirects, page):
    """seed_demo makes local accounts with the realm users' names and e-mails. Signing in
    through Keycloak must link by (issuer, subject), never capture the local account, never
    stop on a sign-up form, and give exactly the realm's roles."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from tenants.access import roles_for

    call_command("seed_demo")
    User = get_user_model()
    base = portal_redirects.url
    expected = {"lead-acme": "Team lead", "member-acme": "Member", "lead-globex": "Team lead",
                "admin": "Platform admin", "finance": "Finance"}
    expected.pop("lead-globex")  # another test of this tier moves lead-globex between groups
    for username, chip in expected.items():
        local = User.objects.get(username=username)
        local_roles = roles_for(local)
        keycloak_sign_in(page, base, username)
        expect(page.locator(".who")).to_contain_text(chip)
        linked = User.objects.get(socialaccount__provider="keycloak",
                                  socialaccount__extra_data__id_token__preferred_username=username)
        assert linked.pk != local.pk and linked.username == f"{username}-sso"
        assert not linked.is_superuser and not linked.has_usable_password()
        local.refresh_from_db()
        assert roles_for(User.objects.get(pk=local.pk)) == local_roles  # untouched
        sign_out(page, base)
    # Each sign-in again finds the same account, not a new one.
    keycloak_sign_in(page, base, "lead-acme")
    assert User.objects.filter(username__startswith="lead-acme").count() == 2
