"""Reads of the intake app: plans over the database's pools and allocations."""

from __future__ import annotations

import dataclasses
import datetime as dt
import pickle
from dataclasses import dataclass, replace
from decimal import Decimal

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.paginator import Paginator
from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.safestring import SafeString

from fleet.allocations.desired import dispatch_workers, spec_for, worker_capacity
from fleet.allocations.manifests import AllocationSpec
from fleet.allocations.services import namespace_for
from fleet.domain import ALL_MIG_PROFILES
from fleet.inventory.capacity import earliest_free
from fleet.inventory.pricing import money_text, pool_rate, pool_rates_until
from fleet.inventory.selectors import (
    free_dedicated_nodes,
    mig_weights,
    pool_capacity,
    pool_endings,
    pools_capacity,
)
from fleet.models import (
    Allocation,
    AllocationResize,
    Cluster,
    GpuNode,
    Pool,
    RateCard,
    Route,
)
from tenants.kept_reads import Until, keeping, kept_across_requests
from tenants.models import AuditEvent, Tenant
from tenants.paging import Window
from tenants.per_request import once_per_request

from .domain import (
    WAITING_STATES,
    Fill,
    IntakeAnswers,
    PoolFacts,
    RequestPlan,
    RouteDecision,
    Status,
    no_pool_message,
    override_decision,
    plan_request,
    route_request,
)
from .models import AllocationTrace, CapacityRequest
from .renderers import request_rows
from .tally import counted_in_tally


def pool_facts(pool: Pool, cap=None, rate: Decimal | None = None, *,
               clusters: int | None = None) -> PoolFacts:
    """`rate`: the pool's rate now (fleet.inventory.pricing), read with others; `clusters`:
    how many live clusters there are (with one, where a request lands goes without saying)."""
    cap = cap or pool_capacity(pool)
    if clusters is None:
        clusters = live_clusters()
    return PoolFacts(
        name=pool.name, route=pool.route, gpu_model=pool.gpu_model,
        devices_per_node=pool.devices_per_node, capacity_devices=cap.capacity_devices,
        allocated_devices=cap.allocated_devices,
        rate_per_device_hour=pool_rate(pool.pk) if rate is None else rate,
        mig_profiles=tuple(pool.mig_profiles or ()), capacity_source=cap.source,
        pool_id=pool.pk, free_whole_nodes=cap.free_whole_nodes,
        free_mig_slices=cap.free_mig_slices,
        cluster=pool.cluster.described if clusters > 1 else "",
        dispatch_to=dispatch_capacity(pool),
    )


def dispatch_capacity(pool: Pool) -> tuple[tuple[str, int], ...]:
    """A dispatched pool's workers in words with its validated devices on each."""
    if not pool.dispatched:
        return ()
    workers = dispatch_workers()
    capacity = worker_capacity(pool, workers)
    return tuple((w.described, capacity[w.slug]) for w in workers)


@once_per_request
def live_clusters() -> int:
    """How many live clusters there are (with one, where a request lands goes without
    saying)."""
    return Cluster.objects.live().count()


@once_per_request
def active_pools() -> tuple[Pool, ...]:
    """Every active pool, its cluster joined, in the pools' own order (route, then name):
    read once for a reading request by every planner and offer that picks among them — as
    the pools' facts kept across reading requests hold them, where they are kept."""
    if keeping():
        return tuple(pool for pool, _ in active_pools_facts())
    return _read_active_pools()


def _read_active_pools() -> tuple[Pool, ...]:
    return tuple(Pool.objects.filter(active=True).select_related("cluster"))


@once_per_request
def active_pools_facts() -> list[tuple[Pool, PoolFacts]]:
    """Every active pool with its facts, in a fixed number of queries (overview, review),
    kept across reading requests until a write to what they are read from."""
    return _kept_pools_facts()


@kept_across_requests(Pool, Cluster, GpuNode, Allocation, Allocation.nodes.through, RateCard,
                      freeze=pickle.dumps, thaw=pickle.loads)
def _kept_pools_facts() -> Until:
    pools = _read_active_pools()
    capacities = pools_capacity(pools)
    rates, next_card = pool_rates_until([p.pk for p in pools], timezone.now())
    clusters = live_clusters()
    return Until([(p, pool_facts(p, capacities[p.pk], rates[p.pk], clusters=clusters))
                  for p in pools], next_card)


