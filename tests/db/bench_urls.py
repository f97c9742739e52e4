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


# The floor in parts, each one step more than the last, so their differences are what each
# part costs: the session, the user, the roles, then the layout (floor).
def with_session(request):
    return HttpResponse(str(len(request.session.keys())))


@login_required
def with_user(request):
    return HttpResponse(request.user.username)


@login_required
def with_roles(request):
    from tenants.access import roles_for

    return HttpResponse(str(roles_for(request.user).labels))


urlpatterns = [path("bench/bare/", bare), path("bench/floor/", floor),
               path("bench/session/", with_session), path("bench/user/", with_user),
               path("bench/roles/", with_roles), *portal_urlpatterns]
