"""The catalog: sources, tokenizers, tokenized sources, pools, shards, mixtures and their
versions, training runs with their progress, flags and the taint they cause.

Built artifacts (tokenized sources, pools, mixture versions) are immutable: once READY their
fields are not edited (services refuse; ``save`` refuses too), a new row supersedes them.
Per-document data stays in Parquet beside each artifact (the documents sidecars, see
``shardcore.props``); rows hold counts, fingerprints, parameters, parents and the manifest
path.

The models live in one module per aggregate (sources, artifacts, annotations, mixtures,
runs, flags, facts, ...) and are all named here: ``from webapp.catalog.models import X``.
"""

from __future__ import annotations

from webapp.catalog.models.annotations import Annotation
from webapp.catalog.models.artifacts import (
    Artifact,
    ArtifactStatus,
    ImmutableArtifactError,
    Pool,
    Shard,
    TokenizedSource,
    Tokenizer,
)
from webapp.catalog.models.evaluations import RunEvaluation
from webapp.catalog.models.facts import Fact
from webapp.catalog.models.flag_documents import FlagDocuments
from webapp.catalog.models.flags import (
    Corruption,
    Flag,
    Taint,
)
from webapp.catalog.models.mixtures import (
    Export,
    Mixture,
    MixtureComponent,
    MixtureVersion,
    export_format_choices,
)
from webapp.catalog.models.runs import (
    RunLoss,
    RunProgress,
    RunSegment,
    TrainingRun,
)
from webapp.catalog.models.sources import (
    Source,
    SourceFile,
)

__all__ = [
    "Annotation",
    "Artifact",
    "ArtifactStatus",
    "Corruption",
    "Export",
    "Fact",
    "Flag",
    "FlagDocuments",
    "ImmutableArtifactError",
    "Mixture",
    "MixtureComponent",
    "MixtureVersion",
    "Pool",
    "RunEvaluation",
    "RunLoss",
    "RunProgress",
    "RunSegment",
    "Shard",
    "Source",
    "SourceFile",
    "Taint",
    "TokenizedSource",
    "Tokenizer",
    "TrainingRun",
    "export_format_choices",
]
