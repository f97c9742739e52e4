"""The isolation guards as admission policies whose number and cost do not grow with the
fleet.

Each guard rule is one ValidatingAdmissionPolicy per place a pod spec can sit, shared by
every allocation of its route and bound once. The rules read nothing but the object and its
namespace's labels: a dedicated block's nodes carry their tenant in their taint and label,
and the portal labels each namespace with its tenant, allocation and route, so adding an
allocation adds neither a compiled expression nor data any policy reads. (An earlier shape
read one params object listing every block's tenant, nodes and namespaces: the API server
converts a policy's params into a CEL value for every evaluation, before any condition, so
every pod created anywhere paid for the whole list; docs/isolation.md has the figures.)

The check that guards are in force is the one policy with params: each guarded allocation
has a GuardParams object of its own (the portal's own cluster-scoped kind: deploy/crds/
guardparams.yaml) holding its `check.` entry and carrying its allocation's label, and the
check's binding selects them all by label. Adding an allocation adds one small object, not a
key to a shared one (whose field managers, one per allocation, made every write to it cost
more as the fleet grew), and its retirement deletes it with its other objects. The check is
evaluated only for its probe namespaces (guard_check.py), never for a tenant's pod.
"""

from __future__ import annotations

import hashlib
import json

from ..domain import Route
from ..vocabulary import (
    CONFIDENTIAL_BIOS,
    DEDICATED_LABEL,
    DEDICATED_TAINT,
    LABEL_ALLOCATION,
    LABEL_ROUTE,
    LABEL_TENANT,
    MANAGED_BY,
    MANAGER,
)

GROUP = "admissionregistration.k8s.io/v1"
GUARD_POLICY_KIND = "ValidatingAdmissionPolicy"
GUARD_BINDING_KIND = "ValidatingAdmissionPolicyBinding"
GUARD_KIND_NAMES = frozenset({GUARD_POLICY_KIND, GUARD_BINDING_KIND})
CHECK_PARAMS_PREFIX = "aifactory-guard-check-a"  # + the allocation's id: its GuardParams
# What earlier portals left: shared policies (named without GUARD_SHAPE) reading this params
# object, kept until none of them is left (see apply.prune_older_guards); and one params
# object holding every allocation's check entry, which no policy reads once the check
# selects the allocations' own.
LEGACY_GUARD_PARAMS = "aifactory-guards"
LEGACY_CHECK_PARAMS = "aifactory-guard-checks"
GUARD_SHAPE = "bylabel"  # in the policies' names: the shape is replaced by new names
PARAMS_API, PARAMS_KIND = "aifactory.io/v1", "GuardParams"
PARAM_KIND = {"apiVersion": PARAMS_API, "kind": PARAMS_KIND}
GUARDS_LABEL = "aifactory.io/guards"  # on every shared guard object: which rule set
CHECK_RULES = "check"  # the guard check's value of it
CHECK_ENTRY_RULES = "check-entry"  # an allocation's params: what the check's binding selects
GUARDED_ROUTES = (Route.DEDICATED_BLOCK, Route.CONFIDENTIAL_POOL)

CHECK_KEY = "check."  # the params' entry keys: check.<allocation id>

# Where a pod's spec sits in each kind a tenant may write, so every guard is checked on
# the template at submit time (a refusal the tenant sees at once) and again on the pods that
# controllers make from it (the last word: nothing reaches a node without passing it).
POD_SPEC_PATHS: tuple[tuple[str, tuple[str, ...], str, str], ...] = (
    ("", ("pods",), "spec", "pods"),
    ("apps", ("deployments", "replicasets", "statefulsets", "daemonsets"),
     "spec.template.spec", "apps"),
    ("batch", ("jobs",), "spec.template.spec", "job"),
    ("batch", ("cronjobs",), "spec.jobTemplate.spec.template.spec", "cronjob"),
)


def guard_labels(rules: str) -> dict[str, str]:
    return {MANAGED_BY: MANAGER, GUARDS_LABEL: rules}