def window_hours(starts_on: dt.date | None, ends_on: dt.date | None) -> Decimal | None:
    if not starts_on or not ends_on or ends_on < starts_on:
        return None
    return Decimal(((ends_on - starts_on).days + 1) * 24)


@once_per_request
def mig_offer(gpu_model: str = "") -> tuple[int, tuple[str, ...]]:
    """GPU memory and MIG profiles of the pool that would take a small request.

    Memory → profile mapping depends on both (80 GB and 141 GB parts slice differently).
    """
    pool = first_active_pool(Route.MIG_VCLUSTER, gpu_model)
    if pool is None and gpu_model:
        memory = (Pool.objects.filter(gpu_model=gpu_model)
                  .values_list("gpu_memory_gb", flat=True).first())
        return (memory or 80), ()
    if pool is None:
        return 80, ()
    return pool.gpu_memory_gb, tuple(pool.mig_profiles or ())


def answers_for(answers: IntakeAnswers, gpu_model: str = "") -> IntakeAnswers:
    memory, offered = mig_offer(gpu_model)
    return replace(answers, gpu_memory_gb=memory, offered_profiles=offered,
                   mig_weights=tuple(sorted(mig_weights().items())))


class ActivePools(dict):
    """Pool id → facts of every active pool, and the pools themselves (`pools`, in the
    pools' own order: route, then name), read once for a page: the planners pick a route's
    pool, and find the pool a request names, among them instead of asking again."""

    def __init__(self, pairs: list[tuple[Pool, PoolFacts]]):
        super().__init__((pool.pk, facts) for pool, facts in pairs)
        self.pools = [pool for pool, _ in pairs]


def pool_for_route(decision: RouteDecision, gpu_model: str = "", pool: Pool | None = None,
                   *, facts: dict | None = None) -> Pool | None:
    """The pool that takes a routed request: the one it names if it serves the route, else
    the first active pool of the route (and GPU model) by name — among the pools a page read
    already (an ActivePools, or active_pools: every active pool, in route and name order)."""
    if decision.route is None:
        return None
    if pool is not None and pool.route == decision.route:
        return pool
    return first_active_pool(decision.route, gpu_model,
                             facts.pools if isinstance(facts, ActivePools) else None)


def first_active_pool(route: str, gpu_model: str = "", pools=None) -> Pool | None:
    """The active pool that takes a route (and GPU model): the first by name, among `pools`
    (every active pool, in route and name order) or active_pools."""
    return next((p for p in (active_pools() if pools is None else pools) if p.route == route
                 and (not gpu_model or p.gpu_model == gpu_model)), None)


def named_pool(pool_id: int | None, facts: dict | None = None) -> Pool | None:
    """The pool a request names, read fresh (not a cached relation) — or as this request
    read it already, among the active pools (an ActivePools, or active_pools)."""
    if not pool_id:
        return None
    pools = facts.pools if isinstance(facts, ActivePools) else active_pools()
    found = next((p for p in pools if p.pk == pool_id), None)
    return found if found is not None else Pool.objects.filter(pk=pool_id).first()


def facts_of_active_pools() -> ActivePools:
    """Pool id → facts of every active pool, read together: a page planning one request
    under several routes (the review page) reads the fleet once, not once per route."""
    return ActivePools(active_pools_facts())


def plan_answers(answers: IntakeAnswers, *, gpu_model: str = "", expected_utilisation: int = 100,
                 starts_on=None, ends_on=None, pool: Pool | None = None,
                 decision: RouteDecision | None = None, facts: dict | None = None
                 ) -> tuple[RouteDecision, RequestPlan | None]:
    """Route the answers and plan them against the pool that serves the route. `facts`
    (facts_of_active_pools) are used for the pools they hold; any other pool is read."""
    decision = decision or route_request(answers)
    if decision.route is None:
        return decision, None
    pool = pool_for_route(decision, gpu_model, pool, facts=facts)
    if pool is None:
        return decision, None
    known = (facts or {}).get(pool.pk)
    plan = plan_request(decision, known or pool_facts(pool),
                        expected_utilisation=expected_utilisation,
                        window_hours=window_hours(starts_on, ends_on))
    return decision, plan


