"""Pools, GPU nodes, outages and allocations move here from tenants/: state only.

The tables keep their names (Meta.db_table), so no row is copied and every foreign key,
index and sequence stays as it is."""

import django.core.validators
import django.db.models.deletion
from decimal import Decimal
from django.db import migrations, models

MOVED = ("pool", "gpunode", "nodeoutage", "allocation")


def content_types_follow(apps, schema_editor):
    """Permissions and admin log entries point at content types: move them with the models."""
    content_type = apps.get_model("contenttypes", "ContentType")
    content_type.objects.filter(app_label="tenants", model__in=MOVED).update(app_label="fleet")


def content_types_back(apps, schema_editor):
    content_type = apps.get_model("contenttypes", "ContentType")
    content_type.objects.filter(app_label="fleet", model__in=MOVED).update(app_label="tenants")


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('contenttypes', '0002_remove_content_type_name'),
        ('tenants', '0005_nodeoutage'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='Pool',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('slug', models.CharField(max_length=40, unique=True, validators=[django.core.validators.RegexValidator('^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$', 'Use 1-40 lowercase letters, digits and hyphens; start and end with a letter or digit (it becomes part of Kubernetes names).')])),
                        ('name', models.CharField(max_length=120)),
                        ('route', models.CharField(choices=[('dedicated_block', 'Dedicated block'), ('confidential_pool', 'Confidential pool'), ('mig_vcluster', 'MIG under vCluster'), ('shared_pool', 'Shared pool')], max_length=30)),
                        ('gpu_model', models.CharField(help_text='e.g. NVIDIA-H100-80GB-HBM3', max_length=60)),
                        ('gpu_memory_gb', models.PositiveIntegerField(default=80)),
                        ('devices_per_node', models.PositiveIntegerField(default=8, validators=[django.core.validators.MinValueValidator(1)])),
                        ('capacity_devices', models.PositiveIntegerField(default=0)),
                        ('node_selector', models.JSONField(blank=True, default=dict)),
                        ('device_class', models.CharField(default='gpu.nvidia.com', max_length=80)),
                        ('mig_profiles', models.JSONField(blank=True, default=list, help_text='MIG profiles offered, e.g. ["1g.10gb", "3g.40gb"]')),
                        ('rate_per_device_hour', models.DecimalField(decimal_places=4, default=Decimal('0'), max_digits=10)),
                        ('borrowing_limit_devices', models.PositiveIntegerField(default=0)),
                        ('cohort', models.CharField(blank=True, max_length=63)),
                        ('dra_product_name', models.CharField(blank=True, max_length=80)),
                        ('active', models.BooleanField(default=True)),
                    ],
                    options={
                        'db_table': 'tenants_pool',
                        'ordering': ['route', 'name'],
                    },
                ),
                migrations.CreateModel(
                    name='GpuNode',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.CharField(max_length=253, unique=True)),
                        ('pool_label', models.CharField(blank=True, max_length=63)),
                        ('gpu_model', models.CharField(blank=True, max_length=80)),
                        ('gpu_count', models.PositiveIntegerField(default=0)),
                        ('gpu_memory_mib', models.PositiveIntegerField(default=0)),
                        ('mig_capable', models.BooleanField(default=False)),
                        ('mig_config', models.CharField(blank=True, max_length=80)),
                        ('validated', models.BooleanField(default=False)),
                        ('bios_profile', models.CharField(blank=True, max_length=40)),
                        ('burn_in_date', models.CharField(blank=True, max_length=40)),
                        ('validation_failure', models.TextField(blank=True)),
                        ('ready', models.BooleanField(default=False)),
                        ('health_problems', models.JSONField(blank=True, default=list)),
                        ('cordoned', models.BooleanField(default=False)),
                        ('present', models.BooleanField(default=True)),
                        ('dra_whole_gpus', models.IntegerField(blank=True, null=True)),
                        ('mig_devices', models.JSONField(blank=True, default=dict)),
                        ('retiring', models.BooleanField(default=False)),
                        ('retiring_reason', models.TextField(blank=True)),
                        ('state', models.CharField(db_index=True, default='unvalidated', max_length=20)),
                        ('reason', models.TextField(blank=True)),
                        ('last_synced_at', models.DateTimeField(blank=True, null=True)),
                        ('pool', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='nodes', to='fleet.pool')),
                    ],
                    options={
                        'db_table': 'tenants_gpunode',
                        'ordering': ['name'],
                    },
                ),
                migrations.CreateModel(
                    name='Allocation',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('route', models.CharField(choices=[('dedicated_block', 'Dedicated block'), ('confidential_pool', 'Confidential pool'), ('mig_vcluster', 'MIG under vCluster'), ('shared_pool', 'Shared pool')], max_length=30)),
                        ('whole_devices', models.PositiveIntegerField(default=0)),
                        ('mig_profile', models.CharField(blank=True, max_length=20)),
                        ('mig_count', models.PositiveIntegerField(default=0)),
                        ('device_equivalents', models.DecimalField(decimal_places=4, max_digits=10)),
                        ('namespace', models.CharField(max_length=63)),
                        ('starts_at', models.DateTimeField()),
                        ('ends_at', models.DateTimeField(blank=True, null=True)),
                        ('status', models.CharField(choices=[('pending', 'Approved, not yet provisioned'), ('provisioning', 'Provisioning'), ('active', 'Active'), ('expiring', 'Expiring'), ('retired', 'Retired'), ('failed', 'Failed (retriable)')], default='pending', max_length=20)),
                        ('status_message', models.TextField(blank=True)),
                        ('flagged_reason', models.TextField(blank=True)),
                        ('flagged_at', models.DateTimeField(blank=True, null=True)),
                        ('progress_done', models.PositiveIntegerField(default=0)),
                        ('progress_total', models.PositiveIntegerField(default=0)),
                        ('attempts', models.PositiveIntegerField(default=0)),
                        ('drift_report', models.TextField(blank=True)),
                        ('drift_checked_at', models.DateTimeField(blank=True, null=True)),
                        ('expiry_notice_sent', models.BooleanField(default=False)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('tenant', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='allocations', to='tenants.tenant')),
                        ('nodes', models.ManyToManyField(blank=True, related_name='allocations', to='fleet.gpunode')),
                        ('pool', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='allocations', to='fleet.pool')),
                    ],
                    options={
                        'db_table': 'tenants_allocation',
                        'ordering': ['-created_at'],
                    },
                ),
                migrations.CreateModel(
                    name='NodeOutage',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('started_at', models.DateTimeField()),
                        ('ended_at', models.DateTimeField(blank=True, null=True)),
                        ('reason', models.TextField()),
                        ('node', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='outages', to='fleet.gpunode')),
                    ],
                    options={
                        'db_table': 'tenants_nodeoutage',
                        'ordering': ['node', 'started_at'],
                        'indexes': [models.Index(fields=['node', 'started_at'], name='tenants_nod_node_id_529139_idx')],
                    },
                ),
                migrations.AddIndex(
                    model_name='gpunode',
                    index=models.Index(fields=['pool', 'state'], name='tenants_gpu_pool_id_882f4c_idx'),
                ),
                migrations.AddIndex(
                    model_name='allocation',
                    index=models.Index(fields=['pool', 'status'], name='tenants_all_pool_id_056bfb_idx'),
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(content_types_follow, content_types_back),
    ]
