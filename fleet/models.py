"""What runs where: clusters, pools, GPU nodes and their outages, and the allocations placed
on them.

These tables were created by the tenants app; they keep their names (see migrations).
Long on purpose: the fleet's tables in one module, so what points at what (cluster ← pool ←
node, allocation, ledger) reads in one place.
"""

from __future__ import annotations

import datetime as dt

from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

from tenants.models import AppendOnlyModel, Tenant, slug_validator

from .allocations import lifecycle
from .domain import Route, largest_job, size_unit
from .vocabulary import (
    HOME_CLUSTER,
    ClusterConnections,
    ClusterRoles,
    LedgerEvent,
    NodeState,
    WorkloadState,
)

__all__ = ["Allocation", "AllocationResize", "Cluster", "GpuNode", "NodeOutage", "Pool",
           "RateCard", "Route"]


# Names Kubernetes accepts, checked where they are typed (Kueue refuses others later).
DNS_LABEL = RegexValidator(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z",
                           "Lowercase letters, digits and '-', starting and ending with a letter "
                           "or digit (a Kubernetes name), e.g. shared-h100.")
DNS_SUBDOMAIN = RegexValidator(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z",
    "Lowercase letters, digits, '-' and '.', e.g. gpu.nvidia.com.")
PRODUCT_NAME = RegexValidator(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?\Z",
                              "The GPU product as GPU Feature Discovery labels it (letters, "
                              "digits, '-', '_', '.'), e.g. NVIDIA-H100-80GB-HBM3.")
MAX_DEVICES = 100_000

class ClusterQuerySet(models.QuerySet):
    def live(self):
        """The clusters the portal talks to: every one not retired, by name."""
        return self.filter(retired_at__isnull=True).order_by("name")


class Cluster(models.Model):
    """A Kubernetes cluster the portal provisions into and reads from.

    The portal's credential for it is a reference (a mounted kubeconfig file, or a Secret in
    the portal's own cluster), never the credential itself: the database holds where to find
    it, the platform's secret store holds it. The health fields are what the last check read.
    """

    class Role(models.TextChoices):
        STANDALONE = ClusterRoles.STANDALONE, "Stand-alone"
        MANAGER = ClusterRoles.MANAGER, "MultiKueue manager"
        WORKER = ClusterRoles.WORKER, "MultiKueue worker"

    class Connection(models.TextChoices):
        CONFIGURED = ClusterConnections.CONFIGURED, \
            "The portal's own setting (PORTAL_KUBE_BACKEND)"
        KUBECONFIG = ClusterConnections.KUBECONFIG, "A kubeconfig: a mounted file or a Secret"
        DRY_RUN = ClusterConnections.DRY_RUN, \
            "Dry run (records what it would apply, talks to nothing)"

    slug = models.CharField(max_length=40, unique=True, validators=[slug_validator])
    name = models.CharField(max_length=120)
    role = models.CharField(max_length=12, choices=Role.choices, default=Role.STANDALONE)
    region = models.CharField(max_length=63, blank=True, validators=[DNS_SUBDOMAIN],
                              help_text="e.g. eu-west-1 or on-prem-ams")
    provider = models.CharField(max_length=63, blank=True, validators=[DNS_SUBDOMAIN],
                                help_text="e.g. on-prem, aws, gcp")
    connection = models.CharField(max_length=12, choices=Connection.choices,
                                  default=Connection.KUBECONFIG)
    # file:/path/to/kubeconfig or secret:<namespace>/<name>[#key]: where the credential is.
    credential_ref = models.CharField(max_length=300, blank=True)
    # What the kubeconfig must point at; blank: whatever it says (read at the check).
    api_server = models.URLField(max_length=300, blank=True)
    # The name of this worker's MultiKueueCluster on the manager (blank: the slug).
    multikueue_name = models.CharField(max_length=63, blank=True, validators=[DNS_LABEL])
    # Workers: where the kubeconfig MultiKueue on the manager uses for this worker is (as
    # credential_ref; blank: the portal's own). The portal copies it into a Secret in Kueue's
    # namespace on the manager; the database holds only the reference.
    dispatch_credential_ref = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    retired_at = models.DateTimeField(null=True, blank=True)
    retired_reason = models.TextField(blank=True)
    # As the last check found it.
    checked_at = models.DateTimeField(null=True, blank=True)
    answers = models.BooleanField(null=True)  # None: never checked, or a dry run
    health_message = models.TextField(blank=True)
    server_seen = models.CharField(max_length=300, blank=True)
    kubernetes_version = models.CharField(max_length=40, blank=True)
    kueue_version = models.CharField(max_length=60, blank=True)
    multikueue_active = models.BooleanField(null=True)  # workers only: the manager's view
    multikueue_reason = models.TextField(blank=True)

    objects = ClusterQuerySet.as_manager()

    class Meta:
        ordering = ["retired_at", "name"]

    def __str__(self) -> str:
        return self.name

    @property
    def live(self) -> bool:
        return self.retired_at is None

    @property
    def is_worker(self) -> bool:
        return self.role == Cluster.Role.WORKER

    @property
    def is_manager(self) -> bool:
        return self.role == Cluster.Role.MANAGER

    @property
    def by_kubeconfig(self) -> bool:
        return self.connection == Cluster.Connection.KUBECONFIG

    @property
    def labels(self) -> dict[str, str]:
        return {k: v for k, v in (("region", self.region), ("provider", self.provider)) if v}

    @property
    def described(self) -> str:
        """The cluster in words, as pages and messages name it: "GPU EU (eu-west-1, aws)"."""
        where = ", ".join(self.labels.values())
        return f"{self.name} ({where})" if where else self.name

    @property
    def multikueue_cluster(self) -> str:
        return self.multikueue_name or self.slug


