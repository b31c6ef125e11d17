"""API permissions through the one role helper (webapp.roles): reading needs a viewer,
writing an editor, except the actions a view lists in ``write_roles`` (a trainer registers
runs and reports progress). Authentication comes first, so a request without a token
gets 401."""

from rest_framework.permissions import SAFE_METHODS, BasePermission

from webapp.roles import require_role


class RolePermission(BasePermission):
    def has_permission(self, request, view) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False  # DRF answers 401 with the token challenge
        if request.method in SAFE_METHODS:
            require_role(request.user, "viewer")
        else:
            action = getattr(view, "action", None)
            require_role(request.user, getattr(view, "write_roles", {}).get(action, "editor"))
        return True
