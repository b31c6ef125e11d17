"""docs/architecture.md against the code: its module map names every package of shardcore,
webapp and workers; every file its "How to add ..." recipes name exists; and the registries
those recipes extend (the annotators, the executors, the measures) hold only entries that
followed them."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
RECIPES = ("an export", "an annotator", "an executor", "a page", "a measure")


def _packages() -> list[str]:
    """Every package (a folder with an ``__init__.py``) of the three, as a dotted name."""
    out = []
    for top in ("shardcore", "webapp", "workers"):
        for init in sorted((ROOT / top).rglob("__init__.py")):
            parts = init.parent.relative_to(ROOT).parts
            if "migrations" in parts or "templatetags" in parts or "management" in parts:
                continue
            out.append(".".join(parts))
    return out


def _named(text: str, dotted: str) -> bool:
    """Whether the document names the package: dotted (``webapp.catalog.measures``), as a
    path (``webapp/catalog/measures/``) or, inside its parent's line of the map, as
    ``name/``."""
    *_, last = dotted.split(".")
    return (
        dotted in text
        or dotted.replace(".", "/") in text
        or re.search(rf"(?<![\w/.]){re.escape(last)}/", text) is not None
    )


def _recipe(text: str, title: str) -> str:
    start = text.index(f"### {title}")
    end = text.find("\n### ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_the_module_map_names_every_package():
    text = DOC.read_text()
    packages = _packages()
    assert "webapp.catalog.measures" in packages and "shardcore.executors" in packages
    assert [p for p in packages if not _named(text, p)] == []


def test_every_how_to_add_recipe_is_there_and_names_files_that_exist():
    text = DOC.read_text()
    for title in RECIPES:
        recipe = _recipe(text, title)
        paths = re.findall(r"`((?:shardcore|webapp|workers|tests|templates)/[\w/.<>-]+)`", recipe)
        assert paths, title
        # A placeholder (<name>) stands for the new file; its folder must exist.
        missing = [
            p for p in paths
            if not (ROOT / (p.split("<")[0].rsplit("/", 1)[0] if "<" in p else p)).exists()
        ]  # fmt: skip
        assert missing == [], (title, missing)


def test_the_annotators_followed_their_recipe():
    """Each built-in annotator is one module of shardcore/annotate with an Annotator
    subclass registered in BUILTIN, and a unit test that names it (the decontamination
    annotator was added along the recipe)."""
    from shardcore.annotate import BUILTIN, Annotator, get

    tests = "\n".join(p.read_text() for p in sorted((ROOT / "tests" / "unit").glob("test_*.py")))
    assert "decon" in BUILTIN
    for name, target in BUILTIN.items():
        module = target.split(":")[0]
        assert (ROOT / (module.replace(".", "/") + ".py")).is_file(), name
        assert issubclass(get(name), Annotator) and get(name).name == name
        assert f'"{name}"' in tests or f"annotate.{module.rsplit('.', 1)[1]}" in tests, name


def test_the_executors_followed_their_recipe():
    """Each engine in NAMES is a module of shardcore/executors with an Executor subclass,
    and each engine but the local one has an integration test against the real engine."""
    import importlib

    from shardcore.executors import NAMES
    from shardcore.executors.base import Executor

    for name in NAMES:
        module = importlib.import_module(f"shardcore.executors.{name}")
        engines = [
            v for v in vars(module).values()
            if isinstance(v, type) and issubclass(v, Executor) and v is not Executor
        ]  # fmt: skip
        assert engines, name
        if name != "local":
            assert (ROOT / "tests" / "integration" / f"test_{name}_executor.py").is_file(), name


def test_every_measure_is_read_by_a_page_or_asked_for_by_a_recorder():
    """A measure nobody reads is dead; each kind of MEASURES is named by a selector's
    fact_read/facts_read or by the services that ask for it."""
    from webapp.catalog.measures import MEASURES

    readers = "\n".join(
        p.read_text()
        for folder in ("selectors", "services")
        for p in sorted((ROOT / "webapp" / "catalog" / folder).glob("*.py"))
    )
    assert sorted(k for k in MEASURES if f'"{k}"' not in readers) == []
