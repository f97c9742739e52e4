from django.core.management.base import BaseCommand, CommandError

from fleet.inventory.connections import backend_of, live_cluster
from fleet.kube import KubeError
from fleet.queues.watch import watch_queues
from fleet.vocabulary import HOME_CLUSTER


class Command(BaseCommand):
    help = ("Follow Kueue's Workloads, queues, and the Pods and ResourceClaims of tenants' "
            "Jobs by watch: changes show on the queue pages in under a second.")

    def add_arguments(self, parser):
        parser.add_argument("--cluster", default=HOME_CLUSTER,
                            help="the registered cluster to follow (one process per cluster)")

    def handle(self, *args, **options):
        cluster = live_cluster(options["cluster"])
        if cluster is None:
            raise CommandError(f"No live cluster {options['cluster']!r} is registered.")
        def said(what, report):
            self.stdout.write(f"{what}: {report.summary()}")

        try:
            watch_queues(backend_of(cluster), on_change=said, cluster=cluster)
        except KubeError as exc:
            raise CommandError(exc.message) from exc
