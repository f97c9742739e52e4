from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "tenants"
    verbose_name = "Tenants, roles and the audit trail"

    def ready(self) -> None:
        from . import receivers  # noqa: F401 - connects the sign-in receiver