def param_ref() -> dict:
    """Every allocation's params, by label: the API server evaluates the check once per
    selected object (only for a probe), and the one holding the probe's entry refuses it.
    None selected refuses the probe too (like failurePolicy Fail): the check never says "in
    force" by mistake."""
    return {"selector": {"matchLabels": guard_labels(CHECK_ENTRY_RULES)},
            "parameterNotFoundAction": "Deny"}


def _variables(path: str, *, pods: bool) -> list[dict]:
    """`spec`: the pod spec; `changed`: whether this write can change placement (a create,
    or a template edit: an update of a pod cannot move it, and scaling a Deployment does not
    touch its template); `fresh`: the tolerations this write adds (on a pod update only the
    new ones: a pod admitted before a guard existed must still be updatable, e.g. to remove
    a finalizer); `tenant` and `allocation`: whose namespace this is, from the labels the
    portal set on it ('' for one the portal does not own; tenants cannot label namespaces).
    Every field is read through optionals: absent never fails."""
    spec = f"object.{path}"
    changed = "request.operation != 'UPDATE'" if pods else \
        f"request.operation != 'UPDATE' || oldObject == null || {spec} != oldObject.{path}"
    fresh = ("variables.spec.?tolerations.orValue([]).filter(t, "
             "request.operation != 'UPDATE' || oldObject == null || "
             f"!oldObject.{path}.?tolerations.orValue([]).exists(o, o == t))") if pods else \
        "variables.spec.?tolerations.orValue([]).filter(t, variables.changed)"

    def label(key: str) -> str:
        return f"namespaceObject.metadata.?labels[?'{key}'].orValue('')"

    return [{"name": "spec", "expression": spec},
            {"name": "changed", "expression": changed},
            {"name": "fresh", "expression": fresh},
            {"name": "tenant", "expression": label(LABEL_TENANT)},
            {"name": "allocation", "expression": label(LABEL_ALLOCATION)}]


def _tolerates(key_test: str, effect: str = "NoSchedule") -> str:
    return f"t.?effect.orValue('') in ['', '{effect}'] && {key_test}"


def dedicated_rules() -> list[tuple[str, str]]:
    """What no namespace outside a block's tenant's own (and the platform's) may do to the
    block's nodes, decided from the pod and its namespace's labels alone. A block's nodes
    carry its tenant in their taint's value and their label (manifests.py): the taint keeps
    the scheduler away and these keep a pod from tolerating it; from naming a node directly
    (spec.nodeName skips the scheduler, and a kubelet enforces only NoExecute taints), which
    no tenant's namespace may do at all; and, for a clear refusal instead of a pod that pends
    forever, from selecting another tenant's or allocation's nodes by label. A pod that
    selects a node by its name (hostname label, or a field as DaemonSets do) is admitted: the
    taint keeps it off a block it does not belong to. (expression over `variables`, message)
    pairs; no rule reads anything that grows with the fleet."""
    ours = ("variables.fresh.exists(t, " + _tolerates(
        f"t.?key.orValue('') == '{DEDICATED_TAINT}' && "
        "(t.?operator.orValue('Equal') == 'Exists' || "
        "t.?value.orValue('') != variables.tenant)") + ")")
    everything = ("variables.fresh.exists(t, " + _tolerates(
        "t.?key.orValue('') == '' && t.?operator.orValue('Equal') == 'Exists'") + ")")
    pinned = "variables.changed && variables.spec.?nodeName.orValue('') != ''"

    def selects(key: str, own: str) -> str:
        return (f"variables.spec.?nodeSelector[?'{key}'].orValue({own}) != {own}")

    # A node-affinity term aims at dedicated nodes when one of its `In` expressions lists
    # nothing but other tenants' (or allocations') values (terms are ORed: one is enough).
    aims = (f"(e.key == '{DEDICATED_LABEL}' && e.values.all(v, v != variables.tenant)) || "
            f"(e.key == '{LABEL_ALLOCATION}' && e.values.all(v, v != variables.allocation))")
    selector = ("variables.changed && (" + " || ".join([
        selects(DEDICATED_LABEL, "variables.tenant"),
        selects(LABEL_ALLOCATION, "variables.allocation")]) +
        " || variables.spec.?affinity.?nodeAffinity"
        ".?requiredDuringSchedulingIgnoredDuringExecution.?nodeSelectorTerms"
        ".orValue([]).exists(term, "
        "term.?matchExpressions.orValue([]).exists(e, e.operator == 'In' && "
        f"e.?values.orValue([]).size() > 0 && ({aims}))))")
    # Refusals go to other tenants: they name neither the owner nor its nodes.
    return [
        (f"!({ours})",
         f"Only the tenant a dedicated block belongs to may tolerate its taint "
         f"({DEDICATED_TAINT}), with its own tenant as the value; remove that toleration."),
        (f"!({everything})",
         "A toleration of every taint (operator Exists without a key) would let this pod "
         "onto nodes dedicated to another tenant; tolerate the taints you need by key."),
        (f"!({pinned})",
         "Nodes may be dedicated to another tenant: a pod of this namespace may not name "
         "its node in spec.nodeName (that skips the scheduler); leave placement to the "
         "scheduler."),
        (f"!({selector})",
         "This pod selects nodes dedicated to another tenant (or to an allocation this "
         "namespace does not hold); it could never run there. Select other nodes or leave "
         "placement to the scheduler."),
    ]