def home_cluster_id() -> int:
    """The cluster a pool or node is in when nobody said: the portal's own (zero config).
    Reads the id alone: migrations call this as a default while later columns do not exist
    yet (0015 made the row before it is the default)."""
    found = Cluster.objects.filter(slug=HOME_CLUSTER).values_list("pk", flat=True).first()
    if found is not None:
        return found
    return Cluster.objects.get_or_create(slug=HOME_CLUSTER, defaults={
        "name": "Local cluster", "connection": Cluster.Connection.CONFIGURED})[0].pk


class PoolQuerySet(models.QuerySet):
    def taking_nodes_of(self, cluster: Cluster):
        """The pools a node of `cluster` may join: the cluster's own, and on a MultiKueue
        worker the manager's shared pools too (their work is dispatched to the workers)."""
        own = models.Q(cluster=cluster)
        if cluster.is_worker:
            own |= models.Q(cluster__role=Cluster.Role.MANAGER, cluster__retired_at__isnull=True,
                            route=Route.SHARED_POOL)
        return self.filter(own)


class Pool(models.Model):
    """A set of nodes that serves one route, with one GPU model and one rate."""

    slug = models.CharField(max_length=40, unique=True, validators=[slug_validator])
    name = models.CharField(max_length=120)
    route = models.CharField(max_length=30, choices=Route.choices)
    gpu_model = models.CharField(max_length=60, help_text="e.g. NVIDIA-H100-80GB-HBM3",
                                 validators=[PRODUCT_NAME])
    # Bounds a real fleet stays far inside; beyond them a typo, not a GPU (one validation for
    # every writer: the forms take them from here).
    gpu_memory_gb = models.PositiveIntegerField(default=80, validators=[
        MinValueValidator(1), MaxValueValidator(1024)])
    devices_per_node = models.PositiveIntegerField(default=8, validators=[
        MinValueValidator(1), MaxValueValidator(64)])
    # A ceiling on what the pool promises (0: none). Never a source: capacity comes from the
    # validated fleet only, so a pool without nodes promises nothing.
    capacity_devices = models.PositiveIntegerField(default=0, validators=[
        MaxValueValidator(MAX_DEVICES)])
    node_selector = models.JSONField(default=dict, blank=True)
    device_class = models.CharField(max_length=80, default="gpu.nvidia.com",
                                    validators=[DNS_SUBDOMAIN])
    mig_profiles = models.JSONField(default=list, blank=True,
                                    help_text='MIG profiles offered, e.g. ["1g.10gb", "3g.40gb"]')
    borrowing_limit_devices = models.PositiveIntegerField(default=0, validators=[
        MaxValueValidator(MAX_DEVICES)])
    # Kueue cohort for pools that lend and borrow (shared, MIG); blank elsewhere.
    cohort = models.CharField(max_length=63, blank=True, validators=[DNS_LABEL])
    active = models.BooleanField(default=True)
    # The cluster its nodes are in: a pool lives in one cluster.
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="pools",
                                default=home_cluster_id)

    objects = PoolQuerySet.as_manager()

    class Meta:
        db_table = "tenants_pool"  # kept from when tenants/ owned it
        ordering = ["route", "name"]

    def __str__(self) -> str:
        return self.name

    @property
    def dispatched(self) -> bool:
        """A shared pool of the MultiKueue manager: its work runs on the workers, where its
        nodes are (fleet/allocations/dispatch.py)."""
        return self.route == Route.SHARED_POOL and self.cluster.is_manager


