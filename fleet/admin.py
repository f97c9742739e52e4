from django.contrib import admin

from .models import Allocation, Pool


@admin.register(Pool)
class PoolAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "route", "gpu_model", "capacity_devices",
                    "active")
    list_filter = ("route", "active")


admin.site.register(Allocation)
