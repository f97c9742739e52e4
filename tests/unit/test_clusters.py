"""The cluster registry's pure decisions: where a credential is, and what a check found."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleet.inventory.clusters import (
    CredentialRef,
    cluster_health,
    kueue_version_of,
    multikueue_state,
    parse_credential_ref,
    retire_refusal,
)

pytestmark = pytest.mark.unit


def test_a_mounted_file():
    assert parse_credential_ref("file:/var/run/clusters/eu/kubeconfig") == CredentialRef(
        "file", path="/var/run/clusters/eu/kubeconfig")


def test_a_secret_with_and_without_its_key():
    assert parse_credential_ref("secret:aifactory-portal/eu-west") == CredentialRef(
        "secret", namespace="aifactory-portal", name="eu-west", key="kubeconfig")
    ref = parse_credential_ref("secret:aifactory-portal/eu-west#config")
    assert (ref.namespace, ref.name, ref.key) == ("aifactory-portal", "eu-west", "config")
    assert str(ref) == "secret:aifactory-portal/eu-west#config"


@pytest.mark.parametrize("text", [
    "apiVersion: v1\nkind: Config\nclusters: []",
    "client-key-data: LS0tLS1CRUdJTi...",
    "Bearer eyJhbGciOiJSUzI1NiIsImtpZCI6IiJ9.token",
])
def test_a_pasted_credential_is_refused_as_such(text):
    with pytest.raises(ValueError, match="looks like a credential itself"):
        parse_credential_ref(text)


@pytest.mark.parametrize("text", [
    "", "file:relative/kubeconfig", "file:/etc/../root/.kube/config", "secret:Upper/x",
    "secret:ns", "secret:ns/", "s3://bucket/kubeconfig", "file:/a b",
])
def test_anything_else_is_refused_with_what_a_reference_looks_like(text):
    with pytest.raises(ValueError, match="file:/path/to/kubeconfig"):
        parse_credential_ref(text)


@given(st.text(max_size=80))
def test_every_text_is_a_reference_or_a_refusal(text):
    try:
        ref = parse_credential_ref(text)
    except ValueError as exc:
        assert str(exc)
    else:  # what is stored reads back the same
        assert parse_credential_ref(str(ref)) == ref


def test_a_dry_run_is_neither_up_nor_down():
    health = cluster_health(dry_run=True, version=None)
    assert health.answers is None
    assert "talks to no API server" in health.message


def test_a_cluster_that_does_not_answer_says_why():
    health = cluster_health(dry_run=False, version=None,
                            error="connection refused (127.0.0.1:6443)")
    assert health.answers is False
    assert health.message == "Does not answer: connection refused (127.0.0.1:6443)"


def test_versions_from_the_answers():
    deployment = {"spec": {"template": {"spec": {"containers": [
        {"image": "registry.k8s.io/kueue/kueue:v0.17.0"}]}}}}
    health = cluster_health(dry_run=False, version={"gitVersion": "v1.37.2"},
                            kueue_deployment=deployment)
    assert (health.answers, health.kubernetes_version, health.kueue_version) == (
        True, "v1.37.2", "v0.17.0")
    assert health.message == "Answers: Kubernetes v1.37.2, Kueue v0.17.0."


def test_without_a_kueue_deployment_only_the_served_api_is_claimed():
    group = {"preferredVersion": {"groupVersion": "kueue.x-k8s.io/v1beta2"}}
    assert kueue_version_of(group, None) == "serves kueue.x-k8s.io/v1beta2"
    assert kueue_version_of(None, None) == ""
    health = cluster_health(dry_run=False, version={"gitVersion": "v1.37.2"})
    assert health.message == "Answers: Kubernetes v1.37.2, no Kueue API."


def test_a_worker_as_the_manager_sees_it():
    active = {"status": {"conditions": [{"type": "Active", "status": "True",
                                         "reason": "Active", "message": "Connected"}]}}
    lost = {"status": {"conditions": [{"type": "Active", "status": "False",
                                       "reason": "ClientConnectionFailed",
                                       "message": "dial tcp: connection refused"}]}}
    assert multikueue_state(active) == (True, "Connected")
    assert multikueue_state(lost) == (False, "dial tcp: connection refused")
    assert multikueue_state({"status": {}})[0] is None
    assert multikueue_state(None) == (False, "The manager has no MultiKueueCluster for this "
                                             "worker.")
    health = cluster_health(dry_run=False, version={"gitVersion": "v1.37.2"}, role="worker",
                            multikueue=multikueue_state(lost))
    assert health.message.endswith("MultiKueue: not active (dial tcp: connection refused).")
    assert health.multikueue_active is False


def test_a_cluster_is_retired_only_when_nothing_lives_there():
    assert retire_refusal(name="GPU EU", home=False, holding=0) == ""
    assert retire_refusal(name="GPU EU", home=False, holding=2) == (
        "GPU EU still holds 2 allocation(s); retire or move them first.")
    assert "cannot be retired" in retire_refusal(name="Local", home=True, holding=0)
