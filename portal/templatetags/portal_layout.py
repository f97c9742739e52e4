"""The top bar of every signed-in page, written in Python: its navigation depends only on the
role set and the current section, so each combination is built once per process; only the
user's name and the sign-out form's CSRF token are filled in per request, instead of a dozen
template conditions and links evaluated on every page (tests/db/test_page_benchmark.py prints
what the layout adds to the floor)."""

from __future__ import annotations

from functools import lru_cache

from django import template
from django.urls import get_script_prefix, get_urlconf
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from portal.context_processors import nav_urls

register = template.Library()

# (context key of the address, label, when the link is shown, when it is the current page)
LINKS = (
    ("home", "Overview", lambda r: True, lambda name, app: name == "home"),
    ("requests", "Requests", lambda r: r["requests"], lambda name, app: name == "list"),
    ("new_request", "New request", lambda r: r["lead"], lambda name, app: name == "new"),
    ("review", "Review", lambda r: r["admin"], lambda name, app: "review" in name),
    ("fleet", "Fleet", lambda r: r["admin"], lambda name, app: name in ("fleet", "node")),
    ("cohorts", "Cohorts", lambda r: r["admin"], lambda name, app: name == "cohorts"),
    ("pending", "Waiting", lambda r: r["admin"], lambda name, app: name == "pending"),
    ("pools", "Pools", lambda r: r["admin"], lambda name, app: "pool" in name),
    ("clusters", "Clusters", lambda r: r["admin"], lambda name, app: "cluster" in name),
    ("billing", None, lambda r: r["billing"],
     lambda name, app: app == "billing" and not name.startswith("stranded")),
    ("stranded", "Stranded", lambda r: r["billing"], lambda name, app: name.startswith(
        "stranded")),
    ("api_docs", "API", lambda r: True, lambda name, app: False),
)


def _role_set(roles) -> tuple:
    return (("requests", bool(roles.is_lead or roles.member_of or roles.sees_all_tenants)),
            ("lead", bool(roles.is_lead)), ("admin", bool(roles.platform_admin)),
            ("billing", bool(roles.sees_all_tenants or roles.tenant_ids)),
            ("all_tenants", bool(roles.sees_all_tenants)), ("labels", tuple(roles.labels)))


@lru_cache(maxsize=512)  # role sets × sections × URL prefixes: a few dozen in practice
def _bar_around_name(prefix: str, urlconf, role_set: tuple, url_name: str,
                     app_name: str) -> tuple[SafeString, SafeString]:
    """The bar's HTML before the user's name and after it (up to the CSRF token)."""
    urls, shown = nav_urls(prefix, urlconf), dict(role_set)
    links = []
    for key, label, visible, current in LINKS:
        if not visible(shown):
            continue
        label = label or ("Billing" if shown["all_tenants"] else "Cost")
        here = mark_safe(' aria-current="page"') if current(url_name, app_name) else ""
        links.append(format_html('<a href="{}"{}>{}</a>', urls[key], here, label))
    before = format_html(
        '<nav aria-label="Main">\n      {}\n    </nav>\n    <div class="who">\n      '
        '<a class="user" href="{}" title="Your notification settings">',
        mark_safe("\n      ".join(links)), urls["notifications"])  # noqa: S308 - escaped each
    after = format_html(
        '</a>\n      {}\n      <form method="post" action="{}" class="inline">',
        format_html_join("", '<span class="chip">{}</span>',
                         ((label,) for label in shown["labels"])), urls["logout"])
    return before, after


@register.simple_tag(takes_context=True)
def signed_in_bar(context) -> SafeString:
    """The navigation and the who-am-I corner for the signed-in user."""
    request, user, roles = context["request"], context["user"], context["roles"]
    match = getattr(request, "resolver_match", None)
    before, after = _bar_around_name(get_script_prefix(), get_urlconf(), _role_set(roles),
                                     getattr(match, "url_name", None) or "",
                                     getattr(match, "app_name", None) or "")
    return before + format_html(
        '{}{}<input type="hidden" name="csrfmiddlewaretoken" value="{}">'
        '<button class="link">Sign out</button></form>\n    </div>',
        user.get_full_name() or user.get_username(), after, context.get("csrf_token", ""))
