"""fleet.renderers.node_rows, built in Python for speed, is character for character what the
fleet page's template loop rendered (kept here as the reference), escaping included."""

from __future__ import annotations

import datetime as dt

import pytest
from django.template import Context, Template
from django.utils import timezone

from fleet.models import Cluster, GpuNode, Pool
from fleet.renderers import node_rows

pytestmark = pytest.mark.unit

# The loop as templates/fleet/fleet.html had it.
LOOP = (
    '{% load humanize %}{% for n in page %}\n'
    '  <tr><td><a href="{% url \'fleet:node\' n.cluster.slug n.name %}">{{ n.name }}</a>'
    '{% if many_clusters %} <span class="muted small">{{ n.cluster.slug }}</span>{% endif %}'
    '{% if n.n_alloc %} <span class="chip">{{ n.n_alloc }} alloc</span>{% endif %}</td>\n'
    '    <td>{{ n.pool.name|default:n.pool_label|default:"—" }}</td>\n'
    '    <td>{{ n.gpu_count }} × {{ n.gpu_model }}</td>\n'
    '    <td>{% for p, c in n.mig_devices.items %}{{ c }}× {{ p }}{% if not forloop.last %}, '
    '{% endif %}{% empty %}{{ n.mig_config|default:"—" }}{% endfor %}</td>\n'
    '    <td><span class="status n-{{ n.state }}">{{ n.state }}</span></td>\n'
    '    <td class="small">{{ n.reason }}</td>\n'
    '    <td class="small {% if n.present and n.last_synced_at and n.last_synced_at < '
    'stale_before %}stale{% else %}muted{% endif %}">{{ n.last_synced_at|naturaltime|'
    'default:"—" }}{% if n.present and n.last_synced_at and n.last_synced_at < stale_before %}'
    ' <span class="chip warn">stale</span>{% endif %}</td></tr>\n'
    '  {% empty %}<tr><td colspan="7" class="muted">No GPU nodes synced yet. Sync from '
    'Kubernetes to read them.</td></tr>{% endfor %}')


def nodes(now: dt.datetime) -> list[GpuNode]:
    home = Cluster(slug="on-prem", name="On-prem <AMS>")
    pool = Pool(name='Shared "H100" <fast> & more', slug="shared", cluster_id=1)
    rows = [
        GpuNode(name="h100-01.example", cluster=home, pool=pool, gpu_count=8,
                gpu_model="NVIDIA-H100", mig_devices={}, mig_config="all-disabled",
                state="schedulable", reason="", present=True,
                last_synced_at=now - dt.timedelta(minutes=1)),
        GpuNode(name="a100-02", cluster=home, pool=None, pool_label="mig-<a100>", gpu_count=8,
                gpu_model="A100 <80GB>", mig_devices={"1g.10gb": 14, "3g.40gb": 2},
                state="unhealthy", reason='XID 79 <"bus"> & more', present=True,
                last_synced_at=now - dt.timedelta(days=58)),
        GpuNode(name="gone-03", cluster=home, pool=None, pool_label="", gpu_count=0,
                gpu_model="", mig_devices={}, mig_config="", state="gone", reason="",
                present=False, last_synced_at=now - dt.timedelta(days=58)),
        GpuNode(name="new-04", cluster=home, pool=pool, gpu_count=4, gpu_model="L40S",
                mig_devices={}, mig_config="", state="unvalidated", reason="no burn-in",
                present=True, last_synced_at=None),
    ]
    rows[0].n_alloc, rows[1].n_alloc = 2, 0
    return rows


@pytest.mark.parametrize("many_clusters", [True, False])
@pytest.mark.parametrize("with_nodes", [True, False], ids=["nodes", "empty"])
def test_the_rows_are_what_the_template_loop_rendered(many_clusters, with_nodes):
    now = timezone.now()  # the rows' times and the stale line from one clock reading
    rows = nodes(now) if with_nodes else []
    stale_before = now - dt.timedelta(minutes=6)
    want = Template(LOOP).render(Context({"page": rows, "many_clusters": many_clusters,
                                          "stale_before": stale_before}))
    got = node_rows(rows, many_clusters=many_clusters, stale_before=stale_before)
    assert got == want.replace("{% load humanize %}", "")
    if rows:
        assert "&lt;fast&gt;" in got and '<span class="chip warn">stale</span>' in got
        assert got.count(">stale</span>") == 1  # the gone node is not called stale
