"""Shared test setup: tier markers by folder, the CI no-skip rule, users for each role."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("PORTAL_TEST_CHROMIUM", "/usr/bin/chromium")
TIERS = ("unit", "db", "web", "worker", "k8s", "sso", "metrics", "e2e")


# `make test` runs two pytest-xdist workers. Each scope below runs whole on one worker,
# because its tests share one expensive server for the session (the cluster, Keycloak, the
# browser) or must not run beside each other (real Celery workers); any other file is a
# scope of its own. The longest scopes go first, so the cluster's tier starts at once on one
# worker while the other takes the files. (xdist's own `loadgroup` cannot be used: it marks
# the group in an attribute pytest 9 no longer reads.)
SHARED_SERVER_SCOPES = {"k8s": "cluster", "sso": "keycloak", "e2e": "browser",
                        "worker": "celery"}
SCOPE_ORDER = tuple(SHARED_SERVER_SCOPES.values())  # as listed: the cluster first


def scope_of(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    for part in Path(path).parts:
        if part in SHARED_SERVER_SCOPES:
            return SHARED_SERVER_SCOPES[part]
    return path


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class SharedServerScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    return SharedServerScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    # A test's tier is its folder, so `-m unit` runs one tier alone.
    for item in items:
        parts = Path(str(item.fspath)).parts
        for tier in TIERS:
            if tier in parts:
                item.add_marker(getattr(pytest.mark, tier))

    def rank(item) -> int:
        scope = scope_of(item.nodeid)
        return SCOPE_ORDER.index(scope) if scope in SCOPE_ORDER else len(SCOPE_ORDER)

    items.sort(key=rank)  # stable: a file keeps its order


def pytest_configure(config):
    # Tests create many users; the production hasher is deliberately slow.
    from django.conf import settings

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    worker = os.environ.get("PYTEST_XDIST_WORKER")  # gw0, gw1… under pytest-xdist
    if worker:
        _redis_of_its_own(int(worker.removeprefix("gw")))


def _redis_of_its_own(n: int) -> None:
    """Each xdist worker has its own test database (pytest-django's suffix); its broker and
    cache get Redis databases of their own too: user ids repeat across the workers' databases,
    so a shared cache would hand one worker's cached user to the other, and a Celery worker
    started by one must not take the other's tasks. The processes a test starts inherit it."""
    from django.conf import settings

    def on_db(url: str, db: int) -> str:
        return url.rsplit("/", 1)[0] + f"/{db}"

    broker = os.environ.get("CELERY_BROKER_URL", "")
    if broker.startswith("redis://"):
        os.environ["CELERY_BROKER_URL"] = settings.CELERY_BROKER_URL = on_db(broker, 2 + 2 * n)
        from portal.celery import app

        app.conf.broker_url = settings.CELERY_BROKER_URL
    cache = os.environ.get("CACHE_URL", "")
    if cache.startswith("redis://"):
        os.environ["CACHE_URL"] = on_db(cache, 3 + 2 * n)
        from django.core.cache import caches

        assert "default" not in caches._connections.__dict__, "the cache was used already"
        settings.CACHES["default"]["LOCATION"] = os.environ["CACHE_URL"]


def pytest_runtest_logreport(report):
    """Keep what benchmarks and the FOCUS validator's tests print (lines starting BENCHMARK or
    VALIDATOR, with the output around them), to show at the end: under xdist a worker's
    printing never reaches the terminal."""
    if report.when != "call" or not report.passed:
        return
    out = "\n".join(content for name, content in report.sections if "stdout" in name)
    if "BENCHMARK" in out or "VALIDATOR" in out:
        _FIGURES.append((report.nodeid, [line for line in out.splitlines() if line.strip()]))


_FIGURES: list[tuple[str, list[str]]] = []


def pytest_terminal_summary(terminalreporter):
    if not _FIGURES:
        return
    terminalreporter.section("benchmarks and validators: the figures they printed")
    for nodeid, lines in sorted(_FIGURES):
        terminalreporter.write_line(f"--- {nodeid}")
        for line in lines:
            terminalreporter.write_line(line)


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


@pytest.fixture(autouse=True)
def _configured_kube_backend():
    """After each test the process-wide Kubernetes backend is rebuilt from settings (the dry
    run unless a test sets one): under xdist one worker process runs the cluster tier and
    then other files, and a backend a test left pointed at the cluster must not answer for
    the next test (seen: the provisioning benchmark's)."""
    yield
    from fleet.kube import forget_backends

    forget_backends()


@pytest.fixture(autouse=True)
def _kept_reads_retired():
    """Kept reads (tenants.kept_reads) are checked against the tables they declare on every
    build, and retired after each test: a test's rolled-back transaction moves no mark back,
    so what one test kept must not answer for the next."""
    from tenants import kept_reads

    kept_reads.STRICT = True
    yield
    kept_reads.renew_every_mark()


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
def bare_pools(db):
    """The same pools with no node synced: for tests that bring their own fleet."""
    from tests.factories import make_pools

    return make_pools(nodes=False)


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
        """The messages matching `predicate`, once there is one; [] if none arrived in
        time (the callers assert on what they got)."""
        from tests.harness.waiting import eventually

        def found() -> list[dict] | bool:
            with self.lock:
                return [m for m in self.messages if predicate(m)] or False

        try:
            return eventually(found, timeout=timeout, interval=0.05, retry_on=(),
                              what="a matching e-mail")
        except TimeoutError:
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

