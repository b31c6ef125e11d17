from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView
from rest_framework.routers import DefaultRouter

from webapp.api import annotations, decon, runs, views

router = DefaultRouter()
router.register("sources", views.SourceViewSet, basename="source")
router.register("pools", views.PoolViewSet, basename="pool")
router.register("mixtures", views.MixtureViewSet, basename="mixture")
router.register("mixture-versions", views.MixtureVersionViewSet, basename="mixture-version")
router.register("jobs", views.JobViewSet, basename="job")
router.register("runs", runs.RunViewSet, basename="run")
router.register("annotations", annotations.AnnotationViewSet, basename="annotation")
router.register("annotators", annotations.AnnotatorViewSet, basename="annotator")
router.register("flags", views.FlagViewSet, basename="flag")
router.register("audit", views.AuditViewSet, basename="audit")
router.register("decon/benchmarks", decon.DeconBenchmarkViewSet, basename="decon-benchmark")
router.register("decon/runs", decon.RunDeconViewSet, basename="decon-run")

urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("", include(router.urls)),
]
