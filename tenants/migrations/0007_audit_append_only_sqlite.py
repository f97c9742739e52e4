"""On SQLite too the database refuses UPDATE and DELETE of audit rows (the embedded run's
database): bulk writes, the base manager and raw SQL cannot rewrite the trail. As on
PostgreSQL, the one change allowed is clearing the actor link of a deleted user."""

from django.db import migrations

FIELDS = ("id", "at", "actor_name", "tenant_id", "subject_type", "subject_id", "action",
          "from_state", "to_state", "reason", "data")
UNCHANGED = " AND ".join(f"NEW.{f} IS OLD.{f}" for f in FIELDS)
CREATE = [
    f"""CREATE TRIGGER tenants_auditevent_no_update BEFORE UPDATE ON tenants_auditevent
        WHEN NOT (NEW.actor_id IS NULL AND {UNCHANGED})
        BEGIN SELECT RAISE(ABORT, 'the audit trail is append-only'); END;""",
    """CREATE TRIGGER tenants_auditevent_no_delete BEFORE DELETE ON tenants_auditevent
       BEGIN SELECT RAISE(ABORT, 'the audit trail is append-only'); END;""",
]
DROP = ["DROP TRIGGER IF EXISTS tenants_auditevent_no_update;",
        "DROP TRIGGER IF EXISTS tenants_auditevent_no_delete;"]


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        for statement in CREATE:
            schema_editor.execute(statement)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        for statement in DROP:
            schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [("tenants", "0006_fleet_models_moved_out")]
    operations = [migrations.RunPython(forwards, backwards)]
