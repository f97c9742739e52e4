"""The fleet page's node table built in Python (a page is 50 rows).

Why here and not in the template: through the template engine each row cost about half a
millisecond (a `{% url %}` reverse, a nested loop over MIG profiles, a humanize filter, the
stale test twice): the loop was most of the admin's slowest page (the page benchmark's
profile). Built here, the node address is reversed once per page and each row is one
tenants.markup.html_format, escaping every value as the template's autoescaping does
(tests/unit/test_node_renderers.py holds the markup equal to the template's loop).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from django.contrib.humanize.templatetags.humanize import naturaltime
from django.urls import reverse
from django.utils.safestring import SafeString

from tenants.markup import html_format, html_join

from .inventory.capacity import node_is_stale

CLUSTER, NAME = "cluster-0-placeholder", "node-0-placeholder"
NODE_ROW = (
    '\n  <tr><td><a href="{}">{}</a>{}{}</td>\n'
    '    <td>{}</td>\n'
    '    <td>{} × {}</td>\n'
    '    <td>{}</td>\n'
    '    <td><span class="status n-{}">{}</span></td>\n'
    '    <td class="small">{}</td>\n'
    '    <td class="small {}">{}{}</td></tr>\n  ')
EMPTY = ('<tr><td colspan="7" class="muted">No GPU nodes synced yet. Sync from Kubernetes to '
         'read them.</td></tr>')


def _mig(node) -> SafeString | str:
    if node.mig_devices:
        return html_join((html_format("{}× {}", c, p) for p, c in node.mig_devices.items()),
                         ", ")
    return node.mig_config or "—"


def node_rows(nodes: Iterable, *, many_clusters: bool, stale_before: dt.datetime
              ) -> SafeString:
    """The node table's rows (cluster and pool joined; `n_alloc` annotated)."""
    pattern = reverse("fleet:node", args=[CLUSTER, NAME])

    def address(n) -> str:
        return pattern.replace(CLUSTER, n.cluster.slug).replace(NAME, n.name)

    rows = []
    for n in nodes:
        stale = node_is_stale(n.present, n.last_synced_at, stale_before)
        rows.append(html_format(
            NODE_ROW, address(n), n.name,
            html_format(' <span class="muted small">{}</span>', n.cluster.slug)
            if many_clusters else "",
            html_format(' <span class="chip">{} alloc</span>', n.n_alloc)
            if getattr(n, "n_alloc", 0) else "",
            (n.pool.name if n.pool else "") or n.pool_label or "—",
            n.gpu_count, n.gpu_model, _mig(n), n.state, n.state, n.reason,
            "stale" if stale else "muted",
            naturaltime(n.last_synced_at) if n.last_synced_at else "—",
            SafeString(' <span class="chip warn">stale</span>') if stale else ""))
    return html_join(rows) or EMPTY
