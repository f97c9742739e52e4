"""billing.renderers: the finance overview's month cells, built in Python for speed, escape
what they show exactly as a template would."""

from __future__ import annotations

import pytest
from django.conf import settings as django_settings
from django.http import QueryDict
from django.template import Context, Template
from django.utils.safestring import SafeString
from hypothesis import given, settings
from hypothesis import strategies as st

from billing.forms import OverviewFilters
from billing.renderers import month_cells, month_heads, total_row

pytestmark = pytest.mark.unit


def test_cells_are_links_or_dashes_in_month_order():
    html = month_cells([("/billing/acme/2026-10/", "EUR 1,234.50"), None])
    assert isinstance(html, SafeString)
    assert html == ('<td><a href="/billing/acme/2026-10/">EUR 1,234.50</a></td>'
                    '<td><span class="muted">—</span></td>')
    assert month_cells([]) == ""


def test_every_value_is_escaped_as_the_template_engine_would():
    url, text = '/billing/x"><script>alert(1)</script>/2026-10/?a=1&b=2', "<b>EUR 1</b>"
    html = month_cells([(url, text)])
    assert "<script>" not in html and "<b>" not in html
    template = Template('<td><a href="{{ url }}">{{ text }}</a></td>')
    assert html == template.render(Context({"url": url, "text": text}))


# The overview's row loop as the template had it (templates/billing/overview.html).
ROW_LOOP = (
    '{% load portal_extras %}{% for r in table %}\n    <tr><th scope="row"><strong>{{ r.name }}'
    '</strong>{% if r.pending %} <span class="chip warn">{{ r.pending }} h pending</span>'
    '{% endif %}</th>\n    <td><strong>{{ r.amount }}</strong></td><td>{% if r.utilisation '
    'is not None %}{{ r.utilisation }}%{% else %}—{% endif %}</td><td>{{ r.allocated }}</td>'
    '<td>{{ r.used }}</td><td>{{ r.idle }}</td>\n    {{ r.cells|month_cells }}</tr>\n  '
    '{% endfor %}')


def test_tenant_rows_are_the_templates():
    from decimal import Decimal

    from billing.renderers import tenant_rows

    table = [
        {"name": 'Acme <script>alert("x")</script> & Co', "pending": 1234,
         "amount": "EUR 1,234.50", "utilisation": Decimal("42.5"), "allocated": "1,200 h",
         "used": "510 h", "idle": "690 h",
         "cells": [("/billing/acme/2026-10/", "EUR 1,234.50"), None]},
        {"name": "Idle Ltd", "pending": 0, "amount": "EUR 0.00", "utilisation": None,
         "allocated": "0 h", "used": "0 h", "idle": "0 h", "cells": [None, None]},
        {"name": "Full", "pending": 3, "amount": "EUR 9.99", "utilisation": Decimal("100"),
         "allocated": "1 h", "used": "1 h", "idle": "0 h", "cells": []},
    ]
    want = Template(ROW_LOOP).render(Context({"table": table}))
    got = tenant_rows(table)
    assert isinstance(got, SafeString)
    assert got == want
    assert "<script>" not in got and "1234 h pending" in got and "42.5%" in got
    assert tenant_rows([]) == ""


# The budgets page's row loop as the template had it (templates/billing/budgets.html).
BUDGET_LOOP = (
    '{% load portal_extras %}{% for tenant, status in rows %}'
    '\n  <tr><th scope="row"><a href="{% url \'billing:overview\' %}?q='
    '{{ tenant.slug|urlencode }}">'
    '{{ tenant.name }}</a></th>\n    <td>{% if status %}{{ status.spent|money }}{% else %}'
    '<span class="muted">—</span>{% endif %}</td>\n    <td>{% if status %}'
    '{{ status.forecast|money }}{% if status.forecast_over %} <span class="chip warn" '
    'title="{{ status.summary }}">forecast {{ status.forecast_percent }}% of budget</span>'
    '{% endif %}{% else %}<span class="muted">—</span>{% endif %}</td>\n    <td>'
    '{% if status %}<span class="chip {% if status.level == \'over\' or status.level == '
    '\'warn\' %}danger{% elif status.level == \'watch\' %}warn{% else %}ok{% endif %}" '
    'title="{{ status.summary }}">{{ status.percent }}%</span>{% else %}<span class="muted">'
    'no budget</span>{% endif %}</td>\n    <td><form method="post" class="inline-form">'
    '{% csrf_token %}<input type="hidden" name="tenant" value="{{ tenant.slug }}"><input '
    'type="hidden" name="page" value="{{ page.number }}">\n      <label class="sr-only" '
    'for="budget-{{ tenant.slug }}">Monthly budget for {{ tenant.name }} in {{ currency }}'
    '</label>\n      <input id="budget-{{ tenant.slug }}" name="amount" inputmode="decimal" '
    'size="10" value="{% if posted.tenant == tenant.slug %}{{ posted.amount }}{% elif status %}'
    '{{ status.budget|stringformat:\'s\' }}{% endif %}"{% if tenant.slug in errors %} '
    'aria-invalid="true" aria-describedby="budget-{{ tenant.slug }}-error"{% endif %}>\n'
    '      <button class="button small">Save</button>\n      {% for slug, err in '
    'errors.items %}{% if slug == tenant.slug %}<p class="error" id="budget-{{ tenant.slug }}'
    '-error">{{ err }}</p>{% endif %}{% endfor %}\n    </form>\n</td></tr>\n  {% with '
    'question=confirm|get:tenant.slug %}{% if question %}<tr><td colspan="5"><form '
    'method="post" class="msg warning" role="alertdialog" aria-labelledby="remove-'
    '{{ tenant.slug }}">{% csrf_token %}<input type="hidden" name="tenant" value="'
    '{{ tenant.slug }}"><input type="hidden" name="page" value="{{ page.number }}"><input '
    'type="hidden" name="amount" value="">\n      <p id="remove-{{ tenant.slug }}">'
    '{{ question }}</p>\n      <button class="button small danger" name="confirm_removal" '
    'value="yes">Remove the budget</button> <a class="button small secondary" href="'
    '{% url \'billing:budgets\' %}{% if page.number > 1 %}?page={{ page.number }}{% endif %}">'
    'Keep it</a>\n    </form></td></tr>{% endif %}{% endwith %}\n{% endfor %}')

TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
AMOUNT = st.decimals(min_value=0, max_value=10**7, places=2, allow_nan=False)


@st.composite
def budget_pages(draw):
    import datetime as dt
    from types import SimpleNamespace

    from billing.domain import BudgetStatus

    slugs = draw(st.lists(st.from_regex(r"[a-z0-9][a-z0-9\-]{0,8}", fullmatch=True),
                          max_size=4, unique=True))
    rows = [(SimpleNamespace(slug=slug, name=draw(TEXT)), draw(st.none() | st.builds(
        BudgetStatus, month=st.just(dt.date(2026, 12, 1)), budget=AMOUNT, spent=AMOUNT,
        forecast=AMOUNT, extended=st.booleans()))) for slug in slugs]
    chosen = st.sampled_from(slugs) if slugs else st.nothing()
    errors = draw(st.dictionaries(chosen, TEXT, max_size=1)) if slugs else {}
    confirm = draw(st.dictionaries(chosen, TEXT, max_size=1)) if slugs else {}
    posted = {"tenant": draw(chosen), "amount": draw(TEXT)} if slugs and errors else {}
    return rows, draw(st.integers(1, 3)), errors, confirm, posted


@given(budget_pages(), st.sampled_from(["EUR", "<b>&"]),
       st.text("abc<>\"'&", min_size=1, max_size=8))
@settings(max_examples=150, deadline=None)
def test_budget_rows_are_the_templates(page, currency, token):
    """Any tenants (names with markup), any statuses, an error, a removal question and a
    refused amount kept: the rows are the template loop's, byte for byte."""
    from types import SimpleNamespace

    from django.test import override_settings
    from django.urls import reverse

    from billing.renderers import budget_rows

    rows, number, errors, confirm, posted = page
    with override_settings(PORTAL_CURRENCY=currency):
        want = Template(BUDGET_LOOP).render(Context({
            "rows": rows, "page": SimpleNamespace(number=number), "currency": currency,
            "errors": errors, "confirm": confirm, "posted": posted, "csrf_token": token}))
    got = budget_rows(rows, csrf_token=token, page_number=number,
                      overview_url=reverse("billing:overview"),
                      budgets_url=reverse("billing:budgets"), currency=currency,
                      errors=errors, confirm=confirm, posted=posted)
    assert isinstance(got, SafeString)
    assert got == want


# The overview's month headers and footer as the template had them.
HEAD_AND_FOOT = (
    '{% load portal_extras %}{% for m in months %}<th scope="col">{{ m|date:"M Y" }}</th>'
    '{% endfor %}|<tfoot><tr><th scope="row">Total</th><td><strong>{{ grand.amount|money }}'
    '</strong></td><td>{% if grand.utilisation is not None %}{{ grand.utilisation }}%'
    '{% else %}—{% endif %}</td><td>{{ grand.allocated_h|hours }}</td><td>'
    '{{ grand.used_h|hours }}</td><td>{{ grand.idle_h|hours }}</td>{% for t in totals %}'
    '<td>{{ t.amount|money }}</td>{% endfor %}</tr></tfoot>')

hours_st = st.decimals(min_value=0, max_value=10**9, places=4, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(months=st.lists(st.dates(), max_size=12),
       amounts=st.lists(st.decimals(min_value=-10**9, max_value=10**9, places=2,
                                    allow_nan=False), max_size=12),
       allocated=hours_st, used=hours_st,
       util=st.none() | st.decimals(min_value=0, max_value=100, places=1, allow_nan=False))
def test_month_heads_and_total_row_are_the_templates(months, amounts, allocated, used, util):
    totals = [{"amount": a} for a in amounts]
    grand = {"amount": sum(amounts), "utilisation": util, "allocated_h": allocated,
             "used_h": used, "idle_h": allocated - used}
    want = Template(HEAD_AND_FOOT).render(Context({"months": months, "grand": grand,
                                                   "totals": totals}))
    got = month_heads(months) + "|" + total_row(grand, totals, django_settings.PORTAL_CURRENCY)
    assert got == want


@settings(max_examples=80, deadline=None)
@given(q=st.none() | st.text(max_size=30), route=st.none() | st.sampled_from(
    ["", "shared_pool", "mig_vcluster", "bogus"]), months=st.none() | st.sampled_from(
    ["3", "6", "12", "7", "x"]), sort=st.none() | st.sampled_from(["amount", "name", "?"]))
def test_the_filter_bar_is_the_forms_own_markup(q, route, months, sort):
    """The filter bar rendered once per set of values is what the form's template loop
    renders: the values given, or every value in force where one was ignored."""
    data = QueryDict(mutable=True)
    for name, value in (("q", q), ("route", route), ("months", months), ("sort", sort)):
        if value is not None:
            data[name] = value
    for name, value in OverviewFilters.DEFAULTS.items():
        data.setdefault(name, str(value))
    filters = OverviewFilters(data)
    shown = (OverviewFilters({k: str(v) for k, v in filters.values().items()})
             if filters.errors else filters)
    want = Template("{% for field in filters %}<label>{{ field.label }} {{ field }}</label>"
                    "{% endfor %}").render(Context({"filters": shown}))
    assert filters.shown() == want
