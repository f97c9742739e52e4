"""Desired Kubernetes state of an allocation, rendered by pure functions.

`render_manifests(spec)` returns every object the allocation needs, in apply order, each
labelled with the tenant and allocation so that it can be listed, reconciled and pruned.
Objects shared by a pool (its ResourceFlavor) carry the pool label but no allocation label,
so retiring one tenant never removes another's flavor.

Long on purpose: every object of every route from one spec, in one module, because the
review's preview, approval, reconcile and the hostile-spec tests must all read the same
renderer, and the guards, quota and access every route shares sit beside the route rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..domain import Route, parse_quantity
from ..vocabulary import (
    CONFIDENTIAL_BIOS,
    DEDICATED_LABEL,
    DEDICATED_TAINT,
    DRA_DRIVER,
    KUEUE,
    LABEL_ALLOCATION,
    LABEL_POOL,
    LABEL_ROUTE,
    LABEL_TENANT,
    MANAGED_BY,
    MANAGER,
    MIG_RESOURCE_PREFIX,
    WHOLE_GPU,
)
from .admission import (
    GUARD_KIND_NAMES,
    GUARD_POLICY_KIND,
    PARAMS_API,
    PARAMS_KIND,
    guard_entries,
    guard_params,
    is_guard_params,
    shared_guards,
)
from .guard_check import guard_check, is_guard_check

MIG_DRIVER = DRA_DRIVER
# Namespaces of the platform itself (CNI, kube-proxy, device plugins, DCGM): their
# DaemonSets tolerate every taint and must keep running on every node, dedicated ones too.
PLATFORM_NAMESPACES = ("kube-system", "kube-node-lease", "kube-public")


def mig_device_class(profile: str) -> str:
    """The platform's DeviceClass of one MIG profile: claims name it, with no CEL of their own
    (Kueue refuses CEL selectors in claim templates), and quota counts it per namespace."""
    return f"mig-{profile}.aifactory.io"


# The names tenants use: the LocalQueue they submit to, and a MIG profile's claim template.
LOCAL_QUEUE = "gpu"


def claim_template_name(profile: str) -> str:
    return f"mig-{profile.replace('.', '-')}"


def mig_resource(profile: str) -> str:
    """The logical resource Kueue counts a profile's claims under (deviceClassMappings)."""
    return f"{MIG_RESOURCE_PREFIX}{profile}"


def kueue_device_class_mappings(profiles) -> list[dict]:
    """What Kueue's Configuration needs (`resources.deviceClassMappings`) for these profiles:
    without it, MIG claims are silently not counted against any quota."""
    return [{"name": mig_resource(p), "deviceClassNames": [mig_device_class(p)]}
            for p in sorted(set(profiles))]


@dataclass(frozen=True)
class AllocationSpec:
    """Everything rendering needs, as plain values (fleet/allocations/desired.py reads them)."""

    allocation_id: int
    tenant: str
    namespace: str
    route: str
    pool: str
    gpu_model: str
    node_selector: dict[str, str] = field(default_factory=dict)
    whole_devices: int = 0
    mig_profile: str = ""
    mig_count: int = 0
    device_class: str = DRA_DRIVER
    nodes: tuple[str, ...] = ()  # dedicated block: the reserved nodes
    cohort: str = ""
    borrowing_limit: int = 0
    group_prefix: str = "oidc:"
    lead_group: str = "/tenants/{slug}/leads"
    member_group: str = "/tenants/{slug}/members"
    confidential_runtime_class: str = "kata-qemu-nvidia-gpu-snp"
    cpu_per_device: int = 16
    memory_gi_per_device: int = 128
    vcluster_chart_version: str = "0.30.0"
    platform_namespaces: tuple[str, ...] = PLATFORM_NAMESPACES


def _labels(spec: AllocationSpec, *, allocation: bool = True) -> dict[str, str]:
    labels = {MANAGED_BY: MANAGER, LABEL_TENANT: spec.tenant, LABEL_ROUTE: spec.route,
              LABEL_POOL: spec.pool}
    if allocation:
        labels[LABEL_ALLOCATION] = str(spec.allocation_id)
    return labels


def _meta(spec: AllocationSpec, name: str, *, namespaced: bool = True,
          allocation: bool = True) -> dict:
    meta = {"name": name, "labels": _labels(spec, allocation=allocation)}
    if namespaced:
        meta["namespace"] = spec.namespace
    return meta


