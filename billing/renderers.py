"""The one place billing builds markup in Python, and why: the finance overview's rows.

A page of the overview is up to 50 tenants × 12 months: 600 cells, each the month's amount
linked to its statement, or a dash, beside each tenant's six figures. Through the template
engine's loop and conditionals those rows cost a page 15–20 ms; built here, one string per
row, a fraction of that. Every value (the statement's address, the texts) goes through
tenants.markup.html_format, which escapes exactly as the template would (numbers localized
first, as the template does); the rest is this module's own constant markup. Everything else billing
shows is a template; `billing.selectors.tenant_table` hands over plain data and the
overview passes `tenant_rows` to it; tests/unit/test_billing_renderers.py holds the rows
equal to the template loop they replace.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.utils.formats import localize
from django.utils.safestring import SafeString

from tenants.markup import html_format, html_join

EMPTY_CELL = '<td><span class="muted">—</span></td>'  # a month without figures
AMOUNT_CELL = '<td><a href="{}">{}</a></td>'  # the month's amount, linked to its statement


def month_cells(cells: Iterable[tuple[str, str] | None]) -> SafeString:
    """One tenant's month cells: (statement address, amount text) per month with figures,
    None for a month without."""
    return html_join(EMPTY_CELL if cell is None else html_format(AMOUNT_CELL, *cell)
                     for cell in cells)


PENDING_CHIP = ' <span class="chip warn">{} h pending</span>'
TENANT_ROW = ('\n    <tr><th scope="row"><strong>{}</strong>{}</th>\n'
              '    <td><strong>{}</strong></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\n'
              '    {}</tr>\n  ')


def tenant_rows(table: Iterable[dict]) -> SafeString:
    """The overview's tenant rows from `tenant_table`'s plain data: name (and hours still
    pending), charged, utilisation, allocated, used, idle, then the month cells."""
    return html_join(
        html_format(TENANT_ROW, r["name"],
                    html_format(PENDING_CHIP, localize(r["pending"])) if r["pending"] else "",
                    r["amount"], "—" if r["utilisation"] is None
                    else html_format("{}%", localize(r["utilisation"])),
                    r["allocated"], r["used"], r["idle"], month_cells(r["cells"]))
        for r in table)
