"""On PostgreSQL the database itself refuses UPDATE and DELETE of audit rows."""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION tenants_audit_append_only() RETURNS trigger AS $$
BEGIN
  -- The one change allowed: a deleted user's actor link is cleared (actor_name stays).
  IF TG_OP = 'UPDATE' AND NEW.actor_id IS NULL
     AND ROW(NEW.at, NEW.actor_name, NEW.tenant_id, NEW.subject_type, NEW.subject_id,
             NEW.action, NEW.from_state, NEW.to_state, NEW.reason, NEW.data::text)
         IS NOT DISTINCT FROM
         ROW(OLD.at, OLD.actor_name, OLD.tenant_id, OLD.subject_type, OLD.subject_id,
             OLD.action, OLD.from_state, OLD.to_state, OLD.reason, OLD.data::text) THEN
    RETURN NEW;
  END IF;
  RAISE EXCEPTION 'the audit trail is append-only';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER tenants_auditevent_append_only
  BEFORE UPDATE OR DELETE ON tenants_auditevent
  FOR EACH ROW EXECUTE FUNCTION tenants_audit_append_only();
"""
DROP = """
DROP TRIGGER IF EXISTS tenants_auditevent_append_only ON tenants_auditevent;
DROP FUNCTION IF EXISTS tenants_audit_append_only();
"""


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("tenants", "0001_initial")]
    operations = [migrations.RunPython(forwards, backwards)]
