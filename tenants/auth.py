"""allauth adapters: no self-service sign-up; local password login only where allowed."""

import logging

from allauth.account.adapter import DefaultAccountAdapter
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter
from django.conf import settings
from django.shortcuts import resolve_url

log = logging.getLogger(__name__)


class PortalAccountAdapter(DefaultAccountAdapter):
    def is_open_for_signup(self, request) -> bool:
        # Accounts come from Keycloak (or the demo data in the embedded run), never sign-up.
        return False

    def pre_login(self, request, user, **kwargs):
        social = (kwargs.get("signal_kwargs") or {}).get("sociallogin")
        if not settings.PORTAL_LOCAL_LOGIN and social is None:
            from django.core.exceptions import PermissionDenied

            raise PermissionDenied("Local password sign-in is off; use Keycloak.")
        return super().pre_login(request, user, **kwargs)


    def get_logout_redirect_url(self, request) -> str:
        """After the portal session ends, end the Keycloak session too (where configured)."""
        url = super().get_logout_redirect_url(request)
        user = getattr(request, "user", None)
        if not (settings.KEYCLOAK_SERVER_URL and settings.PORTAL_KEYCLOAK_LOGOUT and user
                and user.is_authenticated and user.socialaccount_set.filter(
                    provider="keycloak").exists()):
            return url
        from urllib.parse import urlencode

        back = request.build_absolute_uri(resolve_url(url))
        query = urlencode({"client_id": settings.KEYCLOAK_CLIENT_ID,
                           "post_logout_redirect_uri": back})
        realm = settings.KEYCLOAK_SERVER_URL.rstrip("/")
        return f"{realm}/protocol/openid-connect/logout?{query}"


class PortalSocialAccountAdapter(DefaultSocialAccountAdapter):
    def on_authentication_error(self, request, provider, error=None, exception=None,
                                extra_context=None):
        # Kept in the log: the page itself says only that the sign-in failed.
        log.warning("Sign-in through %s failed: %s %r", getattr(provider, "id", provider),
                    error, exception)
        return super().on_authentication_error(request, provider, error=error,
                                               exception=exception,
                                               extra_context=extra_context)

    def is_open_for_signup(self, request, sociallogin) -> bool:
        return True
