"""Serializers: the JSON shapes of the API. Reads are model serializers; writes are plain
serializers whose validated data goes to one service."""

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from shardcore import export as export_formats
from shardcore import limits
from shardcore.order import ORDERINGS
from shardcore.shuffle import SHUFFLES
from webapp.catalog.errors import CatalogError, checked
from webapp.catalog.models import (
    Export,
    Flag,
    Mixture,
    MixtureComponent,
    MixtureVersion,
    Pool,
    RunLoss,
    RunProgress,
    RunSegment,
    Source,
    SourceFile,
    TokenizedSource,
    TrainingRun,
)
from webapp.catalog.selectors import run_segments
from webapp.jobs.models import Job, JobUnit


class SourceSerializer(serializers.ModelSerializer):
    class Meta:
        model = Source
        fields = [
            "id",
            "name",
            "uri",
            "text_field",
            "metadata_fields",
            "description",
            "status",
            "fingerprint",
            "num_files",
            "num_bytes",
            "num_documents",
            "bad_lines",
            "scan_error",
            "created_at",
            "scanned_at",
        ]


class SourceFileSerializer(serializers.ModelSerializer):
    class Meta:
        model = SourceFile
        fields = ["id", "path", "size", "num_documents", "bad_lines", "bad_input"]


class SourceRegisterSerializer(serializers.Serializer):
    name = serializers.SlugField(max_length=100)
    uri = serializers.CharField(max_length=1000)
    text_field = serializers.CharField(max_length=100, default="text")
    metadata_fields = serializers.ListField(
        child=serializers.CharField(max_length=100), default=list, max_length=100
    )
    description = serializers.CharField(allow_blank=True, default="", max_length=10000)
    scan = serializers.BooleanField(default=True)


class TokenizeSerializer(serializers.Serializer):
    tokenizer = serializers.CharField(
        max_length=1000,
        required=False,
        allow_null=True,
        default=None,
        help_text='"tiktoken:<encoding>" or "hf:<path>"; default: the catalog\'s tokenizer',
    )
    engine = serializers.ChoiceField(
        choices=["auto", "reference", "gigatoken", "tiktoken", "tokenizers"], default="auto"
    )


class TokenizedSourceSerializer(serializers.ModelSerializer):
    tokenizer = serializers.CharField(source="tokenizer.spec", read_only=True)

    class Meta:
        model = TokenizedSource
        fields = [
            "id",
            "source",
            "tokenizer",
            "status",
            "fingerprint",
            "params",
            "path",
            "manifest_path",
            "num_documents",
            "num_tokens",
            "num_bytes",
            "supersedes",
            "job",
            "created_at",
            "finished_at",
        ]


class PoolSerializer(serializers.ModelSerializer):
    parents = serializers.PrimaryKeyRelatedField(many=True, read_only=True)
    # The annotations the pool joins: their columns read as <annotator>.<column>.
    annotations = serializers.PrimaryKeyRelatedField(many=True, read_only=True)

    class Meta:
        model = Pool
        fields = [
            "id",
            "name",
            "split",
            "status",
            "fingerprint",
            "params",
            "path",
            "manifest_path",
            "filter",
            "seq_len",
            "num_records",
            "num_documents",
            "num_tokens",
            "num_bytes",
            "parents",
            "annotations",
            "train_pool",
            "supersedes",
            "job",
            "created_at",
            "finished_at",
        ]


def without_quality(params: Any) -> Any:
    """``params`` as a list shows them: without the recorded quality report (``quality``,
    tens of kB per row), which the row's own address answers whole."""
    if not isinstance(params, dict) or "quality" not in params:
        return params
    return {k: v for k, v in params.items() if k != "quality"}


class PoolListSerializer(PoolSerializer):
    """A pool in ``GET /api/pools/``: ``params`` without ``quality``
    (``GET /api/pools/{id}/`` has it)."""

    params = serializers.SerializerMethodField()

    @extend_schema_field({"type": "object"})
    def get_params(self, pool: Pool) -> Any:
        return without_quality(pool.params)


class ComponentSerializer(serializers.ModelSerializer):
    pool_name = serializers.CharField(source="pool.name", read_only=True)

    class Meta:
        model = MixtureComponent
        fields = ["pool", "pool_name", "weight", "stage", "epochs"]


class MixtureVersionSerializer(serializers.ModelSerializer):
    mixture_name = serializers.CharField(source="mixture.name", read_only=True)
    components = ComponentSerializer(many=True, read_only=True)

    class Meta:
        model = MixtureVersion
        fields = [
            "id",
            "mixture",
            "mixture_name",
            "number",
            "status",
            "fingerprint",
            "token_budget",
            "seed",
            "num_samples",
            "params",
            "path",
            "manifest_path",
            "note",
            "components",
            "job",
            "created_at",
            "finished_at",
        ]


