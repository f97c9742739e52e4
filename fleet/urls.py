from django.urls import path

from . import views

app_name = "fleet"
urlpatterns = [
    path("pools/", views.pool_list, name="pools"),
    path("pools/<slug:slug>/", views.pool_edit, name="pool_edit"),
    path("fleet/", views.fleet_overview, name="fleet"),
    path("fleet/sync/", views.fleet_sync_now, name="fleet_sync"),
    path("fleet/nodes/<str:name>/", views.node_detail, name="node"),
    path("fleet/nodes/<str:name>/retire/", views.node_retire, name="node_retire"),
]
