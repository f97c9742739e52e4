"""Writes of the inventory: clusters, pools, their rates, and nodes marked for retirement.
Each audits in the same transaction."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from tenants.access import require_platform_admin
from tenants.audit import audit_record
from tenants.fields import decimal_for_column

from ..domain import FleetError
from ..inventory.pricing import BEGINNING
from ..models import Allocation, Cluster, GpuNode, Pool, RateCard
from ..vocabulary import HOME_CLUSTER
from .clusters import retire_refusal
from .connections import read_health
from .selectors import node_facts
from .sync import clear_recovered_flags, flag_allocations_on

RATE_REACH = dt.timedelta(days=3650)  # a price starts within ten years of today


def rate_card_checked(*, pool: Pool, rate, effective_from: dt.datetime | None = None,
                      gpu_model: str = "") -> tuple[Decimal, dt.datetime]:
    """A rate card's checks, without writing it: the rate and the moment it starts, or a
    FleetError naming the field (a caller may ask a question about a valid card first)."""
    try:
        rate = decimal_for_column(rate, max_digits=10, decimal_places=4, what="The rate")
    except ValueError as exc:
        raise FleetError(str(exc), fields={"rate": str(exc)}) from None
    if rate < 0:
        raise FleetError("A rate cannot be negative.", fields={"rate": "Not below zero."})
    if gpu_model not in ("", pool.gpu_model):
        raise FleetError(f"{pool.name} has {pool.gpu_model} GPUs only: leave the GPU model "
                         "blank or give that one.")
    if effective_from is None:
        if RateCard.objects.filter(pool=pool).exists():
            raise FleetError(f"{pool.name} has a price already; a new one starts at a moment.")
        effective_from = BEGINNING
    else:
        now = timezone.now()
        if not now - RATE_REACH <= effective_from <= now + RATE_REACH:
            raise FleetError("A rate starts within ten years of today, either way.",
                             fields={"effective_from": "Within ten years of today."})
    return rate, effective_from


@transaction.atomic
def rate_card_create(*, pool: Pool, rate, by=None, effective_from: dt.datetime | None = None,
                     gpu_model: str = "") -> RateCard:
    """The one writer of a rate card. Without `effective_from`, the pool's first price (from
    the beginning: no hour of it was priced before). Billing's rate page adds rules of its
    own before it calls this: a new price never starts inside a closed month, and one that
    starts in the past is confirmed."""
    rate, effective_from = rate_card_checked(pool=pool, rate=rate,
                                             effective_from=effective_from, gpu_model=gpu_model)
    card, created = RateCard.objects.get_or_create(
        pool=pool, gpu_model=gpu_model, effective_from=effective_from,
        defaults={"rate_per_device_hour": rate})
    if not created:
        raise FleetError("A rate for this pool starts at that moment already.")
    when = "the beginning" if effective_from == BEGINNING else \
        f"{effective_from:%Y-%m-%d %H:%M} UTC"
    audit_record(actor=by, subject=card, action="rate.created",
                 reason=f"{pool.name}: {rate} per device-hour from {when}.")
    return card


@transaction.atomic
def pool_create(*, form, by) -> Pool:
    """A new pool from an admin's form, with its first rate card; audited."""
    require_platform_admin(by)
    pool = form.save()
    rate_card_create(pool=pool, rate=form.cleaned_data["rate"], by=by)
    audit_record(actor=by, subject=pool, action="pool.created",
                 reason=f"{pool.name}: {pool.get_route_display()}, {pool.gpu_model}, "
                        f"{pool.capacity_devices} device(s) configured"
                        + (f", cohort {pool.cohort}" if pool.cohort else "") + ".")
    return pool


def _save_edit(form, *, by, action: str):
    """An admin's edit saved with an audit row naming what changed (inside the caller's
    transaction)."""
    changed = sorted(form.changed_data)
    obj = form.save()
    if changed:
        audit_record(actor=by, subject=obj, action=action,
                     reason=f"{obj.name}: changed {', '.join(changed)}.",
                     data={name: str(form.cleaned_data.get(name)) for name in changed})
    return obj


