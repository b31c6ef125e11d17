"""Operations endpoints: probes and metrics (public probes; metrics need credentials), the
notifications page."""

from django.urls import path

from webapp.ops import api, metrics, probes, views

urlpatterns = [
    path("healthz", probes.healthz, name="healthz"),
    path("readyz", probes.readyz, name="readyz"),
    path("metrics", metrics.metrics, name="metrics"),
    path("storage/", views.storage_page, name="storage"),
    path("storage/retire/<str:kind>/<int:pk>/", views.storage_retire, name="storage_retire"),
    path("api/storage/", api.StorageView.as_view(), name="api-storage"),
    path("notifications/", views.webhooks, name="webhooks"),
    path("notifications/<int:pk>/remove/", views.webhook_delete, name="webhook_delete"),
]