def _quota_devices(spec: AllocationSpec) -> int:
    return spec.mig_count if spec.route == Route.MIG_VCLUSTER else spec.whole_devices


def flavor_name(spec: AllocationSpec) -> str:
    # Dedicated blocks get a flavor of their own (it selects exactly their nodes).
    if spec.route == Route.DEDICATED_BLOCK:
        return f"{spec.namespace}-dedicated"
    return f"pool-{spec.pool}"


def _namespace(spec: AllocationSpec) -> dict:
    strict = spec.route in (Route.CONFIDENTIAL_POOL, Route.DEDICATED_BLOCK)
    level = "restricted" if strict else "baseline"
    labels = _labels(spec) | {
        "pod-security.kubernetes.io/enforce": level,
        "pod-security.kubernetes.io/enforce-version": "latest",
        "pod-security.kubernetes.io/warn": "restricted",
    }
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": spec.namespace, "labels": labels}}


def _borrows(spec: AllocationSpec) -> bool:
    return spec.route in (Route.SHARED_POOL, Route.MIG_VCLUSTER) and bool(spec.cohort)


def ceiling_devices(spec: AllocationSpec) -> int:
    """The most devices (or slices) the namespace may run at once: its quota, plus what it
    may borrow from the cohort. The namespace ceiling must allow what Kueue admits."""
    return _quota_devices(spec) + (spec.borrowing_limit if _borrows(spec) else 0)


def _cpu(devices: int, spec: AllocationSpec) -> str:
    return str(max(1, devices) * spec.cpu_per_device)


def _memory(devices: int, spec: AllocationSpec) -> str:
    return f"{max(1, devices) * spec.memory_gi_per_device}Gi"


def _quota(spec: AllocationSpec) -> dict:
    devices = ceiling_devices(spec)
    hard = {"requests.cpu": _cpu(devices, spec), "requests.memory": _memory(devices, spec),
            "limits.memory": _memory(devices, spec)}
    if spec.route == Route.MIG_VCLUSTER:
        # Slices only through claims of the approved profile's class; nothing else.
        hard[f"{mig_device_class(spec.mig_profile)}.deviceclass.resource.k8s.io/devices"] = \
            str(devices)
        hard[f"{spec.device_class}.deviceclass.resource.k8s.io/devices"] = "0"
        hard[f"{MIG_DRIVER}.deviceclass.resource.k8s.io/devices"] = "0"
        hard[f"requests.{WHOLE_GPU}"] = "0"
    else:
        hard[f"requests.{WHOLE_GPU}"] = str(devices)
        hard[f"{spec.device_class}.deviceclass.resource.k8s.io/devices"] = str(devices)
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": _meta(spec, "gpu-quota"),
            "spec": {"hard": hard}}


def _limit_range(spec: AllocationSpec) -> dict:
    return {"apiVersion": "v1", "kind": "LimitRange", "metadata": _meta(spec, "defaults"),
            "spec": {"limits": [{"type": "Container",
                                 "default": {"cpu": "2", "memory": "8Gi"},
                                 "defaultRequest": {"cpu": "500m", "memory": "2Gi"}}]}}


# Members run workloads and nothing else: the built-in `edit` role would also let them change
# NetworkPolicies (open what the platform closed). This ClusterRole ships with the portal
# (deploy/rbac.yaml) and is bound per namespace. The binding's name changed with its role
# (a roleRef cannot change); reconcile prunes the old `tenant-members` binding.
MEMBER_ROLE = "aifactory-tenant-member"


def _role_bindings(spec: AllocationSpec) -> list[dict]:
    out = []
    for name, role, pattern in (("tenant-leads", "admin", spec.lead_group),
                                ("tenant-members-workloads", MEMBER_ROLE, spec.member_group)):
        out.append({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": _meta(spec, name),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                          "name": spec.group_prefix + pattern.format(slug=spec.tenant)}],
        })
    return out


