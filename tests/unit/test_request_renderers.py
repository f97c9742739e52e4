"""intake.renderers: the review queue's and the requests list's rows, built in Python for
speed, are character for character what the templates' loops rendered (kept here as the
reference), escaping included."""

from __future__ import annotations

import datetime as dt

import pytest
from django.template import Context, Template
from django.utils import timezone

from fleet.models import Pool
from intake.models import CapacityRequest
from intake.renderers import request_rows, review_rows
from tenants.models import Tenant

pytestmark = pytest.mark.unit

# The loops as the templates had them (templates/intake/review_queue.html, request_list.html).
QUEUE_LOOP = (
    '{% for r in page %}\n    <tr><td><a href="{% url \'intake:review_detail\' r.pk %}'
    '{% if queue_qs %}?{{ queue_qs }}{% endif %}">#{{ r.pk }} {{ r.title }}</a></td>'
    '<td>{{ r.tenant.name }}</td>\n    <td>{{ r.size_label }}</td>'
    '<td>{{ r.get_isolation_origin_display }}</td>'
    '<td>{{ r.get_route_display|default:"—" }}</td><td>{{ r.pool.name|default:"—" }}</td>\n'
    '    <td>{% include "partials/status.html" with status=r.status '
    'label=r.get_status_display %}</td>\n    <td><time datetime="{{ r.updated_at|date:\'c\' }}"'
    ' title="{{ r.updated_at|date:\'Y-m-d H:i\' }}">{{ r.updated_at|timesince }} ago</time>'
    '</td></tr>\n  {% endfor %}')
LIST_LOOP = (
    '{% for r in page %}\n    <tr><td><a href="{% url \'intake:detail\' r.pk %}">#{{ r.pk }} '
    '{{ r.title }}</a><div class="muted small">{{ r.get_workload_kind_display }} · '
    '{{ r.requester.username }}</div></td>\n    <td>{{ r.tenant.name }}</td>\n'
    '    <td>{{ r.size_label }}</td>\n    <td>{{ r.get_route_display|default:"—" }}</td>\n'
    '    <td>{% include "partials/status.html" with status=r.status '
    'label=r.get_status_display %}</td>\n'
    '    <td><time datetime="{{ r.updated_at|date:\'c\' }}">{{ r.updated_at|date:"Y-m-d H:i" }}'
    '</time></td></tr>\n  {% endfor %}')


def requests() -> list[CapacityRequest]:
    from django.contrib.auth import get_user_model

    user = get_user_model()(username='lead<"&>')
    hostile = Tenant(name='Acme <script>alert("x")</script> & Co', slug="acme")
    pool = Pool(name="Shared <H100>", slug="shared", cluster_id=1)  # unsaved: no default read
    now = timezone.now()
    rows = [
        CapacityRequest(pk=7, title='Train "big" <model> & more', tenant=hostile,
                        requester=user, status="submitted", route="shared_pool", pool=pool,
                        isolation_origin="habitual", device_fill="full", whole_devices=3,
                        workload_kind="training",
                        updated_at=now - dt.timedelta(days=3, hours=5)),
        CapacityRequest(pk=12345, title="MIG, no route yet", tenant=hostile, requester=user,
                        status="draft", route="", pool=None, isolation_origin="regulatory",
                        device_fill="small", replicas=2, mig_profile="1g.10gb",
                        workload_kind="inference", updated_at=now - dt.timedelta(minutes=2)),
        CapacityRequest(pk=99, title="Dedicated", tenant=hostile, requester=user,
                        status="changes_requested", route="dedicated_block", pool=pool,
                        isolation_origin="contractual", device_fill="full", whole_devices=1,
                        workload_kind="training",
                        updated_at=dt.datetime(2026, 1, 31, 23, 30, tzinfo=dt.UTC)),
    ]
    return rows


@pytest.mark.parametrize("queue_qs", ["", "status=submitted&tenant=acme&sort=newest"])
def test_review_rows_are_the_templates(queue_qs):
    rows = requests()
    want = Template(QUEUE_LOOP).render(Context({"page": rows, "queue_qs": queue_qs}))
    got = review_rows(rows, queue_qs=queue_qs)
    assert got == want
    assert "<script>" not in got and "&lt;script&gt;" in got
    assert review_rows([]) == ""


def test_request_rows_are_the_templates():
    rows = requests()
    want = Template(LIST_LOOP).render(Context({"page": rows}))
    got = request_rows(rows)
    assert got == want
    assert 'href="/requests/12345/"' in got and "lead&lt;&quot;&amp;&gt;" in got
    assert request_rows([]) == ""
