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

import hashlib
import json
from dataclasses import dataclass, field

from ..domain import Route
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

MIG_DRIVER = DRA_DRIVER
# Namespaces of the platform itself (CNI, kube-proxy, device plugins, DCGM): their
# DaemonSets tolerate every taint and must keep running on every node, dedicated ones too.
PLATFORM_NAMESPACES = ("kube-system", "kube-node-lease", "kube-public")
GUARD_POLICY_KIND = "ValidatingAdmissionPolicy"
GUARD_BINDING_KIND = "ValidatingAdmissionPolicyBinding"
GUARD_KIND_NAMES = frozenset({GUARD_POLICY_KIND, GUARD_BINDING_KIND})


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


# Where a pod's spec sits in each kind a tenant may write, so every guard is checked on
# the template at submit time (a refusal the tenant sees at once) and again on the pods that
# controllers make from it (the last word: nothing reaches a node without passing it).
POD_SPEC_PATHS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("", ("pods",), "spec"),
    ("apps", ("deployments", "replicasets", "statefulsets", "daemonsets"),
     "spec.template.spec"),
    ("batch", ("jobs",), "spec.template.spec"),
    ("batch", ("cronjobs",), "spec.jobTemplate.spec.template.spec"),
)
def _cel_list(values) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


def _guard_variables(path: str, *, pods: bool) -> list[dict]:
    """`spec`: the pod spec; `changed`: whether this write can change placement (a create,
    or a template edit: an update of a pod cannot move it, and scaling a Deployment does not
    touch its template); `fresh`: the tolerations this write adds (on a pod update only the
    new ones: a pod admitted before a guard existed must still be updatable, e.g. to remove
    a finalizer). Every field is read through optionals, so absent fields never fail."""
    spec = f"object.{path}"
    changed = "request.operation != 'UPDATE'" if pods else \
        f"request.operation != 'UPDATE' || oldObject == null || {spec} != oldObject.{path}"
    fresh = ("variables.spec.?tolerations.orValue([]).filter(t, "
             "request.operation != 'UPDATE' || oldObject == null || "
             f"!oldObject.{path}.?tolerations.orValue([]).exists(o, o == t))") if pods else \
        "variables.spec.?tolerations.orValue([]).filter(t, variables.changed)"
    return [{"name": "spec", "expression": spec},
            {"name": "changed", "expression": changed},
            {"name": "fresh", "expression": fresh}]


def _admission_policies(spec: AllocationSpec, name: str, validations, namespace_selector: dict,
                        *, pod_only: list[dict] = ()) -> list[dict]:
    """One ValidatingAdmissionPolicy (and binding) per place a pod spec can sit. Each
    validation is (expression over `variables`, message); `pod_only` ones apply to pods."""
    group = "admissionregistration.k8s.io/v1"
    out = []
    for api_group, resources, path in POD_SPEC_PATHS:
        pods = resources == ("pods",)
        suffix = "pods" if pods else resources[0].rstrip("s")
        if api_group == "apps":
            suffix = "apps"
        policy = f"{name}-{suffix}"
        checks = [*validations, *(pod_only if pods else ())]
        out += [
            {"apiVersion": group, "kind": "ValidatingAdmissionPolicy",
             "metadata": _meta(spec, policy, namespaced=False),
             "spec": {"failurePolicy": "Fail",
                      "matchConstraints": {"resourceRules": [{
                          "apiGroups": [api_group], "apiVersions": ["v1"],
                          "operations": ["CREATE", "UPDATE"], "resources": list(resources)}]},
                      "variables": _guard_variables(path, pods=pods),
                      "validations": [{"expression": e, "message": m} for e, m in checks]}},
            {"apiVersion": group, "kind": "ValidatingAdmissionPolicyBinding",
             "metadata": _meta(spec, policy, namespaced=False),
             "spec": {"policyName": policy, "validationActions": ["Deny"],
                      "matchResources": {"namespaceSelector": namespace_selector}}},
        ]
    return out


def _tolerates(key_test: str, effect: str = "NoSchedule") -> str:
    return (f"variables.fresh.exists(t, {key_test} && "
            f"t.?effect.orValue('') in ['', '{effect}'])")


