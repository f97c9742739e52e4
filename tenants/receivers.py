"""Apply Keycloak roles at every sign-in; end the Keycloak session at sign-out."""

import logging

import requests
from allauth.account.signals import user_logged_in
from django.conf import settings
from django.contrib.auth.signals import user_logged_out
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from . import identity_cache
from .models import Membership, PlatformRole
from .sso import claims_from_extra_data, user_sync_roles

log = logging.getLogger(__name__)
REFRESH_KEY = "keycloak_refresh_token"


@receiver(post_save, sender=settings.AUTH_USER_MODEL)
@receiver(post_delete, sender=settings.AUTH_USER_MODEL)
def user_changed(sender, instance, **kwargs) -> None:
    """A password change, a deactivation or a deletion reaches every process at once."""
    identity_cache.changed(instance.pk)


@receiver(post_save, sender=Membership)
@receiver(post_delete, sender=Membership)
@receiver(post_save, sender=PlatformRole)
@receiver(post_delete, sender=PlatformRole)
def roles_changed(sender, instance, **kwargs) -> None:
    """A grant or a revocation takes effect on the user's next request, in every process."""
    identity_cache.changed(instance.user_id)


@receiver(user_logged_in)
def sync_roles_at_login(sender, request, user, **kwargs) -> None:
    sociallogin = kwargs.get("sociallogin")
    if sociallogin is None:
        return  # a local (embedded demo) login: roles are the portal's own
    user_sync_roles(user=user, claims=claims_from_extra_data(sociallogin.account.extra_data))
    token = getattr(sociallogin, "token", None)
    if token is not None and token.token_secret and request is not None:
        # Kept for this session only, to end the Keycloak session when the user signs out.
        request.session[REFRESH_KEY] = token.token_secret


@receiver(user_logged_out)
def end_keycloak_session(sender, request, user, **kwargs) -> None:
    """Sign-out ends the realm session too, server to server, so the browser is not stopped
    on Keycloak's "log out?" page and the next sign-in asks for the password again."""
    refresh = request.session.get(REFRESH_KEY) if request is not None else None
    if not (refresh and settings.KEYCLOAK_SERVER_URL and settings.PORTAL_KEYCLOAK_LOGOUT):
        return
    url = f"{settings.KEYCLOAK_SERVER_URL.rstrip('/')}/protocol/openid-connect/logout"
    try:
        answer = requests.post(url, data={"client_id": settings.KEYCLOAK_CLIENT_ID,
                                          "client_secret": settings.KEYCLOAK_CLIENT_SECRET,
                                          "refresh_token": refresh}, timeout=5)
        if answer.status_code >= 400:
            log.warning("Keycloak did not end the session of %s: %s %s", user,
                        answer.status_code, answer.text[:200])
    except requests.RequestException as exc:
        log.warning("Keycloak unreachable at sign-out of %s: %s", user, exc)
