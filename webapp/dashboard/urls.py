from django.urls import path

from webapp.dashboard.views import overview, users

app_name = "dashboard"

urlpatterns = [
    path("users/", users.user_list, name="users"),
    path("users/create/", users.user_create, name="user_create"),
    path("users/<int:user_id>/role/", users.user_role, name="user_role"),
    path("users/<int:user_id>/token/", users.token_issue, name="token_issue"),
    path("users/<int:user_id>/token/revoke/", users.token_revoke, name="token_revoke"),
]

# The overview keeps the project-wide name "home" (LOGIN_REDIRECT_URL, the brand link).
home_urlpatterns = [path("", overview.home, name="home")]
