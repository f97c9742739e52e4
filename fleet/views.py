"""Fleet pages for platform admins: counts at a glance, the node table, a node's history."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Count
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode
from django.views.decorators.http import require_POST

from tenants.access import require_platform_admin, roles_for, scope_to_tenants
from tenants.audit import audit_for

from .allocations.lifecycle import USABLE
from .allocations.moves import allocation_move_off, retirement_plan
from .allocations.selectors import connect_info
from .domain import FleetError
from .forms import ClusterCreateForm, ClusterForm, PoolCreateForm, PoolForm, QueueNarrowForm
from .inventory.capacity import fleet_counts
from .inventory.pricing import pool_rate, pool_rates
from .inventory.selectors import (
    cluster_view,
    clusters_overview,
    facts_by_pool,
    node_facts,
    pool_capacity,
    pools_capacity,
)
from .inventory.services import (
    cluster_check,
    cluster_register,
    cluster_retire,
    cluster_update,
    node_set_retiring,
    pool_create,
    pool_update,
)
from .inventory.sync import fleet_sync_all
from .kube import KubeError
from .models import Allocation, Cluster, ClusterQueueState, GpuNode, Pool, Route
from .queues.explain import (
    allocation_queue,
    cohort_views,
    history_chart,
    oldest_wait_text,
    queue_history,
    queue_stamp,
    seam_chart,
    seam_figures,
)
from .queues.truth import amount
from .tasks import sync_fleet
from .vocabulary import LABEL_POOL, NodeState

NODE_STATES = list(NodeState.ALL)


AFFECTED_SHOWN = 8


def _pool_rows(nodes_by_pool: dict):
    """Per pool: fleet counts, what is allocated, and who is affected if it is overcommitted."""
    rows = []
    pools = list(Pool.objects.filter(active=True).select_related("cluster"))
    capacities = pools_capacity(pools, node_facts=nodes_by_pool)
    for pool in pools:
        counts = fleet_counts(nodes_by_pool.get(pool.pk, []))
        cap = capacities[pool.pk]
        over = cap.allocated_devices > cap.capacity_devices
        tenants, more = [], 0
        if over:  # the first few by name and how many more: a pool may hold thousands
            holding = (Allocation.objects.filter(pool=pool, status__in=Allocation.HOLDING)
                       .values_list("tenant__name", flat=True).distinct().order_by(
                           "tenant__name"))
            tenants = list(holding[:AFFECTED_SHOWN])
            if len(tenants) == AFFECTED_SHOWN:
                more = holding.count() - AFFECTED_SHOWN
        rows.append({"pool": pool, "counts": counts, "cap": cap, "overcommitted": over,
                     "affected": tenants, "affected_more": more,
                     "synced": pool.pk in nodes_by_pool})
    unpooled = nodes_by_pool.get(None, [])
    return rows, fleet_counts(unpooled) if unpooled else None


@login_required
def fleet_overview(request):
    require_platform_admin(request.user)
    nodes_by_pool = facts_by_pool(GpuNode.objects.all())  # every node, once, as plain rows
    rows, unpooled = _pool_rows(nodes_by_pool)
    nodes = (GpuNode.objects.select_related("pool", "cluster")
             .annotate(n_alloc=Count("allocations"))
             .order_by("name"))
    state = request.GET.get("state", "")
    if state in NODE_STATES:
        nodes = nodes.filter(state=state)
    pool = request.GET.get("pool", "")
    if pool:
        nodes = nodes.filter(pool__slug=pool)
    page = Paginator(nodes, 50).get_page(request.GET.get("page"))
    flagged = (Allocation.objects.exclude(flagged_reason="")
               .filter(status__in=Allocation.HOLDING).select_related("tenant", "pool"))
    template = "fleet/fleet.html" + ("#nodes" if request.htmx else "")
    clusters = [] if request.htmx else clusters_overview(
        Cluster.objects.filter(retired_at__isnull=True))
    return render(request, template, {
        "clusters": clusters, "many_clusters": len(clusters) > 1 or request.htmx,
        "rows": rows, "unpooled": unpooled, "page": page, "state": state, "pool": pool,
        "states": NODE_STATES, "pools": Pool.objects.all(), "flagged": flagged,
        "total": fleet_counts(f for facts in nodes_by_pool.values() for f in facts),
        "pool_label": LABEL_POOL,
    })


@login_required
@require_POST
def fleet_sync_now(request):
    require_platform_admin(request.user)


    try:
        if settings.CELERY_TASK_ALWAYS_EAGER:  # no worker: sync here and say what it found
            for cluster, said in fleet_sync_all(by=request.user):
                messages.success(request, f"{cluster.name}: {said}")
        else:
            sync_fleet.delay()
            messages.info(request, "Fleet sync queued; the counts refresh when it finishes.")
    except KubeError as exc:
        messages.error(request, f"Fleet sync failed: {exc.message}")
    return redirect("fleet:fleet")


@login_required
def node_detail(request, cluster: str, name: str):
    require_platform_admin(request.user)
    node = get_object_or_404(GpuNode.objects.select_related("pool", "cluster"),
                             cluster__slug=cluster, name=name)
    allocations = node.allocations.select_related("tenant", "pool").filter(
        status__in=Allocation.HOLDING)
    pool_allocations, plan = [], []
    if node.retiring:
        plan = retirement_plan(node)
    if node.retiring and node.pool:
        cap = pool_capacity(node.pool)
        if cap.allocated_devices > cap.capacity_devices:
            pool_allocations = Allocation.objects.filter(
                pool=node.pool, status__in=Allocation.HOLDING).exclude(
                route=Route.DEDICATED_BLOCK).select_related("tenant")
    return render(request, "fleet/node_detail.html", {
        "node": node, "facts": node_facts(node), "events": audit_for(node).order_by("-at")[:100],
        "allocations": allocations, "pool_allocations": pool_allocations, "plan": plan,
    })


@login_required
@require_POST
def node_move_off(request, cluster: str, name: str):
    """Move the chosen dedicated blocks off a retiring node, each onto a free validated node
    of its own pool, in one action (each move audited, its tenant's leads told)."""
    require_platform_admin(request.user)
    node = get_object_or_404(GpuNode.objects.select_related("cluster"), cluster__slug=cluster,
                             name=name)
    reason = request.POST.get("reason", "")
    chosen = [int(v) for v in request.POST.getlist("allocation") if v.isdigit()]
    if not chosen:
        messages.error(request, "Choose at least one allocation to move.")
        return redirect("fleet:node", cluster=node.cluster.slug, name=node.name)
    for pk in chosen:
        try:
            to = allocation_move_off(allocation_id=pk, node_name=node.name, by=request.user,
                                     reason=reason)
            moved = Allocation.objects.only("namespace").get(pk=pk)
            messages.success(request, f"{moved.namespace} moved to {to}; its team leads "
                                      "are told.")
        except Allocation.DoesNotExist:
            messages.error(request, f"No allocation {pk}.")
        except ValueError as exc:  # FleetError: the reason, the route, no free node
            messages.error(request, str(exc))
    return redirect("fleet:node", cluster=node.cluster.slug, name=node.name)


@login_required
@require_POST
def node_retire(request, cluster: str, name: str):
    require_platform_admin(request.user)
    node = get_object_or_404(GpuNode.objects.select_related("cluster"), cluster__slug=cluster,
                             name=name)
    retiring = request.POST.get("retiring") == "true"
    reason = request.POST.get("reason", "")
    try:
        node_set_retiring(node=node, by=request.user, retiring=retiring, reason=reason)
        state = "marked for retirement" if retiring else "back in service"
        messages.success(request, f"{node.name} is {state}.")
    except ValueError as exc:
        messages.error(request, str(exc))
    return redirect("fleet:node", cluster=node.cluster.slug, name=node.name)


@login_required
def pool_list(request):
    require_platform_admin(request.user)


    all_pools = list(Pool.objects.select_related("cluster"))
    capacities = pools_capacity(all_pools)
    rates = pool_rates([p.pk for p in all_pools], timezone.now())
    for p in all_pools:
        p.rate_now = rates[p.pk]  # the rate card in force (fleet.inventory.pricing)
    pools = [(p, capacities[p.pk]) for p in all_pools]
    return render(request, "fleet/pools.html", {"pools": pools, "pool_label": LABEL_POOL})


@login_required
def pool_new(request):
    """Platform admins add a pool: route, GPUs, size, cohort and its first rate."""
    require_platform_admin(request.user)
    form = PoolCreateForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        pool = pool_create(form=form, by=request.user)
        messages.success(request, f"{pool.name} created. It promises nothing until validated "
                                  f"nodes labelled {LABEL_POOL}={pool.slug} are synced.")
        return redirect("fleet:pools")
    return render(request, "fleet/pool_new.html", {"form": form})


@login_required
def pool_edit(request, slug: str):
    require_platform_admin(request.user)
    pool = get_object_or_404(Pool, slug=slug)
    form = PoolForm(request.POST or None, instance=pool)
    if request.method == "POST" and form.is_valid():
        pool_update(form=form, by=request.user)
        messages.success(request, f"{pool.name} saved.")
        return redirect("fleet:pools")

    return render(request, "fleet/pool_form.html", {
        "pool": pool, "form": form, "rate_now": pool_rate(pool.pk),
        "events": audit_for(pool).order_by("-at")[:20]})


@login_required
def allocation_queue_panel(request, pk: int):
    """The queue of an allocation (htmx partial, refreshed while the page is open): what runs,
    what waits and why, borrowing and its price, preemptions, and history."""
    alloc = get_object_or_404(scope_to_tenants(
        request.user, Allocation.objects.select_related("pool", "tenant")), pk=pk)
    narrowed = QueueNarrowForm(request.GET).narrowed()
    stamp = queue_stamp(alloc)
    if request.GET.get("since") == stamp:
        return HttpResponse(status=204)  # nothing new: htmx keeps the panel as it is
    view = allocation_queue(alloc, **narrowed)
    query = {k: v for k, v in narrowed.items() if v not in (None, "")}
    poll_url = reverse("fleet:queue", args=[alloc.pk]) + "?" + urlencode(
        {**query, "since": stamp})
    return render(request, "partials/queue.html", {
        "alloc": alloc, "view": view, "chart": history_chart(view.history),
        "seam_chart": seam_chart(view.seams), "poll_url": poll_url,
        "roles": roles_for(request.user), "narrowed": narrowed})


@login_required
def cohorts(request):
    """Platform admins: every cohort at a glance, and who is blocked by whom."""
    require_platform_admin(request.user)
    followed = Allocation.objects.filter(pk__in=ClusterQueueState.objects.filter(
        allocation__isnull=False).values("allocation_id"))

    chart = history_chart(queue_history(followed))
    seams = seam_figures(followed)  # every tenant's ledger: admins see all

    # Quotas in their own unit (devices, or slices of one MIG profile), worded as everywhere.
    resources = dict(ClusterQueueState.objects.values_list("name", "resource"))
    groups = [{"name": g.name, "rows": [
        {"r": r, "tenant": g.tenants.get(r.queue, ""),
         "quota": amount(r.nominal, resources.get(r.queue, "")),
         "oldest": oldest_wait_text(r.oldest_wait_seconds),
         "blocked_by": [f"{g.tenants.get(b, '?')} ({b})" for b in r.blocked_by]}
        for r in g.rows]} for g in cohort_views()]
    return render(request, "fleet/cohorts.html", {
        "groups": groups, "chart": chart,
        "seams": seams, "seam_chart": seam_chart(seams)})


def _usable_allocation(request, pk: int) -> Allocation:
    """An active allocation of the caller's tenants (else 404: another tenant's, or one that
    cannot be used yet)."""
    return get_object_or_404(scope_to_tenants(
        request.user, Allocation.objects.select_related("pool", "tenant")), pk=pk,
        status__in=USABLE)


@login_required
def allocation_connect_panel(request, pk: int):
    """"Use it": the cluster, a kubeconfig, the queue and an example workload."""
    alloc = _usable_allocation(request, pk)
    return render(request, "partials/connect.html", {"alloc": alloc,
                                                     "info": connect_info(alloc)})


@login_required
def allocation_connect_file(request, pk: int, what: str):
    """The kubeconfig or the example workload, as a YAML download."""
    alloc = _usable_allocation(request, pk)
    info = connect_info(alloc)
    response = HttpResponse(info[what], content_type="application/yaml; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{alloc.namespace}-{what}.yaml"'
    return response


# -- clusters: registered, inspected, retired by platform admins


@login_required
def cluster_list(request):
    require_platform_admin(request.user)
    return render(request, "fleet/clusters.html", {"clusters": clusters_overview()})


@login_required
def cluster_new(request):
    require_platform_admin(request.user)
    form = ClusterCreateForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        cluster = cluster_register(form=form, by=request.user)
        messages.success(request, f"{cluster.name} registered. Check it to see whether it "
                                  "answers; pools placed in it sync its nodes.")
        return redirect("fleet:cluster", slug=cluster.slug)
    return render(request, "fleet/cluster_new.html", {"form": form})


@login_required
def cluster_detail(request, slug: str):
    require_platform_admin(request.user)
    cluster = get_object_or_404(Cluster, slug=slug)
    form = ClusterForm(request.POST or None, instance=cluster)
    if request.method == "POST" and form.is_valid():
        try:
            cluster_update(form=form, by=request.user)
            messages.success(request, f"{cluster.name} saved.")
            return redirect("fleet:cluster", slug=cluster.slug)
        except FleetError as exc:
            messages.error(request, str(exc))
    return render(request, "fleet/cluster_detail.html", {
        "cluster": cluster, "form": form, "view": cluster_view(cluster),
        "events": audit_for(cluster).order_by("-at")[:20]})


@login_required
@require_POST
def cluster_check_now(request, slug: str):
    require_platform_admin(request.user)
    cluster = cluster_check(cluster=get_object_or_404(Cluster, slug=slug), by=request.user)
    (messages.success if cluster.answers is not False else messages.error)(
        request, f"{cluster.name}: {cluster.health_message}")
    return redirect("fleet:cluster", slug=cluster.slug)


@login_required
@require_POST
def cluster_retire_now(request, slug: str):
    require_platform_admin(request.user)
    cluster = get_object_or_404(Cluster, slug=slug)
    try:
        cluster_retire(cluster=cluster, by=request.user, reason=request.POST.get("reason", ""))
        messages.success(request, f"{cluster.name} retired.")
    except FleetError as exc:
        messages.error(request, str(exc))
    return redirect("fleet:cluster", slug=cluster.slug)
