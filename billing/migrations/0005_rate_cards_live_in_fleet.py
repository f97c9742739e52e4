"""RateCard is fleet's now (same table, billing_ratecard): state only."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0004_budgets'),
        ('fleet', '0008_fleet_owns_rate_cards'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name='RateCard')],
            database_operations=[],
        ),
    ]
