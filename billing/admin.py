from django.contrib import admin

from .models import Adjustment, RateCard, Statement


@admin.register(RateCard)
class RateCardAdmin(admin.ModelAdmin):
    """Rate cards are set ahead of time; a rollup re-run reprices the hours they cover."""

    list_display = ("pool", "gpu_model", "rate_per_device_hour", "effective_from")
    list_filter = ("pool",)


@admin.register(Statement)
class StatementAdmin(admin.ModelAdmin):
    list_display = ("tenant", "month", "closed_at", "closed_by")
    readonly_fields = ("tenant", "month", "closed_at", "closed_by")


@admin.register(Adjustment)
class AdjustmentAdmin(admin.ModelAdmin):
    list_display = ("statement", "amount", "reason", "by", "at")

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