def confidential_rules(runtime_class: str) -> tuple[list[tuple[str, str]],
                                                    list[tuple[str, str]]]:
    """(rules for pods and templates, rules for pods only), for the namespaces of
    confidential allocations (their bindings select them by the route label the portal sets
    on them). Such a namespace runs only pods of the confidential RuntimeClass, placed by
    the scheduler on nodes of the confidential BIOS profile: Kueue writes the flavor's node
    labels into the pods it admits; a pod made by hand must select them."""
    rc = runtime_class
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
        ("!variables.changed || "
         f"variables.spec.?nodeSelector[?'{bios_key}'].orValue('') == '{bios_value}'",
         f"Pods in this confidential namespace must run on confidential nodes: submit them "
         f"through the LocalQueue (Kueue adds the node selector) or set nodeSelector "
         f"{bios_key}: {bios_value}."),
    ]
    return both, pods


def guard_policy_name(rules: str, suffix: str) -> str:
    return f"aifactory-{rules}-{GUARD_SHAPE}-{suffix}"


def is_current_shape(name: str) -> bool:
    """Whether a shared guard's name is this shape's (an earlier portal's lack GUARD_SHAPE)."""
    return f"-{GUARD_SHAPE}-" in name


def older_guards(live: list[tuple[str, dict]], rules: set[str]) -> tuple[list[tuple[str, str]],
                                                                         bool]:
    """Of the guard objects in a cluster ((kind, object) pairs, bindings listed before
    policies), an earlier portal's shared ones of the rule sets `rules` as (kind, name) in
    that order, to remove once this shape's are in force; and whether any earlier shared
    guard, of any rule set, is there at all (its params must stay while one is). The check
    keeps its name across shapes; per-allocation guards carry their allocation's label and
    go with its other objects."""
    remove, seen = [], False
    for kind, obj in live:
        meta = obj.get("metadata") or {}
        labels, name = meta.get("labels") or {}, meta.get("name", "")
        if LABEL_ALLOCATION in labels or GUARDS_LABEL not in labels or \
                labels[GUARDS_LABEL] == CHECK_RULES or is_current_shape(name):
            continue
        seen = True
        if labels[GUARDS_LABEL] in rules:  # another route's: replaced by its allocations
            remove.append((kind, name))
    return remove, seen


