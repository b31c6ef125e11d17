"""API of the contamination audit: the benchmarks decon annotations checked documents
against; for one (or one item) the overlapping documents and the pools, mixture versions
and runs holding them with each run's first step reading one; flagging those documents;
for a run, the benchmark items it could have seen; and a run's evaluation results, each
marked ``possibly_contaminated`` when it could have seen an item of that benchmark."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response

from webapp.api.serializers import FlagSerializer
from webapp.api.views import Base, _bad
from webapp.catalog.errors import CatalogError, RunPermissionError
from webapp.catalog.models import TrainingRun
from webapp.catalog.selectors import decon as sel
from webapp.catalog.selectors.run_rows import run_row
from webapp.catalog.services import decon as svc

NAME_REGEX = r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}"


def _taint_row(d: dict) -> dict:
    out = {"kind": d["kind"], "id": d["id"], "label": d["label"], "documents": d["documents"]}
    if "first_read" in d:
        read = d["read"]
        out.update(
            name=d["run"].name,
            first_read=d["first_read"],
            first_sample=read.get("first_sample"),
            step=read.get("step"),
            read=bool(read.get("read")),
        )
    return out


def audit_json(a: dict) -> dict[str, Any]:
    """``selectors.decon.decon_benchmark``'s answer as JSON."""
    return {
        "benchmark": a["benchmark"],
        "item": a["item"] or None,
        "documents": a["documents"],
        "flagged": a["flagged"],
        "complete": a["complete"],
        "sources": [
            {
                "annotation": r["annotation"].pk,
                "source": r["source"].name,
                "documents": r["documents"],
                "items": r["benchmark"].get("items"),
                "items_hit": r["benchmark"].get("items_hit"),
                "flag": r["flag"].pk if r["flag"] else None,
                "document_ids": r.get("document_ids", []),
            }
            for r in a["annotations"]
        ],
        "pools": [_taint_row(d) for d in a["pools"]],
        "versions": [_taint_row(d) for d in a["versions"]],
        "runs": [_taint_row(d) for d in a["runs"]],
    }


def run_json(a: dict) -> dict[str, Any]:
    """``selectors.decon.run_decon``'s answer as JSON."""
    run = a["run"]
    return {
        "run": {"id": run.pk, "name": run.name},
        "computing": a["computing"],
        "benchmarks": [
            {
                "benchmark": b["benchmark"],
                "count": b["count"],
                "items": b["items"],
                "truncated": b["truncated"],
                "documents": b["documents"],
                "pools": [p.pk for p in b["pools"]],
                "flagged": b["flagged"],
                "flag": b["flag"].pk if b["flag"] else None,
                "first_read": b["first_read"],
                "step": (b.get("read") or {}).get("step"),
            }
            for b in a["benchmarks"]
        ],
        "evaluations": a["evaluations"],
    }


class DeconFlagSerializer(serializers.Serializer):
    annotation = serializers.IntegerField(min_value=1, max_value=2**62)
    item = serializers.CharField(max_length=200, required=False, default="")
    reason = serializers.CharField(max_length=2000, required=False, default="")


class DeconBenchmarkViewSet(Base, viewsets.ViewSet):
    lookup_field = "name"
    lookup_value_regex = NAME_REGEX

    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    def list(self, request):
        """The benchmarks some ready decon annotation checked documents against: per
        annotation the source, items, overlapping documents and items hit."""
        return Response(
            [
                {
                    "name": b["name"],
                    "documents": b["documents"],
                    "annotations": [
                        {
                            "annotation": r["annotation"].pk,
                            "source": r["annotation"].tokenized_source.source.name,
                            **{
                                k: r.get(k)
                                for k in ("items", "indexed", "skipped", "documents", "items_hit")
                            },
                        }
                        for r in b["annotations"]
                    ],
                    "flags": [f.pk for f in b.get("flags", [])],
                }
                for b in sel.decon_benchmarks()
            ]
        )

    @extend_schema(
        parameters=[OpenApiParameter("item", str, required=False)],
        responses={200: OpenApiTypes.OBJECT},
    )
    def retrieve(self, request, name=None):
        """The audit of a benchmark (``?item=`` one of its items): the overlapping
        documents per source, and once flagged, the pools, mixture versions and runs
        holding them, each run with the first step reading one."""
        item = request.query_params.get("item", "")[:200]
        return Response(audit_json(sel.decon_benchmark(benchmark=name, item=item)))

    @extend_schema(request=DeconFlagSerializer, responses={201: FlagSerializer})
    @action(detail=True, methods=["post"])
    def flag(self, request, name=None):
        """Flag the documents of a decon annotation overlapping the benchmark (or its
        ``item``): their taint reaches every pool, version and run holding them, with the
        step each run first read one. The same flag asked again answers it (200)."""
        data = DeconFlagSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        try:
            flag, created = svc.decon_flag(
                annotation_id=v["annotation"],
                benchmark=name,
                item=v["item"],
                reason=v["reason"],
                created_by=request.user,
            )
        except CatalogError as e:
            raise _bad(e) from e
        code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
        return Response(FlagSerializer(flag).data, status=code)


class EvaluationSerializer(serializers.Serializer):
    benchmark = serializers.RegexField(NAME_REGEX)
    value = serializers.FloatField()
    metric = serializers.CharField(max_length=100, required=False, default="score")
    step = serializers.IntegerField(min_value=0, max_value=2**62, required=False)


class EvaluationsSerializer(serializers.Serializer):
    results = EvaluationSerializer(many=True, allow_empty=False, max_length=10_000)


class RunDeconViewSet(Base, viewsets.ViewSet):
    # A trainer's token reports its run's evaluations; the service checks the run is its.
    write_roles = {"evaluations": "trainer"}

    def _run(self, pk) -> TrainingRun:
        return run_row(run_id=int(pk))  # NotFound: 404

    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    def retrieve(self, request, pk=None):
        """Which benchmark items the run could have seen, by benchmark (the items of the
        overlapping documents its pools hold), when it first read one, and its
        evaluations marked ``possibly_contaminated``."""
        return Response(run_json(sel.run_decon(run=self._run(pk))))

    @extend_schema(request=EvaluationsSerializer, responses={201: OpenApiTypes.OBJECT})
    @action(detail=True, methods=["post", "get"])
    def evaluations(self, request, pk=None):
        """Report evaluation results of the run (POST ``{"results": [{"benchmark",
        "value", "metric", "step"}]}``) or read them (GET); each is marked
        ``possibly_contaminated`` when the run could have seen an item of its benchmark."""
        run = self._run(pk)
        if request.method == "POST":
            data = EvaluationsSerializer(data=request.data)
            data.is_valid(raise_exception=True)
            try:
                svc.run_evaluations_report(
                    run_id=run.pk, results=data.validated_data["results"], actor=request.user
                )
            except RunPermissionError as e:
                raise PermissionDenied(str(e)) from e
            except CatalogError as e:
                raise _bad(e) from e
        answer = run_json(sel.run_decon(run=run))
        body = {
            "run": answer["run"],
            "computing": answer["computing"],
            "evaluations": answer["evaluations"],
        }
        code = status.HTTP_201_CREATED if request.method == "POST" else status.HTTP_200_OK
        return Response(body, status=code)
