from decimal import Decimal

from django import template
from django.conf import settings
from django.utils.html import conditional_escape
from django.utils.safestring import mark_safe

from billing.domain import hours_text
from billing.renderers import month_cells as render_month_cells
from fleet.domain import devices_text, percent_of
from fleet.inventory.pricing import money_text
from fleet.queues.truth import duration as words
from tenants.timeline import timeline_items

register = template.Library()


@register.filter
def devices(value) -> str:
    """Device counts as everywhere (fleet.domain.devices_text)."""
    return devices_text(value)


@register.simple_tag
def percent(part, whole) -> str:
    """A share in percent with the one rounding (fleet.domain.percent_of), at most 100 (a bar
    never overflows its track); "0" without a whole."""
    share = percent_of(part, whole)
    return f"{min(Decimal(100), share):.1f}" if share is not None else "0"


@register.filter
def money(value) -> str:
    """An amount in the portal's currency: 'EUR 1,234.50'."""
    return money_text(value, settings.PORTAL_CURRENCY)


@register.filter
def get(mapping, key):
    try:
        return mapping.get(key)
    except AttributeError:
        return None


@register.filter
def split(value: str, sep: str = ","):
    return value.split(sep)


@register.filter
def pairs(value: str):
    """"a:A,b:B" → [("a", "A"), ("b", "B")], for small static option lists."""
    return [tuple(item.split(":", 1)) for item in value.split(",")]


@register.filter
def timeline(events) -> str:
    """A history card's timeline items (tenants.timeline.timeline_items)."""
    return timeline_items(events)


@register.filter
def duration(seconds) -> str:
    """Seconds as '42 s', '7 min', '3 h 5 min', '2 d 4 h'."""
    try:
        return words(float(seconds))
    except (TypeError, ValueError, OverflowError):
        return "—"


@register.filter(needs_autoescape=True)
def backticks(text, autoescape=True):
    """Plain text with `commands` in backticks: escaped, the commands set as <code>."""
    parts = str(conditional_escape(text) if autoescape else text).split("`")
    return mark_safe("".join(f"<code>{p}</code>" if i % 2 else p  # noqa: S308 - escaped
                             for i, p in enumerate(parts)))


@register.filter
def month_cells(cells):
    """A tenant's month cells on the finance overview, from billing.selectors.tenant_table's
    plain data (billing.renderers: one escaped string per row, for speed)."""
    return render_month_cells(cells)


@register.filter
def hours(value) -> str:
    """Hours as people read them: '1,234 h', '12.5 h', '0.75 h' (device-seconds are for the
    drill-down only)."""
    return hours_text(value)


@register.filter
def trace_url(trace_id: str) -> str:
    """Where an allocation's trace opens (PORTAL_TRACE_URL), or '' where none is set."""
    template_ = settings.PORTAL_TRACE_URL
    return template_.replace("{trace_id}", trace_id) if template_ and trace_id else ""
