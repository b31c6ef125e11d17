"""Exports of a built mixture for trainers: Megatron-LM, OLMo-core, nanotron, plain JSON.

All exports name the pools' shard files; nothing is copied.

- Megatron (``shardcore.export.megatron``): per stage a ``--data-args-path`` list (every shard
  read up to the stage's end), ``--train-samples`` (the stage's end), ``--split 100,0,0``
  (pools hold their validation slice apart), and, given an output directory, megatron-core's
  dataset index cache keyed for the trainer's arguments, so that with ``--data-cache-path``
  Megatron's sample i is the mixture's sample i. Reads mixtures and materialized mixtures.
- OLMo-core (``shardcore.export.olmo``): ``dataset``/``data_loader`` sections that load into
  ai2-olmo-core's config classes; exact (instance i is sample i) for a pool, a materialized
  mixture or a mixture given its materialized copy, shares only otherwise.
- nanotron (``shardcore.export.nanotron``): ``tokens`` and ``data_stages``, each pool seen
  through a datatrove view folder (``.ds`` links, ``.ds.index``, ``.ds.metadata``), stage
  boundaries on whole global batches, ``start_training_step`` exact.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shardcore import manifest as mf
from shardcore import storage
from shardcore.errors import InputError
from shardcore.export import cli as export_cli
from shardcore.export import megatron
from shardcore.export.megatron import export_megatron
from shardcore.export.nanotron import nanotron_config
from shardcore.export.olmo import olmo_config
from shardcore.mixture import KIND


def _load(mixture_dir: str | os.PathLike) -> dict[str, Any]:
    return mf.read_manifest(mixture_dir, kind=KIND)


def _stage(manifest: dict[str, Any], stage: str | None) -> dict[str, Any]:
    stages = manifest["stages"]
    if stage is None:
        return stages[0]
    for st in stages:
        if st["name"] == stage:
            return st
    raise InputError(f"stage: no stage {stage!r}; stages: {[s['name'] for s in stages]}")


def megatron_blend(
    mixture_dir: str | os.PathLike, stage: str | None = None
) -> tuple[list[float], list[str]]:
    """Weights and IndexedDataset prefixes of one stage's data-args list (default: the
    first stage): every shard read by samples [0, stage end), weighted by the stage's samples
    from it (``shardcore.export.megatron.stage_blends``)."""

    _, blends = megatron.stage_blends(mixture_dir)
    if stage is None:
        return blends[0].weights, blends[0].prefixes
    for b in blends:
        if b.name == stage:
            return b.weights, b.prefixes
    raise InputError(f"stage: no stage {stage!r}; stages: {[b.name for b in blends]}")


def megatron_data_args(mixture_dir: str | os.PathLike, stage: str | None = None) -> str:
    """The ``w1 prefix1 w2 prefix2 ...`` list, as for a ``--data-args-path`` file."""
    _refuse_remote(mixture_dir, "megatron")
    weights, prefixes = megatron_blend(mixture_dir, stage)
    return " ".join(f"{float(w)!r} {p}" for w, p in zip(weights, prefixes, strict=True))


def _olmo(manifest: dict[str, Any], mixture_dir: str | os.PathLike, **options: Any) -> str:

    return olmo_config(mixture_dir, **options)


def _nanotron(manifest: dict[str, Any], mixture_dir: str | os.PathLike, **options: Any) -> str:

    return nanotron_config(mixture_dir, **options)


def _json(manifest: dict[str, Any], mixture_dir: str | os.PathLike, **_: Any) -> str:
    out = {
        "fingerprint": manifest["fingerprint"],
        "seq_len": manifest["seq_len"],
        "num_samples": manifest["num_samples"],
        "num_tokens": manifest["num_tokens"],
        "order": manifest["order"],
        "schedule": {
            "pool": str(Path(mixture_dir, "schedule/pool.npy").resolve()),
            "record": str(Path(mixture_dir, "schedule/record.npy").resolve()),
        },
        "pools": manifest["pools"],
        "stages": manifest["stages"],
    }
    return json.dumps(out, indent=1, sort_keys=True)


def _refuse_remote(path: str | os.PathLike, fmt: str, materialized: Any = None) -> None:
    """Trainer configs name local files (the trainers memory-map the shards): refuse an
    artifact, or a mixture whose pools, are on object storage, naming it."""

    locations = [os.fspath(path)] + ([os.fspath(materialized)] if materialized else [])
    manifest = mf.read_manifest(path)
    locations += [str(p.get("path")) for p in manifest.get("pools") or []]
    for where in locations:
        if storage.is_remote(where):
            raise InputError(
                f"{where}: on object storage; the {fmt} export names local shard files, so "
                "copy the artifact (and a mixture's pools) to local or shared storage and "
                "export there, or stream it with shardcore.loader"
            )


@dataclass(frozen=True)
class ExportFormat:
    """One trainer export, and everything that differs from one to another: its names, its
    file, its rendering, its options on the command line and in the catalog. Every list of
    export names (the CLI's ``--format`` choices, the catalog's formats, the API serializer,
    ``manage.py catalog export``, the version page's links) reads ``FORMATS``, and the
    command and the catalog's service look a format up there instead of naming it;
    tests/unit/test_export_registry.py checks that they agree, and
    tests/unit/test_architecture.py that no caller branches on a format's name."""

    name: str  # shardcore's name: ``shardyard export --format NAME``
    catalog: str  # the catalog's name (an Export row's format); the API takes both names
    label: str  # the version page's link text
    file_name: str  # the file under a mixture version's exports/ (see ``output_name``)
    render: Callable[..., str]  # (mixture_dir, **options) -> the export's text
    local_only: bool = True  # names local shard files: refused for object storage
    # What it writes beside its file (then only an editor writes it, never a reader's GET);
    # empty when it writes nothing else.
    writes_beside: str = ""
    # ``shardyard export``: adds the format's argument group to the command's parser, and
    # turns the parsed arguments into the options of ``render``. An ``out`` among those
    # options is a directory the render writes itself; the command then prints the text.
    add_arguments: Callable[[argparse.ArgumentParser], None] = export_cli.no_arguments
    cli_options: Callable[[argparse.Namespace], dict[str, Any]] = export_cli.no_options
    # A question its arguments ask instead of an export (megatron's --check-trainer-args):
    # the command's exit status, or None to export.
    cli_answer: Callable[[argparse.Namespace], int | None] = export_cli.no_answer
    # The catalog's export of a version. The folder under the version's exports/ given as
    # ``out`` for the files it writes beside its own (empty: none given; nanotron puts its
    # views under <mixture>/exports/nanotron itself) ...
    beside: str = ""
    # ... whether it takes the request's global batch size (samples per step) ...
    batch_sized: bool = False
    # ... and whether it reads the version's ready materialized copy (option
    # ``materialized``), the one artifact besides the version it accepts.
    reads_copy: bool = False

    def output_name(self, options: dict[str, Any]) -> str:
        """The file under a version's exports/ for these options: ``file_name`` marked
        ``-materialized`` when it reads a materialized copy and ``-gbs{N}`` for a global
        batch size (olmo-core-materialized-gbs8.yaml), so that each variant keeps its own
        file and a recorded export is found again by its path."""
        stem, dot, suffix = self.file_name.rpartition(".")
        if options.get("materialized"):
            stem += "-materialized"
        if options.get("global_batch_size"):
            stem += f"-gbs{int(options['global_batch_size'])}"
        return f"{stem}{dot}{suffix}"


def _render_megatron(
    mixture_dir: str | os.PathLike, *, stage: str | None = None, **options: Any
) -> str:
    """Also reads materialized mixtures; ``out`` (a directory) gets the index cache. With
    ``stage``: that stage's ``--data-args-path`` list alone, as a line."""
    if stage:
        return megatron_data_args(mixture_dir, stage) + "\n"
    return export_megatron(mixture_dir, **options)


def _render_olmo(mixture_dir: str | os.PathLike, **options: Any) -> str:
    # Also exports a pool or a materialized mixture, exactly.
    return _olmo({}, mixture_dir, **options)


def _render_nanotron(mixture_dir: str | os.PathLike, **options: Any) -> str:
    return _nanotron(_load(mixture_dir), mixture_dir, **options)


def _render_json(mixture_dir: str | os.PathLike, **options: Any) -> str:
    return _json(_load(mixture_dir), mixture_dir, **options)


FORMATS: dict[str, ExportFormat] = {
    f.name: f
    for f in (
        ExportFormat(
            name="megatron",
            catalog="megatron",
            label="Megatron",
            file_name="megatron.txt",
            render=_render_megatron,
            writes_beside="writes the data-args files and the index cache, then downloads",
            add_arguments=export_cli.megatron_arguments,
            cli_options=export_cli.megatron_options,
            cli_answer=export_cli.megatron_check,
            # Beside megatron.txt: the stage data-args files and megatron-core's index cache
            # (keyed for Megatron-LM's default seed and --split 100,0,0), so that the order
            # holds.
            beside="megatron",
        ),
        ExportFormat(
            name="olmo",
            catalog="olmo-core",
            label="OLMo-core",
            file_name="olmo-core.yaml",
            render=_render_olmo,
            add_arguments=export_cli.olmo_arguments,
            cli_options=export_cli.olmo_options,
            batch_sized=True,
            # With a ready materialized copy, OLMo-core reads Shardyard's exact order from it.
            reads_copy=True,
        ),
        ExportFormat(
            name="nanotron",
            catalog="nanotron",
            label="nanotron",
            file_name="nanotron.yaml",
            render=_render_nanotron,
            writes_beside="writes the pools' view folders, then downloads",
            add_arguments=export_cli.nanotron_arguments,
            cli_options=export_cli.nanotron_options,
            batch_sized=True,
        ),
        ExportFormat(
            name="json",
            catalog="json",
            label="JSON",
            file_name="mixture.json",
            render=_render_json,
            local_only=False,
        ),
    )
}


def by_catalog_name(name: str) -> ExportFormat | None:
    """The format whose catalog name or shardcore name is ``name`` (None if none is)."""
    for f in FORMATS.values():
        if name in (f.catalog, f.name):
            return f
    return None


def accepted_names() -> list[str]:
    """Every name the catalog, its API and its command accept: each format's shardcore name,
    then its catalog name when that differs."""
    out: list[str] = []
    for f in FORMATS.values():
        out += [f.name] if f.catalog == f.name else [f.name, f.catalog]
    return out


def export(mixture_dir: str | os.PathLike, fmt: str, **options: Any) -> str:
    """The mixture in format ``fmt`` (a name of ``FORMATS``) as text."""
    spec = FORMATS.get(fmt)
    if spec is None:
        raise InputError(f"format: unknown export format {fmt!r}; known: {list(FORMATS)}")
    if spec.local_only:
        _refuse_remote(mixture_dir, fmt, options.get("materialized"))
    return spec.render(mixture_dir, **options)
