from django.apps import AppConfig


class IntakeConfig(AppConfig):
    name = "intake"
    verbose_name = "Capacity requests"

    def ready(self) -> None:
        from tenants.kept_reads import triggers_write

        from . import signals  # noqa: F401 - connects the receivers
        from .models import CapacityRequest, RequestTally

        # The tally's triggers (migration 0008): a request written is the tally written.
        triggers_write(CapacityRequest, RequestTally)
