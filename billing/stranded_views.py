"""Stranded capacity's pages: the findings a person may see (their tenant's, or every one for
admins and finance), one finding with its evidence and the lead's answer, the fleet board."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from fleet.models import Pool
from tenants.access import roles_for
from tenants.models import Tenant

from .forms import StrandedAnswerForm, StrandedPolicyForm
from .models import StrandedFinding
from .stranded_board import fleet_board, visible_findings
from .stranded_services import (
    StrandedError,
    finding_accept,
    finding_decline,
    in_place_size,
    policy_for,
    policy_set,
)

F = StrandedFinding
STATUSES = {s for s, _ in StrandedFinding.Status.choices}


@login_required
def stranded(request):
    rows = visible_findings(request.user)
    status = request.GET.get("status", "open")
    if status in STATUSES:
        rows = rows.filter(status=status)
    else:
        status = ""
    page = Paginator(rows.order_by("-cost_per_day", "-found_at", "pk"), 50).get_page(
        request.GET.get("page"))
    return _list_page(request, page, status)


def _list_page(request, page, status: str, forms: dict | None = None, code: int = 200):
    roles = roles_for(request.user)
    led = Tenant.objects.filter(pk__in=roles.lead_of).order_by("name")
    policies = []
    for tenant in led:
        policy = policy_for(tenant)
        form = (forms or {}).get(tenant.slug) or StrandedPolicyForm(initial={
            "when_unanswered": policy.when_unanswered, "grace_days": policy.grace_days})
        policies.append({"tenant": tenant, "policy": policy, "form": form})
    return render(request, "billing/stranded.html", {
        "page": page, "status": status, "statuses": StrandedFinding.Status.choices,
        "sees_all": roles.sees_all_tenants, "policies": policies}, status=code)


@login_required
@require_POST
def stranded_policy(request, slug: str):
    """A lead sets what happens to its tenant's findings nobody answers in time."""
    roles = roles_for(request.user)
    tenant = get_object_or_404(Tenant.objects.filter(pk__in=roles.tenant_ids)
                               if not roles.sees_all_tenants else Tenant.objects, slug=slug)
    if not roles.can_file_for(tenant.pk):
        raise PermissionDenied("Only a team lead of this tenant sets its policy.")
    form = StrandedPolicyForm(request.POST)
    if form.is_valid():
        try:
            policy_set(tenant=tenant, by=request.user, **form.cleaned_data)
            messages.success(request, f"Policy for {tenant.name} saved.")
            return redirect("billing:stranded")
        except StrandedError as exc:
            for name, message in exc.fields.items():
                form.add_error(name, message)
    page = Paginator(visible_findings(request.user).filter(status="open"), 50).get_page(1)
    return _list_page(request, page, "open", {tenant.slug: form}, code=400)


def _finding(request, finding_id: int) -> StrandedFinding:
    """The finding if the user may see it; another tenant's is 404 (as billing's pages)."""
    return get_object_or_404(visible_findings(request.user), pk=finding_id)


def convert_query(row: StrandedFinding) -> str:
    """A new request pre-filled from a finding that proposes MIG slices (a move to MIG, or
    a smaller profile than the hold's): the new request form's answers as a query string.
    The lead reviews and files it; nothing is filed for them."""
    data = row.proposal_data or {}
    profile, count = data.get("mig_profile_after"), data.get("mig_count_after")
    if not profile or not count or (row.action == F.Action.SHRINK
                                    and in_place_size(row) is not None):
        return ""
    pool = Pool.objects.filter(slug=data.get("pool_after") or row.pool.slug).first()
    return urlencode({
        "tenant": row.tenant_id, "title": f"MIG slices for {row.allocation.namespace}",
        "isolation_origin": "habitual", "device_fill": "small", "mig_profile": profile,
        "replicas": count, "gpu_model": pool.gpu_model if pool else "",
        "justification": f"From stranded finding #{row.pk}: {row.reason} Proposed: "
                         f"{row.proposal_sentence}"})


def _detail(request, row: StrandedFinding, form: StrandedAnswerForm | None = None,
            status: int = 200):
    can_answer = row.is_open and roles_for(request.user).can_file_for(row.tenant_id)
    return render(request, "billing/stranded_finding.html", {
        "f": row, "can_answer": can_answer, "form": form or StrandedAnswerForm(),
        "evidence": row.evidence, "in_place": in_place_size(row) is not None,
        "convert": convert_query(row) if can_answer else ""}, status=status)


@login_required
def stranded_finding(request, finding_id: int):
    return _detail(request, _finding(request, finding_id))


@login_required
@require_POST
def stranded_answer(request, finding_id: int):
    """Accept or keep (with a reason), in one step: the tenant's leads only."""
    row = _finding(request, finding_id)
    if not roles_for(request.user).can_file_for(row.tenant_id):
        raise PermissionDenied("Only a team lead of this tenant answers its findings.")
    form = StrandedAnswerForm(request.POST)
    if not form.is_valid():
        return _detail(request, row, form, status=400)
    try:
        if form.cleaned_data["decision"] == "accept":
            row = finding_accept(finding=row, by=request.user,
                                 reason=form.cleaned_data["reason"])
            messages.success(request, f"Accepted. {row.outcome}")
        else:
            finding_decline(finding=row, by=request.user, reason=form.cleaned_data["reason"])
            messages.success(request, "Kept, with your reason in the audit trail.")
    except StrandedError as exc:
        form.add_error(None, exc.message)
        return _detail(request, row, form, status=400)
    return redirect("billing:stranded_finding", finding_id=row.pk)


@login_required
def stranded_board(request):
    """The fleet board: stranded device-hours per pool and day, what was given back."""
    roles = roles_for(request.user)
    if not (roles.platform_admin or roles.finance):
        raise PermissionDenied("The fleet board is for platform admins and finance.")
    return render(request, "billing/stranded_board.html", {
        "pools": fleet_board(timezone.now())})
