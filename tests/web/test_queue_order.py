"""The lead's waiting table reads one order: the position shown, the order of the rows and
"ahead of it" in each reason agree, on the page and in the API, whatever mix of Kueue's
visibility answer and the computed rule the rows were stored with (fleet/queues/order.py).
The real Kueue's side is tests/k8s/test_kueue_queue_order.py."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal

import pytest
from django.utils import timezone

from fleet.models import Allocation, ClusterQueueState, Route
from fleet.queues.sync import record_workloads
from fleet.queues.truth import ADMITTED, PENDING, WorkloadFacts

pytestmark = pytest.mark.django_db

T0 = timezone.now().replace(microsecond=0) - dt.timedelta(hours=1)


@pytest.fixture
def alloc(tenant, pools):
    a = Allocation.objects.create(
        tenant=tenant, pool=pools[Route.DEDICATED_BLOCK], route=Route.DEDICATED_BLOCK,
        whole_devices=8, device_equivalents=Decimal(8), namespace="acme-q1", status="active",
        starts_at=T0 - dt.timedelta(days=1))
    ClusterQueueState.objects.create(name="acme-q1", allocation=a, resource="nvidia.com/gpu",
                                     nominal=Decimal(8), usage=Decimal(8), observed_at=T0)
    return a


def wl(job, *, state=PENDING, minute=0, devices=1, priority=0) -> WorkloadFacts:
    return WorkloadFacts(uid=f"uid-{job}", namespace="acme-q1", name=f"job-{job}-x", job=job,
                         local_queue="gpu", cluster_queue="acme-q1", priority=priority,
                         submitted_at=T0 + dt.timedelta(minutes=minute),
                         devices=Decimal(devices), state=state,
                         admitted_at=T0 if state == ADMITTED else None, resource_version="1")


def _waiting_rows(page: str) -> list[tuple[int, str, str]]:
    """(position shown, workload, reason) of each row of the Waiting table, top to bottom."""
    table = page.split("<h3>Waiting</h3>", 1)[1].split("<h3>", 1)[0]
    return [(int(pos), name, why) for pos, name, why in re.findall(
        r"<tr class=\"reason-[a-z-]+\">\s*<td>(\d+)</td>\s*<td><code>([^<]+)</code>.*?</td>"
        r"\s*<td>[^<]*</td>\s*<td>[^<]*</td>\s*<td>([^<]*)</td>", table, flags=re.S)]


def _ahead(reason: str) -> tuple[int, str] | None:
    found = re.search(r"\((\d+) of your workload\(s\) ahead of it need ([^)]+) first\)",
                      reason)
    return (int(found[1]), found[2]) if found else None


@pytest.mark.parametrize("answered", [
    # Kueue's visibility answer for all three, against the priority rule (job-0011 is
    # higher priority, but Kueue placed job-0007 first: its answer is the order).
    {"job-0007": 0, "job-0011": 1, "job-0012": 2},
    # An answer older than the waiting set: job-0012 arrived after it (computed, last).
    {"job-0007": 0, "job-0011": 1},
    # No visibility API: the computed rule (priority first).
    {},
], ids=["visibility", "partly-answered", "computed"])
def test_rows_positions_and_reasons_agree(client, lead, alloc, answered):
    workloads = [wl("train-1", state=ADMITTED, devices=8),
                 wl("job-0007", minute=1, devices=6), wl("job-0011", minute=2, devices=2,
                                                         priority=10),
                 wl("job-0012", minute=3, devices=1)]
    positions = {f"uid-{job}": (pos, "visibility") for job, pos in answered.items()}
    positions |= {w.uid: (9, "computed") for w in workloads[1:] if w.uid not in positions}
    record_workloads(workloads, queues={}, positions=positions,
                     allocations={alloc.namespace: alloc}, now=T0 + dt.timedelta(minutes=5))
    client.force_login(lead)
    rows = _waiting_rows(client.get(f"/allocations/{alloc.pk}/queue/").content.decode())
    api = client.get(f"/api/allocations/{alloc.pk}/queue/").json()["pending"]

    expected = ["job-0007", "job-0011", "job-0012"] if answered else \
        ["job-0011", "job-0007", "job-0012"]
    assert [name for _pos, name, _why in rows] == expected
    assert [p["name"] for p in api] == expected
    # The position shown is the row's place: #1, #2, #3 top to bottom, and so in the API.
    assert [pos for pos, _name, _why in rows] == [1, 2, 3]
    assert [p["position"] for p in api] == [0, 1, 2]
    # "Ahead of it" counts exactly the rows above, with their devices.
    devices = {"job-0007": 6, "job-0011": 2, "job-0012": 1}
    for i, (_pos, _name, why) in enumerate(rows):
        above = [name for _p, name, _w in rows[:i]]
        want = None if not above else (
            len(above), f"{sum(devices[n] for n in above)} devices")
        assert _ahead(why) == want, why
        assert api[i]["reason"] == why.replace("&#x27;", "'")
    sources = [p["position_source"] for p in api]
    assert sources == ["visibility" if n in answered else "computed" for n in expected]