def _network_policies(spec: AllocationSpec) -> list[dict]:
    dns = {"to": [{"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "kube-system"}}, "podSelector": {"matchLabels": {
            "k8s-app": "kube-dns"}}}],
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}
    same_ns = {"podSelector": {}}
    policies = [
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
         "metadata": _meta(spec, "default-deny"),
         "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
         "metadata": _meta(spec, "allow-same-namespace-and-dns"),
         "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"],
                  "ingress": [{"from": [same_ns]}],
                  "egress": [{"to": [same_ns]}, dns]}},
    ]
    if spec.route != Route.CONFIDENTIAL_POOL:
        # Outside the confidential pool, workloads may reach the internet (model hubs,
        # object storage), never other tenants' namespaces or the cluster's private ranges.
        policies.append({
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": _meta(spec, "allow-internet-egress"),
            "spec": {"podSelector": {}, "policyTypes": ["Egress"], "egress": [{"to": [
                {"ipBlock": {"cidr": "0.0.0.0/0", "except": [
                    "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"]}}]}]}})
    return policies


def _flavor(spec: AllocationSpec) -> dict:
    if spec.route == Route.DEDICATED_BLOCK:
        return {"apiVersion": KUEUE, "kind": "ResourceFlavor",
                "metadata": _meta(spec, flavor_name(spec), namespaced=False),
                # Its own nodes, not the tenant's: Kueue admits a block's work against the
                # block's quota, so its pods must land on the block's nodes (a tenant's two
                # blocks would otherwise fill each other's). The taint stays per tenant.
                "spec": {"nodeLabels": {DEDICATED_LABEL: spec.tenant,
                                        LABEL_ALLOCATION: str(spec.allocation_id)},
                         "nodeTaints": [{"key": DEDICATED_TAINT, "value": spec.tenant,
                                         "effect": "NoSchedule"}],
                         "tolerations": [{"key": DEDICATED_TAINT, "operator": "Equal",
                                          "value": spec.tenant, "effect": "NoSchedule"}]}}
    labels = dict(spec.node_selector)
    if spec.route == Route.CONFIDENTIAL_POOL:
        labels |= CONFIDENTIAL_BIOS
    return {"apiVersion": KUEUE, "kind": "ResourceFlavor",
            "metadata": _meta(spec, flavor_name(spec), namespaced=False, allocation=False),
            "spec": {"nodeLabels": labels}}


def queue_preemption(spec: AllocationSpec) -> dict:
    """The queue policy of every route (docs/queue-policy.md): within a tenant's own queue a
    higher-priority workload preempts a lower-priority one, cohort or not; in a cohort, a
    queue also takes back what it lent. Without the first rule a tenant's urgent job waits
    behind its own batch job forever on every stand-alone queue."""
    policy = {"withinClusterQueue": "LowerPriority"}
    if _borrows(spec):
        policy["reclaimWithinCohort"] = "Any"
    return policy


def _cluster_queue(spec: AllocationSpec) -> dict:
    """Covers CPU and memory as well as devices: every pod carries CPU and memory requests
    (the LimitRange sets defaults), and Kueue holds a workload whose resources its queue does
    not cover. CPU and memory are sized per device, as the namespace quota is."""
    resource = (mig_resource(spec.mig_profile) if spec.route == Route.MIG_VCLUSTER
                else WHOLE_GPU)
    nominal = _quota_devices(spec)
    quotas: list[dict] = [{"name": "cpu", "nominalQuota": _cpu(nominal, spec)},
                          {"name": "memory", "nominalQuota": _memory(nominal, spec)},
                          {"name": resource, "nominalQuota": nominal}]
    body: dict = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": spec.namespace}},
        "queueingStrategy": "BestEffortFIFO",
    }
    if _borrows(spec):
        body["cohortName"] = spec.cohort
        borrow = spec.borrowing_limit
        quotas[0]["borrowingLimit"] = str(borrow * spec.cpu_per_device)
        quotas[1]["borrowingLimit"] = f"{borrow * spec.memory_gi_per_device}Gi"
        quotas[2]["borrowingLimit"] = borrow
    body["preemption"] = queue_preemption(spec)
    # Dedicated and confidential queues stand alone: no cohort, no lending, no borrowing.
    body["resourceGroups"] = [{"coveredResources": [q["name"] for q in quotas], "flavors": [
        {"name": flavor_name(spec), "resources": quotas}]}]
    return {"apiVersion": KUEUE, "kind": "ClusterQueue",
            "metadata": _meta(spec, f"{spec.namespace}", namespaced=False), "spec": body}


def _local_queue(spec: AllocationSpec) -> dict:
    return {"apiVersion": KUEUE, "kind": "LocalQueue", "metadata": _meta(spec, LOCAL_QUEUE),
            "spec": {"clusterQueue": spec.namespace}}


