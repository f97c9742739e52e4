"""The REST API's router: it composes every app's viewsets, so it lives in the composition
root (no app imports another's API)."""

from rest_framework.routers import DefaultRouter

from billing.api import BillingViewSet
from billing.stranded_api import StrandedViewSet
from fleet.api import AllocationViewSet
from fleet.cluster_api import ClusterViewSet
from intake.api import CapacityRequestViewSet

router = DefaultRouter()
router.register("requests", CapacityRequestViewSet, basename="request")
router.register("allocations", AllocationViewSet, basename="allocation")
router.register("billing", BillingViewSet, basename="billing")
router.register("clusters", ClusterViewSet, basename="cluster")
router.register("stranded", StrandedViewSet, basename="stranded")
urlpatterns = router.urls