@dataclass(frozen=True)
class SmallCellComparison:
    """A small answer that became whole devices (no MIG slice holds its memory): the cell it
    was answered in next to the cell it lands in, each with its price when it has one."""

    asked_route: Route  # the small cell's route
    asked_price: Decimal | None  # None: that cell cannot hold it at all
    asked_why: str
    landed_route: Route
    landed_price: Decimal

    @property
    def text(self) -> str:
        cur = settings.PORTAL_CURRENCY
        landed = f"{self.landed_route.label} at {cur} {self.landed_price:,.2f} a month"
        if self.asked_price is None:
            return (f"Answered as a fraction of a device, but no MIG slice here holds the "
                    f"memory: it is planned as {landed}. {self.asked_why}")
        return (f"Answered as a fraction of a device, but no MIG slice here holds the memory, "
                f"so each replica is a whole device and the request lands in {landed}, "
                f"instead of {self.asked_route.label} at {cur} {self.asked_price:,.2f} a "
                f"month. "
                f"{self.asked_why}")


def small_cell_comparison(answers: IntakeAnswers, decision: RouteDecision,
                          plan: RequestPlan | None, *, gpu_model: str = "",
                          expected_utilisation: int = 100, starts_on=None, ends_on=None
                          ) -> SmallCellComparison | None:
    """Both prices before submit, so nobody lands in a block of nodes by surprise."""
    if plan is None or decision.route is None or answers.fill is not Fill.SMALL or \
            decision.fill is not Fill.FULL:
        return None
    landed = Route(decision.route)
    if landed is Route.DEDICATED_BLOCK:
        asked = Route.CONFIDENTIAL_POOL
        alternative = RouteDecision(asked, "", isolation=decision.isolation, fill=Fill.SMALL,
                                    whole_devices=answers.replicas,
                                    mig_weights=decision.mig_weights)
        _, asked_plan = plan_answers(answers, gpu_model=gpu_model,
                                     expected_utilisation=expected_utilisation,
                                     starts_on=starts_on, ends_on=ends_on,
                                     decision=alternative)
        why = ("A binding boundary with whole devices is a dedicated block of whole nodes; "
               "choose a MIG profile or less memory per replica to stay in the confidential "
               "pool.")
        return SmallCellComparison(asked, asked_plan.monthly_price if asked_plan else None,
                                   why, landed, plan.monthly_price)
    return SmallCellComparison(Route.MIG_VCLUSTER, None, "MIG under vCluster cannot hold it: "
                               "the shared pool gives each replica a whole device.", landed,
                               plan.monthly_price)


def plan_for_request(request: CapacityRequest, *, decision: RouteDecision | None = None,
                     pool: Pool | None = None, facts: dict | None = None
                     ) -> tuple[RouteDecision, RequestPlan | None]:
    """The one plan of a request (form, request page, review page and approval alike): its
    route as decided (the admin's override included, once approved), the pool it was
    approved into (else the route's pool), and the price there now (fleet.inventory.pricing)."""
    decision = decision or decided_route(request)
    if pool is None:
        pool = named_pool(request.pool_id, facts)
    return plan_answers(
        answers_for(request.answers(), request.gpu_model), gpu_model=request.gpu_model,
        expected_utilisation=request.expected_utilisation, starts_on=request.starts_on,
        ends_on=request.ends_on, pool=pool, decision=decision, facts=facts,
    )


FLEET_ACTIONS = ("allocation.nodes_reserved", "allocation.nodes_released", "allocation.flagged")


@kept_across_requests(CapacityRequest, Tenant, get_user_model(), Pool, Allocation, Cluster,
                      freeze=pickle.dumps, thaw=pickle.loads)
def request_on_page(pk: int) -> CapacityRequest | None:
    """A request with what its pages show of it (tenant, requester, decider, pool, its
    allocation with pool and cluster), kept until any of those tables is written; None if
    there is no such request. Scoping to the reader's tenants is the caller's."""
    return (CapacityRequest.objects.select_related(
        "tenant", "requester", "decided_by", "pool", "allocation__pool__cluster")
        .filter(pk=pk).first())


