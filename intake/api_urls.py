from rest_framework.routers import DefaultRouter

from fleet.api import AllocationViewSet

from .api import CapacityRequestViewSet

router = DefaultRouter()
router.register("requests", CapacityRequestViewSet, basename="request")
router.register("allocations", AllocationViewSet, basename="allocation")
urlpatterns = router.urls
