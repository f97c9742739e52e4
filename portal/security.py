"""The Content-Security-Policy of every response.

Scripts, styles, images, fonts and connections come from the portal's own origin only: the
portal runs on networks without internet, and a script injected into a page could neither
load nor send anything elsewhere. Inline styles are allowed (progress bars set their width
in a style attribute; htmx and the API reference inject style elements); inline scripts are
not (the pages have none; data for charts travels in <script type="application/json">).
Blob workers are allowed for the API reference's search. Forms post to the portal only, and
to the single sign-on server: signing in is a form whose answer redirects there, and browsers
hold such redirects to `form-action`. PORTAL_CSP replaces the policy (empty: no header).
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from django.conf import settings
from django.middleware import csrf
from django.middleware.csrf import CSRF_ALLOWED_CHARS as chars

DEFAULT_POLICY = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                  "img-src 'self' data:; font-src 'self'; connect-src 'self'; "
                  "worker-src 'self' blob:; object-src 'none'; base-uri 'self'; "
                  "form-action 'self'; frame-ancestors 'none'")


def sign_in_origins() -> list[str]:
    """The origins of the configured OpenID Connect servers (Keycloak)."""
    urls = [settings.KEYCLOAK_SERVER_URL]
    for provider in (getattr(settings, "SOCIALACCOUNT_PROVIDERS", {}) or {}).values():
        urls += [(app.get("settings") or {}).get("server_url", "")
                 for app in provider.get("APPS", [])]
    origins = []
    for url in urls:
        parts = urlsplit(url or "")
        if parts.scheme in ("http", "https") and parts.netloc:
            origin = f"{parts.scheme}://{parts.netloc}"
            if origin not in origins:
                origins.append(origin)
    return origins


def policy() -> str:
    base = settings.PORTAL_CSP
    if not base:
        return ""
    origins = sign_in_origins()
    if not origins:
        return base
    return "; ".join(f"{d} {' '.join(origins)}" if d.strip().startswith("form-action") else d
                     for d in base.split("; "))


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        header = policy()
        if header and "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = header
        return response


# --- CSRF tokens from one read of the system's random source ----------------------------
# Django masks the CSRF secret afresh in every page (so a compressed response cannot leak it)
# with 32 characters drawn one system call each (`secrets.choice`): 32 calls into the kernel
# on every page with a form, costly on virtual machines. The same draw — 32 characters, each
# uniform over the same 62, from the operating system's CSPRNG — takes one read: a byte below
# 248 (= 4 × 62) maps to a character uniformly; others are dropped (rejection sampling).

def random_csrf_string(length: int = 32) -> str:
    limit = 256 - 256 % len(chars)
    out: list[str] = []
    while len(out) < length:
        out += [chars[b % len(chars)] for b in os.urandom(length + 8) if b < limit]
    return "".join(out[:length])


def use_one_read_csrf_strings() -> None:
    """Called once at start (portal.apps): Django's CSRF middleware draws its secrets and
    masks with random_csrf_string. Left as it is should a Django upgrade rename the hook."""
    if callable(getattr(csrf, "_get_new_csrf_string", None)) and \
            csrf.CSRF_SECRET_LENGTH == 32 and len(csrf.CSRF_ALLOWED_CHARS) == 62:
        csrf._get_new_csrf_string = random_csrf_string