class RateCard(models.Model):
    """Price per device-hour for a pool, from a moment on: the only place a price is kept
    (fleet.inventory.pricing reads it for the preview, approval, the queue page and billing alike).
    A pool's first card starts at the beginning of time."""

    pool = models.ForeignKey(Pool, on_delete=models.PROTECT, related_name="rate_cards")
    # Blank: the pool's own GPU model. A card naming another model does not apply (a pool
    # has one model); kept for cards written before that rule.
    gpu_model = models.CharField(max_length=80, blank=True, help_text="Blank: the pool's model")
    rate_per_device_hour = models.DecimalField(max_digits=10, decimal_places=4)
    effective_from = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "billing_ratecard"  # kept from when billing/ owned it
        ordering = ["pool", "-effective_from"]
        constraints = [models.UniqueConstraint(fields=["pool", "gpu_model", "effective_from"],
                                               name="one_rate_per_moment")]

    def __str__(self) -> str:
        return f"{self.pool} {self.rate_per_device_hour}/h from {self.effective_from:%Y-%m-%d}"


class Allocation(models.Model):
    """Capacity promised to a tenant. Created by approval; provisioned into Kubernetes."""

    Status = lifecycle.AllocationStatus
    # Statuses that hold capacity in a pool (fleet.allocations.lifecycle names every such set).
    HOLDING = tuple(sorted(lifecycle.HOLDING))

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="allocations")
    pool = models.ForeignKey(Pool, on_delete=models.PROTECT, related_name="allocations")
    route = models.CharField(max_length=30, choices=Route.choices)
    whole_devices = models.PositiveIntegerField(default=0)
    mig_profile = models.CharField(max_length=20, blank=True)
    mig_count = models.PositiveIntegerField(default=0)
    # Device-equivalents held in the pool (MIG slices count as their share), for capacity.
    device_equivalents = models.DecimalField(max_digits=10, decimal_places=4)
    namespace = models.CharField(max_length=63)
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING)
    status_message = models.TextField(blank=True)
    # Whole nodes reserved for a dedicated block (chosen at approval from validated nodes).
    nodes = models.ManyToManyField("GpuNode", blank=True, related_name="allocations")
    # Set when capacity under the allocation is lost (a node unhealthy, unvalidated, retiring).
    flagged_reason = models.TextField(blank=True)
    flagged_at = models.DateTimeField(null=True, blank=True)
    # Provisioning progress, shown live on the request page.
    progress_done = models.PositiveIntegerField(default=0)
    # Last sign of provisioning work (start, each object applied): a stall is told by its age.
    progress_at = models.DateTimeField(null=True, blank=True)
    progress_total = models.PositiveIntegerField(default=0)
    attempts = models.PositiveIntegerField(default=0)
    # What the last reconcile found changed or deleted outside the portal.
    drift_report = models.TextField(blank=True)
    drift_checked_at = models.DateTimeField(null=True, blank=True)
    expiry_notice_sent = models.BooleanField(default=False)
    # Where the promise came from, as data ("request #12"): fleet never reads intake's
    # tables, and never parses audit prose for it.
    origin = models.CharField(max_length=80, blank=True)
    # A dispatched allocation's quota per MultiKueue worker ({worker slug: devices}), fixed
    # when it is first provisioned (billing's allocated hours per cluster read it).
    cluster_shares = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "tenants_allocation"  # kept from when tenants/ owned it
        ordering = ["-created_at"]
        # Newest first, of everyone's and of one tenant's: a page of the list reads 25 index
        # entries instead of sorting every allocation ever made.
        indexes = [models.Index(fields=["pool", "status"]),
                   models.Index(fields=["-created_at", "-id"], name="alloc_newest_idx"),
                   models.Index(fields=["tenant", "-created_at", "-id"],
                                name="alloc_tenant_newest_idx")]

    def __str__(self) -> str:
        return f"{self.tenant.slug}/{self.namespace} ({self.get_status_display()})"

    @property
    def dispatch_shares(self) -> list[tuple[Cluster, int]]:
        """A dispatched allocation's quota per worker, as (cluster, devices)."""
        shares = self.cluster_shares or {}
        clusters = {c.slug: c for c in Cluster.objects.filter(slug__in=shares)}
        return [(clusters[s], int(d)) for s, d in sorted(shares.items()) if s in clusters]

    @property
    def largest_job(self) -> int:
        return largest_job(self.cluster_shares or {})

    @property
    def window_text(self) -> str:
        """The window as the request stated it: an end at midnight is "through" the day
        before (a request's end date is inclusive; the allocation's end is the instant after)."""
        start = f"{self.starts_at:%Y-%m-%d %H:%M} UTC"
        if self.ends_at is None:
            return f"{start} → open-ended"
        end = self.ends_at.astimezone(dt.UTC)
        if end.time() == dt.time():
            last = end.date() - dt.timedelta(days=1)
            return f"{start} → through {last:%Y-%m-%d} (ends {end:%Y-%m-%d %H:%M} UTC)"
        return f"{start} → {end:%Y-%m-%d %H:%M} UTC"

    @property
    def flag_words(self) -> str:
        """What a tenant is told about a flagged allocation, in words that are true: a
        planned retirement is not a failure. Node names stay the platform's business."""
        if not self.flagged_reason:
            return ""
        states = {n.state for n in self.nodes.all()}
        if states and states <= {NodeState.RETIRING, NodeState.SCHEDULABLE}:
            return ("A node under this allocation is being retired by the platform team "
                    "(planned, not a failure); they are moving the allocation to another.")
        return ("A node under this allocation failed validation or health checks; the "
                "platform team is moving it.")

    # For templates and serializers: the lifecycle's named sets, never string literals.
    @property
    def is_usable(self) -> bool:
        return self.status in lifecycle.USABLE

    @property
    def is_releasable(self) -> bool:
        """What allocation_release accepts: anything not retired yet."""
        return self.status in lifecycle.RETIRABLE

    @property
    def is_resizable(self) -> bool:
        return self.status in lifecycle.RESIZABLE

    @property
    def size(self) -> int:
        """Its size in its own unit (fleet.allocations.resizing): slices or whole devices."""
        return self.mig_count if self.route == Route.MIG_VCLUSTER else self.whole_devices

    @property
    def size_unit(self) -> str:
        return size_unit(self.route, self.mig_profile)

    @property
    def is_renewable(self) -> bool:
        return self.status in lifecycle.RENEWABLE and self.ends_at is not None


