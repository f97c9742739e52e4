from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "tenants"
    verbose_name = "Tenants, roles and the audit trail"

    def ready(self) -> None:
        from . import lookups, receivers  # noqa: F401 - `__any`; the sign-in receiver
