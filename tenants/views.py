"""The signed-in person's own settings: which notifications they receive."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render

from .models import Notification, NotificationKind
from .notifications import enabled_kinds, set_preferences


@login_required
def notification_settings(request):
    if request.method == "POST":
        chosen = set(request.POST.getlist("kinds"))
        unknown = chosen - set(NotificationKind.values)
        if unknown:
            messages.error(request, "Unknown notification kind: nothing was changed.")
            return redirect("tenants:notifications")
        set_preferences(request.user, chosen)
        messages.success(request, "Notification settings saved.")
        return redirect("tenants:notifications")
    on = enabled_kinds(request.user)
    return render(request, "tenants/notifications.html", {
        "kinds": [(k.value, k.label, k.value in on) for k in NotificationKind],
        "recent": Notification.objects.filter(user=request.user)[:10],
    })
