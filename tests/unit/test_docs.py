"""The docs: README.md is the front door (under 300 lines, the two commands), the pages of
docs/ hold the rest, the references docs/gen.py writes are current (regenerated here and
compared), they name every command line option and every API operation, and the site
builds with ``mkdocs build --strict`` (a broken link or anchor fails it)."""

from __future__ import annotations

import argparse
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MKDOCS = Path(sys.executable).parent / "mkdocs"


@pytest.fixture(scope="module")
def gen():
    spec = importlib.util.spec_from_file_location("docs_gen", ROOT / "docs" / "gen.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def schema(gen):
    return gen.openapi_schema()


def test_the_readme_is_a_front_door_under_300_lines():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 300
    assert "make run" in readme and "make test" in readme
    linked = set(re.findall(r"\]\((docs/[\w/.-]+\.md)(?:#[\w-]+)?\)", readme))
    pages = {p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert pages - {"docs/index.md"} <= linked, "pages the README's map leaves out"
    assert all((ROOT / p).exists() for p in linked)


def test_the_generated_references_are_current(gen, schema):
    written = {
        "cli.md": gen.cli_reference(),
        "api.md": gen.api_reference(schema),
        "configuration.md": gen.configuration_reference(),
    }
    for name, text in written.items():
        path = ROOT / "docs" / "reference" / name
        assert path.read_text() == text, f"{path} is stale: run `make docs`"


def _options(parser: argparse.ArgumentParser, prog: str) -> set[tuple[str, str]]:
    found = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found |= _options(sub, f"{prog} {name}")
        else:
            found |= {(prog, option) for option in action.option_strings}
    return found


def test_the_cli_reference_names_every_command_and_option_with_its_help(gen):
    reference = (ROOT / "docs" / "reference" / "cli.md").read_text()
    sections = re.split(r"^#+ `(shardyard[\w -]*)`$", reference, flags=re.M)
    by_command = dict(zip(sections[1::2], sections[2::2], strict=True))
    for name in gen.COMMANDS:
        (sub,) = [p for n, p in gen._subparsers(gen.build_parser(name)) if n == name]
        for prog, option in _options(sub, f"shardyard {name}"):
            assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", by_command[prog]), (
                prog,
                option,
            )
        for action in sub._actions:
            if action.help and action.help != argparse.SUPPRESS and "%(" not in action.help:
                words = " ".join(action.help.split()[:3])
                assert words in " ".join(by_command[f"shardyard {name}"].split()), (name, words)


def test_the_api_reference_names_every_path_and_method(schema):
    reference = (ROOT / "docs" / "reference" / "api.md").read_text()
    operations = [
        (method.upper(), path)
        for path, item in schema["paths"].items()
        for method in ("get", "post", "put", "patch", "delete")
        if method in item
    ]
    assert len(operations) > 40
    for method, path in operations:
        assert f"| `{method}` | `{path}` |" in reference, (method, path)


def test_the_configuration_reference_refuses_an_undocumented_variable(gen, monkeypatch):
    rows = gen.variable_rows()
    monkeypatch.setattr(gen, "variable_rows", lambda: rows[1:])
    with pytest.raises(SystemExit, match=r"read by the code but in no row: \['SHARDYARD_DATA'\]"):
        gen.configuration_reference()


def _build(docs: Path, out: Path) -> subprocess.CompletedProcess:
    # Never --quiet: it hides the warnings that --strict counts, and the build passes.
    return subprocess.run(
        [MKDOCS, "build", "--strict", "--config-file", docs / "mkdocs.yml",
         "--site-dir", out],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_the_site_builds_strictly_and_a_broken_anchor_fails_it(tmp_path):
    done = _build(ROOT, tmp_path / "site")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").exists()

    copy = tmp_path / "copy"
    shutil.copytree(ROOT / "docs", copy / "docs", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    guide = copy / "docs" / "guide.md"
    guide.write_text(guide.read_text() + "\nSee [nowhere](corpora.md#no-such-heading).\n")
    broken = _build(copy, tmp_path / "broken")
    assert broken.returncode != 0 and "no-such-heading" in broken.stderr
