"""API of annotations: the annotators on offer, annotating a tokenized source (a job, 202
with its address), an annotation with its chart summary, the ``<annotator>.<column>``
names a filter can use, and "flag the documents where <filter>"."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.reverse import reverse

from webapp.api.serializers import FlagSerializer
from webapp.api.views import Base, _bad
from webapp.catalog import selectors
from webapp.catalog.errors import CatalogError
from webapp.catalog.models import Annotation
from webapp.catalog.services import annotation_groups
from webapp.catalog.services import annotations as svc


def _id(text: str) -> int:
    """A query parameter that names a row: an id, or a 400 saying so."""
    if not (text.isascii() and text.isdigit() and len(text) <= 18):
        raise ValidationError({"tokenized_source": f"not an id: {text[:40]!r}"})
    return int(text)


class AnnotationSerializer(serializers.ModelSerializer):
    class Meta:
        model = Annotation
        fields = [
            "id",
            "tokenized_source",
            "annotator",
            "annotator_version",
            "params",
            "columns",
            "status",
            "fingerprint",
            "path",
            "manifest_path",
            "num_documents",
            "num_bytes",
            "summary",
            "job",
            "created_at",
            "finished_at",
        ]


class AnnotateSerializer(serializers.Serializer):
    tokenized_source = serializers.IntegerField(min_value=1, max_value=2**62)
    annotator = serializers.CharField(max_length=100)
    params = serializers.DictField(required=False, default=dict)
    text_from = serializers.ChoiceField(choices=["auto", "source", "tokens"], default="auto")


class NearDuplicatesSerializer(serializers.Serializer):
    tokenized_sources = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=2**62), min_length=2, max_length=100
    )
    params = serializers.DictField(required=False, default=dict)


class FlagWhereSerializer(serializers.Serializer):
    filter = serializers.CharField(max_length=10000)
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class AnnotationViewSet(Base, mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = AnnotationSerializer

    def get_queryset(self):
        ts = self.request.query_params.get("tokenized_source")
        return selectors.annotation_rows(tokenized_id=None if ts is None else _id(ts))

    @extend_schema(
        parameters=[OpenApiParameter("tokenized_source", int, required=False)],
        responses={200: AnnotationSerializer(many=True)},
    )
    def list(self, request, *args, **kwargs):
        return super().list(request, *args, **kwargs)

    @extend_schema(request=AnnotateSerializer, responses={202: AnnotationSerializer})
    def create(self, request):
        """Annotate a ready tokenized source with one annotator and its parameters: 202
        with the annotation ("building", its ``job``), the job's address in ``Location``.
        The same source x annotator x parameters answers the existing annotation."""
        data = AnnotateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        selectors.annotation_target(tokenized_id=v["tokenized_source"])  # NotFound: 404
        try:
            ann = svc.annotation_build(
                tokenized_id=v["tokenized_source"],
                annotator=v["annotator"],
                params=v["params"],
                text_from=v["text_from"],
                created_by=request.user,
            )
        except CatalogError as e:
            raise _bad(e) from e
        body = AnnotationSerializer(ann).data
        if ann.job_id is None or ann.is_ready:
            return Response(body, status=status.HTTP_200_OK)
        location = reverse("job-detail", args=[ann.job_id], request=request)
        return Response(body, status=status.HTTP_202_ACCEPTED, headers={"Location": location})

    @extend_schema(
        request=NearDuplicatesSerializer, responses={202: AnnotationSerializer(many=True)}
    )
    @action(detail=False, methods=["post"], url_path="near-duplicates")
    def near_duplicates(self, request):
        """Cluster near-duplicates across several ready tokenized sources (in priority
        order: ``minhash.dup_rank = 0`` keeps the earliest source's copy) as one job: 202
        with one ``minhash`` annotation per source, the job's address in ``Location``. The
        same sources, order and parameters answer the existing annotations (200)."""
        data = NearDuplicatesSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        try:
            rows = annotation_groups.annotation_group_build(
                tokenized_ids=v["tokenized_sources"], params=v["params"], created_by=request.user
            )
        except CatalogError as e:
            raise _bad(e) from e
        body = AnnotationSerializer(rows, many=True).data
        if all(a.is_ready for a in rows):
            return Response(body, status=status.HTTP_200_OK)
        location = reverse("job-detail", args=[rows[0].job_id], request=request)
        return Response(body, status=status.HTTP_202_ACCEPTED, headers={"Location": location})

    @extend_schema(request=FlagWhereSerializer, responses={201: FlagSerializer})
    @action(detail=True, methods=["post"], url_path="flag-where")
    def flag_where(self, request, pk=None):
        """Flag the documents where ``filter`` holds over the annotation's columns (e.g.
        ``pii.emails > 0``): a flag on those documents of its source, tainting everything
        downstream, runs included."""
        annotation_id = selectors.annotation_known(annotation_id=int(pk))  # NotFound: 404
        data = FlagWhereSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            flag = svc.annotation_flag_where(
                annotation_id=annotation_id, **data.validated_data, created_by=request.user
            )
        except CatalogError as e:
            raise _bad(e) from e
        return Response(FlagSerializer(flag).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        parameters=[OpenApiParameter("tokenized_source", int, required=False, many=True)],
        responses={
            200: inline_serializer("AnnotationColumns", {"columns": serializers.ListField()})
        },
    )
    @action(detail=False, methods=["get"])
    def columns(self, request):
        """The ``<annotator>.<column>`` names of the ready annotations (of the given
        tokenized sources): what filters, ``--by`` and quality labels accept."""
        ids = [_id(i) for i in request.query_params.getlist("tokenized_source")]
        return Response({"columns": selectors.annotation_columns(tokenized_ids=ids or None)})


class AnnotatorSerializer(serializers.Serializer):
    name = serializers.CharField()
    version = serializers.CharField(required=False)
    params = serializers.DictField(required=False)
    columns = serializers.ListField(child=serializers.DictField(), required=False)
    corpus_level = serializers.BooleanField(required=False)
    error = serializers.CharField(required=False)


class AnnotatorViewSet(Base, viewsets.ViewSet):
    @extend_schema(responses={200: AnnotatorSerializer(many=True)})
    def list(self, request):
        """Every registered annotator: name, version, parameters with defaults, columns."""
        return Response(selectors.annotator_choices())
