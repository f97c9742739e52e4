from django.contrib import admin

from .models import Allocation, AuditEvent, Membership, PlatformRole, Pool, Tenant


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "cost_centre", "contact_email")
    search_fields = ("slug", "name")


@admin.register(Pool)
class PoolAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "route", "gpu_model", "capacity_devices",
                    "rate_per_device_hour", "active")
    list_filter = ("route", "active")


admin.site.register(Membership)
admin.site.register(PlatformRole)
admin.site.register(Allocation)


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    """Read-only: the audit trail is append-only."""

    list_display = ("at", "actor_name", "action", "subject_type", "subject_id", "reason")
    list_filter = ("action", "subject_type")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
