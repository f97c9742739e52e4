"""API authentication for machines and CLIs: Keycloak-issued bearer tokens (JWT).

Signature checked against the realm's JWKS, and issuer, audience and expiry verified. The
token's groups and roles set the caller's portal roles, as a browser sign-in does.
"""

from __future__ import annotations

import threading

import jwt
from django.conf import settings
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from .sso import sso_user_for, user_sync_roles

_jwks: dict[str, jwt.PyJWKClient] = {}
_lock = threading.Lock()


def jwks_client(realm_url: str) -> jwt.PyJWKClient:
    with _lock:
        if realm_url not in _jwks:
            _jwks[realm_url] = jwt.PyJWKClient(
                f"{realm_url}/protocol/openid-connect/certs", cache_keys=True, lifespan=300)
        return _jwks[realm_url]


def validate_token(token: str) -> dict:
    realm = settings.KEYCLOAK_SERVER_URL.rstrip("/")
    try:
        key = jwks_client(realm).get_signing_key_from_jwt(token)
        return jwt.decode(token, key.key, algorithms=["RS256", "ES256", "PS256"],
                          audience=settings.PORTAL_API_AUDIENCE, issuer=realm,
                          options={"require": ["exp", "iat", "iss", "aud", "sub"]},
                          leeway=settings.PORTAL_JWT_LEEWAY_SECONDS)
    except jwt.ExpiredSignatureError as exc:
        raise exceptions.AuthenticationFailed("The token has expired.") from exc
    except jwt.InvalidAudienceError as exc:
        raise exceptions.AuthenticationFailed("The token is not meant for this API.") from exc
    except jwt.InvalidIssuerError as exc:
        raise exceptions.AuthenticationFailed("The token comes from another issuer.") from exc
    except jwt.PyJWKClientError as exc:
        raise exceptions.AuthenticationFailed(f"The token's key is unknown: {exc}") from exc
    except jwt.InvalidTokenError as exc:
        raise exceptions.AuthenticationFailed(f"The token is not valid: {exc}") from exc


def user_for_claims(claims: dict):
    """The portal user of a Keycloak subject (the same one a browser sign-in links), with
    the token's roles applied. Never looked up by username or e-mail."""
    try:
        user = sso_user_for(provider=settings.KEYCLOAK_PROVIDER_ID, claims=claims)
    except ValueError as exc:
        raise exceptions.AuthenticationFailed(f"The token is not valid: {exc}.") from exc
    user_sync_roles(user=user, claims=claims)
    return user


class KeycloakJWTAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header.startswith(f"{self.keyword} "):
            return None
        if not settings.KEYCLOAK_SERVER_URL:
            raise exceptions.AuthenticationFailed("Bearer tokens need Keycloak configured.")
        token = header[len(self.keyword) + 1:].strip()
        claims = validate_token(token)
        user = user_for_claims(claims)
        if not user.is_active:
            raise exceptions.AuthenticationFailed("The user is disabled.")
        return user, claims

    def authenticate_header(self, request) -> str:
        # Makes DRF answer 401 (not 403) to a missing or bad token.
        return f'{self.keyword} realm="aifactory-portal"'


class KeycloakBearerScheme(OpenApiAuthenticationExtension):
    """Describes the bearer tokens in the OpenAPI schema."""

    target_class = "tenants.api_auth.KeycloakJWTAuthentication"
    name = "keycloakBearer"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "bearerFormat": "JWT",
                "description": "An access token from the portal's Keycloak realm."}
