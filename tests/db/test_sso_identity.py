"""SSO identities link by (issuer, subject) only — never by username or e-mail — and with
Keycloak the roles come from its claims alone. The bearer-token path and a browser sign-in
meet in the same service, so both are held to this."""

import pytest
from allauth.socialaccount.models import SocialAccount
from django.contrib.auth import get_user_model
from rest_framework.exceptions import AuthenticationFailed

from tenants.access import roles_for
from tenants.api_auth import user_for_claims
from tenants.models import Membership, PlatformRole
from tenants.sso import free_username, sso_user_for
from tests.factories import UserFactory, make_lead, make_platform_user

pytestmark = pytest.mark.django_db

ISSUER = "http://127.0.0.1:8080/realms/aifactory"


def claims(sub: str, username: str, **extra) -> dict:
    return {"iss": ISSUER, "sub": sub, "preferred_username": username,
            "email": f"{username}@example.test", **extra}


def test_a_realm_user_named_like_a_local_superuser_does_not_become_it():
    User = get_user_model()
    root = User.objects.create_superuser("admin", "admin@example.test", "pw")
    user = user_for_claims(claims("sub-1", "admin", roles=[]))
    assert user.pk != root.pk and not user.is_superuser and not user.is_staff
    assert user.username == "admin-sso" and not user.has_usable_password()
    assert not roles_for(user).platform_admin


def test_a_token_never_inherits_a_local_accounts_roles(tenant):
    local = make_lead(tenant, "lead-acme")
    user = user_for_claims(claims("sub-2", "lead-acme", groups=[]))
    assert user.pk != local.pk
    assert not roles_for(user).is_lead
    assert Membership.objects.get(user=local).role == "lead"  # the local account is untouched


def test_the_same_subject_is_the_same_user_whatever_its_name(tenant):
    first = user_for_claims(claims("sub-3", "alice", groups=[f"/tenants/{tenant.slug}/leads"]))
    renamed = user_for_claims(claims("sub-3", "alice-renamed",
                                     groups=[f"/tenants/{tenant.slug}/leads"]))
    assert renamed.pk == first.pk
    assert SocialAccount.objects.filter(uid="sub-3").count() == 1


def test_roles_come_from_keycloak_alone(tenant, other_tenant):
    user = user_for_claims(claims("sub-4", "bob", groups=[f"/tenants/{tenant.slug}/members"]))
    # A grant made by hand in the portal for an SSO user does not survive the next token.
    PlatformRole.objects.create(user=user, role=PlatformRole.Role.PLATFORM_ADMIN,
                                source="local")
    Membership.objects.create(user=user, tenant=other_tenant, role="lead", source="local")
    user = user_for_claims(claims("sub-4", "bob", groups=[f"/tenants/{tenant.slug}/members"]))
    roles = roles_for(user)
    assert not roles.platform_admin and not roles.is_lead
    assert roles.member_of == frozenset({tenant.pk})


def test_a_subject_linked_to_another_issuer_is_refused():
    sso_user_for(provider="keycloak", claims=claims("sub-5", "carol"))
    with pytest.raises(AuthenticationFailed, match="another issuer"):
        user_for_claims({**claims("sub-5", "carol"), "iss": "https://elsewhere/realms/x"})


def test_free_username():
    taken = {"admin", "admin-sso"}
    assert free_username("alice", taken.__contains__) == "alice"
    assert free_username("admin", taken.__contains__) == "admin-sso-2"
    assert free_username("", taken.__contains__) == "user"


def test_no_tenant_no_cost_link(client):
    client.force_login(UserFactory(username="nobody"))  # signed in, no tenant, no role
    page = client.get("/").content.decode()
    assert "/billing/" not in page
    finance = make_platform_user("fin", PlatformRole.Role.FINANCE)
    client.force_login(finance)
    assert "/billing/" in client.get("/").content.decode()