def request_events(request: CapacityRequest, *, show_fleet: bool = True
                   ) -> tuple[TimelineEvent, ...]:
    """The request's timeline: its own audit events and its allocation's, in order.

    Without show_fleet, events that name nodes are left out (tenants see capacity, not
    hosts)."""
    return _timeline(request.pk, request.allocation_id, show_fleet)


@dataclass(frozen=True)
class TimelineEvent:
    """What the timeline and the trace read of an audit row (the actor's name is kept on
    the row)."""

    at: dt.datetime
    actor_name: str
    subject_type: str
    action: str
    from_state: str
    to_state: str
    reason: str


_TIMELINE_FIELDS = tuple(f.name for f in dataclasses.fields(TimelineEvent))


@kept_across_requests(AuditEvent)
def _timeline(request_pk: int, allocation_id: int | None, show_fleet: bool
              ) -> tuple[TimelineEvent, ...]:
    q = Q(subject_type="capacityrequest", subject_id=request_pk)
    if allocation_id:
        q |= Q(subject_type="allocation", subject_id=allocation_id)
    events = AuditEvent.objects.filter(q).order_by("at", "id")
    if not show_fleet:
        events = events.exclude(action__in=FLEET_ACTIONS)
    return tuple(TimelineEvent(*row) for row in events.values_list(*_TIMELINE_FIELDS))


@dataclass(frozen=True)
class AllocationPanel:
    """What an allocation's panel shows beyond its own row: the nodes reserved for it, its
    resizes in place, and its trace."""

    nodes: tuple[str, ...]
    resizes: tuple[tuple[dt.datetime, str], ...]  # (at, reason), oldest first
    trace: tuple[str, int] | None  # (trace id, spans)


@kept_across_requests(Allocation.nodes.through, GpuNode, AllocationResize, AllocationTrace)
def allocation_panel(allocation_id: int) -> AllocationPanel:
    """The panel's extras of one allocation, kept across reading requests (the panel polls
    while provisioning runs) until a reservation, a node, a resize or its trace is written."""
    trace = AllocationTrace.objects.filter(allocation_id=allocation_id).values_list(
        "trace_id", "spans").first()
    return AllocationPanel(
        nodes=tuple(GpuNode.objects.filter(allocations=allocation_id).order_by("name")
                    .values_list("name", flat=True)),
        resizes=tuple(AllocationResize.objects.filter(allocation_id=allocation_id)
                      .values_list("at", "reason")),
        trace=tuple(trace) if trace else None)


@dataclass(frozen=True)
class RecentRequest:
    """One row of the overview's recent requests."""

    pk: int
    title: str
    tenant_name: str
    route_label: str
    status: str
    status_label: str


@kept_across_requests(CapacityRequest, Tenant)
def recent_requests(scope: tuple[int, ...] | None, count: int = 6) -> tuple[RecentRequest, ...]:
    """The newest requests among the scope's tenants (tenants.access.tenant_scope), kept
    across reading requests until a request or a tenant is written."""
    found = CapacityRequest.objects.all() if scope is None else (
        CapacityRequest.objects.filter(tenant__in=scope))
    return tuple(
        RecentRequest(r.pk, r.title, r.tenant.name, r.get_route_display(), r.status,
                      r.get_status_display())
        for r in found.select_related("tenant").only(
            "pk", "title", "route", "status", "created_at", "tenant__name")[:count])


@dataclass(frozen=True)
class EndingSoon:
    """An allocation about to end: the notice its tenant needs to renew in time."""

    tenant_name: str
    namespace: str
    ends_at: dt.datetime | None
    request_pk: int | None


@kept_across_requests(Allocation, Tenant, CapacityRequest)
def ending_soon(scope: tuple[int, ...] | None) -> tuple[EndingSoon, ...]:
    """The scope's expiring allocations, with the request to renew, kept across reading
    requests until an allocation, a tenant or a request is written."""
    found = Allocation.objects.filter(status=Allocation.Status.EXPIRING)
    if scope is not None:
        found = found.filter(tenant__in=scope)
    return tuple(EndingSoon(*row) for row in found.order_by("ends_at", "pk").values_list(
        "tenant__name", "namespace", "ends_at", "request__pk"))


