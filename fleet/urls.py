from django.urls import path

from . import views

app_name = "fleet"
urlpatterns = [
    path("pools/", views.pool_list, name="pools"),
    path("pools/new/", views.pool_new, name="pool_new"),
    path("pools/<slug:slug>/", views.pool_edit, name="pool_edit"),
    path("clusters/", views.cluster_list, name="clusters"),
    path("clusters/new/", views.cluster_new, name="cluster_new"),
    path("clusters/<slug:slug>/", views.cluster_detail, name="cluster"),
    path("clusters/<slug:slug>/check/", views.cluster_check_now, name="cluster_check"),
    path("clusters/<slug:slug>/retire/", views.cluster_retire_now, name="cluster_retire"),
    path("fleet/", views.fleet_overview, name="fleet"),
    path("fleet/sync/", views.fleet_sync_now, name="fleet_sync"),
    path("fleet/cohorts/", views.cohorts, name="cohorts"),
    path("fleet/pending/", views.pending_across, name="pending"),
    path("allocations/<int:pk>/queue/", views.allocation_queue_panel, name="queue"),
    path("allocations/<int:pk>/connect/", views.allocation_connect_panel, name="connect"),
    path("allocations/<int:pk>/kubeconfig.yaml", views.allocation_connect_file,
         {"what": "kubeconfig"}, name="kubeconfig"),
    path("allocations/<int:pk>/example.yaml", views.allocation_connect_file,
         {"what": "example"}, name="example"),
    # A node is known by its cluster and its name.
    path("fleet/nodes/<slug:cluster>/<str:name>/", views.node_detail, name="node"),
    path("fleet/nodes/<slug:cluster>/<str:name>/retire/", views.node_retire,
         name="node_retire"),
    path("fleet/nodes/<slug:cluster>/<str:name>/move-off/", views.node_move_off,
         name="node_move_off"),
]
