"""The isolation guards as admission policies whose number does not grow with the fleet.

Each guard rule is one ValidatingAdmissionPolicy per place a pod spec can sit, shared by
every allocation of its route and bound once. What differs per allocation is data: entries
in one params object (a GuardParams named `GUARD_PARAMS`, the portal's own cluster-scoped
kind: deploy/crds/guardparams.yaml) that the policies read (`paramKind`/`paramRef`). A
dedicated block adds its tenant, its allocation and its nodes; a confidential allocation
adds its namespace. Adding an allocation adds keys, never a
compiled expression, so the API server's work per admitted object stays flat.

Each allocation writes its keys under a field manager of its own (server-side apply owns
map keys one by one), so allocations provisioned at once never overwrite each other's
entries, and withdrawing one removes exactly its keys.

The check that guards are in force is shared too: it refuses a probe namespace only when
the params hold the allocation's own `check.` entry, which is written with its other keys,
so the refusal proves the API server reads this allocation's entries (see guards.py).
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
    LABEL_TENANT,
    MANAGED_BY,
    MANAGER,
)

GROUP = "admissionregistration.k8s.io/v1"
GUARD_POLICY_KIND = "ValidatingAdmissionPolicy"
GUARD_BINDING_KIND = "ValidatingAdmissionPolicyBinding"
GUARD_KIND_NAMES = frozenset({GUARD_POLICY_KIND, GUARD_BINDING_KIND})
GUARD_PARAMS = "aifactory-guards"  # the GuardParams every guard reads
PARAMS_API, PARAMS_KIND = "aifactory.io/v1", "GuardParams"
PARAM_KIND = {"apiVersion": PARAMS_API, "kind": PARAMS_KIND}
GUARDS_LABEL = "aifactory.io/guards"  # on every shared guard object: which rule set
GUARDED_ROUTES = (Route.DEDICATED_BLOCK, Route.CONFIDENTIAL_POOL)

# Entry keys in the params.
TENANT_KEY, BLOCK_KEY, NODE_KEY = "tenant.", "block.", "node."
CONFIDENTIAL_KEY, CHECK_KEY = "confidential.", "check."

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
    # Missing params refuse (like failurePolicy Fail): the guards never go quietly off. The
    # params are applied before any binding that reads them, and never deleted.
    return {"name": GUARD_PARAMS, "parameterNotFoundAction": "Deny"}


def _variables(path: str, *, pods: bool) -> list[dict]:
    """`spec`: the pod spec; `changed`: whether this write can change placement (a create,
    or a template edit: an update of a pod cannot move it, and scaling a Deployment does not
    touch its template); `fresh`: the tolerations this write adds (on a pod update only the
    new ones: a pod admitted before a guard existed must still be updatable, e.g. to remove
    a finalizer); `entries`: the params' keys; `tenant`: whose namespace this is ('' for one
    the portal does not own). Every field is read through optionals: absent never fails."""
    spec = f"object.{path}"
    changed = "request.operation != 'UPDATE'" if pods else \
        f"request.operation != 'UPDATE' || oldObject == null || {spec} != oldObject.{path}"
    fresh = ("variables.spec.?tolerations.orValue([]).filter(t, "
             "request.operation != 'UPDATE' || oldObject == null || "
             f"!oldObject.{path}.?tolerations.orValue([]).exists(o, o == t))") if pods else \
        "variables.spec.?tolerations.orValue([]).filter(t, variables.changed)"
    return [{"name": "spec", "expression": spec},
            {"name": "changed", "expression": changed},
            {"name": "fresh", "expression": fresh},
            {"name": "entries", "expression": "params.?spec.?entries.orValue({})"},
            {"name": "tenant", "expression":
             f"namespaceObject.metadata.?labels[?'{LABEL_TENANT}'].orValue('')"},
            # Whether a dedicated block of a tenant other than this namespace's exists
            # (read only for the broad tolerations: it walks the keys).
            {"name": "elsewhere", "expression":
             f"variables.entries.exists(k, k.startsWith('{TENANT_KEY}') && "
             "variables.entries[k] != variables.tenant)"}]


def _theirs(prefix: str, value: str) -> str:
    """Whether `value` (a CEL string) names what a block of another tenant holds."""
    return (f"variables.entries[?('{prefix}' + {value})].orValue(variables.tenant) "
            "!= variables.tenant")


def _tolerates(key_test: str, effect: str = "NoSchedule") -> str:
    return f"t.?effect.orValue('') in ['', '{effect}'] && {key_test}"


def dedicated_rules() -> list[tuple[str, str]]:
    """What no namespace outside a block's tenant's own (and the platform's) may do to the
    block's nodes. The taint keeps the scheduler away; these keep a pod from tolerating it,
    from naming a node directly (spec.nodeName skips the scheduler, and a kubelet enforces
    only NoExecute taints) and, for a clear refusal instead of a pod that pends forever,
    from selecting those nodes. (expression over `variables`, message) pairs."""
    ours = ("variables.fresh.exists(t, " + _tolerates(
        f"t.?key.orValue('') == '{DEDICATED_TAINT}' && "
        "(t.?operator.orValue('Equal') == 'Exists' ? variables.elsewhere : "
        + _theirs(TENANT_KEY, "t.?value.orValue('')") + ")") + ")")
    everything = ("variables.fresh.exists(t, " + _tolerates(
        "t.?key.orValue('') == '' && t.?operator.orValue('Equal') == 'Exists'")
        + ") && variables.elsewhere")
    pinned = ("variables.changed && variables.spec.?nodeName.orValue('') != '' && "
              + _theirs(NODE_KEY, "variables.spec.nodeName"))

    def selects(key: str, prefix: str) -> str:
        return (f"(variables.spec.?nodeSelector[?'{key}'].hasValue() && "
                + _theirs(prefix, f"variables.spec.nodeSelector['{key}']") + ")")

    # A node-affinity term aims at dedicated nodes when one of its `In` expressions lists
    # nothing but another tenant's (terms are ORed: one such term is enough).
    def all_theirs(prefix: str) -> str:
        return "e.values.all(v, " + _theirs(prefix, "v") + ")"

    aims = (f"(e.key == '{DEDICATED_LABEL}' && {all_theirs(TENANT_KEY)}) || "
            f"(e.key == '{LABEL_ALLOCATION}' && {all_theirs(BLOCK_KEY)}) || "
            f"(e.key == 'kubernetes.io/hostname' && {all_theirs(NODE_KEY)})")
    selector = ("variables.changed && (" + " || ".join([
        selects(DEDICATED_LABEL, TENANT_KEY), selects(LABEL_ALLOCATION, BLOCK_KEY),
        selects("kubernetes.io/hostname", NODE_KEY)]) +
        " || variables.spec.?affinity.?nodeAffinity"
        ".?requiredDuringSchedulingIgnoredDuringExecution.?nodeSelectorTerms"
        ".orValue([]).exists(term, "
        "term.?matchExpressions.orValue([]).exists(e, e.operator == 'In' && "
        f"e.?values.orValue([]).size() > 0 && ({aims})) || "
        "term.?matchFields.orValue([]).exists(e, e.key == 'metadata.name' && "
        "e.operator == 'In' && e.?values.orValue([]).size() > 0 && "
        f"{all_theirs(NODE_KEY)})))")
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


def confidential_rules(runtime_class: str) -> tuple[list[tuple[str, str]],
                                                    list[tuple[str, str]]]:
    """(rules for pods and templates, rules for pods only), for namespaces the params list
    as confidential. Such a namespace runs only pods of the confidential RuntimeClass,
    placed by the scheduler on nodes of the confidential BIOS profile: Kueue writes the
    flavor's node labels into the pods it admits; a pod made by hand must select them."""
    rc = runtime_class
    (bios_key, bios_value), = CONFIDENTIAL_BIOS.items()
    mine = f"!variables.entries[?'{CONFIDENTIAL_KEY}' + request.namespace].hasValue() || "
    both = [
        (f"{mine}!variables.changed || variables.spec.?runtimeClassName.orValue('') == '{rc}'",
         f"Pods in this confidential namespace must use the {rc} RuntimeClass "
         f"(spec.runtimeClassName: {rc})."),
        (f"{mine}!variables.changed || variables.spec.?nodeName.orValue('') == ''",
         "Pods in this confidential namespace are placed by the scheduler on confidential "
         "nodes; spec.nodeName is not allowed."),
    ]
    pods = [
        (f"{mine}!variables.changed || "
         f"variables.spec.?nodeSelector[?'{bios_key}'].orValue('') == '{bios_value}'",
         f"Pods in this confidential namespace must run on confidential nodes: submit them "
         f"through the LocalQueue (Kueue adds the node selector) or set nodeSelector "
         f"{bios_key}: {bios_value}."),
    ]
    return both, pods


def _policies(rules: str, validations, namespace_selector: dict, *,
              pod_only=()) -> list[dict]:
    """One policy and one binding per place a pod spec can sit: policies first."""
    policies, bindings = [], []
    for api_group, resources, path, suffix in POD_SPEC_PATHS:
        pods = resources == ("pods",)
        name = f"aifactory-{rules}-{suffix}"
        checks = [*validations, *(pod_only if pods else ())]
        policies.append({
            "apiVersion": GROUP, "kind": GUARD_POLICY_KIND,
            "metadata": {"name": name, "labels": guard_labels(rules)},
            "spec": {"failurePolicy": "Fail",
                     "paramKind": PARAM_KIND,
                     "matchConstraints": {"resourceRules": [{
                         "apiGroups": [api_group], "apiVersions": ["v1"],
                         "operations": ["CREATE", "UPDATE"], "resources": list(resources)}]},
                     "variables": _variables(path, pods=pods),
                     "validations": [{"expression": e, "message": m} for e, m in checks]}})
        bindings.append({
            "apiVersion": GROUP, "kind": GUARD_BINDING_KIND,
            "metadata": {"name": name, "labels": guard_labels(rules)},
            "spec": {"policyName": name, "validationActions": ["Deny"],
                     "paramRef": param_ref(),
                     "matchResources": {"namespaceSelector": namespace_selector}}})
    return policies + bindings


def shared_guards(route: str, *, platform_namespaces: tuple[str, ...],
                  runtime_class: str) -> list[dict]:
    """The route's shared policies and bindings (none for an unguarded route). Only the
    platform's own namespaces are left out: every other namespace, the portal's or not, is
    checked against the entries."""
    others = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                    "values": list(platform_namespaces)}]}
    if route == Route.DEDICATED_BLOCK:
        return _policies("dedicated", dedicated_rules(), others)
    if route == Route.CONFIDENTIAL_POOL:
        both, pods = confidential_rules(runtime_class)
        return _policies("confidential", both, others, pod_only=pods)
    return []