class AllocationResize(AppendOnlyModel):
    """One change of an allocation's size in place (fleet.allocations.resize), kept for
    billing: the hours before `at` are held at the size before, those after at the size
    after. Append-only: a bill already sent was computed from these rows."""

    allocation = models.ForeignKey(Allocation, on_delete=models.PROTECT,
                                   related_name="resizes")
    at = models.DateTimeField()
    whole_devices_before = models.PositiveIntegerField()
    whole_devices_after = models.PositiveIntegerField()
    mig_count_before = models.PositiveIntegerField()
    mig_count_after = models.PositiveIntegerField()
    devices_before = models.DecimalField(max_digits=10, decimal_places=4)
    devices_after = models.DecimalField(max_digits=10, decimal_places=4)
    reason = models.TextField()

    APPEND_ONLY = "an allocation's resizes are append-only"

    class Meta:
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["allocation", "at"])]

    def __str__(self) -> str:
        return (f"{self.at:%Y-%m-%d %H:%M} {self.devices_before} → {self.devices_after}")


class GpuNode(models.Model):
    """A GPU node as last read from the Kubernetes API (see fleet/capacity.py)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="nodes",
                                default=home_cluster_id)
    name = models.CharField(max_length=253)
    pool = models.ForeignKey(Pool, null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="nodes")
    pool_label = models.CharField(max_length=63, blank=True)
    gpu_model = models.CharField(max_length=80, blank=True)
    gpu_count = models.PositiveIntegerField(default=0)
    gpu_memory_mib = models.PositiveIntegerField(default=0)
    mig_capable = models.BooleanField(default=False)
    mig_config = models.CharField(max_length=80, blank=True)
    validated = models.BooleanField(default=False)
    bios_profile = models.CharField(max_length=40, blank=True)
    burn_in_date = models.CharField(max_length=40, blank=True)
    validation_failure = models.TextField(blank=True)
    ready = models.BooleanField(default=False)
    health_problems = models.JSONField(default=list, blank=True)
    cordoned = models.BooleanField(default=False)
    present = models.BooleanField(default=True)
    dra_whole_gpus = models.IntegerField(null=True, blank=True)
    mig_devices = models.JSONField(default=dict, blank=True)  # {profile: count}
    # Set by a platform admin in the portal; takes the node out of promisable capacity.
    retiring = models.BooleanField(default=False)
    retiring_reason = models.TextField(blank=True)
    state = models.CharField(max_length=20, db_index=True, choices=NodeState.CHOICES,
                             default=NodeState.UNVALIDATED)
    reason = models.TextField(blank=True)
    last_synced_at = models.DateTimeField(null=True, blank=True)
    # Digest of the facts last read (fleet.inventory.sync.facts_digest): a sync compares digests and
    # touches only the nodes whose facts changed.
    facts_digest = models.CharField(max_length=40, blank=True)

    class Meta:
        db_table = "tenants_gpunode"  # kept from when tenants/ owned it
        ordering = ["name"]
        indexes = [models.Index(fields=["pool", "state"])]
        # A node is known by its cluster and its name: two clusters may both have "gpu-01".
        constraints = [models.UniqueConstraint(fields=["cluster", "name"],
                                               name="gpunode_cluster_name")]

    def __str__(self) -> str:
        return self.name



class NodeOutage(models.Model):
    """A span in which a node could not be promised (unvalidated, unhealthy, cordoned, gone,
    retiring). Billing credits hours of reserved nodes inside such spans."""

    node = models.ForeignKey(GpuNode, on_delete=models.CASCADE, related_name="outages")
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    reason = models.TextField()

    class Meta:
        db_table = "tenants_nodeoutage"  # kept from when tenants/ owned it
        ordering = ["node", "started_at"]
        indexes = [models.Index(fields=["node", "started_at"])]

    def __str__(self) -> str:
        return f"{self.node} from {self.started_at:%Y-%m-%d %H:%M}"


class QueueWorkload(models.Model):
    """A Kueue Workload in an allocation's namespace, as the portal last read it."""

    class State(models.TextChoices):  # the values of fleet.vocabulary.WorkloadState
        PENDING = WorkloadState.PENDING, "Pending"
        ADMITTED = WorkloadState.ADMITTED, "Running"
        DEACTIVATED = WorkloadState.DEACTIVATED, "Deactivated"
        FINISHED = WorkloadState.FINISHED, "Finished"
        GONE = WorkloadState.GONE, "Deleted"
        STOPPING = WorkloadState.STOPPING, "Stopping"

    allocation = models.ForeignKey(Allocation, on_delete=models.CASCADE,
                                   related_name="workloads")
    uid = models.CharField(max_length=64, unique=True)
    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    job = models.CharField(max_length=253, blank=True)
    local_queue = models.CharField(max_length=253, blank=True)
    cluster_queue = models.CharField(max_length=253, blank=True, db_index=True)
    priority = models.IntegerField(default=0)
    devices = models.DecimalField(max_digits=12, decimal_places=4, default=0)
    state = models.CharField(max_length=12, choices=State.choices, db_index=True)
    submitted_at = models.DateTimeField(null=True, blank=True)
    admitted_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    requeued_at = models.DateTimeField(null=True, blank=True)
    max_seconds = models.PositiveIntegerField(null=True, blank=True)
    pending_reason = models.CharField(max_length=80, blank=True)  # Kueue's reason code
    pending_detail = models.TextField(blank=True)  # Kueue's message: platform admins only
    stop_reason = models.CharField(max_length=80, blank=True)
    stop_preemption = models.CharField(max_length=80, blank=True)
    stopped_at = models.DateTimeField(null=True, blank=True)
    stop_detail = models.TextField(blank=True)  # names other queues: platform admins only
    position = models.PositiveIntegerField(null=True, blank=True)  # in the ClusterQueue
    position_source = models.CharField(max_length=12, blank=True)  # visibility | computed
    first_estimate_at = models.DateTimeField(null=True, blank=True)
    first_estimate_basis = models.CharField(max_length=12, blank=True)
    resource_version = models.CharField(max_length=40, blank=True)
    # MultiKueue (a dispatched allocation's workload on the manager): the worker that
    # admitted it (its MultiKueueCluster name; blank: the allocation's own cluster), the
    # workers Kueue is trying, and what the admission check said.
    ran_on = models.CharField(max_length=63, blank=True)
    nominated = models.JSONField(default=list, blank=True)
    dispatch_state = models.CharField(max_length=12, blank=True)
    dispatch_message = models.TextField(blank=True)
    # While it waits: what each worker's copy says ({worker: "why it waits there"}).
    worker_views = models.JSONField(default=dict, blank=True)
    # The current admission's steps after Kueue (fleet.queues.placement): pods created,
    # devices allocated, scheduled (on which node), running. Reset on each new admission.
    pods_at = models.DateTimeField(null=True, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    devices_allocated = models.TextField(blank=True)
    scheduled_at = models.DateTimeField(null=True, blank=True)
    node = models.CharField(max_length=253, blank=True)
    running_at = models.DateTimeField(null=True, blank=True)
    # What its GPUs did while it ran, from the DCGM exporter's series of its pods in
    # Prometheus (fleet.queues.utilisation): mean graphics-engine activity (0–1) and the most
    # GPU memory used; measured_at is the end of the window measured (None: not yet).
    gpu_busy = models.FloatField(null=True, blank=True)
    gpu_memory_gb = models.FloatField(null=True, blank=True)
    utilisation_at = models.DateTimeField(null=True, blank=True)
    observed_at = models.DateTimeField()

    class Meta:
        ordering = ["submitted_at", "id"]
        indexes = [models.Index(fields=["allocation", "state"])]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.job or self.name} ({self.state})"


