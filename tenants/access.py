"""The one authorization layer: who is what, and which objects they may see.

Views and API endpoints never filter by tenant themselves; they call these helpers. An
object outside the user's tenants is a 404 (its existence is not revealed); a visible
object the user may not act on is a 403.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db.models import IntegerField, QuerySet, Value

from . import identity_cache
from .models import Membership, PlatformRole, Tenant


@dataclass(frozen=True)
class PortalRoles:
    authenticated: bool = False
    platform_admin: bool = False
    finance: bool = False
    lead_of: frozenset[int] = field(default_factory=frozenset)
    member_of: frozenset[int] = field(default_factory=frozenset)

    @property
    def tenant_ids(self) -> frozenset[int]:
        return self.lead_of | self.member_of

    @property
    def sees_all_tenants(self) -> bool:
        return self.platform_admin or self.finance

    @property
    def is_lead(self) -> bool:
        return bool(self.lead_of)

    def can_view_tenant(self, tenant_id: int) -> bool:
        return self.sees_all_tenants or tenant_id in self.tenant_ids

    def can_file_for(self, tenant_id: int) -> bool:
        return tenant_id in self.lead_of

    def can_change_holdings_of(self, tenant_id: int) -> bool:
        """Release or resize what a tenant holds: its leads, or a platform admin."""
        return self.platform_admin or self.can_file_for(tenant_id)

    @property
    def labels(self) -> list[str]:
        out = []
        if self.platform_admin:
            out.append("Platform admin")
        if self.finance:
            out.append("Finance")
        if self.lead_of:
            out.append("Team lead")
        if self.member_of - self.lead_of:
            out.append("Member")
        return out


def roles_cache_key(user_id: int) -> str:
    return f"roles:v2:{user_id}"


def roles_entry(user, roles: PortalRoles) -> tuple[str, PortalRoles]:
    # The join time goes with the roles: ids restart after a database flush (tests, a
    # restore), and a new user must never inherit the roles cached for an old one of that id.
    return (user.date_joined.isoformat(), roles)


def roles_of_entry(user, entry) -> PortalRoles | None:
    """The roles a current cache entry holds for this very user, else None."""
    if isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[1], PortalRoles) \
            and entry[0] == user.date_joined.isoformat():
        return entry[1]
    return None


def roles_for(user) -> PortalRoles:
    """Roles of a user, computed once per request object (cached on the user) and, where
    every process shares the cache, kept there between requests: every page's layout needs
    them. Any grant or revocation clears the entry at once (tenants.receivers). The signed-in
    user's entry is usually read with the user, in the same round trip (tenants.auth)."""
    if user is None or not user.is_authenticated:
        return PortalRoles()
    cached = getattr(user, "_portal_roles", None)
    if cached is not None:
        return cached


    seconds = settings.PORTAL_ROLES_CACHE_SECONDS
    if not seconds:
        user._portal_roles = _roles_from_database(user)
        return user._portal_roles
    key = roles_cache_key(user.pk)
    # The token before the database read: read with the user this request, or now.
    token = getattr(user, "_identity_token", None)
    if token is None:
        entry, token = identity_cache.read(key, user.pk)
        shared = roles_of_entry(user, entry)
        if shared is not None:
            user._portal_roles = shared
            return shared
    roles = _roles_from_database(user)
    identity_cache.write(key, token, roles_entry(user, roles), seconds)
    user._portal_roles = roles
    return roles


def _roles_from_database(user) -> PortalRoles:
    # One round trip for both kinds of role.
    rows = Membership.objects.filter(user=user).values_list("tenant_id", "role").union(
        PlatformRole.objects.filter(user=user).annotate(
            no_tenant=Value(None, output_field=IntegerField())).values_list("no_tenant", "role"),
        all=True)
    platform, lead, member = set(), set(), set()
    for tenant_id, role in rows:
        if tenant_id is None:
            platform.add(role)
        else:
            (lead if role == Membership.Role.LEAD else member).add(tenant_id)
    return PortalRoles(
        authenticated=True,
        platform_admin=PlatformRole.Role.PLATFORM_ADMIN in platform,
        finance=PlatformRole.Role.FINANCE in platform,
        lead_of=frozenset(lead),
        member_of=frozenset(member),
    )


def forget_roles(user) -> None:
    """Call after changing a user's memberships within the same request."""
    for attribute in ("_portal_roles", "_identity_token"):
        if hasattr(user, attribute):
            delattr(user, attribute)
    identity_cache.changed(user.pk)


def visible_tenants(user) -> QuerySet[Tenant]:
    roles = roles_for(user)
    if roles.sees_all_tenants:
        return Tenant.objects.all()
    return Tenant.objects.filter(id__in=roles.tenant_ids)


def tenant_scope(user) -> tuple[int, ...] | None:
    """The tenants the user may see (None: every tenant; nobody signed in: none): the scope
    scope_to_tenants applies, and the key of what is kept per scope."""
    roles = roles_for(user)
    if not roles.authenticated:
        return ()
    return None if roles.sees_all_tenants else tuple(sorted(roles.tenant_ids))


def scope_to_tenants(user, queryset: QuerySet, tenant_field: str = "tenant") -> QuerySet:
    """Limit any queryset with a tenant foreign key to what the user may see."""
    scope = tenant_scope(user)
    if scope is None:
        return queryset
    if not scope:
        return queryset.none()
    return queryset.filter(**{f"{tenant_field}__in": scope})


def require_platform_admin(user) -> PortalRoles:
    roles = roles_for(user)
    if not roles.platform_admin:
        raise PermissionDenied("Only platform admins may do this.")
    return roles


def require_holdings_changer(user, tenant_id: int, what: str) -> PortalRoles:
    """Releasing or resizing an allocation (`what`: "release", "resize") is for the
    tenant's leads and platform admins: anyone else who may see it gets 403."""
    roles = roles_for(user)
    if not roles.can_change_holdings_of(tenant_id):
        raise PermissionDenied(f"Only a team lead of this tenant or a platform admin may "
                               f"{what} an allocation.")
    return roles


def require_lead_of(user, tenant_id: int) -> PortalRoles:
    """Acting for a tenant (filing, editing, renewing) is for its leads: anyone else who may
    see the object gets 403."""
    roles = roles_for(user)
    if not roles.can_file_for(tenant_id):
        raise PermissionDenied("Only a team lead of this tenant may do that.")
    return roles


def require_billing_writer(user) -> PortalRoles:
    """Closing, reopening and adjusting statements, and setting budgets."""
    roles = roles_for(user)
    if not (roles.finance or roles.platform_admin):
        raise PermissionDenied("Only finance and platform admins close and adjust statements.")
    return roles


def require_rates_reader(user) -> PortalRoles:
    roles = roles_for(user)
    if not (roles.platform_admin or roles.finance):
        raise PermissionDenied("Rate cards are for platform admins and finance.")
    return roles


def billing_scope(user) -> list[int] | None:
    """The tenants whose billing the user reads: None for every tenant (finance, admins),
    else its own (leads and members); nobody else reads billing."""
    roles = roles_for(user)
    if roles.sees_all_tenants:
        return None
    if not roles.tenant_ids:
        raise PermissionDenied("Billing is for finance, admins and a tenant's own people.")
    return roles.tenant_ids