def _policies(rules: str, validations, namespace_selector: dict, *,
              pod_only=()) -> list[dict]:
    """One policy and one binding per place a pod spec can sit: policies first."""
    policies, bindings = [], []
    for api_group, resources, path, suffix in POD_SPEC_PATHS:
        pods = resources == ("pods",)
        name = guard_policy_name(rules, suffix)
        checks = [*validations, *(pod_only if pods else ())]
        policies.append({
            "apiVersion": GROUP, "kind": GUARD_POLICY_KIND,
            "metadata": {"name": name, "labels": guard_labels(rules)},
            "spec": {"failurePolicy": "Fail",
                     "matchConstraints": {"resourceRules": [{
                         "apiGroups": [api_group], "apiVersions": ["v1"],
                         "operations": ["CREATE", "UPDATE"], "resources": list(resources)}]},
                     "variables": _variables(path, pods=pods),
                     "validations": [{"expression": e, "message": m} for e, m in checks]}})
        bindings.append({
            "apiVersion": GROUP, "kind": GUARD_BINDING_KIND,
            "metadata": {"name": name, "labels": guard_labels(rules)},
            "spec": {"policyName": name, "validationActions": ["Deny"],
                     "matchResources": {"namespaceSelector": namespace_selector}}})
    return policies + bindings


def shared_guards(route: str, *, platform_namespaces: tuple[str, ...],
                  runtime_class: str) -> list[dict]:
    """The route's shared policies and bindings (none for an unguarded route). Only the
    platform's own namespaces are left out: every other namespace, the portal's or not, is
    checked (the confidential rules: every confidential allocation's namespace)."""
    others = {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
              "values": list(platform_namespaces)}
    if route == Route.DEDICATED_BLOCK:
        return _policies("dedicated", dedicated_rules(), {"matchExpressions": [others]})
    if route == Route.CONFIDENTIAL_POOL:
        both, pods = confidential_rules(runtime_class)
        confidential = {"key": LABEL_ROUTE, "operator": "In",
                        "values": [str(Route.CONFIDENTIAL_POOL)]}
        return _policies("confidential", both, {"matchExpressions": [others, confidential]},
                         pod_only=pods)
    return []


def guard_entries(route: str, *, allocation_id: int, tenant: str, namespace: str,
                  nodes: tuple[str, ...], shared: list[dict]) -> dict[str, str]:
    """The allocation's key in the params: its check entry, a digest of what its guards
    protect and of the shared guards' content, so either changing names a new check."""
    if route not in GUARDED_ROUTES:
        return {}
    protects = {"route": str(route), "tenant": tenant, "namespace": namespace,
                "nodes": sorted(nodes)}
    digest = hashlib.sha256(json.dumps([protects, shared], sort_keys=True).encode())
    return {f"{CHECK_KEY}{allocation_id}": digest.hexdigest()[:12]}


def check_params_name(allocation_id: int) -> str:
    return f"{CHECK_PARAMS_PREFIX}{allocation_id}"


def guard_params(allocation_id: int, entries: dict[str, str]) -> dict:
    """The allocation's own params: its check entry, under its allocation's label (pruned
    with its other objects)."""
    return {"apiVersion": PARAMS_API, "kind": PARAMS_KIND,
            "metadata": {"name": check_params_name(allocation_id),
                         "labels": {**guard_labels(CHECK_ENTRY_RULES),
                                    LABEL_ALLOCATION: str(allocation_id)}},
            "spec": {"entries": dict(entries)}}


def params_entries(manifest: dict) -> dict[str, str]:
    return dict(((manifest.get("spec") or {}).get("entries")) or {})


def is_guard_params(manifest: dict) -> bool:
    """An allocation's check params (not an earlier portal's shared ones)."""
    return manifest.get("kind") == PARAMS_KIND and \
        ((manifest.get("metadata") or {}).get("labels") or {}).get(GUARDS_LABEL) == \
        CHECK_ENTRY_RULES


def params_allocation(manifest: dict) -> int | None:
    """The allocation whose keys a params object carries (its check entry names it)."""
    for key in params_entries(manifest):
        if key.startswith(CHECK_KEY) and key[len(CHECK_KEY):].isdigit():
            return int(key[len(CHECK_KEY):])
    return None
