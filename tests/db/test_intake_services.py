"""Lifecycle services on PostgreSQL: transitions, audit rows and the approval races."""

from decimal import Decimal

import pytest
from django.db import DatabaseError, connection, transaction

from fleet.models import Allocation, Route
from intake import services
from intake.models import CapacityRequest
from tenants.audit import audit_for
from tenants.models import AuditEvent
from tests.factories import make_request, request_fields
from tests.harness.concurrency import race

pytestmark = pytest.mark.django_db


def actions(obj):
    return [e.action for e in audit_for(obj)]


def test_the_database_is_postgresql():
    assert connection.vendor == "postgresql"


def test_create_writes_a_draft_and_an_audit_row(tenant, lead, pools):
    req = make_request(tenant, lead)
    assert req.status == "draft"
    assert actions(req) == ["request.created"]
    event = audit_for(req).get()
    assert event.actor == lead and event.tenant == tenant and event.to_state == "draft"


def test_only_a_lead_of_the_tenant_may_file(tenant, other_lead, member, admin_user, pools):
    for user in (other_lead, member, admin_user):
        with pytest.raises(services.IntakeError, match="team lead"):
            services.request_create(tenant=tenant, by=user, fields=request_fields())
    assert not CapacityRequest.objects.exists()


def test_submit_routes_prices_and_audits(tenant, lead, pools):
    req = make_request(tenant, lead, submit=True)
    assert req.status == "submitted"
    assert req.route == Route.SHARED_POOL
    assert req.pool == pools[Route.SHARED_POOL]
    assert req.route_reason.startswith("Shared pool")
    event = audit_for(req).last()
    assert (event.action, event.from_state, event.to_state) == (
        "request.submitted", "draft", "submitted")
    assert "Shared pool" in event.reason and event.data["monthly_price"] == "7300.00"


def test_submit_refuses_missing_evidence_and_keeps_the_draft(tenant, lead, pools):
    # The service refuses such a draft as the form and the API do (one validation)...
    with pytest.raises(services.IntakeError) as refused:
        make_request(tenant, lead, isolation_origin="contractual", isolation_reference="")
    assert "isolation_reference" in refused.value.fields
    assert not CapacityRequest.objects.exists()
    # ...and a draft saved before that rule (evidence removed under it) is stopped at submit.
    req = make_request(tenant, lead, isolation_origin="contractual", isolation_reference="MSA-77")
    CapacityRequest.objects.filter(pk=req.pk).update(isolation_reference="")
    with pytest.raises(services.IntakeError) as err:
        services.request_submit(request=req, by=lead)
    assert "isolation_reference" in err.value.fields
    req.refresh_from_db()
    assert req.status == "draft" and actions(req) == ["request.created"]


def test_submit_refuses_what_can_never_fit(tenant, lead, pools):
    req = make_request(tenant, lead, whole_devices=40)
    with pytest.raises(services.IntakeError, match="Can never fit"):
        services.request_submit(request=req, by=lead)


def test_approve_creates_an_allocation_and_audits_both(tenant, lead, admin_user, pools):
    req = make_request(tenant, lead, submit=True, whole_devices=4)
    req = services.request_approve(request=req, by=admin_user, reason="Looks right")
    assert req.status == "approved" and req.decided_by == admin_user
    alloc = req.allocation
    assert alloc.device_equivalents == 4 and alloc.pool == pools[Route.SHARED_POOL]
    assert alloc.namespace == f"acme-r{req.pk}"
    assert actions(req)[-1] == "request.approved"
    assert [e.action for e in audit_for(alloc)] == ["allocation.created"]


def test_dedicated_block_allocation_holds_whole_nodes(tenant, lead, admin_user, pools):
    req = make_request(tenant, lead, submit=True, whole_devices=3,
                       isolation_origin="contractual", isolation_reference="MSA-77")
    req = services.request_approve(request=req, by=admin_user, reason="ok")
    assert req.route == Route.DEDICATED_BLOCK
    assert req.allocation.device_equivalents == 8


def test_mig_allocation_counts_slice_shares(tenant, lead, admin_user, pools):
    req = make_request(tenant, lead, submit=True, device_fill="small", replicas=7,
                       mig_profile="1g.10gb", whole_devices=0)
    req = services.request_approve(request=req, by=admin_user, reason="ok")
    alloc = req.allocation
    assert (alloc.mig_profile, alloc.mig_count, alloc.device_equivalents) == (
        "1g.10gb", 7, Decimal("1.0000"))


@pytest.mark.parametrize(("action", "status"), [
    ("deny", "denied"), ("request_changes", "changes_requested")])
