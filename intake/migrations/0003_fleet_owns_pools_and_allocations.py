"""Requests now point at fleet.Pool and fleet.Allocation: the same tables, state only."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('fleet', '0001_initial'),
        ('intake', '0002_renewals'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='capacityrequest',
                    name='allocation',
                    field=models.OneToOneField(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='request', to='fleet.allocation'),
                ),
                migrations.AlterField(
                    model_name='capacityrequest',
                    name='pool',
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='requests', to='fleet.pool'),
                ),
                migrations.AlterField(
                    model_name='capacityrequest',
                    name='renews',
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='renewals', to='fleet.allocation'),
                ),
            ],
            database_operations=[],
        ),
    ]