def why_not_yet(req, plan) -> str:
    """For a request still waiting for capacity that fits later: when, in words (an
    estimate from allocations' ends); else "". A request that holds capacity already (an
    allocation, or the one it renews) or is no longer wanted is not told "not yet"."""
    if (req.allocation_id or req.renews_id or req.status not in WAITING_STATES
            or plan is None or plan.fit.value != "fits_later" or plan.pool.pool_id is None):
        return ""
    when = earliest_free(needed=plan.held_devices, free_now=plan.pool.free_devices,
                         endings=pool_endings(plan.pool.pool_id))
    if when is None:
        return ("Not running yet: the allocations holding this pool are open-ended or end too "
                "late to free enough; it waits for a release, a larger pool, or a route "
                "override.")
    return (f"Not running yet: enough capacity frees up on {when:%Y-%m-%d} when promised "
            "allocations end (an estimate: earlier if one is retired sooner).")


@dataclass(frozen=True)
class ApprovalPlan:
    """Everything approval would do for a request, decided once: the review page previews
    exactly this, and `request_approve` applies exactly this."""

    decision: RouteDecision
    plan: RequestPlan | None
    pool: Pool | None
    namespace: str = ""
    whole_devices: int = 0
    nodes: tuple[str, ...] = ()  # a dedicated block's nodes

    @property
    def ok(self) -> bool:
        return self.decision.ok and self.plan is not None and not self.plan.errors

    def spec(self, tenant, *, allocation_id: int = 0) -> AllocationSpec:
        return spec_for(
            allocation_id=allocation_id, tenant=tenant, pool=self.pool, namespace=self.namespace,
            route=self.decision.route.value, whole_devices=self.whole_devices,
            mig_profile=self.decision.mig_profile, mig_count=self.decision.mig_count,
            nodes=tuple(sorted(self.nodes or ())))


def request_decision(request: CapacityRequest) -> RouteDecision:
    """The matrix's route for a request, as the requester answered."""
    return route_request(answers_for(request.answers(), request.gpu_model))


def decided_route(request: CapacityRequest) -> RouteDecision:
    """The route as decided: the matrix's, or the platform admin's override once approved
    with one (so every page prices the route the allocation really runs on)."""
    decision = request_decision(request)
    if request.route_overridden and request.route and decision.route is not None and \
            request.route != decision.route:
        try:
            return override_decision(decision, Route(request.route), request.override_reason)
        except ValueError:
            return decision
    return decision


def approval_plan(request: CapacityRequest, *, decision: RouteDecision | None = None,
                  pool: Pool | None = None, facts: dict | None = None) -> ApprovalPlan:
    """Route (or take the admin's overridden decision), pick the pool, size, price, fit,
    name the namespace and choose a dedicated block's nodes."""
    decision = decision or decided_route(request)
    if not decision.ok:
        return ApprovalPlan(decision, None, None)
    if pool is None:
        pool = named_pool(request.pool_id, facts)
    pool = pool_for_route(decision, request.gpu_model, pool, facts=facts)
    if pool is None:
        return ApprovalPlan(decision, None, None)
    decision, plan = plan_for_request(request, decision=decision, pool=pool, facts=facts)
    whole = int(plan.held_devices) if decision.route is not Route.MIG_VCLUSTER else 0
    nodes = (free_dedicated_nodes(pool, plan.nodes) if decision.route is Route.DEDICATED_BLOCK
             else ())
    return ApprovalPlan(decision, plan, pool, namespace=namespace_for(request.tenant,
                                                                      f"r{request.pk}"),
                        whole_devices=whole, nodes=nodes)


def approval_decision(request: CapacityRequest, override_route: str = "",
                      why: str = "") -> tuple[RouteDecision, Pool | None]:
    """The decision approval takes, and the pool it would look in first: the matrix's route
    and the pool the request names; or, overridden to another route, the matrix's decision
    resized for it (`override_decision`) and that route's own pool. Raises ValueError for a
    route the request cannot take. The review's previews and `request_approve` both ask
    here, so what is previewed under an override is what approval creates under it."""
    decision = request_decision(request)
    if not override_route or override_route == request.route:
        return decision, (Pool.objects.filter(pk=request.pool_id).first()
                          if request.pool_id else None)
    try:
        route = Route(override_route)
    except ValueError:
        raise ValueError(f"{override_route!r} is not a route.") from None
    return override_decision(decision, route, why), None


