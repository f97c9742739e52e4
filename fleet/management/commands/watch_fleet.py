from django.core.management.base import BaseCommand, CommandError

from fleet.inventory.connections import backend_of, live_cluster
from fleet.inventory.watch import watch_fleet
from fleet.kube import KubeError
from fleet.vocabulary import HOME_CLUSTER


class Command(BaseCommand):
    help = "Follow GPU nodes with a Kubernetes watch: changes show in the portal in a second."

    def add_arguments(self, parser):
        parser.add_argument("--cluster", default=HOME_CLUSTER,
                            help="the registered cluster to follow (one process per cluster)")

    def handle(self, *args, **options):
        cluster = live_cluster(options["cluster"])
        if cluster is None:
            raise CommandError(f"No live cluster {options['cluster']!r} is registered.")
        def said(kind, name, report, seconds):
            self.stdout.write(f"{kind.lower()} {name}: {report.changed} changed, "
                              f"{report.gone} gone ({seconds * 1000:.0f} ms)")

        try:
            watch_fleet(backend_of(cluster), on_change=said, cluster=cluster)
        except KubeError as exc:
            raise CommandError(exc.message) from exc
