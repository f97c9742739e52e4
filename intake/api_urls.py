from rest_framework.routers import DefaultRouter

from .api import CapacityRequestViewSet

router = DefaultRouter()
router.register("requests", CapacityRequestViewSet, basename="request")
urlpatterns = router.urls
