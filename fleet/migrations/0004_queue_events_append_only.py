"""The database itself refuses UPDATE and DELETE of queue history rows (PostgreSQL and
SQLite), as it does for the audit trail: the start-time estimates' track record and the
borrowing reasons are only worth something if nobody can rewrite them."""

from django.db import migrations

POSTGRES = """
CREATE OR REPLACE FUNCTION fleet_queueevent_append_only() RETURNS trigger AS $$
BEGIN
  RAISE EXCEPTION 'queue history is append-only';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER fleet_queueevent_append_only
  BEFORE UPDATE OR DELETE ON fleet_queueevent
  FOR EACH ROW EXECUTE FUNCTION fleet_queueevent_append_only();
"""
POSTGRES_DROP = """
DROP TRIGGER IF EXISTS fleet_queueevent_append_only ON fleet_queueevent;
DROP FUNCTION IF EXISTS fleet_queueevent_append_only();
"""
SQLITE = [
    """CREATE TRIGGER fleet_queueevent_no_update BEFORE UPDATE ON fleet_queueevent
       BEGIN SELECT RAISE(ABORT, 'queue history is append-only'); END;""",
    """CREATE TRIGGER fleet_queueevent_no_delete BEFORE DELETE ON fleet_queueevent
       BEGIN SELECT RAISE(ABORT, 'queue history is append-only'); END;""",
]
SQLITE_DROP = ["DROP TRIGGER IF EXISTS fleet_queueevent_no_update;",
               "DROP TRIGGER IF EXISTS fleet_queueevent_no_delete;"]


def forwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(POSTGRES)
    elif vendor == "sqlite":
        for statement in SQLITE:
            schema_editor.execute(statement)


def backwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(POSTGRES_DROP)
    elif vendor == "sqlite":
        for statement in SQLITE_DROP:
            schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [("fleet", "0003_queue_truth")]
    operations = [migrations.RunPython(forwards, backwards)]
