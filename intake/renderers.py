"""The two request tables built in Python: the review queue's rows and the requests list's.

Why here and not in the template: a page of either is 25 rows, and through the template
engine each row cost about a millisecond (a `{% url %}` reverse, an include for the status
chip, three date filters, a dozen variable lookups): the loop was most of the page (the
benchmark's profile, docs/architecture.md "Performance"). Built here, the detail address is
reversed once per page and each row is one html_format (tenants.markup), which escapes
every value exactly as the template's autoescaping does (tests/unit/test_request_renderers.py
holds the markup equal to the template's, character for character). The rest of both pages
is a template.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from django.urls import reverse
from django.utils.safestring import SafeString
from django.utils.timesince import timesince

from tenants.markup import date_text, html_format, html_join

PK = 987654321  # reversed once, replaced by each row's id (an int converter takes it)
STATUS = '<span class="status s-{}">{}</span>\n'  # templates/partials/status.html

QUEUE_ROW = (
    '\n    <tr><td><a href="{}">#{} {}</a></td><td>{}{}</td>\n'
    '    <td>{}</td><td>{}</td><td>{}</td><td>{}</td>\n'
    '    <td>' + STATUS + '</td>\n'
    '    <td><time datetime="{}" title="{}">{} ago</time></td></tr>\n  ')
LIST_ROW = (
    '\n    <tr><td><a href="{}">#{} {}</a><div class="muted small">{} · {}</div></td>\n'
    '    <td>{}</td>\n'
    '    <td>{}</td>\n'
    '    <td>{}</td>\n'
    '    <td>' + STATUS + '</td>\n'
    '    <td><time datetime="{}">{}</time></td></tr>\n  ')


def _address(name: str):
    pattern = reverse(name, args=[PK])
    return lambda pk: pattern.replace(str(PK), str(pk))


def _or_dash(value) -> str:
    return value or "—"  # the templates' |default:"—"


def review_rows(requests: Iterable, *, queue_qs: str = "",
                notes: Mapping[int, str] | None = None) -> SafeString:
    """The review queue's rows (requests with tenant and pool joined); each links to its
    review page carrying the queue's filter (`queue_qs`). `notes`: tenant id → what the
    reviewer should know about the tenant (intake.notes), under its name."""
    address = _address("intake:review_detail")
    tail = f"?{queue_qs}" if queue_qs else ""
    notes = notes or {}
    return html_join(
        html_format(QUEUE_ROW, address(r.pk) + tail, r.pk, r.title, r.tenant.name,
                    html_format('<div class="small chip warn">{}</div>', notes[r.tenant_id])
                    if r.tenant_id in notes else "",
                    r.size_label, r.get_isolation_origin_display(),
                    _or_dash(r.get_route_display()), _or_dash(r.pool.name if r.pool else ""),
                    r.status, r.get_status_display(), date_text(r.updated_at, "c"),
                    date_text(r.updated_at, "Y-m-d H:i"),
                    timesince(r.updated_at) if r.updated_at else "")
        for r in requests)


def request_rows(requests: Iterable) -> SafeString:
    """The requests list's rows (tenant, requester and pool joined)."""
    address = _address("intake:detail")
    return html_join(
        html_format(LIST_ROW, address(r.pk), r.pk, r.title, r.get_workload_kind_display(),
                    r.requester.username if r.requester else "", r.tenant.name,
                    r.size_label, _or_dash(r.get_route_display()), r.status,
                    r.get_status_display(), date_text(r.updated_at, "c"),
                    date_text(r.updated_at, "Y-m-d H:i"))
        for r in requests)
