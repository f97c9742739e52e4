from django.apps import AppConfig


class IntakeConfig(AppConfig):
    name = "intake"
    verbose_name = "Capacity requests"

    def ready(self) -> None:
        from . import signals  # noqa: F401 - connects the receivers