def dedicated_guard_rules(spec: AllocationSpec) -> list[tuple[str, str]]:
    """What no namespace outside the tenant's own (and the platform's) may do to the
    tenant's dedicated nodes. The taint keeps the scheduler away; these keep a pod from
    tolerating it, from naming a node directly (spec.nodeName skips the scheduler, and a
    kubelet enforces only NoExecute taints) and, for a clear refusal instead of a pod that
    pends forever, from selecting those nodes."""
    tenant, nodes = spec.tenant, _cel_list(spec.nodes)
    everything = _tolerates("t.?key.orValue('') == '' && "
                            "t.?operator.orValue('Equal') == 'Exists'")
    ours = _tolerates(f"t.?key.orValue('') == '{DEDICATED_TAINT}' && "
                      f"(t.?operator.orValue('Equal') == 'Exists' || "
                      f"t.?value.orValue('') == '{tenant}')")
    pinned = f"variables.changed && variables.spec.?nodeName.orValue('') in {nodes}"
    # A node-affinity term selects only dedicated nodes when one of its `In` expressions
    # lists nothing else (terms are ORed: one such term is enough to aim at the block).
    block = str(spec.allocation_id)  # the block's own node label (its flavor selects it)
    aims = (f"(e.key == '{DEDICATED_LABEL}' && e.values.all(v, v == '{tenant}')) || "
            f"(e.key == '{LABEL_ALLOCATION}' && e.values.all(v, v == '{block}')) || "
            f"(e.key == 'kubernetes.io/hostname' && e.values.all(v, v in {nodes}))")
    selector = ("variables.changed && ("
                f"variables.spec.?nodeSelector[?'{DEDICATED_LABEL}'].orValue('') == '{tenant}'"
                f" || variables.spec.?nodeSelector[?'{LABEL_ALLOCATION}'].orValue('') == "
                f"'{block}'"
                f" || variables.spec.?nodeSelector[?'kubernetes.io/hostname'].orValue('') in "
                f"{nodes} || variables.spec.?affinity.?nodeAffinity"
                ".?requiredDuringSchedulingIgnoredDuringExecution.?nodeSelectorTerms"
                ".orValue([]).exists(term, "
                "term.?matchExpressions.orValue([]).exists(e, e.operator == 'In' && "
                f"e.?values.orValue([]).size() > 0 && ({aims})) || "
                "term.?matchFields.orValue([]).exists(e, e.key == 'metadata.name' && "
                "e.operator == 'In' && e.?values.orValue([]).size() > 0 && "
                f"e.values.all(v, v in {nodes}))))")
    # Refusals go to other tenants: they name neither the owner nor its nodes.
    return [
        (f"!({ours})",
         f"Only the tenant a dedicated block belongs to may tolerate its taint "
         f"({DEDICATED_TAINT}); remove that toleration."),
        (f"!({everything})",
         "A toleration of every taint (operator Exists without a key) would let this pod "
         "onto nodes dedicated to another tenant; tolerate the taints you need by key."),
        (f"!({pinned})",
         "That node is dedicated to another tenant: a pod of this namespace may not name it "
         "in spec.nodeName; leave placement to the scheduler."),
        (f"!({selector})",
         "This pod selects nodes dedicated to another tenant; it could never run there. "
         "Select other nodes or leave placement to the scheduler."),
    ]


def guard_name(allocation_id: int) -> str:
    """What an allocation's admission guards (and their check) are named after: cluster-scoped
    objects, so named by the allocation, never by its tenant (refusals quote the name)."""
    return f"aifactory-a{allocation_id}"


def _dedicated_guard(spec: AllocationSpec) -> list[dict]:
    # Every namespace but the tenant's own and the platform's. NotIn also matches namespaces
    # without the tenant label (default, anything the portal does not own).
    selector = {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
         "values": list(spec.platform_namespaces)},
        {"key": LABEL_TENANT, "operator": "NotIn", "values": [spec.tenant]}]}
    # The API server quotes the policy's name in every refusal, and refusals go to other
    # tenants: the name says which allocation, never whose.
    return _admission_policies(spec, f"{guard_name(spec.allocation_id)}-dedicated",
                               dedicated_guard_rules(spec), selector)