def _dedicated_nodes(spec: AllocationSpec) -> list[dict]:
    return [{"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": node, "labels": {DEDICATED_LABEL: spec.tenant,
                                 LABEL_ALLOCATION: str(spec.allocation_id)}},
        "spec": {"taints": [{"key": DEDICATED_TAINT, "value": spec.tenant,
                             "effect": "NoSchedule"}]}} for node in spec.nodes]


def _mig_device_class(spec: AllocationSpec) -> dict:
    """Pool-level (no allocation label, like the flavor): one class per offered profile."""
    expression = (f"device.driver == '{MIG_DRIVER}' && "
                  f"device.attributes['{MIG_DRIVER}'].type == 'mig' && "
                  f"device.attributes['{MIG_DRIVER}'].profile == '{spec.mig_profile}'")
    meta = _meta(spec, mig_device_class(spec.mig_profile), namespaced=False, allocation=False)
    meta["labels"].pop(LABEL_TENANT, None)
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": meta,
            "spec": {"selectors": [{"cel": {"expression": expression}}]}}


def _claim_template(spec: AllocationSpec) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": _meta(spec, claim_template_name(spec.mig_profile)),
            "spec": {"spec": {"devices": {"requests": [{"name": "mig", "exactly": {
                "deviceClassName": mig_device_class(spec.mig_profile), "count": 1}}]}}}}