def test_deny_and_request_changes(tenant, lead, admin_user, pools, action, status):
    req = make_request(tenant, lead, submit=True)
    req = services.ACTIONS[action](request=req, by=admin_user, reason="Not like this")
    assert req.status == status and req.decision_reason == "Not like this"
    assert not Allocation.objects.exists()
    event = audit_for(req).last()
    assert (event.from_state, event.to_state, event.reason) == ("submitted", status,
                                                                "Not like this")


def test_changes_requested_can_be_edited_and_resubmitted(tenant, lead, admin_user, pools):
    req = make_request(tenant, lead, submit=True, whole_devices=8)
    services.request_request_changes(request=req, by=admin_user, reason="Fewer devices")
    req = services.request_update(request=req, by=lead,
                                  fields=request_fields(whole_devices=2))
    req = services.request_submit(request=req, by=lead)
    assert req.status == "submitted" and req.whole_devices == 2
    assert actions(req) == ["request.created", "request.submitted", "request.request_changes",
                            "request.edited", "request.submitted"]
    edited = [e for e in audit_for(req) if e.action == "request.edited"][0]
    assert edited.data["changes"]["whole_devices"] == {"from": "8", "to": "2"}
    # The trail says what changed in the form's words, not the model's field names.
    assert edited.reason == "Changed whole devices 8 → 2."
    assert "whole_devices" not in edited.reason


def test_an_edit_names_choices_by_their_labels_and_prose_without_quoting_it(tenant, lead,
                                                                            pools):
    req = make_request(tenant, lead, workload_kind="training")
    services.request_update(request=req, by=lead, fields=request_fields(
        workload_kind="inference", justification="A different reason, long enough to read."))
    edited = [e for e in audit_for(req) if e.action == "request.edited"][0]
    assert "workload kind Training → Inference" in edited.reason, edited.reason
    assert "justification rewritten" in edited.reason
    assert "A different reason" not in edited.reason


def test_submitted_requests_cannot_be_edited(tenant, lead, pools):
    req = make_request(tenant, lead, submit=True)
    with pytest.raises(services.IntakeError, match="only drafts"):
        services.request_update(request=req, by=lead, fields={"whole_devices": 1})


def test_lead_cannot_approve_and_admin_cannot_submit(tenant, lead, admin_user, pools):
    req = make_request(tenant, lead)
    with pytest.raises(services.IntakeError, match="team lead"):
        services.request_submit(request=req, by=admin_user)
    services.request_submit(request=req, by=lead)
    with pytest.raises(services.IntakeError, match="platform admin"):
        services.request_approve(request=req, by=lead, reason="self-service")


def test_override_needs_a_reason_and_is_audited(tenant, lead, admin_user, pools):
    req = make_request(tenant, lead, submit=True, whole_devices=2)
    with pytest.raises(services.IntakeError, match="written reason"):
        services.request_approve(request=req, by=admin_user, reason="ok",
                                 override_route=Route.DEDICATED_BLOCK)
    req = services.request_approve(request=req, by=admin_user, reason="ok",
                                   override_route=Route.DEDICATED_BLOCK,
                                   override_reason="Export-controlled weights, contract coming")
    assert req.route == Route.DEDICATED_BLOCK and req.route_overridden
    assert req.allocation.pool == pools[Route.DEDICATED_BLOCK]
    assert "Export-controlled" in req.route_reason
    assert "request.rerouted" in actions(req)


def test_approval_refuses_capacity_that_is_not_free(tenant, lead, admin_user, pools):
    first = make_request(tenant, lead, submit=True, whole_devices=30)
    second = make_request(tenant, lead, submit=True, whole_devices=4)
    services.request_approve(request=first, by=admin_user, reason="ok")
    with pytest.raises(services.IntakeError, match="Not approved: Does not fit now"):
        services.request_approve(request=second, by=admin_user, reason="ok")
    second.refresh_from_db()
    assert second.status == "submitted" and second.allocation is None


def test_audit_rows_are_append_only_in_python_and_in_postgresql(tenant, lead, pools):
    req = make_request(tenant, lead)
    event = audit_for(req).get()
    event.reason = "rewritten"
    with pytest.raises(TypeError):
        event.save()
    with pytest.raises(TypeError):
        AuditEvent.objects.filter(pk=event.pk).update(reason="x")
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        with connection.cursor() as cur:
            cur.execute("UPDATE tenants_auditevent SET reason = 'x' WHERE id = %s", [event.pk])
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        with connection.cursor() as cur:
            cur.execute("DELETE FROM tenants_auditevent WHERE id = %s", [event.pk])
    assert AuditEvent.objects.get(pk=event.pk).reason == "Draft created."