def guard_entries(route: str, *, allocation_id: int, tenant: str, namespace: str,
                  nodes: tuple[str, ...], shared: list[dict]) -> dict[str, str]:
    """The allocation's keys in the params, with its check entry: a digest of its other
    keys and of the shared guards' content, so either changing names a new check."""
    if route == Route.DEDICATED_BLOCK:
        entries = {f"{TENANT_KEY}{tenant}": tenant, f"{BLOCK_KEY}{allocation_id}": tenant,
                   **{f"{NODE_KEY}{node}": tenant for node in nodes}}
    elif route == Route.CONFIDENTIAL_POOL:
        entries = {f"{CONFIDENTIAL_KEY}{namespace}": tenant}
    else:
        return {}
    digest = hashlib.sha256(json.dumps([entries, shared], sort_keys=True).encode())
    return {**entries, f"{CHECK_KEY}{allocation_id}": digest.hexdigest()[:12]}


def entries_manager(base: str, allocation_id: int) -> str:
    """The field manager an allocation's params keys are applied under."""
    return f"{base}-a{allocation_id}"


def entries_owner(base: str, manager: str) -> int | None:
    """The allocation a params field manager belongs to (None: not one of ours)."""
    prefix = f"{base}-a"
    tail = manager[len(prefix):] if manager.startswith(prefix) else ""
    return int(tail) if tail.isdigit() else None


def guard_params(entries: dict[str, str]) -> dict:
    """The params as one allocation applies them: only its own keys (none to withdraw
    them)."""
    manifest = {"apiVersion": PARAMS_API, "kind": PARAMS_KIND,
                "metadata": {"name": GUARD_PARAMS, "labels": guard_labels("params")}}
    if entries:  # none: no `spec` at all (an empty map reaches the server as null)
        manifest["spec"] = {"entries": dict(entries)}
    return manifest


def params_entries(manifest: dict) -> dict[str, str]:
    return dict(((manifest.get("spec") or {}).get("entries")) or {})


def is_guard_params(manifest: dict) -> bool:
    return manifest.get("kind") == PARAMS_KIND and \
        (manifest.get("metadata") or {}).get("name") == GUARD_PARAMS


def params_allocation(manifest: dict) -> int | None:
    """The allocation whose keys a params fragment carries (its check entry names it)."""
    for key in params_entries(manifest):
        if key.startswith(CHECK_KEY) and key[len(CHECK_KEY):].isdigit():
            return int(key[len(CHECK_KEY):])
    return None
