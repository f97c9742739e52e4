"""What every page's layout needs that does not change between requests: the navigation's
addresses and the head's asset tags. Each is worked out once per process (and per URL
prefix), not per page: reversing nine URLs and resolving six static files cost the floor of
every page a fifth of its time (tests/db/test_page_benchmark.py prints the parts)."""

from __future__ import annotations

from functools import lru_cache

from django.conf import settings
from django.templatetags.static import static
from django.urls import get_script_prefix, get_urlconf, reverse
from django.utils.safestring import SafeString, mark_safe
from django_htmx.jinja import htmx_script

NAV = {  # context name → URL name
    "home": "home", "requests": "intake:list", "new_request": "intake:new",
    "review": "intake:review_queue", "fleet": "fleet:fleet", "cohorts": "fleet:cohorts",
    "pending": "fleet:pending",
    "pools": "fleet:pools", "clusters": "fleet:clusters", "billing": "billing:overview",
    "stranded": "billing:stranded",
    "api_docs": "api-docs",
    "notifications": "tenants:notifications", "login": "account_login",
    "logout": "account_logout",
}


@lru_cache(maxsize=8)  # per URL prefix: a handful, never one per request
def nav_urls(prefix: str, urlconf) -> dict[str, str]:
    return {key: reverse(name, urlconf=urlconf) for key, name in NAV.items()}


@lru_cache(maxsize=8)
def _head(static_url: str) -> SafeString:
    return mark_safe(  # noqa: S308 - built from our own static paths only
        f'<link rel="stylesheet" href="{static("css/portal.css")}">\n  '
        f"{htmx_script(minified=True)}\n  "
        f'<script src="{static("vendor/chart.umd.min.js")}" defer></script>\n  '
        f'<script src="{static("js/charts.js")}" defer></script>\n  '
        f'<script src="{static("js/portal.js")}" defer></script>\n  '
        f'<link rel="icon" href="{static("img/favicon.svg")}" type="image/svg+xml">')


def layout(request):
    return {"nav": nav_urls(get_script_prefix(), get_urlconf()),
            "head_assets": _head(settings.STATIC_URL)}
