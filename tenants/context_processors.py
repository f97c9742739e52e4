from django.conf import settings

from .access import roles_for

DEMO_USERS = [
    ("lead-acme", "team lead of Acme Research"),
    ("member-acme", "member of Acme Research"),
    ("lead-globex", "team lead of Globex ML"),
    ("admin", "platform admin"),
    ("finance", "finance"),
]


def portal_roles(request):
    local = settings.PORTAL_LOCAL_LOGIN
    return {
        "roles": roles_for(getattr(request, "user", None)),
        "local_login": local,
        "currency": settings.PORTAL_CURRENCY,
        "demo_users": DEMO_USERS if (local and not settings.PRODUCTION) else [],
    }