class QueueEvent(AppendOnlyModel):
    """One transition of a workload (submitted, admitted, preempted, …), with the reason in
    the tenant's words and Kueue's own message for platform admins. Append-only: the queue
    history and the start-time estimates' track record are read from it."""

    class Kind(models.TextChoices):  # the values of fleet.vocabulary.LedgerEvent
        SUBMITTED = LedgerEvent.SUBMITTED, "Submitted"
        ADMITTED = LedgerEvent.ADMITTED, "Admitted"
        PREEMPTED = LedgerEvent.PREEMPTED, "Preempted"
        EVICTED = LedgerEvent.EVICTED, "Stopped"
        REQUEUED = LedgerEvent.REQUEUED, "Requeued"
        FINISHED = LedgerEvent.FINISHED, "Finished"
        GONE = LedgerEvent.GONE, "Deleted"
        # After admission (fleet.queues.placement), from what Kubernetes recorded.
        PODS = LedgerEvent.PODS, "Pods created"
        CLAIMED = LedgerEvent.CLAIMED, "Devices allocated"
        SCHEDULED = LedgerEvent.SCHEDULED, "Scheduled"
        RUNNING = LedgerEvent.RUNNING, "Running"
        DISPATCHED = LedgerEvent.DISPATCHED, "Dispatched"

    allocation = models.ForeignKey(Allocation, on_delete=models.PROTECT,
                                   related_name="queue_events")
    workload_uid = models.CharField(max_length=64)
    workload = models.CharField(max_length=253)  # the Job's name, as the tenant knows it
    local_queue = models.CharField(max_length=253, blank=True)
    priority = models.IntegerField(default=0)
    kind = models.CharField(max_length=12, choices=Kind.choices)
    # When the step happened, as well as the portal can tell (fleet/queues/timing.py:
    # best_time): an Event's MicroTime, the moment its watch saw the change, or the stamp
    # Kubernetes recorded (`kube_at`, whole seconds; null where it recorded none). `at_source`
    # says which ("" on rows recorded before sources were kept: the stamp, or the portal's
    # clock); the step happened within `at_bound_seconds` of `at` (null: unknown).
    at = models.DateTimeField(db_index=True)
    kube_at = models.DateTimeField(null=True, blank=True)
    at_source = models.CharField(max_length=8, blank=True, choices=[
        ("event", "Event time"), ("watch", "Seen by the watch"), ("object", "Object stamp"),
        ("portal", "Portal's clock")])
    at_bound_seconds = models.FloatField(null=True, blank=True)
    devices = models.DecimalField(max_digits=12, decimal_places=4, default=0)
    borrowed = models.DecimalField(max_digits=12, decimal_places=4, default=0)
    wait_seconds = models.FloatField(null=True, blank=True)
    # The seam this step closes, in seconds: admitted ← queued (queue wait), pods ← admitted,
    # claimed ← pods (claim allocation), scheduled ← pods, running ← admitted (pod start).
    seam_seconds = models.FloatField(null=True, blank=True)
    reason = models.TextField()
    detail = models.TextField(blank=True)

    APPEND_ONLY = "queue history is append-only"

    class Meta:
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["allocation", "kind", "at"]),
                   # the steps a workload already has, read to measure its next seam
                   models.Index(fields=["workload_uid", "kind"])]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.workload} {self.kind}"