@transaction.atomic
def pool_update(*, form, by) -> Pool:
    """Save an admin's pool edit with an audit row naming what changed."""
    require_platform_admin(by)
    return _save_edit(form, by=by, action="pool.updated")


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


def _cluster_words(c: Cluster) -> str:
    where = ", ".join(f"{k} {v}" for k, v in c.labels.items())
    how = f"kubeconfig at {c.credential_ref}" if c.by_kubeconfig else \
        c.get_connection_display()
    return f"{c.name} ({c.get_role_display()}{', ' + where if where else ''}): {how}"


@transaction.atomic
def cluster_register(*, form, by) -> Cluster:
    """A cluster added by an admin: where it is and how to reach it (a reference only)."""
    require_platform_admin(by)
    cluster = form.save()
    audit_record(actor=by, subject=cluster, action="cluster.registered",
                 reason=f"Registered {_cluster_words(cluster)}.")
    return cluster


@transaction.atomic
def cluster_update(*, form, by) -> Cluster:
    require_platform_admin(by)
    if form.instance.retired_at is not None:
        raise FleetError(f"{form.instance.name} is retired; register a new cluster instead.")
    return _save_edit(form, by=by, action="cluster.updated")


@transaction.atomic
def cluster_retire(*, cluster: Cluster, by, reason: str) -> Cluster:
    """Take a cluster out of the portal. Refused while anything still lives there: its
    pools' allocations must be retired (or moved) first, so nothing is orphaned unseen."""
    require_platform_admin(by)
    if not reason.strip():
        raise FleetError("Give a reason: it is kept in the cluster's history.",
                         fields={"reason": "Required."})
    cluster = Cluster.objects.select_for_update().get(pk=cluster.pk)
    if cluster.retired_at is not None:
        return cluster
    refusal = retire_refusal(
        name=cluster.name, home=cluster.slug == HOME_CLUSTER,
        holding=Allocation.objects.filter(pool__cluster=cluster,
                                          status__in=Allocation.HOLDING).count())
    if refusal:
        raise FleetError(refusal)
    cluster.retired_at, cluster.retired_reason = timezone.now(), reason.strip()
    cluster.save(update_fields=["retired_at", "retired_reason"])
    Pool.objects.filter(cluster=cluster).update(active=False)
    audit_record(actor=by, subject=cluster, action="cluster.retired",
                 reason=f"{cluster.name} retired: {reason.strip()}")
    return cluster


def cluster_check(*, cluster: Cluster, by=None) -> Cluster:
    """Ask the cluster what it is now (outside any transaction), then record it; a change of
    verdict (answers or not, MultiKueue active or not) goes into its history."""
    manager = (Cluster.objects.live().filter(role=Cluster.Role.MANAGER)
               .exclude(pk=cluster.pk).first() if cluster.is_worker else None)
    health = read_health(cluster, manager=manager)
    with transaction.atomic():
        row = Cluster.objects.select_for_update().get(pk=cluster.pk)
        before = (row.answers, row.multikueue_active)
        row.checked_at = timezone.now()
        row.answers, row.health_message = health.answers, health.message
        row.server_seen = health.server or row.server_seen
        if health.answers:
            row.kubernetes_version = health.kubernetes_version
            row.kueue_version = health.kueue_version
        row.multikueue_active = health.multikueue_active
        row.multikueue_reason = health.multikueue_reason
        row.save(update_fields=["checked_at", "answers", "health_message", "server_seen",
                                "kubernetes_version", "kueue_version", "multikueue_active",
                                "multikueue_reason"])
        if before != (row.answers, row.multikueue_active) or by is not None:
            audit_record(actor=by, subject=row, action="cluster.checked",
                         reason=f"{row.name}: {health.message}",
                         data={"answers": row.answers, "multikueue": row.multikueue_active})
    return row


def clusters_check() -> list[Cluster]:
    """Every live cluster checked in turn (beat)."""
    return [cluster_check(cluster=c) for c in
            Cluster.objects.live()]
