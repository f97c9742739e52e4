"""Fleet pages for platform admins: counts at a glance, the node table, a node's history."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode
from django.views.decorators.http import require_POST

from tenants.access import require_platform_admin, roles_for, scope_to_tenants
from tenants.audit import audit_for
from tenants.paging import known_page

from .allocations.lifecycle import USABLE
from .allocations.moves import allocation_move_off, retirement_plan
from .allocations.selectors import (
    affected_by_retiring,
    allocations_on,
    connect_info,
    flagged_allocations,
)
from .domain import FleetError
from .forms import ClusterCreateForm, ClusterForm, PoolCreateForm, PoolForm, QueueNarrowForm
from .inventory.capacity import stale_before, stale_clusters
from .inventory.pool_list import pools_with_capacity
from .inventory.pricing import pool_rate
from .inventory.selectors import (
    NODES_PER_PAGE,
    across_clusters,
    cluster_view,
    clusters_overview,
    fleet_summary,
    last_sightings,
    node_facts,
    node_page,
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
from .models import Allocation, Cluster, GpuNode, Pool, home_cluster_id
from .queues.across import pending_across_clusters
from .queues.cohorts import cohort_groups, followed_allocations
from .queues.explain import (
    allocation_queue,
    history_chart,
    queue_history,
    queue_stamp,
    seam_chart,
    seam_figures,
)
from .renderers import node_rows
from .tasks import sync_fleet
from .vocabulary import LABEL_POOL, NodeState

NODE_STATES = list(NodeState.ALL)


@login_required
def fleet_overview(request):
    require_platform_admin(request.user)
    # Every node once, as plain rows; every pool and its capacity; the live clusters.
    reading, picture, live_views = fleet_summary()
    state = request.GET.get("state", "")
    pool = request.GET.get("pool", "")
    rows, count, number = node_page(state if state in NODE_STATES else "", pool,
                                    request.GET.get("page"))
    page = known_page(rows, count, number, NODES_PER_PAGE)
    template = "fleet/fleet.html" + ("#nodes" if request.htmx else "")
    clusters = [] if request.htmx else live_views
    many_clusters = len(live_views) > 1
    now, every = timezone.now(), settings.PORTAL_FLEET_SYNC_SECONDS
    return render(request, template, {
        "node_rows": node_rows(page, many_clusters=many_clusters,
                               stale_before=stale_before(now, every)),
        "sync_every": every,
        "stale": {} if request.htmx else stale_clusters(last_sightings(), now=now,
                                                        every_seconds=every),
        "clusters": clusters, "many_clusters": many_clusters,
        "across": across_clusters(clusters),
        "rows": picture.pools, "unpooled": picture.unpooled, "page": page, "state": state,
        "pool": pool, "states": NODE_STATES, "pools": reading.pools,
        "flagged": flagged_allocations(), "total": picture.total, "pool_label": LABEL_POOL,
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
    plan = retirement_plan(node) if node.retiring else []
    return render(request, "fleet/node_detail.html", {
        "node": node, "facts": node_facts(node), "events": audit_for(node).order_by("-at")[:100],
        "allocations": allocations_on(node), "pool_allocations": affected_by_retiring(node),
        "plan": plan,
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


    return render(request, "fleet/pools.html", {"pools": pools_with_capacity(),
                                                "pool_label": LABEL_POOL})


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
def pending_across(request):
    """Platform admins: every waiting workload of every cluster, where and why."""
    require_platform_admin(request.user)
    rows, per_cluster = pending_across_clusters()
    return render(request, "fleet/pending.html", {"rows": rows, "per_cluster": per_cluster})


@login_required
def cohorts(request):
    """Platform admins: every cohort at a glance, and who is blocked by whom."""
    require_platform_admin(request.user)
    followed = followed_allocations()
    seams = seam_figures(followed)  # every tenant's ledger: admins see all
    return render(request, "fleet/cohorts.html", {
        "groups": cohort_groups(), "chart": history_chart(queue_history(followed)),
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


def _cluster_or_404(slug: str) -> Cluster:
    home_cluster_id()  # the home cluster is there before anything names it
    return get_object_or_404(Cluster, slug=slug)


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
    cluster = _cluster_or_404(slug)
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
    cluster = cluster_check(cluster=_cluster_or_404(slug), by=request.user)
    (messages.success if cluster.answers is not False else messages.error)(
        request, f"{cluster.name}: {cluster.health_message}")
    return redirect("fleet:cluster", slug=cluster.slug)


@login_required
@require_POST
def cluster_retire_now(request, slug: str):
    require_platform_admin(request.user)
    cluster = _cluster_or_404(slug)
    try:
        cluster_retire(cluster=cluster, by=request.user, reason=request.POST.get("reason", ""))
        messages.success(request, f"{cluster.name} retired.")
    except FleetError as exc:
        messages.error(request, str(exc))
    return redirect("fleet:cluster", slug=cluster.slug)
