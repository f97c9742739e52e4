"""An allocation's progress is written at the start, when everything is applied, and in
between at most once per Progress.PROGRESS_EVERY seconds (not once per wave)."""

from decimal import Decimal

import pytest
from django.utils import timezone

from fleet.allocations.transitions import Progress
from fleet.models import Allocation, Route

pytestmark = pytest.mark.django_db


def _seen(alloc) -> tuple[int, int]:
    return tuple(Allocation.objects.values_list("progress_done", "progress_total")
                 .get(pk=alloc.pk))


def test_progress_between_the_ends_waits_its_turn(tenant, pools, monkeypatch):
    alloc = Allocation.objects.create(
        tenant=tenant, pool=pools[Route.SHARED_POOL], route=Route.SHARED_POOL, whole_devices=4,
        device_equivalents=Decimal(4), namespace="acme-r1", status="provisioning",
        starts_at=timezone.now())
    monkeypatch.setattr(Progress, "PROGRESS_EVERY", 3600.0)
    progress = Progress(alloc.pk, 9)
    assert _seen(alloc) == (0, 9)
    progress.advance(4)
    assert _seen(alloc) == (0, 9)  # a wave later, within the second: not written
    progress.advance(9)
    assert _seen(alloc) == (9, 9)  # everything applied: written at once
    monkeypatch.setattr(Progress, "PROGRESS_EVERY", 0.0)
    resumed = Progress(alloc.pk, 9, 2)
    assert _seen(alloc) == (2, 9)  # a resume says where it stands
    resumed.advance(5)
    assert _seen(alloc) == (5, 9)
