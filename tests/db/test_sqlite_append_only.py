"""The embedded run's SQLite database refuses to rewrite the audit trail and the queue
history, whatever writes to it (raw SQL here; the ORM's bulk paths end in the same SQL).
Run against a fresh SQLite database migrated by the real `manage.py migrate`."""

from __future__ import annotations

import pytest

from tests.db.embedded_sqlite import run_on_embedded_sqlite

PROBE = """
from django.contrib.auth import get_user_model
from django.db import connection
from tenants.audit import audit_record
from tenants.models import AuditEvent, Tenant

user = get_user_model().objects.create(username="gone-soon")
tenant = Tenant.objects.create(slug="t1", name="T1", cost_centre="CC")
audit_record(actor=user, subject=tenant, tenant=tenant, action="tenant.created", reason="x")
row = AuditEvent.objects.get()
import datetime as dt
from fleet.models import Allocation, Pool, QueueEvent
pool = Pool.objects.create(slug="p", name="P", route="shared_pool")
alloc = Allocation.objects.create(tenant=tenant, pool=pool, route="shared_pool",
                                  device_equivalents=1, namespace="t1-a",
                                  starts_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
QueueEvent.objects.create(allocation=alloc, workload_uid="u", workload="w", kind="submitted",
                          at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC), reason="Submitted.")
for label, sql in [("update", "UPDATE tenants_auditevent SET reason = 'rewritten'"),
                   ("delete", "DELETE FROM tenants_auditevent"),
                   ("queue", "UPDATE fleet_queueevent SET reason = 'x'")]:
    try:
        with connection.cursor() as c:
            c.execute(sql)
        print(label, "ALLOWED")
    except Exception as exc:
        print(label, "REFUSED", exc)
user.delete()  # the one change allowed: the actor link is cleared, the name stays
row = AuditEvent.objects.get()
print("actor", row.actor_id, row.actor_name, row.reason)
"""


@pytest.mark.parametrize("probe", [PROBE])
def test_sqlite_refuses_to_rewrite_history(tmp_path, probe):
    out = run_on_embedded_sqlite(tmp_path, probe)
    lines = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    assert lines["update"].startswith("REFUSED") and "append-only" in lines["update"]
    assert lines["delete"].startswith("REFUSED") and "append-only" in lines["delete"]
    assert lines["queue"].startswith("REFUSED") and "append-only" in lines["queue"]
    assert lines["actor"] == "None gone-soon x"
