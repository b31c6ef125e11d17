"""Single sign-on through OpenID Connect (mozilla-django-oidc), on when
SHARDYARD_OIDC_CLIENT_ID is set; local accounts stay (``make run`` uses only them).

The identity provider's groups claim (SHARDYARD_OIDC_GROUPS_CLAIM, ``groups`` by default)
decides the user's Shardyard role at every sign-in: a group named like a role (viewer,
trainer, editor, admin) is that role, and SHARDYARD_OIDC_ROLE_MAP maps the provider's own
names (``data-eng=editor,ml-research=trainer``). The user is put in exactly the role groups
the claim maps to (removed from the others), so a change at the provider takes effect at the
next sign-in. Users are matched by ``preferred_username`` (else the e-mail address)."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.models import Group
from django.http import Http404
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from webapp.ops.oidc_map import parse_role_map  # noqa: F401 - re-exported
from webapp.roles import ROLES


def roles_from_claims(claims: dict) -> set[str]:
    names = claims.get(settings.SHARDYARD_OIDC_GROUPS_CLAIM) or []
    if isinstance(names, str):
        names = [names]
    mapping = settings.SHARDYARD_OIDC_ROLE_MAP
    return {mapping.get(n, n) for n in names if mapping.get(n, n) in ROLES}


class RoleMappingBackend(OIDCAuthenticationBackend):
    """Creates or updates the user from the provider's claims, roles from its groups."""

    def _username(self, claims: dict) -> str:
        return (claims.get("preferred_username") or claims.get("email") or "")[:150]

    def verify_claims(self, claims):
        return bool(self._username(claims))

    def filter_users_by_claims(self, claims):
        username = self._username(claims)
        if not username:
            return self.UserModel.objects.none()
        return self.UserModel.objects.filter(username=username)

    def create_user(self, claims):
        user = self.UserModel.objects.create_user(
            self._username(claims), email=claims.get("email", "")
        )
        user.set_unusable_password()  # signs in through the provider only
        user.save(update_fields=["password"])
        return self.update_user(user, claims)

    def update_user(self, user, claims):
        roles = roles_from_claims(claims)
        current = set(user.groups.filter(name__in=ROLES).values_list("name", flat=True))
        for name in current - roles:
            user.groups.remove(Group.objects.get(name=name))
        for name in roles - current:
            user.groups.add(Group.objects.get_or_create(name=name)[0])
        if claims.get("email") and user.email != claims["email"]:
            user.email = claims["email"]
            user.save(update_fields=["email"])
        return user


def _only_when_on(view):
    def wrapped(request, *args, **kwargs):
        if not settings.SHARDYARD_OIDC_ENABLED:
            raise Http404("single sign-on is not configured")
        return view(request, *args, **kwargs)

    return login_not_required(wrapped)


authenticate = _only_when_on(OIDCAuthenticationRequestView.as_view())
callback = _only_when_on(OIDCAuthenticationCallbackView.as_view())


def sso(request) -> dict:
    """Template context: whether the login page offers single sign-on."""
    return {"sso_enabled": settings.SHARDYARD_OIDC_ENABLED}
