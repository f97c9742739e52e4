"""The admission guards as a portal before shared guards rendered them: ten objects per
dedicated block (a ValidatingAdmissionPolicy and binding per place a pod spec can sit, and a
check of its own), each labelled with its allocation. What clusters provisioned by that
portal still hold: the upgrade test starts from it, and the admission benchmark prints its
cost beside the shared guards'. Kept as it was; never used by the portal itself."""

from __future__ import annotations

import hashlib
import json

from fleet.allocations.manifests import AllocationSpec, _meta
from fleet.vocabulary import DEDICATED_LABEL, DEDICATED_TAINT, LABEL_ALLOCATION, LABEL_TENANT

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


def legacy_guards(spec: AllocationSpec) -> list[dict]:
    """A dedicated block's guards and check in the per-allocation shape."""
    guards = _dedicated_guard(spec)
    return guards + _guard_check(spec, guards)


def legacy_probe(spec: AllocationSpec) -> dict:
    for m in legacy_guards(spec):
        digest = m["metadata"].get("annotations", {}).get(GUARD_DIGEST_ANNOTATION)
        if m["kind"] == "ValidatingAdmissionPolicy" and digest:
            name = m["metadata"]["name"]
            return {"apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": name, "labels": {GUARD_PROBE_LABEL: name,
                                                          GUARD_DIGEST_LABEL: digest}}}
    raise AssertionError("no check")