class MixtureVersionListSerializer(MixtureVersionSerializer):
    """A version in ``GET /api/mixture-versions/``: ``params`` without ``quality``, the
    schedule's quality report its build recorded (``GET /api/mixture-versions/{id}/`` has
    it)."""

    params = serializers.SerializerMethodField()

    @extend_schema_field({"type": "object"})
    def get_params(self, version: MixtureVersion) -> Any:
        return without_quality(version.params)


class ExportSerializer(serializers.ModelSerializer):
    class Meta:
        model = Export
        fields = [
            "id",
            "version",
            "format",
            "status",
            "path",
            "manifest_path",
            "fingerprint",
            "num_records",
            "num_tokens",
            "num_bytes",
            "checksum",
            "job",
            "created_at",
            "finished_at",
        ]


class ExportCreateSerializer(serializers.Serializer):
    format = serializers.ChoiceField(choices=export_formats.accepted_names())
    global_batch_size = serializers.IntegerField(
        min_value=1,
        max_value=1 << 30,
        required=False,
        allow_null=True,
        default=None,
        help_text="nanotron and OLMo-core: samples per step",
    )


class MaterializeSerializer(serializers.Serializer):
    shard_bytes = serializers.IntegerField(
        min_value=1 << 10,
        max_value=1 << 40,
        default=64 << 20,
        help_text="bytes of tokens per output shard",
    )


class MixtureSerializer(serializers.ModelSerializer):
    versions = serializers.SerializerMethodField()

    class Meta:
        model = Mixture
        fields = ["id", "name", "description", "created_at", "versions"]

    def get_versions(self, obj) -> list[int]:
        return [v.pk for v in obj.versions.all()]


class JobSerializer(serializers.ModelSerializer):
    progress = serializers.FloatField(read_only=True)
    tokens_per_second = serializers.FloatField(read_only=True, allow_null=True)
    eta_seconds = serializers.SerializerMethodField()

    class Meta:
        model = Job
        fields = [
            "id",
            "kind",
            "title",
            "state",
            "phase",
            "num_phases",
            "units_total",
            "units_done",
            "progress",
            "documents",
            "tokens",
            "bytes",
            "bad_lines",
            "tokens_per_second",
            "eta_seconds",
            "error",
            "output_dir",
            "created_at",
            "started_at",
            "finished_at",
        ]

    def get_eta_seconds(self, obj) -> float | None:
        eta = obj.eta
        return eta.total_seconds() if eta is not None else None


class JobDetailSerializer(JobSerializer):
    class Meta(JobSerializer.Meta):
        fields = [*JobSerializer.Meta.fields, "bad_input", "log_tail"]


class JobUnitSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobUnit
        fields = ["unit_id", "phase", "state", "attempts", "worker", "error"]


class RunSerializer(serializers.ModelSerializer):
    # Ids, not names: the progress answer costs no extra query.
    owner = serializers.IntegerField(source="created_by_id", read_only=True, allow_null=True)
    team = serializers.IntegerField(source="team_id", read_only=True, allow_null=True)

    class Meta:
        model = TrainingRun
        fields = [
            "id",
            "name",
            "mixture_version",
            "external_id",
            "state",
            "last_step",
            "consumed_samples",
            "consumed_tokens",
            "last_reported_at",
            "created_at",
            "owner",
            "team",
        ]


class RunSegmentSerializer(serializers.ModelSerializer):
    path = serializers.CharField(source="mixture_version.path", read_only=True)
    fingerprint = serializers.CharField(source="mixture_version.fingerprint", read_only=True)

    class Meta:
        model = RunSegment
        fields = [
            "index",
            "mixture_version",
            "path",
            "fingerprint",
            "first_sample",
            "end_sample",
            "first_step",
            "created_at",
        ]


class RunDetailSerializer(RunSerializer):
    """A run with its segments: the versions it read, in order, with the run's samples
    each gave ([first_sample, end_sample); the last is open). A loader reads them as
    ``ShardyardIterableDataset(segments)``."""

    segments = serializers.SerializerMethodField()

    class Meta(RunSerializer.Meta):
        fields = [*RunSerializer.Meta.fields, "segments"]

    @extend_schema_field(RunSegmentSerializer(many=True))
    def get_segments(self, run):

        return RunSegmentSerializer(run_segments(run=run), many=True).data


