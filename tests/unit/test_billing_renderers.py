"""billing.renderers: the finance overview's month cells, built in Python for speed, escape
what they show exactly as a template would."""

from __future__ import annotations

import pytest
from django.template import Context, Template
from django.utils.safestring import SafeString

from billing.renderers import month_cells

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