def confidential_guard_rules(spec: AllocationSpec) -> tuple[list[tuple[str, str]],
                                                            list[tuple[str, str]]]:
    """(rules for pods and templates, rules for pods only). A confidential namespace runs
    only pods of the confidential RuntimeClass, placed by the scheduler on nodes of the
    confidential BIOS profile: Kueue writes the flavor's node labels into the pods it admits;
    a pod made by hand must select them itself."""
    rc = spec.confidential_runtime_class
    (bios_key, bios_value), = CONFIDENTIAL_BIOS.items()
    both = [
        (f"!variables.changed || variables.spec.?runtimeClassName.orValue('') == '{rc}'",
         f"Pods in this confidential namespace must use the {rc} RuntimeClass "
         f"(spec.runtimeClassName: {rc})."),
        ("!variables.changed || variables.spec.?nodeName.orValue('') == ''",
         "Pods in this confidential namespace are placed by the scheduler on confidential "
         "nodes; spec.nodeName is not allowed."),
    ]
    pods = [
        (f"!variables.changed || variables.spec.?nodeSelector[?'{bios_key}'].orValue('') == "
         f"'{bios_value}'",
         f"Pods in this confidential namespace must run on confidential nodes: submit them "
         f"through the LocalQueue (Kueue adds the node selector) or set nodeSelector "
         f"{bios_key}: {bios_value}."),
    ]
    return both, pods


def _confidential_guard(spec: AllocationSpec) -> list[dict]:
    both, pods = confidential_guard_rules(spec)
    return _admission_policies(
        spec, f"{guard_name(spec.allocation_id)}-confidential", both,
        {"matchLabels": {"kubernetes.io/metadata.name": spec.namespace}}, pod_only=pods)


# The API server loads admission policies from a watch and recompiles them about once a
# second, each apiserver on its own: a policy that was just created may not refuse anything
# yet. Nothing in the API says when it does, so provisioning asks: after the guards it
# applies one last policy, the check, that refuses exactly one object nobody else creates (a
# namespace carrying the check's own label), and dry-runs that object until it is refused.
# The check comes last in both watches (policies and bindings), and the API server compiles
# every policy it has seen at once, so its refusal means the guards before it are in force
# too — before the dedicated nodes are tainted and before anyone gets access.
GUARD_PROBE_LABEL = "aifactory.io/guard-probe"
GUARD_DIGEST_ANNOTATION = "aifactory.io/guards-digest"
GUARD_DIGEST_LABEL = "aifactory.io/guards-digest"


GUARD_CHECK_SUFFIX = "-guard-check"


def guard_check_name(spec: AllocationSpec) -> str:
    return f"{guard_name(spec.allocation_id)}{GUARD_CHECK_SUFFIX}"


def _guard_check(spec: AllocationSpec, guards: list[dict]) -> list[dict]:
    # The refusal quotes a digest of the guards: after a change (a block moved to other
    # nodes) only the check of the new guards answers with the new digest.
    name = guard_check_name(spec)
    digest = hashlib.sha256(json.dumps(guards, sort_keys=True).encode()).hexdigest()[:12]
    group = "admissionregistration.k8s.io/v1"
    meta = _meta(spec, name, namespaced=False)
    meta["annotations"] = {GUARD_DIGEST_ANNOTATION: digest}
    binding_meta = _meta(spec, name, namespaced=False)
    binding_meta["annotations"] = {GUARD_DIGEST_ANNOTATION: digest}
    return [
        {"apiVersion": group, "kind": "ValidatingAdmissionPolicy", "metadata": meta,
         "spec": {"failurePolicy": "Fail",
                  "matchConstraints": {
                      "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                         "operations": ["CREATE"],
                                         "resources": ["namespaces"]}],
                      # Only the probe carries this label: no real namespace is evaluated.
                      "objectSelector": {"matchLabels": {GUARD_PROBE_LABEL: name}}},
                  "validations": [{"expression": "false", "message":
                                   f"{name}: the guards applied before this check "
                                   f"(digest {digest}) are in force."}]}},
        # The binding matches only a probe of these guards' digest: a refusal quoting it
        # was given through this binding, so the binding watch has it too.
        {"apiVersion": group, "kind": "ValidatingAdmissionPolicyBinding",
         "metadata": binding_meta,
         "spec": {"policyName": name, "validationActions": ["Deny"],
                  "matchResources": {"objectSelector": {"matchLabels": {
                      GUARD_PROBE_LABEL: name, GUARD_DIGEST_LABEL: digest}}}}},
    ]


