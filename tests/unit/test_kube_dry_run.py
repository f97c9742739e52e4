"""The dry-run backend and prune, and how API errors map to KubeError."""

import json

import pytest

from fleet.kube import DryRunBackend, KubeError, ObjectKey, _error_from_api, prune


def obj(kind, name, ns="", alloc="1", api="v1"):
    meta = {"name": name, "labels": {"aifactory.io/allocation": alloc}}
    if ns:
        meta["namespace"] = ns
    return {"apiVersion": api, "kind": kind, "metadata": meta}


def test_dry_run_backend_records_applies_and_lists_by_label():
    b = DryRunBackend()
    b.apply(obj("Namespace", "acme-r1"))
    b.apply(obj("ResourceQuota", "q", "acme-r1"))
    b.apply(obj("ResourceQuota", "q", "other", alloc="2"))
    b.apply(obj("ResourceQuota", "dry", "acme-r1"), dry_run=True)
    assert b.get("v1", "ResourceQuota", "dry", "acme-r1") is None
    assert [o["metadata"]["namespace"] for o in
            b.list("v1", "ResourceQuota", label_selector="aifactory.io/allocation=1")] == [
        "acme-r1"]
    assert b.log[0] == ("apply", ObjectKey("v1", "Namespace", "", "acme-r1"))


def test_prune_keeps_what_is_kept_and_deletes_namespaces_last():
    b = DryRunBackend()
    for o in (obj("Namespace", "acme-r1"), obj("ResourceQuota", "q", "acme-r1"),
              obj("LimitRange", "l", "acme-r1")):
        b.apply(o)
    keep = [ObjectKey("v1", "LimitRange", "acme-r1", "l")]
    deleted = prune(b, label_selector="aifactory.io/allocation=1",
                    kinds=[("v1", "Namespace"), ("v1", "ResourceQuota"), ("v1", "LimitRange")],
                    keep=keep)
    assert [k.kind for k in deleted] == ["ResourceQuota", "Namespace"]
    assert b.get("v1", "LimitRange", "l", "acme-r1") is not None


class FakeApiError(Exception):
    def __init__(self, status, message, reason):
        self.status = status
        self.body = json.dumps({"message": message, "reason": reason})


@pytest.mark.parametrize(("status", "retriable"), [
    (422, False), (403, False), (404, False), (400, False), (409, True), (429, True),
    (500, True), (503, True), (None, True)])
def test_error_mapping_says_whether_a_retry_can_help(status, retriable):
    err = _error_from_api(FakeApiError(status, "the server said so", "Reason"), "Applying X")
    assert isinstance(err, KubeError)
    assert err.retriable is retriable
    assert err.message == "Applying X: the server said so"
