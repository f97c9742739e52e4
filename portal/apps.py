from django.apps import AppConfig


class PortalConfig(AppConfig):
    """The composition root: demo seeding, /metrics, the overview page, shared template tags."""

    name = "portal"
    verbose_name = "Portal"

    def ready(self) -> None:
        from billing.stranded_board import review_notes
        from intake.notes import register

        from .embedded_beat import start_if_wanted
        from .security import use_one_read_csrf_strings

        register(review_notes)  # the review queue says which tenants hold unused devices
        use_one_read_csrf_strings()
        start_if_wanted()
