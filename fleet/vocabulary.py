"""The platform's vocabulary, once: label and annotation keys, resource names, API groups and
node conditions that the portal, GPU feature discovery, NVIDIA's DRA driver, Kueue and the
burn-in pipeline agree on. Every room of fleet reads them from here."""

from __future__ import annotations

# Who manages an object, and whose it is
MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "aifactory-portal"
LABEL_TENANT = "aifactory.io/tenant"
LABEL_ALLOCATION = "aifactory.io/allocation"
LABEL_ROUTE = "aifactory.io/route"
LABEL_POOL = "aifactory.io/pool"
# The cluster the portal was configured with (PORTAL_KUBE_BACKEND): always registered.
HOME_CLUSTER = "local"


class ClusterRoles:
    """What a cluster is to MultiKueue (the registry's choices; the pure checks' words)."""

    STANDALONE, MANAGER, WORKER = "standalone", "manager", "worker"


class ClusterConnections:
    """How the portal reaches a cluster (the registry's choices; the adapter's kinds)."""

    CONFIGURED, KUBECONFIG, DRY_RUN = "configured", "kubeconfig", "dry-run"

# Nodes: GPU feature discovery's labels, and our burn-in pipeline's
GFD_PRODUCT = "nvidia.com/gpu.product"
GFD_COUNT = "nvidia.com/gpu.count"
GFD_MEMORY = "nvidia.com/gpu.memory"
GFD_MIG_CAPABLE = "nvidia.com/mig.capable"
GFD_MIG_CONFIG = "nvidia.com/mig.config"
VALIDATED_LABEL = "aifactory.io/validated"
BIOS_PROFILE_LABEL = "aifactory.io/bios-profile"
CONFIDENTIAL_BIOS = {BIOS_PROFILE_LABEL: "confidential"}
BURN_IN_ANNOTATION = "aifactory.io/burn-in-date"
FAILURE_ANNOTATION = "aifactory.io/validation-failure"
DEDICATED_TAINT = "aifactory.io/dedicated"
DEDICATED_LABEL = "aifactory.io/dedicated-to"
# Node conditions Node Problem Detector writes from DCGM (PORTAL_GPU_CONDITION_TYPES names
# the ones that make a node unhealthy; these are its default).
DEFAULT_GPU_CONDITIONS = ("GpuXidError", "GpuEccError", "GpuNvlinkError", "GpuThermal")

# States, each defined once (choices for the models, names for the pure functions)
class NodeState:
    """What a GPU node is to the portal, in the order a fleet page lists them."""

    SCHEDULABLE, CORDONED, UNHEALTHY = "schedulable", "cordoned", "unhealthy"
    UNVALIDATED, RETIRING, GONE = "unvalidated", "retiring", "gone"
    ALL = (SCHEDULABLE, CORDONED, UNHEALTHY, UNVALIDATED, RETIRING, GONE)
    CHOICES = [(s, s.capitalize()) for s in ALL]


class WorkloadState:
    """A Kueue Workload as the portal reads it (fleet.queues.truth)."""

    PENDING, ADMITTED, DEACTIVATED = "pending", "admitted", "deactivated"
    FINISHED, GONE = "finished", "gone"
    # Evicted or preempted by Kueue, its quota still reserved while its pods stop: not
    # running work any more, not waiting yet (fleet.queues.truth.workload_state).
    STOPPING = "stopping"
    CHOICES = [(PENDING, "Pending"), (ADMITTED, "Running"), (DEACTIVATED, "Deactivated"),
               (FINISHED, "Finished"), (GONE, "Deleted"), (STOPPING, "Stopping")]
    # The states in which a workload holds quota of its ClusterQueue.
    HOLDING = (ADMITTED, STOPPING)


class LedgerEvent:
    """The kinds of a workload's ledger rows (fleet.queues.ledger): Kueue's transitions, then
    the steps after admission from what Kubernetes recorded (fleet.queues.placement)."""

    SUBMITTED, ADMITTED, PREEMPTED, EVICTED = "submitted", "admitted", "preempted", "evicted"
    FINISHED, GONE = "finished", "gone"
    DISPATCHED = "dispatched"  # MultiKueue: a worker admitted the manager's workload
    PODS, CLAIMED, SCHEDULED, RUNNING = "pods", "claimed", "scheduled", "running"
    REQUEUED = "requeued"  # its pods stopped after a preemption or eviction: back in the queue


# Resources
WHOLE_GPU = "nvidia.com/gpu"
DRA_DRIVER = "gpu.nvidia.com"  # NVIDIA's DRA driver: MIG devices carry its attributes
MIG_RESOURCE_PREFIX = "mig.aifactory.io/"  # what Kueue counts a MIG profile's claims under

# API groups and versions
KUEUE = "kueue.x-k8s.io/v1beta2"
KUEUE_VISIBILITY = "/apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/{}/pendingworkloads"
# The labels a tenant's job carries for Kueue: its LocalQueue, and its run-time limit.
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_MAX_EXEC_LABEL = "kueue.x-k8s.io/max-exec-time-seconds"