def override_plan(request: CapacityRequest, override_route: str, *,
                  facts: dict | None = None) -> ApprovalPlan:
    """What approving under `override_route` would do, planned as approval plans it (its
    pool chosen as approval chooses it). Raises ValueError as `approval_decision` does."""
    decision, pool = approval_decision(request, override_route, "preview")
    if not decision.ok:
        return ApprovalPlan(decision, None, None)
    pool = pool_for_route(decision, request.gpu_model, pool, facts=facts)
    if pool is None:
        return ApprovalPlan(decision, None, None)
    return approval_plan(request, decision=decision, pool=pool, facts=facts)


def override_options(request: CapacityRequest, facts: dict | None = None) -> list[dict]:
    """For the review page: what approving under each other route would mean now — its pool,
    size, monthly price and fit, from the same plan approval uses — or why it cannot be.
    So an override is never approved blind. `facts`: facts_of_active_pools, if read already."""
    base = request_decision(request)
    if base.route is None:
        return []
    out, facts = [], facts if facts is not None else facts_of_active_pools()
    for route in Route:
        if route is base.route:
            continue
        row = {"route": route.value, "label": route.label}
        try:
            approval = override_plan(request, route.value, facts=facts)
        except ValueError as exc:
            out.append({**row, "ok": False, "why": str(exc)})
            continue
        if approval.pool is None or approval.plan is None:
            out.append({**row, "ok": False, "why": no_pool_message(route) + "."})
            continue
        plan = approval.plan
        out.append({**row, "ok": plan.ok and plan.fit.value == "fits_now",
                    "pool": approval.pool.name, "held": plan.held_devices,
                    "monthly": money_text(plan.monthly_price), "fit": plan.fit.value,
                    "why": plan.fit_reason if plan.ok else
                    " ".join(m for _, m in plan.errors)})
    return out


def offered_mig_profiles() -> list:
    """The fractional MIG profiles the active MIG pools offer (every fractional profile
    while none is configured): what the form and the API accept alike."""
    offered = {name for pool in active_pools() if pool.route == Route.MIG_VCLUSTER
               for name in (pool.mig_profiles or [])}
    return [p for p in ALL_MIG_PROFILES.values()
            if p.is_fraction and (not offered or p.name in offered)]


# --- The admins' review queue ---------------------------------------------------------------
# A request's place in the queue is when it entered its status: `updated_at`, which nothing
# moves while a request waits (request_submit sets it; the next write is the decision). The
# id breaks ties, so the order is total and "the next one" is well defined.
REVIEW_PAGE_SIZE = 25


@dataclass(frozen=True)
class ReviewQueueFilter:
    """What the admin narrowed the queue to (built by intake.forms.ReviewQueueFilterForm)."""

    status: str = Status.SUBMITTED.value  # "" for every status
    route: str = ""
    tenant_id: int | None = None
    older_than_days: int | None = None  # waiting at least this many days
    newest_first: bool = False

    def waiting(self) -> ReviewQueueFilter:
        """The same queue, only what still waits for a decision."""
        return replace(self, status=Status.SUBMITTED.value)


def _queue_order(f: ReviewQueueFilter) -> tuple[str, str]:
    return ("-updated_at", "-id") if f.newest_first else ("updated_at", "id")


def queued_requests(f: ReviewQueueFilter, *, now: dt.datetime) -> QuerySet[CapacityRequest]:
    """The filtered queue in its order; one query per page (tenant and pool joined).

    An index on (status, updated_at, id) serves the default filter and both orders."""
    qs = CapacityRequest.objects.select_related("tenant", "pool")
    if f.status:
        qs = qs.filter(status=f.status)
    if f.route:
        qs = qs.filter(route=f.route)
    if f.tenant_id is not None:
        qs = qs.filter(tenant_id=f.tenant_id)
    if f.older_than_days:
        qs = qs.filter(updated_at__lte=now - dt.timedelta(days=f.older_than_days))
    return qs.order_by(*_queue_order(f))


@dataclass(frozen=True)
class QueuePlace:
    """A request's place in the review queue: all "next" reads of it (a link, "came round")."""

    pk: int
    updated_at: dt.datetime