def is_guard_check(manifest: dict) -> bool:
    return manifest["kind"] in GUARD_KIND_NAMES and \
        manifest["metadata"]["name"].endswith(GUARD_CHECK_SUFFIX)


def guards_fingerprint(live_guards: list[dict]) -> str:
    """Of the guards as the API server holds them: a guard deleted and made again (same
    content, new uid) or changed (new generation) changes it."""
    keys = sorted((g.get("kind", ""), (g.get("metadata") or {}).get("name", ""),
                   (g.get("metadata") or {}).get("uid", ""),
                   (g.get("metadata") or {}).get("generation", 0)) for g in live_guards)
    return hashlib.sha256(json.dumps(keys).encode()).hexdigest()[:8]


def stamp_guard_check(manifest: dict, fingerprint: str) -> dict:
    """A check object as applied: its digest also names the guards as they live (their uids
    and generations), so the check's policy and binding change — and become the newest
    objects in both watches — whenever a guard was made again or changed, even with the
    same content. Other objects are returned as they are."""
    digest = manifest["metadata"].get("annotations", {}).get(GUARD_DIGEST_ANNOTATION)
    if not digest or "." in digest or not is_guard_check(manifest):
        return manifest
    return json.loads(json.dumps(manifest).replace(digest, f"{digest}.{fingerprint}"))


def guards_content_digest(manifest: dict) -> str:
    """The digest a check or probe carries, without the stamp of the guards as they lived
    (stamp_guard_check appends ".<fingerprint>"): what the guards' content alone names."""
    digest = (manifest["metadata"].get("annotations") or {}).get(GUARD_DIGEST_ANNOTATION, "")
    return digest.split(".", 1)[0]


def guard_probe(manifests: list[dict]) -> dict | None:
    """The object only the allocation's guard check refuses (never created: dry-run only),
    or None when the allocation has no guards."""
    for m in manifests:
        digest = m["metadata"].get("annotations", {}).get(GUARD_DIGEST_ANNOTATION)
        if m["kind"] == GUARD_POLICY_KIND and digest:
            name = m["metadata"]["name"]
            return {"apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": name,
                                 "labels": {GUARD_PROBE_LABEL: name, GUARD_DIGEST_LABEL: digest},
                                 "annotations": {GUARD_DIGEST_ANNOTATION: digest}}}
    return None


def refused_by_admission(status: int | None, message: str) -> bool:
    """Whether an API error is an admission control's refusal (a policy or webhook), not a
    missing permission ("... cannot create resource ...") or a server away."""
    return status in (400, 403, 422) and " cannot " not in message and (
        "denied" in message or "admission webhook" in message)


def guard_check_answer(probe: dict, status: int | None, message: str) -> str:
    """What the API server's refusal of the probe says: "current" (the check of these guards
    refused it: they are in force), "older" (a check of the guards as they were, e.g. before
    a block moved: not yet) or "other" (not the check at all: a missing permission, say)."""
    meta = probe["metadata"]
    if status not in (400, 403, 422) or f"'{meta['name']}'" not in message or \
            "(digest " not in message:
        return "other"
    digest = meta["annotations"][GUARD_DIGEST_ANNOTATION]
    return "current" if f"(digest {digest})" in message else "older"


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


