"""The "Use it" section: what a tenant downloads to run work on its allocation."""

from __future__ import annotations

import pytest
import yaml

from tests.factories import make_request

pytestmark = pytest.mark.django_db


@pytest.fixture
def active(tenant, lead, admin_user, pools, django_capture_on_commit_callbacks, settings,
           tmp_path):
    from intake import services

    ca = tmp_path / "ca.crt"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    settings.PORTAL_CLUSTER_API_URL = "https://k8s.example:6443"
    settings.PORTAL_CLUSTER_CA_FILE = str(ca)
    settings.KEYCLOAK_SERVER_URL = "https://sso.example/realms/ai-factory"
    req = make_request(tenant, lead, submit=True, whole_devices=2)
    with django_capture_on_commit_callbacks(execute=True):
        services.request_approve(request=req, by=admin_user, reason="ok")
    req.refresh_from_db()
    return req.allocation


def test_the_section_says_where_and_how(client, member, active):
    client.force_login(member)  # members run work too
    page = client.get(f"/allocations/{active.pk}/connect/").content.decode()
    assert "https://k8s.example:6443" in page and active.namespace in page
    assert "LocalQueue <code>gpu</code>" in page and "Download kubeconfig" in page


def test_the_downloads_are_yaml_for_this_namespace_and_hold_no_secret(client, lead, active):
    client.force_login(lead)
    response = client.get(f"/allocations/{active.pk}/kubeconfig.yaml")
    assert response["Content-Disposition"] == \
        f'attachment; filename="{active.namespace}-kubeconfig.yaml"'
    cfg = yaml.safe_load(response.content)
    assert cfg["current-context"] == active.namespace
    assert cfg["clusters"][0]["cluster"]["server"] == "https://k8s.example:6443"
    assert cfg["clusters"][0]["cluster"]["certificate-authority-data"]
    assert "--oidc-issuer-url=https://sso.example/realms/ai-factory" in \
        cfg["users"][0]["user"]["exec"]["args"]
    assert "token" not in response.content.decode().lower().replace("get-token", "")
    job = yaml.safe_load(client.get(f"/allocations/{active.pk}/example.yaml").content)
    assert job["metadata"]["namespace"] == active.namespace
    api = client.get(f"/api/allocations/{active.pk}/connect/").json()
    assert yaml.safe_load(api["example"]) == job and api["local_queue"] == "gpu"


def test_nothing_to_use_before_it_is_active(client, lead, active):
    from fleet.models import Allocation

    Allocation.objects.filter(pk=active.pk).update(status="provisioning")
    client.force_login(lead)
    for path in ("connect/", "kubeconfig.yaml", "example.yaml"):
        assert client.get(f"/allocations/{active.pk}/{path}").status_code == 404
    assert client.get(f"/api/allocations/{active.pk}/connect/").status_code == 404
