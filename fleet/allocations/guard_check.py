"""The check that an allocation's admission guards are in force, as pure data: the shared
check policy and binding, the probe only one allocation's entries make it refuse, the
fingerprint of the shared guards as they live, and what a refusal says (guards.py asks)."""

from __future__ import annotations

import hashlib
import json

from .admission import (
    CHECK_KEY,
    CHECK_RULES,
    GROUP,
    GUARD_BINDING_KIND,
    GUARD_KIND_NAMES,
    GUARD_POLICY_KIND,
    PARAM_KIND,
    guard_labels,
    is_guard_params,
    param_ref,
    params_allocation,
    params_entries,
)

# The API server loads admission policies from a watch and recompiles them about once a
# second, each apiserver on its own, and reads params from an informer: a policy or an entry
# just written may not refuse anything yet. Nothing in the API says when it does, so
# provisioning asks: after the shared guards (policies, then bindings) and the params, it
# applies the check, which refuses exactly one object nobody else creates (a namespace
# carrying the probe label) when the params hold the allocation's check entry, and dry-runs
# that object until it is refused. The check is the last policy and the last binding
# written, and the API server compiles every policy it has seen at once, so its refusal
# means the guards before it are in force; the params are read through one informer for
# every policy, so the entry it quotes is read by all of them.
GUARD_CHECK = "aifactory-guard-check"
GUARD_PROBE_LABEL = "aifactory.io/guard-probe"  # the allocation asking: "a<id>"
GUARD_DIGEST_LABEL = "aifactory.io/guards-digest"  # its check entry
GUARD_FINGERPRINT_LABEL = "aifactory.io/guards-live"  # the shared guards as they live
GUARD_DIGEST_ANNOTATION = "aifactory.io/guards-digest"
UNSTAMPED = "as-rendered"  # the fingerprint before the shared guards are read back


def guard_check(fingerprint: str = UNSTAMPED) -> list[dict]:
    """The check's policy and binding; the fingerprint names the shared guards as the API
    server holds them (their uids and generations), so the check changes, and becomes the
    newest object in both watches, whenever one of them was made again or changed."""
    probe, digest = f"object.metadata.labels['{GUARD_PROBE_LABEL}']", \
        f"object.metadata.labels['{GUARD_DIGEST_LABEL}']"
    meta = {"name": GUARD_CHECK, "labels": guard_labels(CHECK_RULES),
            "annotations": {GUARD_DIGEST_ANNOTATION: fingerprint}}
    return [
        {"apiVersion": GROUP, "kind": GUARD_POLICY_KIND, "metadata": meta,
         "spec": {"failurePolicy": "Fail",
                  "paramKind": PARAM_KIND,
                  "matchConstraints": {
                      "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                         "operations": ["CREATE"],
                                         "resources": ["namespaces"]}],
                      # Only probes carry this label: no real namespace is evaluated.
                      "objectSelector": {"matchExpressions": [
                          {"key": GUARD_PROBE_LABEL, "operator": "Exists"},
                          {"key": GUARD_DIGEST_LABEL, "operator": "Exists"}]}},
                  "validations": [{
                      "expression": f"params.?spec.?entries.orValue({{}})[?'{CHECK_KEY}' + {probe}]"
                                    f".orValue('') != {digest}",
                      "messageExpression":
                          f"'{GUARD_CHECK} [{fingerprint}]: the guards of ' + {probe} + "
                          f"' (digest ' + {digest} + ') are in force.'"}]}},
        # The binding matches only a probe naming this fingerprint: a refusal was given
        # through this binding, so the binding watch has it too.
        {"apiVersion": GROUP, "kind": GUARD_BINDING_KIND, "metadata": dict(meta),
         "spec": {"policyName": GUARD_CHECK, "validationActions": ["Deny"],
                  "paramRef": param_ref(),
                  "matchResources": {"objectSelector": {"matchLabels": {
                      GUARD_FINGERPRINT_LABEL: fingerprint}}}}},
    ]


def is_guard_check(manifest: dict) -> bool:
    return manifest.get("kind") in GUARD_KIND_NAMES and \
        (manifest.get("metadata") or {}).get("name") == GUARD_CHECK


def is_shared_guard(manifest: dict) -> bool:
    """A shared policy or binding of a guard rule (not the check)."""
    return manifest.get("kind") in GUARD_KIND_NAMES and not is_guard_check(manifest)


def guards_fingerprint(live_guards: list[dict]) -> str:
    """Of the shared guards as the API server holds them: a guard deleted and made again
    (same content, new uid) or changed (new generation) changes it."""
    keys = sorted((g.get("kind", ""), (g.get("metadata") or {}).get("name", ""),
                   (g.get("metadata") or {}).get("uid", ""),
                   (g.get("metadata") or {}).get("generation", 0)) for g in live_guards)
    return hashlib.sha256(json.dumps(keys).encode()).hexdigest()[:8]


def stamp_guard_check(manifest: dict, fingerprint: str) -> dict:
    """A check object as applied, naming the shared guards as they live; other objects are
    returned as they are."""
    if not is_guard_check(manifest):
        return manifest
    policy, binding = guard_check(fingerprint)
    if manifest["kind"] == GUARD_POLICY_KIND:
        return policy
    return binding


def check_fingerprint(manifests: list[dict]) -> str:
    for m in manifests:
        if is_guard_check(m) and m["kind"] == GUARD_BINDING_KIND:
            return m["spec"]["matchResources"]["objectSelector"]["matchLabels"][
                GUARD_FINGERPRINT_LABEL]
    return UNSTAMPED


def entries_digest(manifests: list[dict]) -> str:
    """The check entry of the allocation's params in these objects ('' without guards)."""
    for m in manifests:
        if is_guard_params(m):
            for key, value in params_entries(m).items():
                if key.startswith(CHECK_KEY):
                    return value
    return ""


def guard_probe(manifests: list[dict], fingerprint: str | None = None) -> dict | None:
    """The object only this allocation's check refuses (never created: dry-run only), or
    None when the allocation has no guards. The fingerprint is the stamped check's (read
    from `manifests` when not given)."""
    owner = next((params_allocation(m) for m in manifests if is_guard_params(m)), None)
    digest = entries_digest(manifests)
    if owner is None or not digest:
        return None
    fingerprint = fingerprint or check_fingerprint(manifests)
    name = f"aifactory-a{owner}-guard-probe"
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name,
                         "labels": {GUARD_PROBE_LABEL: str(owner), GUARD_DIGEST_LABEL: digest,
                                    GUARD_FINGERPRINT_LABEL: fingerprint}}}


def refused_by_admission(status: int | None, message: str) -> bool:
    """Whether an API error is an admission control's refusal (a policy or webhook), not a
    missing permission ("... cannot create resource ...") or a server away."""
    return status in (400, 403, 422) and " cannot " not in message and (
        "denied" in message or "admission webhook" in message)


def guard_check_answer(probe: dict, status: int | None, message: str) -> str:
    """What the API server's refusal of the probe says: "current" (the check refused it
    for these entries through the check as stamped now: the guards are in force), "older"
    (the check refused it, but not as stamped now) or "other" (not the check at all: a
    missing permission, say)."""
    labels = probe["metadata"]["labels"]
    if status not in (400, 403, 422) or f"'{GUARD_CHECK}'" not in message or \
            "(digest " not in message:
        return "other"
    current = (f"[{labels[GUARD_FINGERPRINT_LABEL]}]" in message and
               f"guards of {labels[GUARD_PROBE_LABEL]} (digest "
               f"{labels[GUARD_DIGEST_LABEL]})" in message)
    return "current" if current else "older"
