"""allauth adapters: no self-service sign-up; local password login only where allowed."""

import logging

from allauth.account.adapter import DefaultAccountAdapter
from allauth.account.utils import user_username
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter
from django.conf import settings
from django.contrib import auth
from django.contrib.auth.middleware import AuthenticationMiddleware
from django.core.exceptions import PermissionDenied
from django.utils.functional import SimpleLazyObject

from . import identity_cache
from .access import roles_cache_key, roles_of_entry
from .sso import free_username, username_taken

log = logging.getLogger(__name__)


class PortalAccountAdapter(DefaultAccountAdapter):
    def is_open_for_signup(self, request) -> bool:
        # Accounts come from Keycloak (or the demo data in the embedded run), never sign-up.
        return False

    def pre_login(self, request, user, **kwargs):
        social = (kwargs.get("signal_kwargs") or {}).get("sociallogin")
        if not settings.PORTAL_LOCAL_LOGIN and social is None:
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
        user = super().populate_user(request, sociallogin, data)
        user_username(user, free_username(user_username(user) or sociallogin.account.uid,
                                          username_taken))
        return user


# --- The signed-in user, from the shared cache -------------------------------------------
# Every page loads its user; where every process shares the cache (settings.SHARED_CACHE)
# the user is kept there between requests under a key of its id and the session's password
# hash, stamped with the user's version token (tenants.identity_cache): a password change, a
# deactivation or a deletion retires it at once (tenants.receivers), and a session whose hash
# no longer matches finds no entry and goes through Django's full check (which signs it out).

def user_cache_key(user_id, session_hash: str) -> str:
    return f"user:v1:{user_id}:{session_hash}"


def cached_user(request):
    seconds = settings.PORTAL_USER_CACHE_SECONDS
    session = request.session
    user_id = session.get(auth.SESSION_KEY)
    session_hash = session.get(auth.HASH_SESSION_KEY)
    backend = session.get(auth.BACKEND_SESSION_KEY)
    if not (seconds and user_id and session_hash
            and backend in settings.AUTHENTICATION_BACKENDS):
        return auth.get_user(request)

    key, roles_key = user_cache_key(user_id, session_hash), roles_cache_key(user_id)
    # The user and their roles (every page's layout needs both) in one round trip, with the
    # token, which is read before any database read.
    found, token = identity_cache.read_together([key, roles_key], user_id)
    user = found.get(key)
    if user is None:
        user = auth.get_user(request)  # Django's own checks: hash, active, flush on mismatch
        if not (user.is_authenticated and user.get_session_auth_hash() == session_hash):
            return user
        identity_cache.write(key, token, user, seconds)
    else:
        user.backend = backend
    # Set after the user was written to the cache: these belong to this request only.
    roles = roles_of_entry(user, found.get(roles_key)) \
        if settings.PORTAL_ROLES_CACHE_SECONDS else None
    if roles is not None:
        user._portal_roles = roles
    else:
        user._identity_token = token  # roles_for stamps what it reads with it
    return user


class CachedAuthenticationMiddleware(AuthenticationMiddleware):
    """Django's AuthenticationMiddleware, reading the user through `cached_user`."""

    def process_request(self, request):
        super().process_request(request)  # request.auser and the checks as Django has
        request.user = SimpleLazyObject(lambda: _once(request))


def _once(request):
    if not hasattr(request, "_cached_user"):
        request._cached_user = cached_user(request)
    return request._cached_user
