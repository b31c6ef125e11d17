"""Token authentication that reads the user's role in the same query as the token: the
progress endpoint is called on every training step, and a second query per request for
the user's groups was a sixth of its cost. Always current (no cache to invalidate when an
admin changes a role or revokes a token)."""

from __future__ import annotations

from django.contrib.auth.models import Group
from django.db.models import Exists, OuterRef
from django.utils.translation import gettext_lazy as _
from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed

from webapp.dashboard.permissions import ROLES, role_from_groups


class TokenRoleAuthentication(TokenAuthentication):
    def authenticate_credentials(self, key):
        model = self.get_model()
        in_role = {
            f"_in_{role}": Exists(
                Group.objects.filter(user=OuterRef("user_id"), name=role).only("id")
            )
            for role in ROLES
        }
        try:
            token = model.objects.select_related("user").annotate(**in_role).get(key=key)
        except model.DoesNotExist:
            raise AuthenticationFailed(_("Invalid token.")) from None
        user = token.user
        if not user.is_active:
            raise AuthenticationFailed(_("User inactive or deleted."))
        names = [role for role in ROLES if getattr(token, f"_in_{role}")]
        user._shardyard_role = role_from_groups(names, is_superuser=user.is_superuser)
        return (user, token)
