"""The runs' API: register a run, report its progress and losses, switch its mixture
version, and the reads of a run (its flags' first reads, its resume position, its budget,
its lineage). Its helpers are the other views' (``webapp.api.views``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.response import Response

from webapp.api import serializers as s
from webapp.catalog import selectors
from webapp.catalog.errors import CatalogError, RunPermissionError, RunSwitchedError
from webapp.catalog.models import TrainingRun
from webapp.catalog.services.runs import (
    run_losses_record,
    run_progress_record,
    run_register,
    run_switch,
)

if TYPE_CHECKING:
    pass  # the stubs' alias
from webapp.api.views import (
    Base,
    Conflict,
    FlagReadSerializer,
    ResumeSerializer,
    _bad,
    _flag_read,
)


class RunViewSet(Base, mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = s.RunSerializer
    # A trainer's token registers runs, reports their progress and losses, and switches
    # them to new weights; the service checks the run is the user's (its owner, its team
    # or an admin). Nothing else a trainer may write.
    write_roles = {
        "create": "trainer",
        "progress": "trainer",
        "losses": "trainer",
        "switch": "trainer",
    }

    def get_queryset(self):
        return selectors.run_rows()

    def get_serializer_class(self):
        return s.RunDetailSerializer if self.action == "retrieve" else s.RunSerializer

    @extend_schema(
        request=s.RunSwitchSerializer,
        responses={201: s.RunDetailSerializer, 400: OpenApiTypes.OBJECT, 403: OpenApiTypes.OBJECT},
    )
    @action(detail=True, methods=["post"])
    def switch(self, request, pk=None):
        """Save new weights (say, the proposal's) as a new version of the run's mixture that
        continues from the run's resume position, and switch the run to it there. The
        answer is the run with its segments (the versions it read and from which sample)."""
        data = s.RunSwitchSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        result = _run_write(
            run_switch,
            pk,
            {"weights": v["weights"], "note": v["note"], "add": v["add"]},
            request.user,
        )
        return Response(
            {
                **s.RunDetailSerializer(result["run"]).data,
                "version": result["version"].pk,
                "continues": result["continues"],
            },
            status=status.HTTP_201_CREATED,
        )

    @extend_schema(
        request=s.RunRegisterSerializer, responses={201: s.RunSerializer, 403: OpenApiTypes.OBJECT}
    )
    def create(self, request):
        data = s.RunRegisterSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        try:
            run = run_register(
                name=v["name"],
                mixture_version_id=v["mixture_version"],
                external_id=v["external_id"],
                team=v.get("team") or None,
                created_by=request.user,
            )
        except RunPermissionError as e:
            raise PermissionDenied(str(e)) from e
        except CatalogError as e:
            raise _bad(e) from e
        return Response(s.RunSerializer(run).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        methods=["POST"],
        request=s.ProgressSerializer,
        responses={
            201: s.RunSerializer,
            400: OpenApiTypes.OBJECT,
            403: OpenApiTypes.OBJECT,
            409: OpenApiTypes.OBJECT,
        },
    )
    @extend_schema(methods=["GET"], responses={200: s.RunProgressSerializer(many=True)})
    @action(detail=True, methods=["get", "post"])
    def progress(self, request, pk=None):
        if request.method == "GET":
            run = selectors.run_row(run_id=int(pk), only=["id"])
            page = self.paginate_queryset(run.progress.order_by("step"))
            return self.get_paginated_response(s.RunProgressSerializer(page, many=True).data)
        data = s.ProgressSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        # The hot path of every trainer: the service loads the run itself (no extra read).
        run = _run_write(run_progress_record, pk, data.validated_data, request.user)
        return Response(s.RunSerializer(run).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        methods=["POST"],
        request=s.LossReportSerializer,
        responses={
            201: inline_serializer(
                "LossesRecorded",
                {
                    "recorded": serializers.IntegerField(),
                    "already_recorded": serializers.IntegerField(
                        help_text="the same run, split, series and step was reported before"
                    ),
                },
            )
        },
    )
    @extend_schema(methods=["GET"], responses={200: s.RunLossSerializer(many=True)})
    @action(detail=True, methods=["get", "post"])
    def losses(self, request, pk=None):
        """Validation loss per pool (and per source) at checkpoints, and training loss per
        step: POST records them (a trainer's token), GET lists them in step order."""

        if request.method == "GET":
            run = selectors.run_row(run_id=int(pk), only=["id"])
            rows = run.losses.select_related("pool").order_by("split", "series", "step")
            page = self.paginate_queryset(rows)
            return self.get_paginated_response(s.RunLossSerializer(page, many=True).data)
        data = s.LossReportSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        result = _run_write(run_losses_record, pk, data.validated_data, request.user)
        return Response(result, status=status.HTTP_201_CREATED)

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "reference", OpenApiTypes.INT, required=True, description="the reference run's id"
            ),
            OpenApiParameter("eta", OpenApiTypes.FLOAT, description="step size (default 1)"),
            OpenApiParameter(
                "smoothing",
                OpenApiTypes.FLOAT,
                description="share of the uniform mixture mixed in (default 0.001)",
            ),
        ],
        responses={200: OpenApiTypes.OBJECT},
    )
    @action(detail=True, methods=["get"])
    def proposal(self, request, pk=None):
        """The next stage's weights for this run's pools, from its validation losses
        against a reference run's (DoReMi's exponentiated excess loss; shardcore.adapt)."""

        selectors.run_row(run_id=int(pk), only=["id"])
        q = s.ProposalQuerySerializer(data=request.query_params)
        q.is_valid(raise_exception=True)
        v = q.validated_data
        try:
            return Response(
                selectors.run_mixture_proposal(
                    run_id=int(pk),
                    reference_run_id=v["reference"],
                    eta=v["eta"],
                    smoothing=v["smoothing"],
                )
            )
        except CatalogError as e:
            raise _bad(e) from e

    @extend_schema(responses={200: FlagReadSerializer})
    @action(detail=True, methods=["get"])
    def flags(self, request, pk=None):
        """Per flag tainting the run: when the run first read the flagged documents (the
        step), or "not yet" at its current position."""
        run = selectors.run_row(run_id=int(pk), with_version=True)
        return Response([_flag_read(r) for r in selectors.run_flag_reads(run=run)])

    @extend_schema(responses={200: ResumeSerializer, 409: OpenApiTypes.OBJECT})
    @action(detail=True, methods=["get"])
    def resume(self, request, pk=None):
        run = selectors.run_row(run_id=int(pk), only=["id", "last_step"])
        try:
            position = selectors.run_resume_position(run_id=run.pk)
        except CatalogError as e:
            return Response({"detail": str(e)}, status=status.HTTP_409_CONFLICT)
        return Response({"step": run.last_step, "token_offset": 0, **position})


def _run_write(record, pk, fields: dict, actor):
    """A trainer's write to its run (progress, losses), with the service's refusals as
    HTTP: no such run 404, not the run's owner 403, bad input 400."""

    try:
        return record(run_id=int(pk), **fields, actor=actor)
    except TrainingRun.DoesNotExist:
        raise NotFound(f"no run {pk}") from None
    except RunPermissionError as e:
        raise PermissionDenied(str(e)) from e
    except RunSwitchedError as e:
        raise Conflict(str(e)) from e
    except CatalogError as e:
        raise _bad(e) from e
