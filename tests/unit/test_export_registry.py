"""Every list of export names reads shardcore.export.FORMATS: the CLI's --format choices,
the catalog's Export formats, the services' file names, the API serializer, ``manage.py
catalog export`` and the version page's links agree with it."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from shardcore import export
from shardcore.cli import build_parser
from shardcore.errors import InputError

ROOT = Path(__file__).resolve().parents[2]


def _choices(parser: argparse.ArgumentParser, *path: str, dest: str) -> list[str]:
    for name in path:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return list(next(a for a in parser._actions if a.dest == dest).choices)


def test_the_cli_offers_every_format_and_no_other():
    assert _choices(build_parser(), "export", dest="format") == list(export.FORMATS)


def test_the_catalog_names_come_from_the_registry():
    assert export.accepted_names() == ["megatron", "olmo", "olmo-core", "nanotron", "json"]
    for f in export.FORMATS.values():
        assert export.by_catalog_name(f.catalog) is f
        assert export.by_catalog_name(f.name) is f
    assert export.by_catalog_name("parquet") is None


def test_the_catalog_model_service_serializer_and_command_read_the_registry():
    from webapp.api.serializers import ExportCreateSerializer
    from webapp.catalog.management.commands.catalog import Command
    from webapp.catalog.models import Export
    from webapp.catalog.services import exports

    catalog_names = [f.catalog for f in export.FORMATS.values()]
    choices = [value for value, _label in Export._meta.get_field("format").choices]
    assert choices == [Export.Format.MATERIALIZED, *catalog_names]
    assert list(exports.EXPORT_FORMATS) == catalog_names
    assert {name for name, _file in exports.EXPORT_FORMATS.values()} == set(export.FORMATS)
    assert {"megatron", "nanotron"} == exports.EXPORT_WRITES_FILES
    field = ExportCreateSerializer().fields["format"]
    assert list(field.choices) == export.accepted_names()
    parser = Command().create_parser("manage.py", "catalog")
    assert _choices(parser, "export", dest="format") == export.accepted_names()


def test_the_version_page_names_no_format_by_hand():
    page = (ROOT / "templates/dashboard/mixtures/version.html").read_text()
    # Every export link takes its format from the loop over the registry.
    links = re.findall(r"url 'dashboard:mixture_version_export' version\.pk (\S+) %}", page)
    assert links and set(links) == {"f.name"}


def test_an_unknown_format_is_refused_naming_the_known_ones(tmp_path):
    with pytest.raises(InputError, match=r"unknown export format 'parquet'; known: \['megatron'"):
        export.export(tmp_path, "parquet")


def test_each_format_names_its_file_for_the_options_the_catalog_gives_it(tmp_path):
    fmt = export.FORMATS
    assert fmt["megatron"].output_name({"out": tmp_path / "megatron"}) == "megatron.txt"
    assert fmt["json"].output_name({}) == "mixture.json"
    assert fmt["nanotron"].output_name({}) == "nanotron.yaml"
    assert fmt["nanotron"].output_name({"global_batch_size": 8}) == "nanotron-gbs8.yaml"
    olmo = fmt["olmo"]
    assert olmo.output_name({"materialized": None}) == "olmo-core.yaml"
    assert olmo.output_name({"global_batch_size": 4}) == "olmo-core-gbs4.yaml"
    copy = {"materialized": str(tmp_path / "flat")}
    assert olmo.output_name(copy) == "olmo-core-materialized.yaml"
    assert olmo.output_name({**copy, "global_batch_size": 4}) == "olmo-core-materialized-gbs4.yaml"
    # What the catalog gives each: the batch size to those that take it, the copy to the one
    # that reads it, a folder for the files beside to the one that writes them there.
    assert [f.name for f in fmt.values() if f.batch_sized] == ["olmo", "nanotron"]
    assert [f.name for f in fmt.values() if f.reads_copy] == ["olmo"]
    assert {f.name: f.beside for f in fmt.values() if f.beside} == {"megatron": "megatron"}


def test_the_command_takes_each_formats_options_from_its_own_group():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    groups = {
        g.title: [a.dest for a in g._group_actions] for g in sub.choices["export"]._action_groups
    }
    assert groups["olmo"] == ["materialized", "work_dir"]
    assert groups["nanotron"] == ["views_dir", "nanotron_tokenizer"]
    assert groups["megatron"] == ["stage"]
    args = parser.parse_args(["export", "mix", "--format", "nanotron", "--views-dir", "v"])
    assert export.FORMATS["nanotron"].cli_options(args) == {
        "global_batch_size": None,
        "views_dir": "v",
    }
    args = parser.parse_args(["export", "mix", "--format", "megatron", "--stage", "anneal"])
    assert export.FORMATS["megatron"].cli_options(args) == {"stage": "anneal"}
    assert export.FORMATS["json"].cli_options(args) == {}