def render_manifests(spec: AllocationSpec) -> list[dict]:
    """Every object of the allocation, in the order they must be applied: guard rails
    first (the API server takes a moment to load an admission policy), the tenant's access
    last (nobody can act in the namespace before its quota, policies and queue exist)."""
    out: list[dict] = []
    if spec.route == Route.DEDICATED_BLOCK:
        out += _dedicated_guard(spec)
    if spec.route == Route.CONFIDENTIAL_POOL:
        out += _confidential_guard(spec)
    if out:
        out += _guard_check(spec, out)  # after every guard: its refusal says all are in force
    out += [_namespace(spec), _quota(spec), _limit_range(spec), *_network_policies(spec)]
    if spec.route == Route.DEDICATED_BLOCK:
        out += _dedicated_nodes(spec)
    if spec.route == Route.MIG_VCLUSTER:
        out += [_mig_device_class(spec), _claim_template(spec)]
        out += _vcluster(spec)
    out += [_flavor(spec), _cluster_queue(spec), _local_queue(spec), *_role_bindings(spec)]
    return out


# Node names are the platform's business (a tenant sees its quota, not its hosts), and the
# guard policies name the nodes they protect.
PLATFORM_ONLY_KINDS = frozenset({"Node", *GUARD_KIND_NAMES})


def tenant_may_see(manifest: dict) -> bool:
    """Whether a tenant's people are shown this object of their allocation."""
    return manifest.get("kind") not in PLATFORM_ONLY_KINDS


# Kinds an allocation may own, for listing and pruning (namespaces last).
GUARD_KINDS = GUARD_KIND_NAMES


# What only comes after the guards are in force: a dedicated block's nodes (labelled and
# tainted for the tenant) and the tenant's access. Everything else is inert without them,
# so it is applied while the API server compiles the guards.
AFTER_GUARDS_KINDS = frozenset({"Node", "RoleBinding"})


def apply_waves(manifests: list[dict]) -> list[list[dict]]:
    """render_manifests' order as waves that may each be applied in parallel: the guard
    rails first — every guard's policy, then every guard's binding, then the check's policy
    alone and the check's binding alone, so each binding follows its policy and the check is
    the last object written to both watches (what its refusal proves rests on that); then the
    namespace with the cluster-scoped objects (device class, flavor, ClusterQueue); then
    everything inside the namespace; then a dedicated block's nodes; the tenant's
    RoleBindings last, so nobody gets access before quota, policies and queue exist."""
    rails = [m for m in manifests if m["kind"] in GUARD_KINDS and not is_guard_check(m)]
    checks = [m for m in manifests if m["kind"] in GUARD_KINDS and is_guard_check(m)]
    policies = [m for m in rails if m["kind"] == GUARD_POLICY_KIND]
    bindings = [m for m in rails if m["kind"] != GUARD_POLICY_KIND]
    checks.sort(key=lambda m: m["kind"] != GUARD_POLICY_KIND)  # policy first
    guards = [w for w in (policies, bindings) if w] + [[m] for m in checks]
    rest = [m for m in manifests if m["kind"] not in GUARD_KINDS]
    nodes = [m for m in rest if m["kind"] == "Node"]
    cluster = [m for m in rest if not m["metadata"].get("namespace") and m["kind"] != "Node"]
    access = [m for m in rest if m["kind"] == "RoleBinding"]
    inside = [m for m in rest if m["metadata"].get("namespace") and m["kind"] != "RoleBinding"]
    return [*guards, *(w for w in (cluster, inside, nodes, access) if w)]


OWNED_KINDS: tuple[tuple[str, str], ...] = (
    (KUEUE, "LocalQueue"), (KUEUE, "ClusterQueue"), (KUEUE, "ResourceFlavor"),
    ("cluster.x-k8s.io/v1beta2", "Cluster"),
    ("infrastructure.cluster.x-k8s.io/v1alpha1", "VCluster"),
    ("resource.k8s.io/v1", "ResourceClaimTemplate"),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"),
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
    return [] if _same(desired, live) else [path]


def _same(desired, live) -> bool:
    if desired == live:
        return True
    # The server normalises some scalars: quantities ("4" vs 4) and the like.
    return live is not None and str(desired) == str(live)
