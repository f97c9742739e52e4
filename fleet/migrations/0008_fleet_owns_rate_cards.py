"""Rate cards move to fleet (fleet.pricing answers every price) and the pool's own copy of the
rate goes: its value becomes a card from the beginning, so every hour keeps its price (an
hour before a pool's first card was priced at the pool's rate, and still is)."""

import datetime as dt

import django.db.models.deletion
from django.db import migrations, models

BEGINNING = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def cards_from_pool_rates(apps, schema_editor):
    Pool = apps.get_model("fleet", "Pool")
    RateCard = apps.get_model("fleet", "RateCard")
    for pool in Pool.objects.all():
        if not RateCard.objects.filter(pool=pool, gpu_model="",
                                       effective_from__lte=BEGINNING).exists():
            RateCard.objects.create(pool=pool, gpu_model="", effective_from=BEGINNING,
                                    rate_per_device_hour=pool.rate_per_device_hour)


def pool_rates_from_cards(apps, schema_editor):
    Pool = apps.get_model("fleet", "Pool")
    RateCard = apps.get_model("fleet", "RateCard")
    for pool in Pool.objects.all():
        card = RateCard.objects.filter(pool=pool, gpu_model="").order_by(
            "-effective_from").first()
        if card is not None:
            Pool.objects.filter(pk=pool.pk).update(rate_per_device_hour=card.rate_per_device_hour)


class Migration(migrations.Migration):

    dependencies = [
        ('fleet', '0007_queue_workload_deactivated'),
        ('billing', '0004_budgets'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='RateCard',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('gpu_model', models.CharField(blank=True, help_text="Blank: the pool's model", max_length=80)),
                        ('rate_per_device_hour', models.DecimalField(decimal_places=4, max_digits=10)),
                        ('effective_from', models.DateTimeField()),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('pool', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='rate_cards', to='fleet.pool')),
                    ],
                    options={
                        'db_table': 'billing_ratecard',
                        'ordering': ['pool', '-effective_from'],
                        'constraints': [models.UniqueConstraint(fields=('pool', 'gpu_model', 'effective_from'), name='one_rate_per_moment')],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(cards_from_pool_rates, pool_rates_from_cards),
        migrations.RemoveField(model_name='pool', name='rate_per_device_hour'),
    ]
