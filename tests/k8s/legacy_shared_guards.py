"""The admission guards as the portal before this shape rendered them: shared policies per
guard rule and kind (named without the shape, `aifactory-dedicated-<kind>`) reading one
GuardParams object, `aifactory-guards`, that listed every block's tenant, allocation and
nodes; the check read the same object. What clusters provisioned by that portal hold: the
upgrade test starts from it, and the admission benchmark prints its cost beside the
current shape's. Dedicated blocks only. Kept as it was; never used by the portal itself."""

from __future__ import annotations

import hashlib
import json

from fleet.allocations.admission import (
    GROUP,
    GUARD_BINDING_KIND,
    GUARD_POLICY_KIND,
    LEGACY_GUARD_PARAMS,
    PARAM_KIND,
    PARAMS_API,
    PARAMS_KIND,
    POD_SPEC_PATHS,
    guard_labels,
)
from fleet.allocations.guard_check import (
    GUARD_DIGEST_LABEL,
    GUARD_FINGERPRINT_LABEL,
    GUARD_PROBE_LABEL,
    guard_check,
)
from fleet.allocations.manifests import AllocationSpec
from fleet.vocabulary import DEDICATED_LABEL, DEDICATED_TAINT, LABEL_ALLOCATION, LABEL_TENANT

TENANT_KEY, BLOCK_KEY, NODE_KEY, CHECK_KEY = "tenant.", "block.", "node.", "check."
FINGERPRINT = "legacy"


def param_ref() -> dict:
    return {"name": LEGACY_GUARD_PARAMS, "parameterNotFoundAction": "Deny"}


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


def shared_policies(platform_namespaces: tuple[str, ...]) -> list[dict]:
    """The dedicated rule set's policies and bindings, as that portal applied them."""
    selector = {"matchExpressions": [{"key": "kubernetes.io/metadata.name",
                                      "operator": "NotIn", "values": list(platform_namespaces)}]}
    policies, bindings = [], []
    for api_group, resources, path, suffix in POD_SPEC_PATHS:
        name = f"aifactory-dedicated-{suffix}"
        policies.append({
            "apiVersion": GROUP, "kind": GUARD_POLICY_KIND,
            "metadata": {"name": name, "labels": guard_labels("dedicated")},
            "spec": {"failurePolicy": "Fail", "paramKind": PARAM_KIND,
                     "matchConstraints": {"resourceRules": [{
                         "apiGroups": [api_group], "apiVersions": ["v1"],
                         "operations": ["CREATE", "UPDATE"], "resources": list(resources)}]},
                     "variables": _variables(path, pods=resources == ("pods",)),
                     "validations": [{"expression": e, "message": m}
                                     for e, m in dedicated_rules()]}})
        bindings.append({
            "apiVersion": GROUP, "kind": GUARD_BINDING_KIND,
            "metadata": {"name": name, "labels": guard_labels("dedicated")},
            "spec": {"policyName": name, "validationActions": ["Deny"],
                     "paramRef": param_ref(),
                     "matchResources": {"namespaceSelector": selector}}})
    return policies + bindings


def legacy_check() -> list[dict]:
    """That portal's check: the same policy and binding, reading its params."""
    out = guard_check(FINGERPRINT)
    out[1]["spec"]["paramRef"] = param_ref()
    return out


def block_entries(spec: AllocationSpec) -> dict[str, str]:
    t = spec.tenant
    entries = {f"{TENANT_KEY}{t}": t, f"{BLOCK_KEY}{spec.allocation_id}": t,
               **{f"{NODE_KEY}{n}": t for n in spec.nodes}}
    digest = hashlib.sha256(json.dumps(entries, sort_keys=True).encode()).hexdigest()[:12]
    return {**entries, f"{CHECK_KEY}{spec.allocation_id}": digest}


def block_params(spec: AllocationSpec) -> dict:
    """One block's keys, applied under its own field manager as that portal did."""
    return {"apiVersion": PARAMS_API, "kind": PARAMS_KIND,
            "metadata": {"name": LEGACY_GUARD_PARAMS, "labels": guard_labels("params")},
            "spec": {"entries": block_entries(spec)}}


def legacy_shared_probe(spec: AllocationSpec) -> dict:
    """The namespace that check refuses once it reads the block's keys (dry-run only)."""
    owner = spec.allocation_id
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": f"aifactory-a{owner}-guard-probe", "labels": {
                GUARD_PROBE_LABEL: str(owner),
                GUARD_DIGEST_LABEL: block_entries(spec)[f"{CHECK_KEY}{owner}"],
                GUARD_FINGERPRINT_LABEL: FINGERPRINT}}}

