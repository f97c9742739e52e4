"""Allocations record where they came from as data. Existing ones are filled once from the
request that points to them (intake's table, read here only to convert history)."""

from django.db import migrations, models


def fill_origin(apps, schema_editor):
    Allocation = apps.get_model("fleet", "Allocation")
    try:
        CapacityRequest = apps.get_model("intake", "CapacityRequest")
    except LookupError:  # intake not installed: nothing to convert
        return
    for req_id, alloc_id in CapacityRequest.objects.filter(
            allocation__isnull=False).values_list("pk", "allocation_id"):
        Allocation.objects.filter(pk=alloc_id, origin="").update(origin=f"request #{req_id}")


class Migration(migrations.Migration):

    dependencies = [
        ('fleet', '0008_fleet_owns_rate_cards'),
        ('intake', '0003_fleet_owns_pools_and_allocations'),
    ]

    operations = [
        migrations.AddField(
            model_name='allocation',
            name='origin',
            field=models.CharField(blank=True, max_length=80),
        ),
        migrations.RunPython(fill_origin, migrations.RunPython.noop),
    ]
