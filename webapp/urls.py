"""URL map: pages, the JSON API and its OpenAPI schema."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView

from webapp.dashboard.urls import home_urlpatterns
from webapp.security import ThrottledLoginView

urlpatterns = [
    path("accounts/login/", ThrottledLoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    # Browsers and tools ask for /favicon.ico whatever the page says; it is the page's icon.
    path(
        "favicon.ico",
        login_not_required(RedirectView.as_view(url=static("shardyard/favicon.svg"))),
        name="favicon",
    ),
    path("api/", include("webapp.api.urls")),
    path("", include("webapp.ops.urls")),
    # The dashboard's overview replaces the ops overview at "/" (it shows the workers too).
    *home_urlpatterns,
    path("", include("webapp.dashboard.urls")),
]
