"""Operations endpoints: probes and metrics (public probes; metrics need credentials), the
notifications page."""

from django.urls import path

from webapp.ops import api, metrics, oidc, probes, views

urlpatterns = [
    path("healthz", probes.healthz, name="healthz"),
    path("readyz", probes.readyz, name="readyz"),
    path("metrics", metrics.metrics, name="metrics"),
    path("storage/", views.storage_page, name="storage"),
    path("storage/measure/", views.storage_measure, name="storage_measure"),
    path("storage/retire/<str:kind>/<int:pk>/", views.storage_retire, name="storage_retire"),
    path("api/storage/", api.StorageView.as_view(), name="api-storage"),
    # Single sign-on (webapp.ops.oidc); 404 unless SHARDYARD_OIDC_CLIENT_ID is set. The
    # names are mozilla-django-oidc's own.
    path("oidc/authenticate/", oidc.authenticate, name="oidc_authentication_init"),
    path("oidc/callback/", oidc.callback, name="oidc_authentication_callback"),
    path("notifications/", views.webhooks, name="webhooks"),
    path("notifications/<int:pk>/remove/", views.webhook_delete, name="webhook_delete"),
]
