"""Shared test setup: tier markers by folder, the CI no-skip rule, users for each role."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("PORTAL_TEST_CHROMIUM", "/usr/bin/chromium")
TIERS = ("unit", "db", "web", "worker", "k8s", "sso", "metrics", "e2e")


def pytest_collection_modifyitems(config, items):
    # A test's tier is its folder, so `-m unit` runs one tier alone.
    for item in items:
        parts = Path(str(item.fspath)).parts
        for tier in TIERS:
            if tier in parts:
                item.add_marker(getattr(pytest.mark, tier))


def pytest_sessionfinish(session, exitstatus):
    """Under CI=true no tier may silently skip: a skip fails the run."""
    if os.environ.get("CI", "").lower() != "true":
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter else []
    if skipped:
        reporter.write_line(f"CI=true: {len(skipped)} test(s) skipped; failing the run.",
                            red=True)
        for rep in skipped:
            reporter.write_line(f"  skipped: {rep.nodeid} {rep.longrepr}")
        session.exitstatus = 1


@pytest.fixture
def tenant(db):
    from tests.factories import TenantFactory

    return TenantFactory(slug="acme", name="Acme")


@pytest.fixture
def other_tenant(db):
    from tests.factories import TenantFactory

    return TenantFactory(slug="globex", name="Globex")


@pytest.fixture
def pools(db):
    from tests.factories import make_pools

    return make_pools()


@pytest.fixture
def lead(tenant):
    from tests.factories import make_lead

    return make_lead(tenant, "lead")


@pytest.fixture
def member(tenant):
    from tests.factories import make_member

    return make_member(tenant, "member")


@pytest.fixture
def other_lead(other_tenant):
    from tests.factories import make_lead

    return make_lead(other_tenant, "outsider")


@pytest.fixture
def admin_user(db):
    from tenants.models import PlatformRole
    from tests.factories import make_platform_user

    return make_platform_user("padmin", PlatformRole.Role.PLATFORM_ADMIN)


@pytest.fixture
def finance_user(db):
    from tenants.models import PlatformRole
    from tests.factories import make_platform_user

    return make_platform_user("fin", PlatformRole.Role.FINANCE)


def pytest_configure(config):
    # Tests create many users; the production hasher is deliberately slow.
    from django.conf import settings

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


# --- Headless Chromium (Debian's) driven by Playwright: one browser per session, shared by
# the e2e and sso tiers (two sync Playwright instances cannot share a thread).
@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread; the ORM calls the tests make
    # for setup are still plain synchronous calls.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run",
            "--disable-quic"])
        yield browser
        browser.close()
    os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    page = context.new_page()
    yield page
    context.close()




# --- A real SMTP server (aiosmtpd) on loopback: notifications are asserted where they land.
class _Inbox:
    def __init__(self):
        import threading

        self.messages: list = []
        self.lock = threading.Lock()

    async def handle_DATA(self, server, session, envelope):  # aiosmtpd's handler hook
        from email import message_from_bytes, policy

        msg = message_from_bytes(envelope.content, policy=policy.default)
        with self.lock:
            self.messages.append({"to": list(envelope.rcpt_tos), "subject": msg["subject"],
                                  "body": msg.get_body().get_content()})
        return "250 Message accepted for delivery"

    def to(self, address: str) -> list[dict]:
        with self.lock:
            return [m for m in self.messages if address in m["to"]]

    def wait_for(self, predicate, timeout: float = 10.0) -> list[dict]:
        import time

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                found = [m for m in self.messages if predicate(m)]
            if found:
                return found
            time.sleep(0.05)
        return []


@pytest.fixture
def smtp_server(settings):
    """Start aiosmtpd on a free port and point Django's SMTP backend at it."""
    import socket

    from aiosmtpd.controller import Controller

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    inbox = _Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST = "127.0.0.1"
    settings.EMAIL_PORT = port
    settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
    inbox.port = settings.EMAIL_PORT
    inbox.controller = controller
    yield inbox
    controller.stop()
