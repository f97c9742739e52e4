"""Billing now points at fleet.Pool and fleet.Allocation: the same tables, state only."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0001_initial'),
        ('fleet', '0001_initial'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='ratecard',
                    name='pool',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='rate_cards', to='fleet.pool'),
                ),
                migrations.AlterField(
                    model_name='statementline',
                    name='allocation',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='fleet.allocation'),
                ),
                migrations.AlterField(
                    model_name='usagehour',
                    name='allocation',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='hours', to='fleet.allocation'),
                ),
                migrations.AlterField(
                    model_name='usagehour',
                    name='pool',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='fleet.pool'),
                ),
                migrations.AlterField(
                    model_name='usagemonth',
                    name='allocation',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='months', to='fleet.allocation'),
                ),
                migrations.AlterField(
                    model_name='usagemonth',
                    name='pool',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='fleet.pool'),
                ),
            ],
            database_operations=[],
        ),
    ]
