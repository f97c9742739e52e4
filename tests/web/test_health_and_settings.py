"""The health check against the real database and broker, and production settings."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.django_db
def test_healthz_reports_postgresql_and_the_real_redis_broker(client, settings):
    from portal.celery import app

    app.conf.task_always_eager = False
    settings.CELERY_TASK_ALWAYS_EAGER = False
    try:
        body = client.get("/healthz").json()
    finally:
        app.conf.task_always_eager = True
    assert body["database"] == {"ok": True, "detail": "postgresql"}
    assert body["broker"] == {"ok": True, "detail": "reachable"}
    assert body["status"] == "ok"


@pytest.mark.django_db
def test_healthz_is_503_when_the_broker_is_down(client, settings):
    settings.CELERY_TASK_ALWAYS_EAGER = False
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["broker"]["ok"] is False


@pytest.mark.django_db
def test_probes_answer_by_pod_ip_over_plain_http_with_the_right_semantics(client, settings,
                                                                         django_assert_num_queries):
    """The kubelet asks by pod IP (a Host ALLOWED_HOSTS does not list) over HTTP: probes are
    answered anyway (other paths still refuse the host). Liveness never touches the database;
    readiness needs the database, not the broker (users are served while Redis is away)."""
    settings.ALLOWED_HOSTS = ["portal.example.com"]
    settings.SECURE_SSL_REDIRECT = True
    pod = {"HTTP_HOST": "10.244.1.7:8000"}
    with django_assert_num_queries(0):
        assert client.get("/livez", **pod).status_code == 200
    settings.CELERY_TASK_ALWAYS_EAGER = False
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"  # Redis away
    ready = client.get("/readyz", **pod)
    assert ready.status_code == 200 and ready.json()["broker"]["ok"] is False
    assert client.get("/healthz", **pod).status_code == 503  # the full report says so
    assert client.get("/", **pod).status_code == 400  # any other page: host refused
    assert client.post("/livez", **pod).status_code != 200  # probes are GET/HEAD only


@pytest.mark.django_db
def test_a_database_that_does_not_answer_is_not_ready(settings):
    """A real PostgreSQL connection to a port nobody listens on: not ready (the pod leaves
    rotation); liveness does not ask the database at all (above)."""
    from django.db.utils import ConnectionHandler

    from portal.probes import database_status

    dead = ConnectionHandler({"default": {**settings.DATABASES["default"], "PORT": "1",
                                          "HOST": "127.0.0.1"}})["default"]
    try:
        ok, detail = database_status(dead)
    finally:
        dead.close()
    assert ok is False and "OperationalError" in detail
    assert database_status() == (True, "postgresql")


def _production_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("DEBUG", "DJANGO_ALLOW_ASYNC_UNSAFE")}
    env.update({
        "PORTAL_MODE": "production",
        "SECRET_KEY": "p" * 30 + "-x9$Qk2!mZ7@vL4#nR8%tY1^wB5&cE3*",
        "ALLOWED_HOSTS": "portal.example.com",
        "DATABASE_URL": os.environ["DATABASE_URL"],
        "CELERY_BROKER_URL": os.environ["CELERY_BROKER_URL"],
    })
    env.update(extra)
    return env


def test_check_deploy_is_clean_in_production_settings():
    result = subprocess.run([sys.executable, "manage.py", "check", "--deploy",
                             "--fail-level", "WARNING"], cwd=ROOT, env=_production_env(),
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_production_refuses_debug():
    result = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT,
                            env=_production_env(DEBUG="true"), capture_output=True, text=True)
    assert result.returncode != 0
    assert "DEBUG must be off in production" in result.stderr


@pytest.mark.parametrize(("drop", "message"), [
    ("SECRET_KEY", "SECRET_KEY"), ("DATABASE_URL", "DATABASE_URL"),
    ("ALLOWED_HOSTS", "ALLOWED_HOSTS"), ("CELERY_BROKER_URL", "CELERY_BROKER_URL")])
def test_production_refuses_to_start_without_required_settings(drop, message):
    env = _production_env()
    env.pop(drop)
    result = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env,
                            capture_output=True, text=True)
    assert result.returncode != 0
    assert message in result.stderr


def test_money_carries_the_portals_currency(settings):
    from portal.templatetags.portal_extras import money

    settings.PORTAL_CURRENCY = "CHF"
    assert money("1234.5") == "CHF\u00a01,234.50"
    assert money("-120") == "CHF\u00a0-120.00"
    assert money("not a number") == "—"


def test_a_currency_that_is_no_iso_code_stops_the_start():
    import os
    import subprocess
    import sys

    env = {**os.environ, "PORTAL_CURRENCY": "euros"}
    out = subprocess.run([sys.executable, "-c", "import portal.settings"], env=env,
                         capture_output=True, text=True)
    assert out.returncode != 0 and "ISO 4217" in out.stderr


def test_the_api_docs_load_nothing_from_outside(client, db):
    """The portal runs on networks without internet: Redoc comes from its own static files."""
    import re

    body = client.get("/api/docs/").content.decode()
    sources = re.findall(r'(?:src|href)="([^"]+)"', body)
    assert any("redoc" in s for s in sources), sources
    assert not [s for s in sources if s.startswith(("http://", "https://", "//"))], sources


@pytest.mark.django_db
def test_bad_requests_and_expired_forms_get_the_portals_own_pages(lead):
    from django.test import Client

    strict = Client(enforce_csrf_checks=True)
    strict.force_login(lead)
    expired = strict.post("/settings/notifications/", {"kinds": ["request_decided"]})
    assert expired.status_code == 403
    body = expired.content.decode()
    assert "This form has expired" in body and "AI Factory Portal" in body
    assert "CSRF verification failed" not in body
    many = strict.get("/billing/?" + "&".join(["a=1"] * 1200))
    assert many.status_code == 400
    assert "Bad request" in many.content.decode() and 'class="topbar"' in many.content.decode()
    api = Client(enforce_csrf_checks=True)
    api.force_login(lead)
    assert api.post("/api/requests/", {}).status_code == 403


@pytest.mark.django_db
def test_every_page_carries_a_content_security_policy_and_no_inline_script(client, lead,
                                                                            admin_user):
    """Scripts from the portal's own origin only: the header is on every answer, and no page
    has a script the policy would block (data for charts is JSON, not script)."""
    import re

    from django.conf import settings

    assert "script-src 'self'" in settings.PORTAL_CSP
    assert "'unsafe-inline'" not in settings.PORTAL_CSP.split("script-src")[1].split(";")[0]
    urls = ["/accounts/login/", "/api/docs/", "/", "/requests/", "/review/", "/fleet/",
            "/fleet/cohorts/", "/pools/", "/billing/", "/billing/budgets/", "/billing/rates/"]
    for url in urls:
        if url == "/":
            client.force_login(admin_user)
        response = client.get(url)
        assert response.status_code == 200, url
        assert response["Content-Security-Policy"] == settings.PORTAL_CSP, url  # no SSO here
        body = response.content.decode()
        for attrs in re.findall(r"<script([^>]*)>", body):
            # The rule is the pair: a script is a file (src) or data (JSON), never code
            # written into the page (the CSP allows no inline script).
            assert "src=" in attrs or 'type="application/json"' in attrs, (url, attrs)
        assert not re.search(r"\son(click|load|change|submit|input)=", body), url


def test_signing_in_may_post_on_to_the_sso_server_only(settings):
    """Sign-in is a form whose answer redirects to Keycloak: form-action names that origin
    (browsers apply it to the redirect), and nothing else widens."""
    from portal.security import policy

    settings.KEYCLOAK_SERVER_URL = "https://sso.example.com/realms/aifactory"
    header = policy()
    assert "form-action 'self' https://sso.example.com;" in header
    assert header.replace(" https://sso.example.com", "") == settings.PORTAL_CSP


@pytest.mark.django_db
def test_an_api_address_that_matches_nothing_answers_json_and_a_page_answers_html(client):
    api = client.get("/api/billing/no.such/thing/")
    assert api.status_code == 404 and api["Content-Type"] == "application/json"
    assert api.json()["message"] == "Not found."
    page = client.get("/no/such/page/")
    assert page.status_code == 404 and b"<html" in page.content


def test_the_web_process_loads_its_views_and_freezes_them_out_of_the_collector():
    """portal.wsgi (what gunicorn loads) imports every view, then gc.freeze(): a full
    collection during a request scans only what requests made."""
    code = ("import gc, sys; import portal.wsgi; "
            "print(gc.get_freeze_count(), 'billing.views' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    frozen, views_loaded = out.split()
    assert int(frozen) > 50_000 and views_loaded == "True", out
