"""Clusters as data: every pool and node belongs to one; the one the portal was configured
with becomes the home cluster (`local`, connected through PORTAL_KUBE_BACKEND)."""

import django.core.validators
import django.db.models.deletion
from django.db import migrations, models

import fleet.models
import tenants.models


def home_cluster(apps, schema_editor):
    Cluster = apps.get_model("fleet", "Cluster")
    home, _ = Cluster.objects.get_or_create(slug="local", defaults={
        "name": "Local cluster", "connection": "configured"})
    apps.get_model("fleet", "Pool").objects.filter(cluster__isnull=True).update(cluster=home)
    apps.get_model("fleet", "GpuNode").objects.filter(cluster__isnull=True).update(cluster=home)


DNS_LABEL = django.core.validators.RegexValidator(
    "^[a-z0-9]([-a-z0-9]*[a-z0-9])?\\Z",
    "Lowercase letters, digits and '-', starting and ending with a letter or digit (a "
    "Kubernetes name), e.g. shared-h100.")
DNS_SUBDOMAIN = django.core.validators.RegexValidator(
    "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\\Z",
    "Lowercase letters, digits, '-' and '.', e.g. gpu.nvidia.com.")


class Migration(migrations.Migration):

    dependencies = [
        ("fleet", "0014_allocation_newest_indexes"),
    ]

    operations = [
        migrations.CreateModel(
            name="Cluster",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False,
                                           verbose_name="ID")),
                ("slug", models.CharField(max_length=40, unique=True,
                                          validators=[tenants.models.slug_validator])),
                ("name", models.CharField(max_length=120)),
                ("role", models.CharField(choices=[("standalone", "Stand-alone"),
                                                   ("manager", "MultiKueue manager"),
                                                   ("worker", "MultiKueue worker")],
                                          default="standalone", max_length=12)),
                ("region", models.CharField(blank=True, help_text="e.g. eu-west-1 or on-prem-ams",
                                            max_length=63, validators=[DNS_SUBDOMAIN])),
                ("provider", models.CharField(blank=True, help_text="e.g. on-prem, aws, gcp",
                                              max_length=63, validators=[DNS_SUBDOMAIN])),
                ("connection", models.CharField(choices=[
                    ("configured", "The portal's own setting (PORTAL_KUBE_BACKEND)"),
                    ("kubeconfig", "A kubeconfig: a mounted file or a Secret"),
                    ("dry-run", "Dry run (records what it would apply, talks to nothing)")],
                    default="kubeconfig", max_length=12)),
                ("credential_ref", models.CharField(blank=True, max_length=300)),
                ("api_server", models.URLField(blank=True, max_length=300)),
                ("multikueue_name", models.CharField(blank=True, max_length=63,
                                                     validators=[DNS_LABEL])),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("retired_at", models.DateTimeField(blank=True, null=True)),
                ("retired_reason", models.TextField(blank=True)),
                ("checked_at", models.DateTimeField(blank=True, null=True)),
                ("answers", models.BooleanField(null=True)),
                ("health_message", models.TextField(blank=True)),
                ("server_seen", models.CharField(blank=True, max_length=300)),
                ("kubernetes_version", models.CharField(blank=True, max_length=40)),
                ("kueue_version", models.CharField(blank=True, max_length=60)),
                ("multikueue_active", models.BooleanField(null=True)),
                ("multikueue_reason", models.TextField(blank=True)),
            ],
            options={"ordering": ["retired_at", "name"]},
        ),
        migrations.AddField(
            model_name="pool", name="cluster",
            field=models.ForeignKey(null=True, on_delete=django.db.models.deletion.PROTECT,
                                    related_name="pools", to="fleet.cluster")),
        migrations.AddField(
            model_name="gpunode", name="cluster",
            field=models.ForeignKey(null=True, on_delete=django.db.models.deletion.PROTECT,
                                    related_name="nodes", to="fleet.cluster")),
        migrations.RunPython(home_cluster, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="pool", name="cluster",
            field=models.ForeignKey(default=fleet.models.home_cluster_id,
                                    on_delete=django.db.models.deletion.PROTECT,
                                    related_name="pools", to="fleet.cluster")),
        migrations.AlterField(
            model_name="gpunode", name="cluster",
            field=models.ForeignKey(default=fleet.models.home_cluster_id,
                                    on_delete=django.db.models.deletion.PROTECT,
                                    related_name="nodes", to="fleet.cluster")),
        migrations.AlterField(
            model_name="gpunode", name="name", field=models.CharField(max_length=253)),
        migrations.AddConstraint(
            model_name="gpunode",
            constraint=models.UniqueConstraint(fields=("cluster", "name"),
                                               name="gpunode_cluster_name")),
    ]
