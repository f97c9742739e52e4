"""Portal roles from Keycloak claims, applied on every login (and every API token).

Mapping is a pure function over the claims; applying it is a service that adds and removes
only the grants that came from Keycloak, each audited. A tenant that does not exist yet is
never created silently: only with PORTAL_CREATE_TENANTS_FROM_GROUPS on.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from allauth.socialaccount.models import SocialAccount
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction

from .access import forget_roles
from .audit import audit_record
from .models import Membership, PlatformRole, Tenant

log = logging.getLogger(__name__)
SOURCE = "keycloak"


@dataclass(frozen=True)
class ClaimRoles:
    platform: frozenset[str]  # PlatformRole.Role values
    tenants: tuple[tuple[str, str], ...]  # (slug, Membership.Role value), sorted


def _pattern(template: str) -> re.Pattern:
    escaped = re.escape(template).replace(re.escape("{slug}"), r"(?P<slug>[a-z0-9][a-z0-9-]*)")
    return re.compile(f"^{escaped}$")


def roles_from_claims(claims: dict, *, groups_claim: str = "groups", roles_claim: str = "roles",
                      lead_pattern: str = "/tenants/{slug}/leads",
                      member_pattern: str = "/tenants/{slug}/members",
                      admin_role: str = "platform-admin",
                      finance_role: str = "finance") -> ClaimRoles:
    groups = claims.get(groups_claim) or []
    roles = claims.get(roles_claim) or []
    if isinstance(groups, str):
        groups = [groups]
    if isinstance(roles, str):
        roles = [roles]
    lead_re, member_re = _pattern(lead_pattern), _pattern(member_pattern)
    tenants: dict[str, str] = {}
    for group in groups:
        if m := lead_re.match(group):
            tenants[m["slug"]] = Membership.Role.LEAD  # lead wins over member
        elif (m := member_re.match(group)) and m["slug"] not in tenants:
            tenants[m["slug"]] = Membership.Role.MEMBER
    platform = set()
    if admin_role in roles:
        platform.add(PlatformRole.Role.PLATFORM_ADMIN)
    if finance_role in roles:
        platform.add(PlatformRole.Role.FINANCE)
    return ClaimRoles(frozenset(platform), tuple(sorted(tenants.items())))


def roles_from_settings(claims: dict) -> ClaimRoles:
    return roles_from_claims(
        claims, groups_claim=settings.PORTAL_GROUPS_CLAIM,
        roles_claim=settings.PORTAL_ROLES_CLAIM,
        lead_pattern=settings.PORTAL_LEAD_GROUP_PATTERN,
        member_pattern=settings.PORTAL_MEMBER_GROUP_PATTERN,
        admin_role=settings.PORTAL_ADMIN_ROLE, finance_role=settings.PORTAL_FINANCE_ROLE)


@transaction.atomic
def user_sync_roles(*, user, claims: dict) -> list[str]:
    """Make the user's grants equal what the claims say; return changes.

    With Keycloak, roles come from Keycloak alone: grants the portal made by hand for this
    user (source "local") are replaced too."""
    wanted = roles_from_settings(claims)
    changes: list[str] = []
    have_platform = {r.role: r for r in PlatformRole.objects.filter(user=user)}
    for role in wanted.platform - set(have_platform):
        PlatformRole.objects.create(user=user, role=role, source=SOURCE)
        changes.append(f"granted {PlatformRole.Role(role).label}")
    for role in wanted.platform & set(have_platform):
        if have_platform[role].source != SOURCE:
            PlatformRole.objects.filter(pk=have_platform[role].pk).update(source=SOURCE)
    for role, grant in have_platform.items():
        if role not in wanted.platform:
            grant.delete()
            changes.append(f"revoked {PlatformRole.Role(role).label}")

    wanted_tenants = dict(wanted.tenants)
    existing = {t.slug: t for t in Tenant.objects.filter(slug__in=wanted_tenants)}
    for slug in set(wanted_tenants) - set(existing):
        if settings.PORTAL_CREATE_TENANTS_FROM_GROUPS:
            existing[slug] = Tenant.objects.create(slug=slug, name=slug.replace("-", " ").title())
            audit_record(actor=None, subject=existing[slug], tenant=existing[slug],
                         action="tenant.created",
                         reason=f"Created from Keycloak group of {user.get_username()} "
                                "(PORTAL_CREATE_TENANTS_FROM_GROUPS is on).")
        else:
            log.warning("Keycloak group for unknown tenant %r ignored (user %s)", slug, user)
            changes.append(f"ignored group of unknown tenant {slug}")
    have = {m.tenant.slug: m for m in Membership.objects.filter(user=user).select_related(
        "tenant")}
    for slug, role in wanted_tenants.items():
        tenant = existing.get(slug)
        if tenant is None:
            continue
        current = have.get(slug)
        if current is None:
            Membership.objects.create(user=user, tenant=tenant, role=role, source=SOURCE)
            changes.append(f"{Membership.Role(role).label.lower()} of {slug}")
        elif current.role != role or current.source != SOURCE:
            current.role, current.source = role, SOURCE
            current.save(update_fields=["role", "source"])
            changes.append(f"now {Membership.Role(role).label.lower()} of {slug}")
    for slug, membership in have.items():
        if slug not in wanted_tenants:
            membership.delete()
            changes.append(f"removed from {slug}")
    real = [c for c in changes if not c.startswith("ignored")]
    if real:
        audit_record(actor=user, subject=user, action="user.roles_synced",
                     reason=f"Roles from Keycloak at sign-in: {'; '.join(changes)}.")
    forget_roles(user)
    return changes


def claims_from_extra_data(extra_data: dict) -> dict:
    """allauth ≥ 65.11 keeps the ID token's claims and userinfo apart; merge them."""
    claims = {}
    if isinstance(extra_data.get("id_token"), dict):
        claims.update(extra_data["id_token"])
    if isinstance(extra_data.get("userinfo"), dict):
        claims.update(extra_data["userinfo"])
    if not claims:
        claims = dict(extra_data)
    return claims


