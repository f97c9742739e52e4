"""Apply Keycloak roles at every sign-in."""

from allauth.account.signals import user_logged_in
from django.dispatch import receiver

from .sso import claims_from_extra_data, user_sync_roles


@receiver(user_logged_in)
def sync_roles_at_login(sender, request, user, **kwargs) -> None:
    sociallogin = kwargs.get("sociallogin")
    if sociallogin is None:
        return  # a local (embedded demo) login: roles are the portal's own
    user_sync_roles(user=user, claims=claims_from_extra_data(sociallogin.account.extra_data))
