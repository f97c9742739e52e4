"""The portal's URLs plus two reference pages for the page benchmark: a bare HttpResponse and
the floor (the base layout for a signed-in user, no data)."""

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render
from django.urls import path

from portal.urls import handler500  # noqa: F401
from portal.urls import urlpatterns as portal_urlpatterns


def bare(request):
    return HttpResponse("ok")


@login_required
def floor(request):
    return render(request, "base.html", {})


urlpatterns = [path("bench/bare/", bare), path("bench/floor/", floor), *portal_urlpatterns]
