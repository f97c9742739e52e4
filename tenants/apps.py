from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "tenants"
    verbose_name = "Tenants, roles and the audit trail"

    def ready(self) -> None:
        # The write watch on every connection; `__any`; the sign-in receiver. (Imported
        # here: the models must be loaded first.)
        from django.contrib.auth import get_user_model

        from . import kept_reads, lookups, receivers  # noqa: F401

        # Written at every sign-in and shown by no kept read.
        kept_reads.unread_columns(get_user_model(), "last_login")