class ClusterQueueState(models.Model):
    """An allocation's ClusterQueue as last read: quota, use, borrowing."""

    name = models.CharField(max_length=253, unique=True)
    allocation = models.OneToOneField(Allocation, null=True, blank=True,
                                      on_delete=models.SET_NULL, related_name="queue_state")
    cohort = models.CharField(max_length=253, blank=True)
    resource = models.CharField(max_length=253, blank=True)
    nominal = models.DecimalField(max_digits=12, decimal_places=4, default=0)
    borrowing_limit = models.DecimalField(max_digits=12, decimal_places=4, null=True,
                                          blank=True)
    usage = models.DecimalField(max_digits=12, decimal_places=4, default=0)
    borrowed = models.DecimalField(max_digits=12, decimal_places=4, default=0)
    pending = models.PositiveIntegerField(default=0)
    admitted = models.PositiveIntegerField(default=0)
    active = models.BooleanField(default=True)
    inactive_reason = models.CharField(max_length=120, blank=True)
    observed_at = models.DateTimeField()

    def __str__(self) -> str:
        return self.name


class QueueUsageHour(models.Model):
    """Devices admitted through an allocation's queue, integrated per hour from successive
    reads; `borrowed_s` is the part above its nominal quota, which billing charges."""

    allocation = models.ForeignKey(Allocation, on_delete=models.PROTECT,
                                   related_name="queue_hours")
    hour = models.DateTimeField()
    used_s = models.DecimalField(max_digits=16, decimal_places=4, default=0)
    borrowed_s = models.DecimalField(max_digits=16, decimal_places=4, default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["allocation", "hour"],
                                               name="one_queue_hour_each")]

    def __str__(self) -> str:
        return f"{self.allocation_id} {self.hour:%Y-%m-%d %H:00}"
