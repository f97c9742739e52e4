"""What Argo CD and Flux say about the portal's path, read as plain data."""

import pytest

from fleet.allocations.gitops_status import (
    argocd_status,
    flux_status,
    parse_ref,
    tool_status,
)


def test_the_setting_names_one_object_or_is_refused():
    ref = parse_ref("argocd:argocd/tenants")
    assert (ref.api_version, ref.kind, ref.namespace, ref.name) == (
        "argoproj.io/v1alpha1", "Application", "argocd", "tenants")
    assert parse_ref("flux:flux-system/tenants").kind == "Kustomization"
    assert parse_ref("") is None
    for bad in ("argocd:tenants", "helm:x/y", "flux:/y", "flux:x/"):
        with pytest.raises(ValueError):
            parse_ref(bad)


@pytest.mark.parametrize(("status", "state", "words"), [
    ({"sync": {"status": "Synced"}, "health": {"status": "Healthy"}}, "ok", "synced"),
    ({"sync": {"status": "OutOfSync"}, "health": {"status": "Progressing"}}, "progressing",
     "OutOfSync"),
    ({"operationState": {"phase": "Failed", "message": "denied"}}, "failed", "denied"),
    ({"conditions": [{"type": "ComparisonError", "message": "repo not found"}]}, "failed",
     "repo not found"),
    ({"sync": {"status": "Synced"}, "health": {"status": "Degraded", "message": "crash"}},
     "failed", "crash"),
    ({}, "unknown", "Unknown"),
    ({"conditions": "junk", "sync": [], "operationState": None}, "unknown", "Unknown"),
])
def test_argocd(status, state, words):
    got = argocd_status({"status": status})
    assert got.state == state and words in got.words


@pytest.mark.parametrize(("conditions", "state", "words"), [
    ([{"type": "Ready", "status": "True", "reason": "ReconciliationSucceeded"}], "ok",
     "ready"),
    ([{"type": "Ready", "status": "False", "reason": "HealthCheckFailed", "message": "x"}],
     "failed", "HealthCheckFailed: x"),
    ([{"type": "Ready", "status": "Unknown", "message": "Reconciliation in progress"}],
     "progressing", "in progress"),
    ([], "unknown", "not reconciled"),
])
def test_flux(conditions, state, words):
    got = flux_status({"status": {"conditions": conditions}})
    assert got.state == state and words in got.words


def test_a_missing_object_is_said_so():
    assert "not found" in tool_status(parse_ref("flux:a/b"), None).words


def test_git_credentials_come_from_mounted_files_never_the_command_line(settings, tmp_path):
    import base64
    import shlex

    from fleet.allocations.gitops import GitOpsError, credential_env

    settings.PORTAL_GITOPS_SSH_KEY_FILE = str(tmp_path / "id ed25519")
    settings.PORTAL_GITOPS_KNOWN_HOSTS_FILE = str(tmp_path / "known_hosts")
    settings.PORTAL_GITOPS_TOKEN_FILE = ""
    ssh = shlex.split(credential_env()["GIT_SSH_COMMAND"])
    assert ssh[:3] == ["ssh", "-i", str(tmp_path / "id ed25519")]
    assert "StrictHostKeyChecking=yes" in ssh
    settings.PORTAL_GITOPS_SSH_KEY_FILE = ""
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    settings.PORTAL_GITOPS_TOKEN_FILE = str(token)
    settings.PORTAL_GITOPS_USERNAME = "x-access-token"
    env = credential_env()
    assert env["GIT_CONFIG_KEY_0"] == "http.extraHeader"
    assert base64.b64decode(env["GIT_CONFIG_VALUE_0"].split()[-1]) == b"x-access-token:s3cret"
    settings.PORTAL_GITOPS_TOKEN_FILE = str(tmp_path / "missing")
    with pytest.raises(GitOpsError, match="cannot be read"):
        credential_env()
