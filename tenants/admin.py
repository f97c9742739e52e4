from django.contrib import admin

from .models import AuditEvent, Membership, PlatformRole, Tenant


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "cost_centre", "contact_email")
    search_fields = ("slug", "name")


admin.site.register(Membership)
admin.site.register(PlatformRole)


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
