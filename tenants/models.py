"""Who: tenants, memberships, platform roles, and the append-only audit trail."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.utils import timezone

slug_validator = RegexValidator(
    r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$",
    "Use 1-40 lowercase letters, digits and hyphens; start and end with a letter or digit "
    "(it becomes part of Kubernetes names).",
)


class Tenant(models.Model):
    slug = models.CharField(max_length=40, unique=True, validators=[slug_validator])
    name = models.CharField(max_length=120)
    cost_centre = models.CharField(max_length=40, blank=True)
    contact_email = models.EmailField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    class Role(models.TextChoices):
        LEAD = "lead", "Team lead"
        MEMBER = "member", "Member"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="memberships")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices)
    # "keycloak" when the last login's groups granted it; "local" for demo/admin grants.
    source = models.CharField(max_length=20, default="local")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "tenant"], name="one_membership_per_tenant"),
        ]

    def __str__(self) -> str:
        return f"{self.user} {self.role} of {self.tenant}"


class PlatformRole(models.Model):
    """Realm-wide roles: platform admin and finance."""

    class Role(models.TextChoices):
        PLATFORM_ADMIN = "platform_admin", "Platform admin"
        FINANCE = "finance", "Finance"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="platform_roles")
    role = models.CharField(max_length=20, choices=Role.choices)
    source = models.CharField(max_length=20, default="local")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "role"], name="one_platform_role_each"),
        ]

    def __str__(self) -> str:
        return f"{self.user} {self.get_role_display()}"


class AppendOnlyQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise TypeError(self.model.APPEND_ONLY)

    def delete(self):
        raise TypeError(self.model.APPEND_ONLY)


class AppendOnlyModel(models.Model):
    """Rows written once and never edited or deleted through the ORM (the database refuses
    it too: see the append-only triggers in the migrations)."""

    APPEND_ONLY = "this record is append-only"

    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        abstract = True

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise TypeError(self.APPEND_ONLY)
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise TypeError(self.APPEND_ONLY)


class AuditEvent(AppendOnlyModel):
    """One row per change, written in the same transaction as the change. Never edited."""

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                              on_delete=models.SET_NULL, related_name="+")
    actor_name = models.CharField(max_length=150)  # kept if the user is ever removed
    tenant = models.ForeignKey(Tenant, null=True, blank=True, on_delete=models.PROTECT,
                               related_name="audit_events")
    subject_type = models.CharField(max_length=40)
    subject_id = models.PositiveBigIntegerField()
    action = models.CharField(max_length=40)
    from_state = models.CharField(max_length=30, blank=True)
    to_state = models.CharField(max_length=30, blank=True)
    reason = models.TextField()
    data = models.JSONField(default=dict, blank=True)

    APPEND_ONLY = "the audit trail is append-only"

    class Meta:
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["subject_type", "subject_id", "at"])]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.actor_name} {self.action} {self.subject_type}"


class WorkerHeartbeat(models.Model):
    """Written by a Celery worker on a schedule, so /healthz can tell that workers run."""

    hostname = models.CharField(max_length=200)
    at = models.DateTimeField(auto_now_add=True, db_index=True)

    def __str__(self) -> str:
        return f"{self.hostname} at {self.at:%Y-%m-%d %H:%M:%S}"


class NotificationKind(models.TextChoices):
    """What the portal e-mails people about; each can be turned off per user."""

    REQUEST_DECIDED = "request_decided", "A request of mine was approved or rejected"
    CHANGES_REQUESTED = "changes_requested", "An admin asked for changes to a request"
    PROVISIONING_DONE = "provisioning_done", "Provisioning finished"
    PROVISIONING_FAILED = "provisioning_failed", "Provisioning failed"
    ALLOCATION_EXPIRING = "allocation_expiring", "An allocation is about to expire"
    BUDGET_THRESHOLD = "budget_threshold", "A tenant's spend crossed a budget threshold"
    CAPACITY_CHANGED = "capacity_changed", ("One of my allocations was resized, or a node "
                                             "under it lost or retired")
    STRANDED_CAPACITY = "stranded_capacity", "Capacity is found stranded, or a finding decided"


class NotificationOptOut(models.Model):
    """A kind this user turned off; everything else is on by default."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="notification_opt_outs")
    kind = models.CharField(max_length=30, choices=NotificationKind.choices)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "kind"],
                                               name="one_opt_out_per_kind")]

    def __str__(self) -> str:
        return f"{self.user} turned off {self.kind}"


class Notification(models.Model):
    """One e-mail to one person: written in the transaction of the event, sent after commit
    by a task that retries, so a mail server outage delays it and loses nothing."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="notifications")
    kind = models.CharField(max_length=30, choices=NotificationKind.choices)
    subject = models.CharField(max_length=200)
    body = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    last_error = models.TextField(blank=True)
    # From then on it says nothing true or useful (an "expires soon" after the end, a week-old
    # "ready"): dropped unsent instead of sent late.
    moot_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["sent_at", "created_at"], name="notification_unsent")]

    def __str__(self) -> str:
        return f"{self.kind} to {self.user}: {self.subject}"

    @property
    def dropped(self) -> bool:
        return self.sent_at is None and self.moot_at is not None and \
            self.moot_at <= timezone.now()


class IdempotentResponse(models.Model):
    """The first answer to an API write sent with an `Idempotency-Key` header: a retry of the
    same write (a client that lost the answer when a web worker died) gets this answer again
    instead of doing the write twice. Written in the write's own transaction, so a write that
    did not commit leaves no key behind."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="+")
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64)  # method, path and body of the first write
    status_code = models.PositiveSmallIntegerField(null=True)
    body = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "key"],
                                               name="one_answer_per_idempotency_key")]

    def __str__(self) -> str:
        return f"{self.user_id}:{self.key}"
