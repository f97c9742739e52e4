from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView

from . import probes, views

urlpatterns = [
    path("", views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    path("livez", probes.livez, name="livez"),
    path("readyz", probes.readyz, name="readyz"),
    path("accounts/", include("allauth.urls")),
    path("", include("tenants.urls")),
    path("", include("intake.urls")),
    path("", include("fleet.urls")),
    path("", include("billing.urls")),
    path("metrics", views.metrics, name="metrics"),
    path("api/", include("portal.api_urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularRedocView.as_view(url_name="api-schema"), name="api-docs"),
    path("django-admin/", admin.site.urls),
]

# A database that cannot be reached is a 503 with Retry-After, not a 500.
handler500 = "portal.views.server_error"
# Under /api/ even an address that matches no route answers in JSON, as the schema says.
handler404 = "portal.views.not_found"
