"""Thin views over the intake services. Every view checks role and tenant first."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db import transaction
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from fleet.allocations.lifecycle import IN_PROGRESS
from fleet.allocations.resize import allocation_resize as resize
from fleet.allocations.resizing import MAX_SIZE
from fleet.allocations.services import allocation_release as release
from fleet.allocations.services import allocation_retry as retry
from fleet.domain import FleetError
from tenants.access import (
    require_holdings_changer,
    require_lead_of,
    require_platform_admin,
    roles_for,
    tenant_scope,
)
from tenants.markup import html_join
from tenants.models import Tenant
from tenants.paging import Window
from tenants.widgets import tenant_filter_html, tenants_of

from . import services
from .domain import (
    FILL_LABELS,
    ISOLATION_LABELS,
    Fill,
    Isolation,
    Status,
    matrix_table,
    submit_blocked,
)
from .forms import CapacityRequestForm, DecisionForm, ReviewQueueFilterForm
from .models import STATUS_CHOICES, CapacityRequest
from .notes import tenant_notes
from .preview import request_objects
from .renderers import review_rows
from .selectors import (
    REVIEW_PAGE_SIZE,
    AllocationPanel,
    ReviewQueueFilter,
    active_pools_facts,
    allocation_panel,
    comes_round,
    facts_of_active_pools,
    next_in_queue,
    override_options,
    plan_answers,
    plan_for_request,
    queue_page,
    request_events,
    request_list_rows,
    request_on_page,
    small_cell_comparison,
    why_not_yet,
)
from .tally import request_counts


def get_request_for(user, pk: int) -> CapacityRequest:
    """The request if the user may see it, else 404 (other tenants' requests do not exist)."""
    obj = request_on_page(pk)
    scope = tenant_scope(user)
    if obj is None or (scope is not None and obj.tenant_id not in scope):
        raise Http404("No such request.")
    return obj


def _lead_tenants(user):
    roles = roles_for(user)
    return Tenant.objects.filter(id__in=roles.lead_of)


def matrix_context(cell) -> dict:
    return matrix_table(cell)


def _preview_context(form: CapacityRequestForm) -> dict:
    form.is_valid()  # fills cleaned_data where it can; errors are shown by the form itself
    data = getattr(form, "cleaned_data", {})
    answers = form.answers()
    options = {"gpu_model": data.get("gpu_model") or "",
               "expected_utilisation": data.get("expected_utilisation") or 0,
               "starts_on": data.get("starts_on"), "ends_on": data.get("ends_on")}
    decision, plan = plan_answers(answers, **options)
    return {"decision": decision, "plan": plan,
            "comparison": small_cell_comparison(answers, decision, plan, **options),
            "submit_blocked": submit_blocked(decision, plan, options["gpu_model"]),
            **matrix_context(decision.cell)}


@login_required
def request_list(request):
    roles = roles_for(request.user)
    status = request.GET.get("status", "")
    if status not in Status._value2member_map_:
        status = ""  # an unknown status filters nothing
    tenant = request.GET.get("tenant", "")
    counts = request_counts(request.user, tenant_slug=tenant)
    scope = tenant_scope(request.user)
    window = Window(counts.get(status, 0) if status else sum(counts.values()),
                    lambda start, stop: request_list_rows(scope, status, tenant, start, stop))
    page = Paginator(window, 25).get_page(request.GET.get("page"))
    template = "intake/request_list.html"
    if request.htmx:
        template += "#rows"
    return render(request, template, {
        "page": page, "rows": html_join(page.object_list), "status": status,
        "tenant": tenant, "statuses": STATUS_CHOICES,
        "counts": counts, "can_file": roles.is_lead,
        "tenant_filter": tenant_filter_html(tenant_scope(request.user), tenant),
    })


@login_required
@require_http_methods(["GET", "POST"])
def request_new(request):
    if not roles_for(request.user).lead_of:
        raise PermissionDenied("Only team leads file capacity requests.")
    tenants = _lead_tenants(request.user)
    offered = tenants_of(tuple(sorted(roles_for(request.user).lead_of)))  # kept: no query
    initial = _prefill(request, offered)
    form = CapacityRequestForm(request.POST or None, tenants=tenants, offered=offered,
                               initial=initial)
    # A pre-filled form (a finding's "convert") previews its route at once; its answers
    # are still only checked when the lead files them.
    preview = form if request.method != "GET" or len(initial) == 1 else CapacityRequestForm(
        {k: getattr(v, "pk", v) for k, v in initial.items()}, tenants=tenants)
    if request.method == "POST" and form.is_valid():
        try:
            # One unit: a submit that fails leaves no draft behind (one more per retry).
            with transaction.atomic():
                created = services.request_create(tenant=form.cleaned_data["tenant"],
                                                  by=request.user,
                                                  fields=form.service_fields())
                if request.POST.get("intent") == "submit":
                    services.request_submit(request=created, by=request.user)
            if request.POST.get("intent") == "submit":
                messages.success(request, f"Request #{created.pk} submitted for review.")
            else:
                messages.success(request, f"Draft #{created.pk} saved.")
            return redirect("intake:detail", pk=created.pk)
        except services.IntakeError as exc:
            _attach(form, exc)
    status = 200
    return render(request, "intake/request_form.html",
                  {"form": form, "editing": None, **_preview_context(preview)}, status=status)


# Answers a link may pre-fill (a stranded finding's "convert"): shown in the form, checked
# only when the lead files it, like anything typed.
PREFILLED = ("title", "workload_kind", "isolation_origin", "device_fill", "whole_devices",
             "replicas", "mig_profile", "memory_gb", "gpu_model", "justification")


def _prefill(request, offered: list) -> dict:
    """The form's first answers: the first of the lead's tenants (`offered`), or the one a
    link names among them, and a link's pre-filled answers."""
    initial = {"tenant": offered[0] if offered else None}
    if request.method != "GET":
        return initial
    initial |= {name: request.GET[name][:2000] for name in PREFILLED if name in request.GET}
    tenant = request.GET.get("tenant", "")
    if tenant.isascii() and tenant.isdigit() and len(tenant) <= 18:
        initial["tenant"] = next((t for t in offered if t.pk == int(tenant)),
                                 initial["tenant"])
    return initial


def _require_lead_of(user, obj: CapacityRequest) -> None:
    require_lead_of(user, obj.tenant_id)


def _attach(form, exc: services.IntakeError) -> None:
    for name, message in exc.fields.items():
        if name in form.fields:
            form.add_error(name, message)
    form.add_error(None, exc.message)


@login_required
@require_http_methods(["GET", "POST"])
def request_edit(request, pk: int):
    obj = get_request_for(request.user, pk)
    if not roles_for(request.user).can_file_for(obj.tenant_id):
        raise PermissionDenied("Only a team lead of this tenant may edit its requests.")
    if not obj.is_editable:
        messages.error(request, "Only drafts and requests with changes requested can be edited.")
        return redirect("intake:detail", pk=obj.pk)
    form = CapacityRequestForm(request.POST or None, instance=obj,
                               tenants=_lead_tenants(request.user))
    if request.method == "POST" and form.is_valid():
        try:
            services.request_update(request=obj, by=request.user, fields=form.service_fields())
            if request.POST.get("intent") == "submit":
                services.request_submit(request=obj, by=request.user)
                messages.success(request, f"Request #{obj.pk} submitted for review.")
            else:
                messages.success(request, "Changes saved.")
            return redirect("intake:detail", pk=obj.pk)
        except services.IntakeError as exc:
            _attach(form, exc)
    # An unbound form has no answers to route: preview what the request holds now.
    shown = form if form.is_bound else CapacityRequestForm(
        form.saved_answers(), instance=obj, tenants=_lead_tenants(request.user))
    return render(request, "intake/request_form.html",
                  {"form": form, "editing": obj, **_preview_context(shown)})


@login_required
@require_POST
def request_preview(request):
    """The live preview: route, reason, devices, price and fit for a half-filled form."""
    if not roles_for(request.user).is_lead and not roles_for(request.user).platform_admin:
        raise PermissionDenied("Only team leads and admins preview requests.")
    # Only tenants the caller may file for (admins: any, for the review): another tenant's
    # slug is refused exactly like one that does not exist.
    roles = roles_for(request.user)
    tenants = Tenant.objects.all() if roles.platform_admin else \
        Tenant.objects.filter(pk__in=roles.lead_of)
    form = CapacityRequestForm(request.POST, tenants=tenants)
    return render(request, "intake/request_form.html#preview", _preview_context(form))


@login_required
def request_detail(request, pk: int):
    obj = get_request_for(request.user, pk)
    roles = roles_for(request.user)
    # The active pools' facts as every reading page keeps them (intake.selectors).
    decision, plan = plan_for_request(obj, facts=facts_of_active_pools())
    return render(request, "intake/request_detail.html", {
        "req": obj, "decision": decision, "plan": plan, "panel": _panel(obj),
        "why_not_yet": why_not_yet(obj, plan),
        "events": request_events(obj, show_fleet=roles.platform_admin),
        "can_edit": obj.is_editable and roles.can_file_for(obj.tenant_id),
        "polling": obj.allocation is not None and obj.allocation.status in IN_PROGRESS,
        "isolation_label": ISOLATION_LABELS.get(Isolation(obj.isolation_origin)),
        "fill_label": FILL_LABELS.get(Fill(obj.device_fill)),
        **matrix_context(decision.cell),
    })


@login_required
@require_POST
def request_withdraw(request, pk: int):
    """The lead takes a filed request out of review."""
    obj = get_request_for(request.user, pk)
    _require_lead_of(request.user, obj)
    try:
        services.request_withdraw(request=obj, by=request.user,
                                  reason=request.POST.get("reason", ""))
        messages.success(request, f"Request #{obj.pk} withdrawn; nothing was promised.")
    except services.IntakeError as exc:
        messages.error(request, exc.message)
    return redirect("intake:detail", pk=obj.pk)


@login_required
@require_POST
def request_delete(request, pk: int):
    """The lead deletes a draft."""
    obj = get_request_for(request.user, pk)
    _require_lead_of(request.user, obj)
    try:
        services.request_delete_draft(request=obj, by=request.user)
    except services.IntakeError as exc:
        messages.error(request, exc.message)
        return redirect("intake:detail", pk=obj.pk)
    messages.success(request, f"Draft #{pk} deleted.")
    return redirect("intake:list")


@login_required
@require_POST
def allocation_release(request, pk: int):
    """End the request's allocation now: billing stops, its objects are removed."""
    obj = get_request_for(request.user, pk)
    require_holdings_changer(request.user, obj.tenant_id, "release")
    if obj.allocation is None:
        messages.error(request, "This request has no allocation to release.")
        return redirect("intake:detail", pk=obj.pk)
    try:
        alloc = release(allocation=obj.allocation, by=request.user,
                        reason=request.POST.get("reason", ""))
        messages.success(request, f"{alloc.namespace} released: billing stopped "
                                  f"{alloc.ends_at:%Y-%m-%d %H:%M} UTC.")
    except FleetError as exc:
        messages.error(request, exc.message)
    return redirect("intake:detail", pk=obj.pk)


@login_required
@require_POST
def allocation_resize(request, pk: int):
    """A new size for the request's allocation, in place (the fleet's resize decides)."""
    obj = get_request_for(request.user, pk)
    require_holdings_changer(request.user, obj.tenant_id, "resize")
    if obj.allocation is None:
        messages.error(request, "This request has no allocation to resize.")
        return redirect("intake:detail", pk=obj.pk)
    raw = request.POST.get("size", "").strip()
    try:
        # A few digits at most: int() of thousands is refused by Python itself.
        size = int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 6 else None
        if size is None:
            raise FleetError(f"The new size is a whole number of {obj.allocation.size_unit}, "
                             f"from 1 to {MAX_SIZE:,}.")
        alloc = resize(allocation=obj.allocation, size=size, by=request.user,
                       reason=request.POST.get("reason", ""))
        messages.success(request, f"{alloc.namespace} now holds {alloc.size} "
                                  f"{alloc.size_unit}; billing follows from now.")
    except FleetError as exc:
        messages.error(request, exc.message)
    return redirect("intake:detail", pk=obj.pk)


@login_required
@require_POST
def request_submit(request, pk: int):
    obj = get_request_for(request.user, pk)
    _require_lead_of(request.user, obj)
    try:
        services.request_submit(request=obj, by=request.user)
        messages.success(request, f"Request #{obj.pk} submitted for review.")
    except services.IntakeError as exc:
        messages.error(request, exc.message)
    return redirect("intake:detail", pk=obj.pk)


def _with_query(url: str, query: str) -> str:
    return f"{url}?{query}" if query else url


def _queue_filter(request) -> tuple[ReviewQueueFilterForm, ReviewQueueFilter, str]:
    """The queue filter the query string carries, through the one form: the form, the
    filter and its canonical query string (the whole queue when the form refuses it)."""
    form = ReviewQueueFilterForm(request.GET)
    if form.is_valid():
        return form, form.filters(), form.query_string()
    return form, ReviewQueueFilter(), ""


@login_required
def review_queue(request):
    require_platform_admin(request.user)
    form, queue, query = _queue_filter(request)
    context = {"filters": form, "queue_qs": query, "page": None}
    if not form.errors:
        # One count of the matching rows and one query for the page, whatever the page size.
        page = queue_page(queue, form.cleaned_data["page"], REVIEW_PAGE_SIZE,
                          now=timezone.now())
        here = reverse("intake:review_queue")
        context.update(page=page, rows=review_rows(page, queue_qs=query, notes=tenant_notes(
            {r.tenant_id for r in page})),
                       newest_first=queue.newest_first, pages={
            "previous": page.has_previous() and _with_query(
                here, form.query_string(page=page.previous_page_number())),
            "next": page.has_next() and _with_query(
                here, form.query_string(page=page.next_page_number()))})
    template = "intake/review_queue.html"
    if request.htmx:
        template += "#rows"
    else:
        context["pools"] = active_pools_facts()
    # A bad value is the client's error (400), said on the page; htmx swaps only a success,
    # so its request gets the message with a 200.
    status = 400 if form.errors and not request.htmx else 200
    return render(request, template, context, status=status)


def _after_decision(request, obj: CapacityRequest, action: str, queue: ReviewQueueFilter,
                    query: str, was_at) -> HttpResponseRedirect:
    """Next in queue: the next request waiting in the same filtered queue, or the queue."""
    following = next_in_queue(queue, after_pk=obj.pk, after_at=was_at, now=timezone.now())
    messages.success(request, render_to_string("intake/decision_recorded.html", {
        "url": _with_query(reverse("intake:review_detail", args=[obj.pk]), query),
        "pk": obj.pk, "action": action.replace("_", " "),
        "next_pk": following.pk if following else None}))
    if following is None:
        return redirect(_with_query(reverse("intake:review_queue"), query))
    return redirect(_with_query(reverse("intake:review_detail", args=[following.pk]), query))


@login_required
@require_http_methods(["GET", "POST"])
def review_detail(request, pk: int):
    require_platform_admin(request.user)
    obj = get_request_for(request.user, pk)
    queue_form, queue, query = _queue_filter(request)
    form = DecisionForm(request.POST or None,
                        objects_url=reverse("intake:manifests", args=[obj.pk]))
    if request.method == "POST" and form.is_valid():
        action = form.cleaned_data["action"]
        was_at = obj.updated_at  # its place in the queue: the decision moves updated_at
        try:
            if action == "approve":
                services.request_approve(
                    request=obj, by=request.user, reason=form.cleaned_data["reason"],
                    override_route=form.cleaned_data["override_route"],
                    override_reason=form.cleaned_data["override_reason"])
            else:
                services.ACTIONS[action](request=obj, by=request.user,
                                         reason=form.cleaned_data["reason"])
        except services.IntakeError as exc:
            _attach(form, exc)
            obj.refresh_from_db()
        else:
            if queue_form.errors:
                messages.warning(request, "The queue filter in the address was not understood; "
                                          "the next request comes from the whole queue.")
            return _after_decision(request, obj, action, queue, query, was_at)
    # The fleet read once for the request's plan and every route an override could take.
    facts = facts_of_active_pools() if obj.status == Status.SUBMITTED else None
    decision, plan = plan_for_request(obj, facts=facts)
    following = next_in_queue(queue, after_pk=obj.pk, after_at=obj.updated_at,
                              now=timezone.now())
    return render(request, "intake/review_detail.html", {
        "req": obj, "decision": decision, "plan": plan, "form": form, "panel": _panel(obj),
        "why_not_yet": why_not_yet(obj, plan),
        "pending": obj.status == Status.SUBMITTED,
        "events": request_events(obj, show_fleet=True),
        "polling": obj.allocation is not None and obj.allocation.status in IN_PROGRESS,
        "queue_qs": query, "queue_errors": queue_form.errors and queue_form.error_list(),
        "queue_url": _with_query(reverse("intake:review_queue"), query),
        "overrides": override_options(obj, facts) if obj.status == Status.SUBMITTED else [],
        "next_req": following,
        # Past the end of the queue, "next" comes round to its start: say so.
        "next_wraps": comes_round(queue, obj, following),
        "next_url": following and _with_query(
            reverse("intake:review_detail", args=[following.pk]), query),
        **matrix_context(decision.cell),
    })


def _panel(obj: CapacityRequest) -> AllocationPanel | None:
    return allocation_panel(obj.allocation_id) if obj.allocation_id else None


def _allocation_context(obj: CapacityRequest) -> dict:
    alloc = obj.allocation
    if alloc is not None:
        alloc.refresh_from_db()
    return {"req": obj, "alloc": alloc, "panel": _panel(obj),
            "polling": alloc is not None and alloc.status in IN_PROGRESS}


@login_required
def request_allocation(request, pk: int):
    """The allocation panel; htmx polls it while provisioning runs."""
    obj = get_request_for(request.user, pk)
    return render(request, "partials/allocation.html", _allocation_context(obj))


@login_required
def request_manifests(request, pk: int):
    """The Kubernetes objects of a request: what approval would create, or what it did."""
    obj = get_request_for(request.user, pk)
    # The review page's route override asks for the objects of the route chosen.
    objects = request_objects(obj, platform_admin=roles_for(request.user).platform_admin,
                              override_route=request.GET.get("override_route", ""))
    template = "intake/manifests.html" + ("#objects" if request.htmx else "")
    return render(request, template, {"req": obj, **objects})


@login_required
@require_POST
def allocation_retry(request, pk: int):
    require_platform_admin(request.user)
    obj = get_object_or_404(CapacityRequest.objects.select_related("allocation"), pk=pk)
    if obj.allocation is None:
        messages.error(request, "This request has no allocation to retry.")
    else:
        try:
            retry(allocation=obj.allocation, by=request.user)
            messages.success(request, "Provisioning queued again.")
        except ValueError as exc:
            messages.error(request, str(exc))
    return redirect("intake:detail", pk=obj.pk)


@login_required
@require_POST
def request_renew(request, pk: int):
    """Start a renewal: a draft with the same answers and the window moved on."""
    obj = get_request_for(request.user, pk)
    _require_lead_of(request.user, obj)
    try:
        renewal = services.request_create_renewal(request=obj, by=request.user)
    except services.IntakeError as exc:
        messages.error(request, exc.message)
        return redirect("intake:detail", pk=obj.pk)
    messages.info(request, "Renewal drafted: check the dates, then submit it for review.")
    return redirect("intake:edit", pk=renewal.pk)
