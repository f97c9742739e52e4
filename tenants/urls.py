from django.urls import path

from . import views

app_name = "tenants"
urlpatterns = [
    path("settings/notifications/", views.notification_settings, name="notifications"),
]