@pytest.mark.django_db(transaction=True)
def test_two_admins_approving_at_once_one_wins(tenant, lead, pools):
    from tenants.models import PlatformRole
    from tests.factories import make_platform_user

    a1 = make_platform_user("admin-one", PlatformRole.Role.PLATFORM_ADMIN)
    a2 = make_platform_user("admin-two", PlatformRole.Role.PLATFORM_ADMIN)
    req = make_request(tenant, lead, submit=True, whole_devices=4)
    results, errors = race([
        lambda: services.request_approve(request=req, by=a1, reason="one"),
        lambda: services.request_approve(request=req, by=a2, reason="two"),
    ])
    assert len(results) == 1 and len(errors) == 1
    assert isinstance(errors[0], services.IntakeError)
    assert "decided it at" in errors[0].message
    assert Allocation.objects.count() == 1
    assert [e.action for e in audit_for(req)].count("request.approved") == 1


@pytest.mark.django_db(transaction=True)
def test_two_approvals_racing_for_the_last_devices_one_wins(tenant, lead, admin_user, pools):
    from tenants.models import PlatformRole
    from tests.factories import make_platform_user

    other_admin = make_platform_user("admin-three", PlatformRole.Role.PLATFORM_ADMIN)
    filler = make_request(tenant, lead, submit=True, whole_devices=24)
    services.request_approve(request=filler, by=admin_user, reason="fill")
    r1 = make_request(tenant, lead, submit=True, whole_devices=6)
    r2 = make_request(tenant, lead, submit=True, whole_devices=6)
    results, errors = race([
        lambda: services.request_approve(request=r1, by=admin_user, reason="a"),
        lambda: services.request_approve(request=r2, by=other_admin, reason="b"),
    ])
    assert len(results) == 1 and len(errors) == 1
    assert "Does not fit now" in errors[0].message
    held = sum(a.device_equivalents for a in Allocation.objects.all())
    assert held == 30 <= pools[Route.SHARED_POOL].capacity_devices


def test_renewal_extends_the_allocation_through_the_same_review(
        tenant, lead, admin_user, pools, django_capture_on_commit_callbacks):
    import datetime as dt

    from django.utils import timezone

    from fleet.tasks import expire_allocations

    req = make_request(tenant, lead, submit=True, whole_devices=4)
    with django_capture_on_commit_callbacks(execute=True):
        req = services.request_approve(request=req, by=admin_user, reason="ok")
    alloc = Allocation.objects.get(pk=req.allocation_id)
    assert alloc.status == "active"
    Allocation.objects.filter(pk=alloc.pk).update(ends_at=timezone.now() + dt.timedelta(days=2))
    with django_capture_on_commit_callbacks(execute=True):
        expire_allocations()
    alloc.refresh_from_db()
    assert alloc.status == "expiring"

    renewal = services.request_create_renewal(request=req, by=lead)
    assert renewal.renews == alloc and renewal.status == "draft"
    # Changing the size is a new request, not a renewal.
    services.request_update(request=renewal, by=lead, fields={"whole_devices": 8})
    with pytest.raises(services.IntakeError, match="keeps the allocation's route and size"):
        services.request_submit(request=renewal, by=lead)
    services.request_update(request=renewal, by=lead, fields={"whole_devices": 4})
    renewal = services.request_submit(request=renewal, by=lead)
    with django_capture_on_commit_callbacks(execute=True):
        renewal = services.request_approve(request=renewal, by=admin_user, reason="Still needed")
    alloc.refresh_from_db()
    req.refresh_from_db()
    assert renewal.status == "approved" and alloc.status == "active"
    assert alloc.ends_at.date() == renewal.ends_on + dt.timedelta(days=1)
    assert req.status == "active"  # the original request follows its allocation back
    assert Allocation.objects.count() == 1  # no second allocation, no second promise
    assert "Renewed until" in audit_for(alloc).get(action="allocation.renewed").reason


def test_only_live_allocations_can_be_renewed(tenant, lead, pools):
    req = make_request(tenant, lead, submit=True)
    with pytest.raises(services.IntakeError, match="active or expiring"):
        services.request_create_renewal(request=req, by=lead)


def test_an_allocation_stuck_in_provisioning_is_retired_at_its_end(
        tenant, lead, admin_user, pools, django_capture_on_commit_callbacks):
    """Its worker died mid-provision and nothing finished it: at its end it is retired like
    any other, not left holding capacity forever."""
    import datetime as dt

    from django.utils import timezone

    from fleet.tasks import expire_allocations

    req = make_request(tenant, lead, submit=True, whole_devices=4)
    with django_capture_on_commit_callbacks(execute=True):
        req = services.request_approve(request=req, by=admin_user, reason="ok")
    alloc = Allocation.objects.get(pk=req.allocation_id)
    Allocation.objects.filter(pk=alloc.pk).update(
        status="provisioning", ends_at=timezone.now() - dt.timedelta(minutes=5))
    with django_capture_on_commit_callbacks(execute=True):
        expire_allocations()
    alloc.refresh_from_db()
    assert alloc.status == "retired"
    assert "Retired" in audit_for(alloc).filter(to_state="retired").get().reason
