"""Benchmark, not a timed assertion: the review queue's 25 rows rendered three ways, side by
side on the same rows — the Django template language (the loop the page had), Django's
Jinja2 engine (django.template.backends.jinja2, autoescaping, `url` as a global reversing
per row as `{% url %}` does) and the precompiled Python rows the page uses now
(intake.renderers). The three must say the same thing (compared as text once entities are
read: Jinja2 writes `&#34;` where Django writes `&quot;`).

Jinja2 is not a dependency of the portal: the Jinja2 part runs only where it is importable
(PORTAL_BENCH_JINJA2_PATH may name a directory it was installed into, e.g. with
`pip install --target`). Rerun alone:
    make test ARGS="tests/unit/test_row_engines_benchmark.py -s -n 0"
Lines start with BENCHMARK.
"""

from __future__ import annotations

import html
import os
import sys
import time

import pytest
from django.template import Context, Template
from django.urls import reverse
from django.utils.timesince import timesince

from intake.renderers import review_rows
from tenants.markup import date_text
from tests.unit.test_request_renderers import QUEUE_LOOP, requests

pytestmark = pytest.mark.unit

RUNS = 200
JINJA_LOOP = (
    '{% for r in page %}\n    <tr><td><a href="{{ url("intake:review_detail", r.pk) }}'
    '{% if queue_qs %}?{{ queue_qs }}{% endif %}">#{{ r.pk }} {{ r.title }}</a></td>'
    '<td>{{ r.tenant.name }}</td>\n    <td>{{ r.size_label }}</td>'
    '<td>{{ r.get_isolation_origin_display() }}</td>'
    '<td>{{ r.get_route_display() or "—" }}</td><td>{{ (r.pool.name if r.pool) or "—" }}</td>'
    '\n    <td>{% include "status.html" %}</td>\n'
    '    <td><time datetime="{{ r.updated_at|date("c") }}"'
    ' title="{{ r.updated_at|date("Y-m-d H:i") }}">{{ r.updated_at|timesince }} ago</time>'
    '</td></tr>\n  {% endfor %}')
JINJA_STATUS = '<span class="status s-{{ r.status }}">{{ r.get_status_display() }}</span>\n'


def jinja_environment():
    extra = os.environ.get("PORTAL_BENCH_JINJA2_PATH", "")
    if extra and extra not in sys.path:
        sys.path.append(extra)
    jinja2 = pytest.importorskip("jinja2")
    env = jinja2.Environment(autoescape=True, keep_trailing_newline=True, loader=jinja2.DictLoader({
        "status.html": JINJA_STATUS}))
    env.globals["url"] = lambda name, *args: reverse(name, args=args)
    env.filters["date"] = date_text
    env.filters["timesince"] = timesince
    return env


def best_ms(render) -> float:
    """The best of five rounds of RUNS renders, per render (the machine is noisy)."""
    rounds = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(RUNS):
            render()
        rounds.append((time.perf_counter() - started) * 1000 / RUNS)
    return min(rounds)


def test_benchmark_the_review_queue_rows_in_three_engines():
    page = (requests() * 9)[:25]
    qs = "status=submitted&sort=oldest"
    dtl = Template(QUEUE_LOOP)
    engines = {
        "Django templates": lambda: dtl.render(Context({"page": page, "queue_qs": qs})),
        "Python rows (intake.renderers)": lambda: review_rows(page, queue_qs=qs),
    }
    try:
        jinja = jinja_environment().from_string(JINJA_LOOP)
    except pytest.skip.Exception:
        jinja = None
    if jinja is not None:
        engines["Jinja2"] = lambda: jinja.render(page=page, queue_qs=qs)
    said = {name: html.unescape(str(render())) for name, render in engines.items()}
    first = said["Django templates"]
    for name, text in said.items():
        at = next((i for i, (a, b) in enumerate(zip(first, text, strict=False)) if a != b),
                  min(len(first), len(text)))
        assert text == first, (name, first[at - 60:at + 60], text[at - 60:at + 60])
    print(f"\nBENCHMARK review queue rows, {len(page)} rows, best of 5 × {RUNS} renders"
          + ("" if jinja else " (Jinja2 not importable: skipped)"))
    for name, render in engines.items():
        print(f"BENCHMARK rows {name:32s} {best_ms(render):6.2f} ms a page")
