from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "tenants"
    verbose_name = "Tenants, roles and the audit trail"

    def ready(self) -> None:
        # The write watch on every connection; `__any`; the sign-in receiver.
        from . import kept_reads, lookups, receivers  # noqa: F401
