from django.urls import path

from . import views

app_name = "intake"
urlpatterns = [
    path("requests/", views.request_list, name="list"),
    path("requests/new/", views.request_new, name="new"),
    path("requests/preview/", views.request_preview, name="preview"),
    path("requests/<int:pk>/", views.request_detail, name="detail"),
    path("requests/<int:pk>/edit/", views.request_edit, name="edit"),
    path("requests/<int:pk>/submit/", views.request_submit, name="submit"),
    path("requests/<int:pk>/withdraw/", views.request_withdraw, name="withdraw"),
    path("requests/<int:pk>/delete/", views.request_delete, name="delete"),
    path("requests/<int:pk>/release/", views.allocation_release, name="release"),
    path("requests/<int:pk>/resize/", views.allocation_resize, name="resize"),
    path("requests/<int:pk>/allocation/", views.request_allocation, name="allocation"),
    path("requests/<int:pk>/manifests/", views.request_manifests, name="manifests"),
    path("requests/<int:pk>/retry/", views.allocation_retry, name="retry"),
    path("requests/<int:pk>/renew/", views.request_renew, name="renew"),
    path("review/", views.review_queue, name="review_queue"),
    path("review/<int:pk>/", views.review_detail, name="review_detail"),
]
