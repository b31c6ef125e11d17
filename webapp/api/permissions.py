"""API permissions through the dashboard's one role helper: reading needs a viewer,
writing an editor. Authentication comes first, so a request without a token gets 401."""

from rest_framework.permissions import SAFE_METHODS, BasePermission

from webapp.dashboard.permissions import require_role


class RolePermission(BasePermission):
    def has_permission(self, request, view) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False  # DRF answers 401 with the token challenge
        require_role(request.user, "viewer" if request.method in SAFE_METHODS else "editor")
        return True
