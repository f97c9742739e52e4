"""Writes of the inventory: pools, their rates, and nodes marked for retirement. Each audits
in the same transaction."""

from __future__ import annotations

from decimal import Decimal

from django.db import transaction

from tenants.access import require_platform_admin
from tenants.audit import audit_record

from ..domain import FleetError
from ..inventory.pricing import BEGINNING
from ..models import GpuNode, Pool, RateCard
from .selectors import node_facts
from .sync import clear_recovered_flags, flag_allocations_on


@transaction.atomic
def pool_set_rate(*, pool: Pool, rate: Decimal, by=None, effective_from=None) -> None:
    """A pool's first price (from the beginning), or, later, a price from a moment on.
    Billing's rate page adds future-dated cards with its own checks (closed months)."""
    since = effective_from or BEGINNING
    RateCard.objects.update_or_create(pool=pool, gpu_model="", effective_from=since,
                                      defaults={"rate_per_device_hour": rate})
    when = "the beginning" if since == BEGINNING else f"{since:%Y-%m-%d %H:%M} UTC"
    audit_record(actor=by, subject=pool, action="rate.created",
                 reason=f"{pool.name}: {rate} per device-hour from {when}.")


@transaction.atomic
def pool_create(*, form, by) -> Pool:
    """A new pool from an admin's form, with its first rate card; audited."""
    require_platform_admin(by)
    pool = form.save()
    pool_set_rate(pool=pool, rate=form.cleaned_data["rate"], by=by)
    audit_record(actor=by, subject=pool, action="pool.created",
                 reason=f"{pool.name}: {pool.get_route_display()}, {pool.gpu_model}, "
                        f"{pool.capacity_devices} device(s) configured"
                        + (f", cohort {pool.cohort}" if pool.cohort else "") + ".")
    return pool


@transaction.atomic
def pool_update(*, form, by) -> Pool:
    """Save an admin's pool edit with an audit row naming what changed."""
    require_platform_admin(by)
    changed = sorted(form.changed_data)
    pool = form.save()
    if changed:
        audit_record(actor=by, subject=pool, action="pool.updated",
                     reason=f"{pool.name}: changed {', '.join(changed)}.",
                     data={name: str(form.cleaned_data.get(name)) for name in changed})
    return pool


@transaction.atomic
def node_set_retiring(*, node: GpuNode, by, retiring: bool, reason: str) -> GpuNode:
    """Mark a node for retirement (it leaves promisable capacity at once), or undo it."""
    require_platform_admin(by)
    if not reason.strip():
        raise FleetError("Give a reason: it is kept in the node's history.")
    node = GpuNode.objects.select_for_update().get(pk=node.pk)
    if node.retiring == retiring:
        return node
    node.retiring = retiring
    node.retiring_reason = reason.strip() if retiring else ""
    facts = node_facts(node)
    node.state, node.reason = facts.state, facts.reason
    node.save(update_fields=["retiring", "retiring_reason", "state", "reason"])
    audit_record(actor=by, subject=node, action="node.retiring" if retiring else
                 "node.retirement_cancelled", reason=reason)
    # A planned retirement of a healthy node is no outage: no credit (tenants keep using it
    # until they are moved); only failed validation or health opens an outage (fleet sync).
    if retiring:
        flag_allocations_on([node], by=by)
    else:
        clear_recovered_flags(by=by)
    return node
