"""The factory in a box, for people: `make factory-demo`.

Starts the simulated factory from the test tier's cached builds — kube-apiserver and etcd,
kube-controller-manager, Kueue, kube-scheduler and kwok GPU nodes — provisions four tenants'
shared-pool allocations (2 devices each, in one cohort that lends up to 8) through the
portal's own services, and runs the portal against it: the web server
(`manage.py runserver`), `manage.py watch_queues` and `manage.py watch_fleet`. A load generator
then plays the tenants' leads, submitting Jobs through their LocalQueues (1–6 devices, 8–40 s
each), so queues fill, borrow, are reclaimed and drain while you watch.

Open the address it prints and sign in as `padmin` (platform admin), `lead-<tenant>` or
`fin` (finance), password `demo`. It runs PORTAL_DEMO_SECONDS (default 900) or until Ctrl-C.
PORTAL_DEMO_SCREENSHOT=<dir> saves screenshots of the cohorts page and a lead's queue after a
minute. Not part of `make test`: the file is not named test_*.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from fleet.models import ClusterQueueState, Pool, QueueWorkload, Route

from .approvals import approve
from .identities import as_identity
from .workloads import job as tenant_job

pytestmark = [pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[2]
PORT = int(os.environ.get("PORT", "8000"))
SECONDS = float(os.environ.get("PORTAL_DEMO_SECONDS", "900"))
NAMES = ("acme", "globex", "initech", "umbrella")


def _database_url() -> str:
    from django.db import connection

    s = connection.settings_dict
    auth = s["USER"] + (f":{s['PASSWORD']}" if s.get("PASSWORD") else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT']}/{s['NAME']}"


def _portal_env(control_plane) -> dict:
    env = dict(os.environ)
    env.update({"DATABASE_URL": _database_url(), "PORTAL_KUBE_BACKEND": "kubeconfig",
                "PORTAL_KUBECONFIG": str(control_plane.portal_kubeconfig),
                "CELERY_TASK_ALWAYS_EAGER": "true", "DEBUG": "true",
                "PORTAL_USAGE_SOURCE": "portal.demo_usage.used_device_seconds",
                "PORTAL_BASE_URL": f"http://127.0.0.1:{PORT}"})
    return env


def _start(argv: list[str], env: dict, log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "manage.py", *argv], cwd=ROOT, env=env,
                            stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def _screenshots(directory: Path, lead: str, request_id: int) -> None:
    from playwright.sync_api import sync_playwright

    directory.mkdir(parents=True, exist_ok=True)
    base = f"http://127.0.0.1:{PORT}"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium",
                                    args=["--no-sandbox"])
        for user, path, name in (("padmin", "/fleet/cohorts/", "factory-demo-cohorts"),
                                 (lead, f"/requests/{request_id}/",
                                  "factory-demo-lead-queue")):
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(f"{base}/accounts/login/")
            page.fill("input[name=login]", user)
            page.fill("input[name=password]", "demo")
            page.click("form.form button[type=submit]")
            page.wait_for_url(f"{base}/")
            page.goto(base + path)
            page.wait_for_timeout(2500)  # the panels load and the charts draw
            target = directory / f"{name}.png"
            if path.startswith("/requests/"):  # the lead's queue panel, not the whole page
                page.locator("#queue").screenshot(path=str(target))
            else:
                page.screenshot(path=str(target), full_page=True)
            page.close()
        browser.close()
    print(f"demo: screenshots in {directory}", flush=True)


def test_the_factory_in_a_box(control_plane, simulated_fleet, placement,
                              admin_user, finance_user, tmp_path):
    from tests.factories import TenantFactory, make_lead

    Pool.objects.filter(route=Route.SHARED_POOL).update(cohort="demo-shared",
                                                        borrowing_limit_devices=8)
    for user in (admin_user, finance_user):
        _password(user)
    tenants = []
    for name in NAMES:
        tenant = TenantFactory(slug=f"{name}-{uuid.uuid4().hex[:3]}", name=name.title())
        lead = make_lead(tenant, f"lead-{name}")
        _password(lead)
        req, alloc = approve(tenant, lead, admin_user, Route.SHARED_POOL,
                             _run_now, whole_devices=2)
        alloc.refresh_from_db()
        assert alloc.status == "active", alloc.status_message
        tenants.append((req, lead, alloc, as_identity(
            control_plane, f"{tenant.slug}-lead", [f"oidc:/tenants/{tenant.slug}/leads"])))

    env = _portal_env(control_plane)
    procs = [_start(["runserver", f"127.0.0.1:{PORT}", "--noreload"], env,
                    tmp_path / "web.log"),
             _start(["watch_queues"], env, tmp_path / "watch_queues.log"),
             _start(["watch_fleet"], env, tmp_path / "watch_fleet.log")]
    print(f"\ndemo: the portal on http://127.0.0.1:{PORT} — sign in as padmin, fin or "
          f"lead-{'/'.join(NAMES)}, password demo; logs in {tmp_path}; "
          f"{SECONDS:.0f} s or Ctrl-C", flush=True)
    rng = random.Random(7)
    started = time.monotonic()
    shot_dir = os.environ.get("PORTAL_DEMO_SCREENSHOT")
    submitted, last_report = 0, 0.0
    try:
        # A span, not a wait: the demo keeps submitting work for SECONDS (or until Ctrl-C),
        # at a person's pace (the pause at the end of each round).
        while time.monotonic() - started < SECONDS:
            for proc in procs:
                assert proc.poll() is None, f"{proc.args} exited; see {tmp_path}"
            placement.raise_if_dead()
            _req, _lead, alloc, ident = rng.choice(tenants)
            waiting = QueueWorkload.objects.filter(allocation=alloc, state="pending").count()
            if waiting < 3:
                body = tenant_job(alloc.namespace, devices=rng.choice([1, 1, 2, 2, 3, 4, 6]),
                                  name=f"job-{submitted:04d}")
                body["spec"]["template"]["metadata"] = {"annotations": _run_for(
                    rng.randint(8, 40))}
                ident.apply(body)
                submitted += 1
            if time.monotonic() - last_report > 10:
                last_report = time.monotonic()
                print("demo: " + "; ".join(_queue_line(a) for _t, _l, a, _i in tenants),
                      flush=True)
            if shot_dir and time.monotonic() - started > 60:
                req, lead, _alloc, _ = tenants[1]
                _screenshots(Path(shot_dir), lead.username, req.pk)
                shot_dir = None
            time.sleep(rng.uniform(1.0, 3.0))
    except KeyboardInterrupt:
        print("\ndemo: stopping", flush=True)
    finally:
        for proc in procs:
            _stop(proc)
    # What the demo showed came from the cluster: the watch recorded admitted work.
    assert QueueWorkload.objects.filter(allocation__in=[t[2] for t in tenants]).exclude(
        admitted_at=None).exists()


def _password(user) -> None:
    """'demo', hashed as the portal process checks it (the tests' fast hasher is theirs)."""
    from django.contrib.auth.hashers import PBKDF2PasswordHasher

    hasher = PBKDF2PasswordHasher()
    user.password = hasher.encode("demo", hasher.salt())
    user.save(update_fields=["password"])


def _run_now(execute=True):
    """approve()'s on-commit capture: committed at once here (a transactional test)."""
    from contextlib import nullcontext

    return nullcontext()


def _run_for(seconds: int) -> dict:
    from tests.harness.placement import start_delays

    return start_delays(run_ms=seconds * 1000)


def _queue_line(alloc) -> str:
    state = ClusterQueueState.objects.filter(name=alloc.namespace).first()
    if state is None:
        return f"{alloc.namespace}: -"
    return (f"{alloc.tenant.name} {state.usage.normalize():f} in use "
            f"({state.borrowed.normalize():f} borrowed), {state.pending} waiting")
