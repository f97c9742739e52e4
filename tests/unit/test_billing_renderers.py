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
