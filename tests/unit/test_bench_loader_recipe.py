"""The loader bench measures the docs' DataLoader recipe (docs/trainers.md): it executes
that block as written (up to its loop, with the pool's path), so that the docs' advice and the
bench's number cannot drift apart."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from shardcore.loader import Samples
from shardcore.pool import build_pool
from tests.unit import pool_fixtures as pf

pytest.importorskip("torch")
pytest.importorskip("xxhash")

ROOT = Path(__file__).resolve().parents[2]
SEQ = 63


@pytest.fixture(scope="module")
def pool(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bench-recipe")
    src = pf.write_tokenized(root / "src", pf.corpus("prose", 300), shard_docs=100)
    build_pool([str(src)], str(root / "p"), seq_len=SEQ, memory=1 << 20, shard_size=20_000)
    return root / "p"


def _readme_block() -> str:
    from bench.loader.loaders import RECIPE_MARK, RECIPE_PAGE

    blocks = re.findall(r"```python\n(.*?)```", RECIPE_PAGE.read_text(), flags=re.S)
    (block,) = [b for b in blocks if RECIPE_MARK in b]
    return block


def test_the_loader_bench_runs_the_readme_recipe_as_written(pool):
    from bench.loader.loaders import read_ours

    block = _readme_block()
    n = len(Samples(str(pool)))
    got = read_ours(str(pool), str(SEQ), "2", "8", "2", "readme")
    # The code the bench ran is the README's block up to its loop, word for word.
    assert got["recipe"].strip() and block.startswith(got["recipe"])
    assert block[len(got["recipe"]) :].startswith("for ")
    assert got["loader"] == "ShardyardLoader" and got["samples"] == 2 * n
    # The plain DataLoader the README advises against reads the same samples.
    plain = read_ours(str(pool), str(SEQ), "2", "8", "2", "plain")
    assert plain["digest"] == got["digest"] and "recipe" not in plain


def test_the_bench_follows_an_edited_readme_recipe_and_its_settings(pool, tmp_path, monkeypatch):
    """A README whose recipe reads batches of 4 is what the bench runs, and it refuses a run
    whose --batch is not the recipe's, naming the setting to give."""
    from bench.loader import loaders
    from bench.loader.loaders import RECIPE_PAGE

    readme = tmp_path / "trainers.md"
    text = RECIPE_PAGE.read_text()
    edited = _readme_block().replace("batch_size=8", "batch_size=4")
    readme.write_text(text.replace(_readme_block(), edited))
    monkeypatch.setattr(loaders, "RECIPE_PAGE", readme)
    got = loaders.read_ours(str(pool), str(SEQ), "2", "4", "1", "readme")
    assert "ShardyardLoader(dataset, batch_size=4, num_workers=2)" in got["recipe"]
    with pytest.raises(SystemExit, match="run with --batch 4 --workers 2"):
        loaders.read_ours(str(pool), str(SEQ), "2", "8", "1", "readme")
