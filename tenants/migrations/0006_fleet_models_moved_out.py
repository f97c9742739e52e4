"""Pools, GPU nodes, outages and allocations now live in fleet/: state only, no table is dropped."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0002_fleet_owns_pools_and_allocations'),
        ('intake', '0003_fleet_owns_pools_and_allocations'),
        ('tenants', '0005_nodeoutage'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveField(
                    model_name='gpunode',
                    name='pool',
                ),
                migrations.RemoveField(
                    model_name='nodeoutage',
                    name='node',
                ),
                migrations.DeleteModel(
                    name='Allocation',
                ),
                migrations.DeleteModel(
                    name='Pool',
                ),
                migrations.DeleteModel(
                    name='GpuNode',
                ),
                migrations.DeleteModel(
                    name='NodeOutage',
                ),
            ],
            database_operations=[],
        ),
    ]
