from django.apps import AppConfig


class PortalConfig(AppConfig):
    """The composition root: demo seeding, /metrics, the overview page, shared template tags."""

    name = "portal"
    verbose_name = "Portal"
