"""Four tenants contending in one cohort: the setup the queue-truth and placement
contention tests share."""

from __future__ import annotations

import uuid

from fleet.models import Allocation, Pool, Route
from tests.factories import TenantFactory, make_lead

from .approvals import approve


def four_in_a_cohort(admin_user, capture, *, prefix: str) -> dict[str, tuple]:
    """Tenants a–d with 2 devices each on the shared pool, approved and provisioned, in a
    cohort of their own (a fresh name, so queues other tests left cannot lend to it), each
    allowed to borrow up to 8. {letter: (tenant, lead, allocation)}."""
    tag = uuid.uuid4().hex[:5]
    Pool.objects.filter(route=Route.SHARED_POOL).update(cohort=f"contend-{tag}",
                                                        borrowing_limit_devices=8)
    out = {}
    for letter in "abcd":
        slug = f"{prefix}{tag}{letter}"
        tenant = TenantFactory(slug=slug, name=slug.upper())
        lead = make_lead(tenant, f"lead-{slug}")
        _req, alloc = approve(tenant, lead, admin_user, Route.SHARED_POOL, capture,
                              whole_devices=2)
        alloc = Allocation.objects.get(pk=alloc.pk)
        assert alloc.status == "active", alloc.status_message
        out[letter] = (tenant, lead, alloc)
    return out
