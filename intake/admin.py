from django.contrib import admin

from .models import CapacityRequest


@admin.register(CapacityRequest)
class CapacityRequestAdmin(admin.ModelAdmin):
    list_display = ("id", "title", "tenant", "status", "route", "pool", "created_at")
    list_filter = ("status", "route")
    readonly_fields = [f.name for f in CapacityRequest._meta.fields]