def free_username(wanted: str, taken) -> str:
    """A username for a new SSO account: the realm's own name when free, else the same with
    an "-sso" suffix (and a number). Never an existing account: identities link by issuer and
    subject, so a realm user named like a local account must not become that account."""
    base = (wanted or "user")[:140]
    if not taken(base):
        return base
    n = 1
    while True:
        candidate = f"{base}-sso" + (f"-{n}" if n > 1 else "")
        if not taken(candidate):
            return candidate
        n += 1


def username_taken(name: str) -> bool:
    User = get_user_model()
    return User.objects.filter(**{f"{User.USERNAME_FIELD}__iexact": name}).exists()


@transaction.atomic
def sso_user_for(*, provider: str, claims: dict):
    """The portal user of a Keycloak subject for the bearer-token path: found by (provider =
    one issuer, sub) only — the same SocialAccount a browser sign-in creates — or created with
    a fresh username, as the sign-in adapter would."""
    account = (SocialAccount.objects.select_for_update().select_related("user")
               .filter(provider=provider, uid=claims["sub"]).first())
    if account is not None:
        known_issuer = claims_from_extra_data(account.extra_data).get("iss")
        if known_issuer and claims.get("iss") and known_issuer != claims["iss"]:
            raise ValueError("this subject is linked to another issuer")
        return account.user
    user = get_user_model().objects.create_user(  # no password: it signs in through Keycloak
        free_username(claims.get("preferred_username") or claims["sub"], username_taken),
        email=claims.get("email", ""), first_name=claims.get("given_name", "")[:150],
        last_name=claims.get("family_name", "")[:150])
    SocialAccount.objects.create(provider=provider, uid=claims["sub"], user=user,
                                 extra_data={"id_token": {k: claims[k] for k in ("iss", "sub")
                                                          if k in claims}})
    return user
