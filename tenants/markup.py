"""format_html for the rows pages build in Python (billing, fleet and intake renderers): the
same escaping — a value with `__html__` as it says, anything else `html.escape`d, which is
what Django's escape does — without format_html's per-argument lazy wrappers. The finance
overview formats about 650 cells a page, and the page profile found format_html's wrappers
a sixth of it. tests/unit/test_markup.py holds it equal to format_html for any text.
"""

from __future__ import annotations

from html import escape

from django.utils.dateformat import format as date_format
from django.utils.safestring import SafeString
from django.utils.timezone import template_localtime


def escaped(value) -> str:
    """conditional_escape's answer, as a plain string."""
    html = getattr(value, "__html__", None)
    return html() if html is not None else escape(str(value))


def html_format(template: str, *args) -> SafeString:
    """format_html(template, *args): every argument escaped, the template trusted."""
    return SafeString(template.format(*[escaped(a) for a in args]))


def html_join(parts, separator: str = "") -> SafeString:
    """Markup already safe (html_format's, or constants), joined."""
    return SafeString(separator.join(parts))


def date_text(value, fmt: str) -> str:
    """The `date` filter: in the current time zone, then formatted (the two formats the
    rows use by the standard library: Django's formatter builds an object per call)."""
    if value is None:
        return ""
    local = template_localtime(value)
    if fmt == "c":
        return local.isoformat()
    if fmt == "Y-m-d H:i":
        return local.strftime("%Y-%m-%d %H:%M")
    return date_format(local, fmt)
