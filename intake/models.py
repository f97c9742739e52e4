"""Capacity requests: what a team lead asked for, how it was routed and decided."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from fleet.models import Allocation, Pool, Route
from tenants.models import Tenant

from .domain import (
    EDITABLE_STATES,
    FILL_LABELS,
    ISOLATION_LABELS,
    Fill,
    IntakeAnswers,
    Isolation,
    Status,
)


class WorkloadKind(models.TextChoices):
    TRAINING = "training", "Training"
    FINE_TUNING = "fine_tuning", "Fine-tuning"
    INFERENCE = "inference", "Inference"
    EVALUATION = "evaluation", "Evaluation"
    NOTEBOOK = "notebook", "Notebook"


ISOLATION_CHOICES = [(i.value, ISOLATION_LABELS[i]) for i in Isolation]
FILL_CHOICES = [(f.value, FILL_LABELS[f]) for f in Fill]
STATUS_CHOICES = [(s.value, s.value.replace("_", " ").capitalize()) for s in Status]


class CapacityRequest(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="requests")
    requester = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT,
                                  related_name="capacity_requests")
    title = models.CharField(max_length=120)
    workload_kind = models.CharField(max_length=20, choices=WorkloadKind.choices)
    isolation_origin = models.CharField(max_length=20, choices=ISOLATION_CHOICES)
    isolation_reference = models.CharField(
        max_length=200, blank=True,
        help_text="Contract id, regulation or data class (required unless habitual).")
    device_fill = models.CharField(max_length=10, choices=FILL_CHOICES)
    whole_devices = models.PositiveIntegerField(default=0)
    replicas = models.PositiveIntegerField(default=0)
    mig_profile = models.CharField(max_length=20, blank=True)
    memory_gb = models.PositiveIntegerField(default=0)
    gpu_model = models.CharField(max_length=60, blank=True)
    starts_on = models.DateField()
    ends_on = models.DateField(null=True, blank=True)
    expected_utilisation = models.PositiveSmallIntegerField(
        default=70, validators=[MinValueValidator(0), MaxValueValidator(100)])
    justification = models.TextField()

    status = models.CharField(max_length=20, choices=STATUS_CHOICES,
                              default=Status.DRAFT.value, db_index=True)
    # The routing decision, stored when the request is submitted (and on an override).
    route = models.CharField(max_length=30, choices=Route.choices, blank=True)
    route_reason = models.TextField(blank=True)
    pool = models.ForeignKey(Pool, null=True, blank=True, on_delete=models.PROTECT,
                             related_name="requests")
    route_overridden = models.BooleanField(default=False)
    override_reason = models.TextField(blank=True)
    # The review decision.
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                   on_delete=models.PROTECT, related_name="+")
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_reason = models.TextField(blank=True)
    allocation = models.OneToOneField(Allocation, null=True, blank=True,
                                      on_delete=models.PROTECT, related_name="request")
    # A renewal extends an existing allocation through the same review.
    renews = models.ForeignKey(Allocation, null=True, blank=True, on_delete=models.PROTECT,
                               related_name="renewals")

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        # Newest first, the id breaking ties: pages (LIMIT/OFFSET) of requests filed in the
        # same instant never repeat or skip one, and intake_newest_idx serves it unsorted.
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["tenant", "status"]),
                   # Lists, newest first (everyone's and one tenant's): no sort of the table.
                   models.Index(fields=["-created_at", "-id"], name="intake_newest_idx"),
                   models.Index(fields=["tenant", "-created_at"],
                                name="intake_tenant_newest_idx"),
                   # The review queue: a status, in the order requests entered it.
                   models.Index(fields=["status", "updated_at", "id"],
                                name="intake_review_queue_idx")]

    def __str__(self) -> str:
        return f"#{self.pk} {self.title}"

    @property
    def is_editable(self) -> bool:
        return Status(self.status) in EDITABLE_STATES

    @property
    def status_enum(self) -> Status:
        return Status(self.status)

    @property
    def size_label(self) -> str:
        """What the request holds, in the route's own unit: '2 devices' on whole-device
        routes (a binding small answer is a whole device per replica), '3 × 1g.10gb' on the
        MIG route (or before routing, as answered)."""
        small = self.device_fill == "small"
        if self.route == Route.MIG_VCLUSTER or (small and not self.route):
            what = self.mig_profile or f"{self.memory_gb} GB"
            return f"{self.replicas} × {what}"
        n = self.replicas if small else self.whole_devices
        return f"{n} device{'' if n == 1 else 's'}"

    def answers(self) -> IntakeAnswers:
        return IntakeAnswers(
            isolation=Isolation(self.isolation_origin) if self.isolation_origin else None,
            fill=Fill(self.device_fill) if self.device_fill else None,
            reference=self.isolation_reference,
            whole_devices=self.whole_devices,
            replicas=self.replicas,
            mig_profile=self.mig_profile,
            memory_gb=self.memory_gb,
        )


class AllocationTrace(models.Model):
    """The OpenTelemetry trace sent for an allocation's path from filing to its first running
    workload (intake.trace): one per allocation, written once the collector took it."""

    allocation = models.OneToOneField(Allocation, on_delete=models.CASCADE,
                                      related_name="trace")
    trace_id = models.CharField(max_length=32)  # 32 lower-case hex digits, as OTLP shows it
    spans = models.PositiveSmallIntegerField()
    exported_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.allocation_id}: {self.trace_id}"


class RequestTally(models.Model):
    """How many capacity requests each tenant has in each status, kept by the database itself:
    triggers on intake_capacityrequest (migration 0008) add a row of +1 or -1 for every insert,
    delete and change of status or tenant, whichever code path or bulk write made it. Rows are
    only ever inserted — no row is locked, so concurrent writers never wait on each other
    (a tally updated in place deadlocked under load: a change of status locks two counters, in
    the order of the change). The counts are the sums per tenant and status; a beat task folds
    the rows into one per tenant and status (`compact_request_tally`) so there stay a few per
    tenant, however many requests were filed (200,000: counting them took ~100 ms a page)."""

    # Kept by triggers on intake_capacityrequest: a migration that makes SQLite rebuild
    # that table drops them (tests/db/test_request_tally.py checks they are there).
    # No foreign-key constraint: a delta row must never wait on the tenant's row lock.
    tenant = models.ForeignKey(Tenant, on_delete=models.DO_NOTHING, related_name="+",
                               db_constraint=False)
    status = models.CharField(max_length=20)
    n = models.IntegerField()

    class Meta:
        indexes = [models.Index(fields=["tenant", "status"], name="intake_tally_tenant_status")]

    def __str__(self) -> str:
        return f"{self.tenant_id} {self.status}: {self.n:+d}"