def _vcluster(spec: AllocationSpec) -> list[dict]:
    name = "vcluster"
    values = (
        "sync:\n  toHost:\n    pods:\n      enabled: true\n    resourceClaims:\n"
        "      enabled: true\n    resourceClaimTemplates:\n      enabled: true\n"
        "  fromHost:\n    deviceClasses:\n      enabled: true\n"
        "policies:\n  resourceQuota:\n    enabled: false\n")
    return [
        {"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "VCluster",
         "metadata": _meta(spec, name),
         "spec": {"helmRelease": {"chart": {"name": "vcluster", "repo":
                                            "https://charts.loft.sh",
                                            "version": spec.vcluster_chart_version},
                                  "values": values}}},
        {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
         "metadata": _meta(spec, name),
         "spec": {"controlPlaneRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                      "kind": "VCluster", "name": name},
                  "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                        "kind": "VCluster", "name": name}}},
    ]


def guard_manifests(spec: AllocationSpec) -> list[dict]:
    """The allocation's part of the admission guards: its own check params, the route's
    shared policies and bindings, then the check (none for an unguarded route)."""
    shared = shared_guards(spec.route, platform_namespaces=spec.platform_namespaces,
                           runtime_class=spec.confidential_runtime_class)
    if not shared:
        return []
    entries = guard_entries(spec.route, allocation_id=spec.allocation_id, tenant=spec.tenant,
                            namespace=spec.namespace, nodes=spec.nodes, shared=shared)
    return [guard_params(spec.allocation_id, entries), *shared, *guard_check()]


def render_manifests(spec: AllocationSpec) -> list[dict]:
    """Every object of the allocation, in the order they must be applied: guard rails
    first (the API server takes a moment to load an admission policy), the tenant's access
    last (nobody can act in the namespace before its quota, policies and queue exist)."""
    out = guard_manifests(spec)
    out += [_namespace(spec), _quota(spec), _limit_range(spec), *_network_policies(spec)]
    if spec.route == Route.DEDICATED_BLOCK:
        out += _dedicated_nodes(spec)
    if spec.route == Route.MIG_VCLUSTER:
        out += [_mig_device_class(spec), _claim_template(spec)]
        out += _vcluster(spec)
    out += [_flavor(spec), _cluster_queue(spec), _local_queue(spec), *_role_bindings(spec)]
    return out


def is_guard_object(manifest: dict) -> bool:
    """A guard policy, binding or the guards' params: the platform's, shared by
    allocations, applied before anything that relies on them."""
    return manifest.get("kind") in GUARD_KIND_NAMES or is_guard_params(manifest)


# Node names are the platform's business (a tenant sees its quota, not its hosts), and the
# guards' params name the nodes they protect and every guarded tenant.
PLATFORM_ONLY_KINDS = frozenset({"Node", *GUARD_KIND_NAMES, PARAMS_KIND})


def tenant_may_see(manifest: dict) -> bool:
    """Whether a tenant's people are shown this object of their allocation."""
    return manifest.get("kind") not in PLATFORM_ONLY_KINDS


# What only comes after the guards are in force: a dedicated block's nodes (labelled and
# tainted for the tenant) and the tenant's access. Everything else is inert without them,
# so it is applied while the API server compiles the guards.
AFTER_GUARDS_KINDS = frozenset({"Node", "RoleBinding"})


def apply_waves(manifests: list[dict]) -> list[list[dict]]:
    """render_manifests' order as waves that may each be applied in parallel: the guard
    rails first — the params with every shared policy (a binding refuses everything while
    its params are missing), then every shared binding, then the check's policy alone and
    the check's binding alone, so each binding follows its policy and the check is the last
    object written to both watches (what its refusal proves rests on that); then the
    namespace with the cluster-scoped objects (device class, flavor, ClusterQueue); then
    everything inside the namespace; then a dedicated block's nodes; the tenant's
    RoleBindings last, so nobody gets access before quota, policies and queue exist."""
    guards = [m for m in manifests if is_guard_object(m)]
    rails = [m for m in guards if not is_guard_check(m)]
    checks = [m for m in guards if is_guard_check(m)]
    first = [m for m in rails if m["kind"] != "ValidatingAdmissionPolicyBinding"]
    bindings = [m for m in rails if m["kind"] == "ValidatingAdmissionPolicyBinding"]
    checks.sort(key=lambda m: m["kind"] != GUARD_POLICY_KIND)  # policy first
    waves = [w for w in (first, bindings) if w] + [[m] for m in checks]
    rest = [m for m in manifests if not is_guard_object(m)]
    nodes = [m for m in rest if m["kind"] == "Node"]
    cluster = [m for m in rest if not m["metadata"].get("namespace") and m["kind"] != "Node"]
    access = [m for m in rest if m["kind"] == "RoleBinding"]
    inside = [m for m in rest if m["metadata"].get("namespace") and m["kind"] != "RoleBinding"]
    return [*waves, *(w for w in (cluster, inside, nodes, access) if w)]


# Kinds an allocation may own, for listing and pruning (namespaces last). The guards'
# policies and bindings are listed for portals that rendered them per allocation (each
# carried its allocation's label); the shared ones carry none and are never pruned. Each
# guarded allocation's check params carry its label and go with it.
OWNED_KINDS: tuple[tuple[str, str], ...] = (
    (KUEUE, "LocalQueue"), (KUEUE, "ClusterQueue"), (KUEUE, "ResourceFlavor"),
    ("cluster.x-k8s.io/v1beta2", "Cluster"),
    ("infrastructure.cluster.x-k8s.io/v1alpha1", "VCluster"),
    ("resource.k8s.io/v1", "ResourceClaimTemplate"),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"),
    (PARAMS_API, PARAMS_KIND),  # the allocation's check params
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("v1", "LimitRange"), ("v1", "ResourceQuota"), ("v1", "Namespace"),
)


def node_release(name: str) -> dict:
    """Applying this with the portal's field manager drops the labels and taint it owned."""
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}


def drift(desired, live, path: str = "") -> list[str]:
    """Paths where the live object no longer has what we want (extra live fields are fine)."""
    if isinstance(desired, dict):
        if not isinstance(live, dict):
            return [path or "/"]
        out = []
        for key, value in desired.items():
            out += drift(value, live.get(key), f"{path}.{key}" if path else key)
        return out
    if isinstance(desired, list):
        if not isinstance(live, list) or len(live) != len(desired):
            return [path]
        out = []
        for i, (d, lv) in enumerate(zip(desired, live, strict=True)):
            out += drift(d, lv, f"{path}[{i}]")
        return out
    return [] if _same(desired, live, path) else [path]


def _same(desired, live, path: str = "") -> bool:
    if desired == live:
        return True
    if live is None:
        return False
    if str(desired) == str(live):
        return True  # the server normalises some scalars ("4" vs 4)
    # and writes quantities in its canonical form: "1024Gi" comes back as "1Ti". Only in a
    # spec, never a name, label or annotation, nor the guards' entries (compared as text).
    if path.startswith("metadata") or ".entries." in f".{path}.":
        return False
    ours = parse_quantity(str(desired))
    return ours is not None and ours == parse_quantity(str(live))
