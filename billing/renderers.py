"""The places billing builds markup in Python, and why: the finance overview's rows, month
headers and Total row, and the budgets page's rows.

A page of the overview is up to 50 tenants × 12 months: 600 cells, each the month's amount
linked to its statement, or a dash, beside each tenant's six figures. Through the template
engine's loop and conditionals those rows cost a page 15–20 ms; built here, one string per
row, a fraction of that. Every value (the statement's address, the texts) goes through
tenants.markup.html_format, which escapes exactly as the template would (numbers localized
first, as the template does); the rest is this module's own constant markup. The budgets
page is 50 tenants, each with its own small form: through the template engine (a
`{% csrf_token %}`, two `{% url %}` and a dozen conditionals per row) 7–8 ms of the page.
Everything else billing shows is a template; `billing.selectors.tenant_table` hands over
plain data and the overview passes `tenant_rows` to it, the budgets view `budget_rows`;
tests/unit/test_billing_renderers.py holds the rows, headers and footer equal to the
template loops they replace. The headers and footer are kept with the overview's figures,
so a view thaws markup instead of formatting 13 dates and 12 amounts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from urllib.parse import quote

from django.utils.formats import date_format, localize
from django.utils.safestring import SafeString

from fleet.inventory.pricing import money_text
from tenants.markup import escaped, html_format, html_join

from .domain import hours_text

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


MONTH_HEAD = '<th scope="col">{}</th>'
TOTAL_ROW = ('<tfoot><tr><th scope="row">Total</th><td><strong>{}</strong></td><td>{}</td>'
             '<td>{}</td><td>{}</td><td>{}</td>{}</tr></tfoot>')
MONTH_TOTAL = '<td>{}</td>'


def month_heads(months: Iterable) -> SafeString:
    """The overview's month column headers ("Nov 2026"), as the date filter writes them."""
    return html_join(html_format(MONTH_HEAD, date_format(m, "M Y")) for m in months)


def total_row(grand: Mapping, totals: Iterable[Mapping], currency: str) -> SafeString:
    """The overview's footer: the grand total's six figures, then each month's charge."""
    return html_format(
        TOTAL_ROW, money_text(grand["amount"], currency),
        "—" if grand["utilisation"] is None else html_format("{}%", localize(grand["utilisation"])),
        hours_text(grand["allocated_h"]), hours_text(grand["used_h"]), hours_text(grand["idle_h"]),
        html_join(html_format(MONTH_TOTAL, money_text(t["amount"], currency)) for t in totals))


DASH = '<span class="muted">—</span>'
CSRF_INPUT = '<input type="hidden" name="csrfmiddlewaretoken" value="{}">'
BUDGET_ROW = (
    '\n  <tr><th scope="row"><a href="{overview}?q={q}">{name}</a></th>\n'
    '    <td>{spent}</td>\n    <td>{forecast}</td>\n    <td>{of_budget}</td>\n'
    '    <td><form method="post" class="inline-form">{csrf}<input type="hidden" name="tenant" '
    'value="{slug}"><input type="hidden" name="page" value="{page}">\n'
    '      <label class="sr-only" for="budget-{slug}">Monthly budget for {name} in {currency}'
    '</label>\n'
    '      <input id="budget-{slug}" name="amount" inputmode="decimal" size="10" value="{value}"'
    '{invalid}>\n      <button class="button small">Save</button>\n      {error}\n'
    '    </form>\n</td></tr>\n  {question}\n')
FORECAST_CHIP = ' <span class="chip warn" title="{}">forecast {}% of budget</span>'
LEVEL_CHIP = '<span class="chip {}" title="{}">{}%</span>'
CHIP_OF_LEVEL = {"over": "danger", "warn": "danger", "watch": "warn"}
INVALID = ' aria-invalid="true" aria-describedby="budget-{}-error"'
ERROR = '<p class="error" id="budget-{}-error">{}</p>'
QUESTION = (
    '<tr><td colspan="5"><form method="post" class="msg warning" role="alertdialog" '
    'aria-labelledby="remove-{slug}">{csrf}<input type="hidden" name="tenant" value="{slug}">'
    '<input type="hidden" name="page" value="{page}"><input type="hidden" name="amount" '
    'value="">\n      <p id="remove-{slug}">{question}</p>\n      <button class="button small '
    'danger" name="confirm_removal" value="yes">Remove the budget</button> <a class="button '
    'small secondary" href="{keep}">Keep it</a>\n    </form></td></tr>')


def budget_rows(rows, *, csrf_token: str, page_number: int, overview_url: str,
                budgets_url: str, currency: str, errors: Mapping[str, str],
                confirm: Mapping[str, str], posted: Mapping[str, str]) -> SafeString:
    """The budgets page's rows: per (tenant, BudgetStatus or None) the tenant, this month's
    spend, forecast and share of budget, and the form that sets its budget (with the error
    or the removal question a refused post left)."""
    csrf = html_format(CSRF_INPUT, csrf_token)
    page = escaped(localize(page_number))
    keep = html_format("{}?page={}", budgets_url, localize(page_number)) if page_number > 1 \
        else escaped(budgets_url)
    overview = escaped(overview_url)

    def row(tenant, status):
        slug, name = escaped(tenant.slug), escaped(tenant.name)
        if posted.get("tenant") == tenant.slug:
            value = escaped(posted.get("amount", ""))
        else:
            value = escaped(f"{status.budget}") if status else ""
        question = confirm.get(tenant.slug)
        return BUDGET_ROW.format(
            overview=overview, q=escaped(quote(tenant.slug, safe="/")), name=name, slug=slug,
            spent=escaped(money_text(status.spent, currency)) if status else DASH,
            forecast=(escaped(money_text(status.forecast, currency)) + (html_format(
                FORECAST_CHIP, status.summary, localize(status.forecast_percent))
                if status.forecast_over else "")) if status else DASH,
            of_budget=html_format(LEVEL_CHIP, CHIP_OF_LEVEL.get(status.level, "ok"),
                                  status.summary, localize(status.percent)) if status
            else '<span class="muted">no budget</span>',
            csrf=csrf, page=page, currency=escaped(currency), value=value,
            invalid=INVALID.format(slug) if tenant.slug in errors else "",
            error=ERROR.format(slug, escaped(errors[tenant.slug])) if tenant.slug in errors
            else "",
            question=QUESTION.format(slug=slug, csrf=csrf, page=page, keep=keep,
                                     question=escaped(question)) if question else "")

    return html_join(row(tenant, status) for tenant, status in rows)