class PoolWeightSerializer(serializers.Serializer):
    pool = serializers.IntegerField(min_value=1, max_value=2**62)
    weight = serializers.FloatField()  # its range: shardcore.limits.weight, below

    def validate_weight(self, value: float) -> float:
        # One range and one message for 0, -1, 1e13 alike (DRF's min_value said another).
        try:
            return checked(lambda: limits.weight("weight", value))
        except CatalogError as exc:
            raise serializers.ValidationError(str(exc)) from None


class RunSwitchSerializer(serializers.Serializer):
    weights = PoolWeightSerializer(
        many=True,
        min_length=1,
        max_length=10_000,
        help_text='[{"pool": id, "weight": w}]: the new weights of the stage the run is in '
        "(token shares, normalized)",
    )
    note = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")
    add = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=2**62),
        required=False,
        default=list,
        max_length=10_000,
        help_text="pools the stage does not hold yet that ``weights`` adds to it; any other "
        "pool the stage lacks is refused",
    )

    def validate_weights(self, value: list[dict[str, Any]]) -> dict[int, float]:
        out: dict[int, float] = {}
        for i, w in enumerate(value):
            if w["pool"] in out:
                raise serializers.ValidationError(
                    f"weights[{i}].pool: pool {w['pool']} is given twice"
                )
            out[w["pool"]] = w["weight"]
        return out


class RunRegisterSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=200)
    mixture_version = serializers.IntegerField(min_value=1)
    external_id = serializers.CharField(max_length=300, allow_blank=True, default="")
    team = serializers.CharField(
        max_length=150,
        required=False,
        allow_blank=True,
        help_text="a group you belong to: its members may report progress too",
    )


class ProgressSerializer(serializers.Serializer):
    step = serializers.IntegerField(min_value=0, max_value=2**62)
    consumed_samples = serializers.IntegerField(min_value=0, max_value=2**62, required=False)
    consumed_tokens = serializers.IntegerField(min_value=0, max_value=2**62, required=False)
    mixture_version = serializers.IntegerField(
        min_value=1,
        required=False,
        help_text="the version the trainer read up to this report: refused (409) if the run "
        "switched to another before",
    )

    def validate(self, attrs):
        if "consumed_samples" not in attrs and "consumed_tokens" not in attrs:
            raise serializers.ValidationError("give consumed_samples or consumed_tokens")
        return attrs


class RunProgressSerializer(serializers.ModelSerializer):
    class Meta:
        model = RunProgress
        fields = ["step", "consumed_samples", "consumed_tokens", "reported_at"]


class ValLossSerializer(serializers.Serializer):
    pool = serializers.IntegerField(min_value=1, max_value=2**62)
    source = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    loss = serializers.FloatField(min_value=0.0)  # finite: NaN and infinities are refused


class TrainLossSerializer(serializers.Serializer):
    step = serializers.IntegerField(min_value=0, max_value=2**62)
    loss = serializers.FloatField(min_value=0.0)


class LossReportSerializer(serializers.Serializer):
    """Losses of a run. Each entry's fields are checked here (a refusal names the entry
    and field: ``{"val": {"1": {"loss": [...]}}}``); what needs the catalog (the pool is
    read by the run's version, the source is one of the pool's, the step is within the
    version, no entry twice) by the service."""

    step = serializers.IntegerField(
        min_value=0,
        max_value=2**62,
        required=False,
        help_text="the checkpoint's step; required with val",
    )
    val = ValLossSerializer(
        many=True,
        required=False,
        max_length=10_000,
        help_text='[{"pool": id, "source": "name" (optional), "loss": 2.31}]: validation loss '
        "per pool read by the run's version (its training or validation pool id), or per "
        "source of a pool built from several",
    )
    train = TrainLossSerializer(
        many=True,
        required=False,
        max_length=10_000,
        help_text='[{"step": 12, "loss": 3.02}]: training loss per step',
    )

    def validate(self, attrs):
        if not attrs.get("val") and not attrs.get("train"):
            raise serializers.ValidationError("give val (with step) or train")
        if attrs.get("val") and "step" not in attrs:
            raise serializers.ValidationError({"step": "validation losses are reported at a step"})
        return attrs


class RunLossSerializer(serializers.ModelSerializer):
    pool_name = serializers.CharField(source="pool.name", read_only=True, default=None)

    class Meta:
        model = RunLoss
        fields = [
            "split",
            "step",
            "pool",
            "pool_name",
            "source",
            "loss",
            "consumed_tokens",
            "reported_at",
        ]


class ProposalQuerySerializer(serializers.Serializer):
    reference = serializers.IntegerField(min_value=1, max_value=2**62)
    eta = serializers.FloatField(min_value=0.0, max_value=1000.0, default=1.0)
    smoothing = serializers.FloatField(min_value=0.0, max_value=1.0, default=1e-3)


