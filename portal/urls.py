from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView

from billing import views as billing_views

from . import views

urlpatterns = [
    path("", views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    path("accounts/", include("allauth.urls")),
    path("", include("intake.urls")),
    path("", include("tenants.urls")),
    path("", include("billing.urls")),
    path("metrics", billing_views.metrics, name="metrics"),
    path("api/", include("intake.api_urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularRedocView.as_view(url_name="api-schema"), name="api-docs"),
    path("django-admin/", admin.site.urls),
]
