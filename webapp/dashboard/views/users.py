"""User management for admins: create users with a role, change roles, issue and revoke
API tokens, link and unlink single sign-on identities."""

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from webapp.dashboard import services
from webapp.dashboard.forms import IdentityLinkForm, RoleForm, UserCreateForm
from webapp.ops.selectors import identity_row
from webapp.roles import require_role, user_roles


def user_list(request):
    require_role(request.user, "admin")
    return render(
        request,
        "dashboard/users/list.html",
        {
            "rows": user_roles(),
            "form": UserCreateForm(),
            "role_form": RoleForm(),
            "sso_enabled": settings.SHARDYARD_OIDC_ENABLED,
            "issuer": settings.SHARDYARD_OIDC_ISSUER,
        },
    )


@require_POST
def user_create(request):
    require_role(request.user, "admin")
    form = UserCreateForm(request.POST)
    if form.is_valid():
        try:
            user = services.user_create(**form.cleaned_data)
        except ValidationError as e:
            messages.error(request, "; ".join(e.messages))
        else:
            messages.success(request, f"Created {user.username} ({form.cleaned_data['role']}).")
            return redirect("dashboard:users")
    else:
        messages.error(request, form.errors.as_text())
    return redirect("dashboard:users")


@require_POST
def user_role(request, user_id: int):
    require_role(request.user, "admin")
    user = get_object_or_404(get_user_model(), pk=user_id)
    form = RoleForm(request.POST)
    if form.is_valid():
        services.user_role_set(user=user, role=form.cleaned_data["role"])
        messages.success(request, f"{user.username} is now {form.cleaned_data['role']}.")
    else:
        messages.error(request, form.errors.as_text())
    return redirect("dashboard:users")


@require_POST
def token_issue(request, user_id: int):
    require_role(request.user, "admin")
    user = get_object_or_404(get_user_model(), pk=user_id)
    token = services.token_issue(user=user)
    # Shown once: the list page never prints keys.
    messages.success(request, f"New API token for {user.username}: {token.key}")
    return redirect("dashboard:users")


@require_POST
def token_revoke(request, user_id: int):
    require_role(request.user, "admin")
    user = get_object_or_404(get_user_model(), pk=user_id)
    if services.token_revoke(user=user):
        messages.success(request, f"Revoked the API token of {user.username}.")
    else:
        messages.info(request, f"{user.username} had no API token.")
    return redirect("dashboard:users")


@require_POST
def identity_link(request, user_id: int):
    require_role(request.user, "admin")
    user = get_object_or_404(get_user_model(), pk=user_id)
    form = IdentityLinkForm(request.POST)
    if not form.is_valid():
        messages.error(request, form.errors.as_text())
        return redirect("dashboard:users")
    try:
        services.identity_link(user=user, **form.cleaned_data)
    except ValidationError as e:
        messages.error(request, "; ".join(e.messages))
    else:
        messages.success(
            request,
            f"{user.username} is linked to {form.cleaned_data['subject']} of "
            f"{form.cleaned_data['issuer']}: that single sign-on now reaches this account.",
        )
    return redirect("dashboard:users")


@require_POST
def identity_unlink(request, identity_id: int):
    require_role(request.user, "admin")
    identity = identity_row(identity_id=identity_id)  # NotFound: a 404 page
    services.identity_unlink(identity=identity)
    messages.success(
        request, f"Unlinked {identity.subject} of {identity.issuer} from {identity.user.username}."
    )
    return redirect("dashboard:users")