class FlagSerializer(serializers.ModelSerializer):
    source_name = serializers.CharField(source="source.name", read_only=True)
    file_path = serializers.CharField(source="source_file.path", read_only=True, default=None)

    class Meta:
        model = Flag
        fields = [
            "id",
            "target",
            "source",
            "source_name",
            "file_path",
            "num_documents",
            "reason",
            "created_at",
            "taint_state",
            "taint_error",
            "annotation",
            "where",
        ]


class FlagCreateSerializer(serializers.Serializer):
    source = serializers.IntegerField(min_value=1)
    file_path = serializers.CharField(max_length=1000, required=False)
    document_ids = serializers.ListField(
        child=serializers.IntegerField(min_value=0, max_value=2**62),
        required=False,
        max_length=1_000_000,
    )
    reason = serializers.CharField(max_length=2000)


class AuditQuerySerializer(serializers.Serializer):
    source = serializers.CharField(max_length=100)
    file_path = serializers.CharField(max_length=1000, required=False, default="")
    document_id = serializers.IntegerField(min_value=0, max_value=2**62, required=False)


class PoolRegisterSerializer(serializers.Serializer):
    """A pool built by the command line (``shardyard register``), under the data root."""

    path = serializers.CharField(max_length=1000)
    name = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")


class MixtureVersionRegisterSerializer(serializers.Serializer):
    """A schedule built by the command line, recorded as the next version of ``mixture``."""

    path = serializers.CharField(max_length=1000)
    mixture = serializers.CharField(max_length=100, required=False, allow_blank=True, default="")
    note = serializers.CharField(max_length=10000, required=False, allow_blank=True, default="")


class _Limited(serializers.Field):
    """A number read and bounded as the pages and the command line do: ``limits.parse``
    (``1e6``, ``1_000_000``, ``1M``), then ``check`` (a ``shardcore.limits`` function), whose
    message is the answer's (``val_fraction: 0.7 is outside the allowed range [0, 0.5]``)."""

    def __init__(self, *, check, **kwargs):
        self.check = check
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        try:
            return checked(lambda: self.check(limits.parse(str(self.field_name), data)))
        except CatalogError as exc:
            raise serializers.ValidationError(str(exc)) from None


class LimitedInteger(_Limited, serializers.IntegerField):
    pass


class LimitedFloat(_Limited, serializers.FloatField):
    pass


def _weight(value):
    return limits.weight("weight", value)


def _tokens(value):
    return limits.tokens("tokens", value)


class PoolBuildSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=200)
    tokenized_ids = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=2**62), min_length=1, max_length=1000
    )
    seq_len = LimitedInteger(check=limits.seq_len)
    filter = serializers.CharField(max_length=10000, required=False, allow_blank=True)
    shuffle = serializers.ChoiceField(choices=list(SHUFFLES), default="exact")
    seed = LimitedInteger(check=limits.seed, default=0)
    val_fraction = LimitedFloat(check=limits.val_fraction, default=0.0)
    annotation_ids = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=2**62),
        required=False,
        default=list,
        max_length=1000,
    )


class MixtureRowSerializer(serializers.Serializer):
    pool = serializers.IntegerField(min_value=1, max_value=2**62)
    weight = LimitedFloat(check=_weight)
    stage = serializers.CharField(max_length=40, required=False, allow_blank=True, default="main")
    group = serializers.CharField(max_length=100, required=False, allow_blank=True, default="")
    group_weight = LimitedFloat(check=_weight, required=False)


class MixtureStageSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=40)
    tokens = LimitedInteger(check=_tokens)


class MixtureVersionCreateSerializer(serializers.Serializer):
    """The builder's draft: rows of pools and weights (one level of named groups), later
    stages with their token counts, the budget, seed, ordering and repetition cap."""

    name = serializers.SlugField(max_length=100)
    description = serializers.CharField(max_length=10000, required=False, allow_blank=True)
    tokens = LimitedInteger(check=_tokens)
    seed = LimitedInteger(check=limits.seed, default=0)
    order = serializers.ChoiceField(choices=list(ORDERINGS), default="blend")
    max_repetitions = LimitedFloat(check=limits.repetitions, default=4.0)
    order_options = serializers.DictField(
        required=False,
        help_text='diversity ordering options, e.g. {"by": ["language"], "length_bins": true}',
    )
    rows = MixtureRowSerializer(many=True, min_length=1, max_length=1000)
    stages = MixtureStageSerializer(many=True, required=False, max_length=100)
