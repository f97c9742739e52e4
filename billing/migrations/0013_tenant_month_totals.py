"""The tenant-month totals kept at write time (billing.totals), filled for the months that
exist already: from then on the rollup, closing and reopening keep them."""

import django.db.models.deletion
from django.db import migrations, models


def fill(apps, schema_editor):
    # The one rule (billing.figures.month_figures through billing.totals): a copy of its
    # roundings here would be a second place for them. Run on today's models, at migrate
    # time, for the months present; an empty database writes nothing.
    from billing.totals import refresh_month_totals

    UsageMonth = apps.get_model("billing", "UsageMonth")  # noqa: N806
    Statement = apps.get_model("billing", "Statement")  # noqa: N806
    keys = set(UsageMonth.objects.values_list("tenant_id", "month").distinct())
    keys |= set(Statement.objects.values_list("tenant_id", "month"))
    refresh_month_totals(keys)


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0012_stranded_policy'),
        ('fleet', '0017_workload_stopping_requeued'),
        ('tenants', '0010_capacity_changed_notification'),
    ]

    operations = [
        migrations.CreateModel(
            name='TenantMonthTotal',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('month', models.DateField()),
                ('allocated_h', models.DecimalField(decimal_places=4, default=0, max_digits=18)),
                ('used_h', models.DecimalField(decimal_places=4, default=0, max_digits=18)),
                ('amount', models.DecimalField(decimal_places=2, default=0, max_digits=16)),
                ('pool', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='fleet.pool')),
                ('tenant', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='tenants.tenant')),
            ],
            options={
                'indexes': [models.Index(fields=['month', 'tenant'], name='total_by_month_tenant')],
                'constraints': [models.UniqueConstraint(fields=('tenant', 'pool', 'month'), name='one_total_per_tenant_pool_month')],
            },
        ),
        migrations.RunPython(fill, migrations.RunPython.noop),
    ]
