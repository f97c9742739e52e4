"""A real Keycloak (from Maven Central) for the sso tier, and the portal pointed at it."""

from __future__ import annotations

import pytest

from tenants.models import Tenant
from tests.harness.keycloak import KeycloakServer


@pytest.fixture(scope="session")
def keycloak(tmp_path_factory):
    kc = KeycloakServer(tmp_path_factory.mktemp("keycloak")).start()
    print(f"\nkeycloak: ready in {kc.startup_seconds:.1f}s")
    yield kc
    kc.stop()


@pytest.fixture
def sso(keycloak, settings):
    """Portal settings as an operator would set them for Keycloak (local login off)."""
    realm = keycloak.realm_url()
    settings.KEYCLOAK_SERVER_URL = realm
    settings.PORTAL_LOCAL_LOGIN = False
    settings.PORTAL_JWT_LEEWAY_SECONDS = 0
    settings.KEYCLOAK_CLIENT_SECRET = "dev-portal-secret-change-me"
    settings.SOCIALACCOUNT_PROVIDERS = {"openid_connect": {"APPS": [{
        "provider_id": "keycloak", "name": "Keycloak", "client_id": "aifactory-portal",
        "secret": "dev-portal-secret-change-me", "settings": {"server_url": realm}}]}}
    return keycloak


@pytest.fixture
def demo_tenants(db):
    return [Tenant.objects.get_or_create(slug=s, defaults={"name": n})[0]
            for s, n in (("acme-research", "Acme Research"), ("globex-ml", "Globex ML"))]


def client_id(keycloak, client: str) -> str:
    return keycloak.admin("GET", f"/clients?clientId={client}")[0]["id"]


@pytest.fixture
def portal_redirects(sso, live_server):
    """Let the portal client redirect back to this test's live server."""
    cid = client_id(sso, "aifactory-portal")
    rep = sso.admin("GET", f"/clients/{cid}")
    rep["redirectUris"] = [f"{live_server.url}/accounts/oidc/keycloak/login/callback/"]
    rep["attributes"]["post.logout.redirect.uris"] = f"{live_server.url}/*"
    sso.admin("PUT", f"/clients/{cid}", json=rep)
    return live_server
