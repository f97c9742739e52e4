"""The request tally (intake.models.RequestTally) is what counting the requests says, after
every kind of write: the services' transitions, bulk inserts, queryset updates, a request
moved to another tenant, deletes — on PostgreSQL and on the embedded run's SQLite (its own
triggers, migrated by the real `manage.py migrate`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Every write path at once; prints the tally and the count, which must be equal.
SCENARIO = """
import json
from django.db.models import Count
from intake.models import CapacityRequest, RequestTally
from tenants.models import Tenant
from tests.factories import make_lead, make_pools, make_request

def tally():
    return sorted((t, s, n) for t, s, n in RequestTally.objects.values_list(
        "tenant__slug", "status", "n") if n)

def counted():
    return sorted((t, s, n) for t, s, n in CapacityRequest.objects.values_list(
        "tenant__slug", "status").annotate(n=Count("id")).values_list(
        "tenant__slug", "status", "n"))

make_pools()
a, b = Tenant.objects.create(slug="ta", name="A"), Tenant.objects.create(slug="tb", name="B")
lead = make_lead(a, "tally-lead")
steps = []
drafts = [make_request(a, lead, title=f"d{i}") for i in range(3)]
submitted = make_request(a, lead, submit=True, title="s")
steps.append(("services", tally() == counted()))
CapacityRequest.objects.bulk_create([CapacityRequest(
    tenant=b, requester=lead, title=f"bulk {i}", status="denied", workload_kind="training",
    justification="x", starts_on=submitted.starts_on, ends_on=submitted.ends_on)
    for i in range(4)])
steps.append(("bulk insert", tally() == counted()))
CapacityRequest.objects.filter(tenant=b).update(status="retired")
steps.append(("queryset update", tally() == counted()))
CapacityRequest.objects.filter(pk=drafts[0].pk).update(tenant=b)
steps.append(("moved tenant", tally() == counted()))
drafts[1].title = "renamed"; drafts[1].save()  # no status change: nothing to tally
steps.append(("saved unchanged", tally() == counted()))
CapacityRequest.objects.filter(pk__in=[drafts[2].pk, submitted.pk]).delete()
steps.append(("deleted", tally() == counted()))
print("RESULT " + json.dumps({"steps": steps, "tally": tally()}))
"""


def _result(stdout: str) -> dict:
    line = next(x for x in stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def _assert_consistent(result: dict) -> None:
    assert all(ok for _, ok in result["steps"]), result["steps"]
    # 1 draft left in ta, 1 moved draft + 4 bulk rows (retired) in tb
    assert result["tally"] == [["ta", "draft", 1], ["tb", "draft", 1], ["tb", "retired", 4]]


@pytest.mark.django_db
def test_the_tally_is_the_count_on_postgresql():
    scope: dict = {}
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(SCENARIO, scope)  # noqa: S102 - our own scenario, shared with the SQLite run
    _assert_consistent(_result(out.getvalue()))


def test_the_tally_is_the_count_on_sqlite(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL",)}
    env.update({"PORTAL_VAR_DIR": str(tmp_path), "CELERY_TASK_ALWAYS_EAGER": "true"})
    run = lambda *argv: subprocess.run(  # noqa: E731
        [sys.executable, "manage.py", *argv], cwd=ROOT, env=env, capture_output=True,
        text=True, timeout=300)
    migrated = run("migrate", "--noinput", "-v0")
    assert migrated.returncode == 0, migrated.stderr
    out = run("shell", "-c", SCENARIO)
    assert out.returncode == 0, out.stderr
    _assert_consistent(_result(out.stdout))
