"""Operations endpoints: probes and metrics (public probes; metrics need credentials), the
notifications page."""

from django.urls import path

from webapp.ops import metrics, probes, views

urlpatterns = [
    path("healthz", probes.healthz, name="healthz"),
    path("readyz", probes.readyz, name="readyz"),
    path("metrics", metrics.metrics, name="metrics"),
    path("notifications/", views.webhooks, name="webhooks"),
    path("notifications/<int:pk>/remove/", views.webhook_delete, name="webhook_delete"),
]
