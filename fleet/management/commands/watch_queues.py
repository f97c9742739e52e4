from django.core.management.base import BaseCommand, CommandError

from fleet.kube import KubeError, get_backend
from fleet.queues.watch import watch_queues


class Command(BaseCommand):
    help = ("Follow Kueue's Workloads, queues, and the Pods and ResourceClaims of tenants' "
            "Jobs by watch: changes show on the queue pages in under a second.")

    def handle(self, *args, **options):
        def said(what, report):
            self.stdout.write(f"{what}: {report.summary()}")

        try:
            watch_queues(get_backend(), on_change=said)
        except KubeError as exc:
            raise CommandError(exc.message) from exc
