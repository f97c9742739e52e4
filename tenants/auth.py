"""allauth adapters: no self-service sign-up; local password login only where allowed."""

import logging

from allauth.account.adapter import DefaultAccountAdapter
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter
from django.conf import settings

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

    def pre_social_login(self, request, sociallogin) -> None:
        # A first sign-in creates a new account, linked by (issuer, subject) alone. The realm's
        # e-mail is kept on the user but not claimed as a portal address, so a local account
        # with the same address neither captures the sign-in nor sends it to a sign-up form.
        if not sociallogin.is_existing:
            sociallogin.email_addresses = []
        super().pre_social_login(request, sociallogin)

    def populate_user(self, request, sociallogin, data):
        from allauth.account.utils import user_username

        from .sso import free_username, username_taken

        user = super().populate_user(request, sociallogin, data)
        user_username(user, free_username(user_username(user) or sociallogin.account.uid,
                                          username_taken))
        return user
