"""Operations endpoints: probes and metrics (public probes; metrics need credentials)."""

from django.urls import path

from webapp.ops import metrics, probes

urlpatterns = [
    path("healthz", probes.healthz, name="healthz"),
    path("readyz", probes.readyz, name="readyz"),
    path("metrics", metrics.metrics, name="metrics"),
]
