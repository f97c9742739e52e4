from django.core.management.base import BaseCommand, CommandError

from fleet.inventory.watch import watch_fleet
from fleet.kube import KubeError, get_backend


class Command(BaseCommand):
    help = "Follow GPU nodes with a Kubernetes watch: changes show in the portal in a second."

    def handle(self, *args, **options):
        def said(kind, name, report, seconds):
            self.stdout.write(f"{kind.lower()} {name}: {report.changed} changed, "
                              f"{report.gone} gone ({seconds * 1000:.0f} ms)")

        try:
            watch_fleet(get_backend(), on_change=said)
        except KubeError as exc:
            raise CommandError(exc.message) from exc