def next_in_queue(f: ReviewQueueFilter, *, after_pk: int, after_at: dt.datetime,
                  now: dt.datetime) -> QueuePlace | None:
    """The next request still waiting in the same filtered queue, after the one at
    (after_at, after_pk) in the queue's order; past the end, the first one still waiting
    (requests skipped earlier come round again). None when nothing else waits.

    Pass the position the request had *before* it was decided: a decision moves
    `updated_at`. Kept across reading requests until a request is written, but where the
    filter's age cut-off moves with the clock."""
    if f.older_than_days:
        return _next_waiting.uncached(f, after_pk, after_at, now)
    return _next_waiting(f, after_pk, after_at, None)


@kept_across_requests(CapacityRequest)
def _next_waiting(f: ReviewQueueFilter, after_pk: int, after_at: dt.datetime,
                  now: dt.datetime | None) -> QueuePlace | None:
    waiting = (queued_requests(f.waiting(), now=now).exclude(pk=after_pk)
               .select_related(None).values_list("pk", "updated_at"))
    if f.newest_first:
        later = Q(updated_at__lt=after_at) | Q(updated_at=after_at, id__lt=after_pk)
    else:
        later = Q(updated_at__gt=after_at) | Q(updated_at=after_at, id__gt=after_pk)
    found = waiting.filter(later).first() or waiting.first()
    return QueuePlace(*found) if found else None


def comes_round(f: ReviewQueueFilter, current, following) -> bool:
    """Whether `following` (next_in_queue after `current`) lies before it in the queue's
    order: "next" came round past the end to the queue's start. Positions as in the queue,
    (updated_at, id)."""
    if following is None:
        return False
    there, here = (following.updated_at, following.pk), (current.updated_at, current.pk)
    return there > here if f.newest_first else there < here


# What a row of the queue shows (intake.renderers.review_rows, size_label included): a
# request has 28 columns, its tenant and requester more, and building 25 whole instances
# was most of the queue page's Python.
QUEUE_ROW_FIELDS = ("title", "tenant_id", "tenant__name", "device_fill", "route",
                    "mig_profile", "memory_gb", "replicas", "whole_devices",
                    "isolation_origin", "pool_id", "pool__name", "status", "updated_at")


def queue_page(f: ReviewQueueFilter, number, per_page: int, *, now: dt.datetime):
    """A page of the filtered queue: counted from the tally kept at write time when only
    status and tenant narrow it, else by the database. Its rows are kept across reading
    requests, but under an age filter (its cut-off moves with the clock)."""
    if f.older_than_days:
        return Paginator(queued_requests(f, now=now).only(*QUEUE_ROW_FIELDS),
                         per_page).get_page(number)
    count = _queue_count(f) if f.route else counted_in_tally(f.status, f.tenant_id)
    return Paginator(Window(count, lambda start, stop: _queue_rows(f, start, stop)),
                     per_page).get_page(number)


@kept_across_requests(CapacityRequest, Tenant, Pool, freeze=pickle.dumps, thaw=pickle.loads)
def _queue_rows(f: ReviewQueueFilter, start: int, stop: int) -> list[CapacityRequest]:
    # No age filter here (queue_page): the clock does not change these rows.
    return list(queued_requests(f, now=timezone.now()).only(*QUEUE_ROW_FIELDS)[start:stop])


@kept_across_requests(CapacityRequest)
def _queue_count(f: ReviewQueueFilter) -> int:
    return queued_requests(f, now=timezone.now()).count()


@kept_across_requests(CapacityRequest, Tenant, get_user_model(), Pool)
def request_list_rows(scope: tuple[int, ...] | None, status: str, tenant_slug: str,
                      start: int, stop: int) -> tuple[SafeString, ...]:
    """Rows start..stop of the requests list (newest first) of the tenants of `scope`
    (None: all), with `status` and of the tenant `tenant_slug` (empty: any), each row's
    markup (intake.renderers.request_rows); kept across reading requests until a write to
    what they show."""
    qs = CapacityRequest.objects.select_related("tenant", "requester", "pool")
    if scope is not None:
        qs = qs.filter(tenant_id__in=scope)
    if status:
        qs = qs.filter(status=status)
    if tenant_slug:
        qs = qs.filter(tenant__slug=tenant_slug)
    return tuple(request_rows([r]) for r in qs[start:stop])
