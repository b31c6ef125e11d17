"""User management for admins: create users with a role, change roles, issue and revoke
API tokens."""

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from webapp.dashboard import services
from webapp.dashboard.forms import RoleForm, UserCreateForm
from webapp.roles import require_role, user_roles


def user_list(request):
    require_role(request.user, "admin")
    return render(
        request,
        "dashboard/users/list.html",
        {"rows": user_roles(), "form": UserCreateForm(), "role_form": RoleForm()},
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
