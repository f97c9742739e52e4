"""allauth adapters: no self-service sign-up; local password login only where allowed."""

from allauth.account.adapter import DefaultAccountAdapter
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter
from django.conf import settings


class PortalAccountAdapter(DefaultAccountAdapter):
    def is_open_for_signup(self, request) -> bool:
        # Accounts come from Keycloak (or the demo data in the embedded run), never sign-up.
        return False

    def pre_login(self, request, user, **kwargs):
        if not settings.PORTAL_LOCAL_LOGIN and not kwargs.get("sociallogin"):
            from django.core.exceptions import PermissionDenied

            raise PermissionDenied("Local password sign-in is off; use Keycloak.")
        return super().pre_login(request, user, **kwargs)


class PortalSocialAccountAdapter(DefaultSocialAccountAdapter):
    def is_open_for_signup(self, request, sociallogin) -> bool:
        return True
