"""Annotations end to end on real text (CPython's stdlib sources): the registry, an
annotator registered through an entry point, the artifact aligned with the tokenized
source's documents, text read from the sources or decoded, reruns that skip finished
shards, and the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardcore import annotate as registry
from shardcore.annotate import pii, quality
from shardcore.annotate.artifact import annotate, annotate_shard, read_annotation
from shardcore.annotate.texts import shard_texts
from shardcore.errors import InputError
from shardcore.tokenize import tokenize
from shardcore.tokenized import TokenizedSource
from tests.unit.tokenize_fixtures import stdlib_records, write_jsonl

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "examples" / "annotator_plugin"


@pytest.fixture(scope="module")
def records() -> list[dict]:
    return stdlib_records(24)


@pytest.fixture(scope="module")
def tokenized(tmp_path_factory, records) -> Path:
    tmp = tmp_path_factory.mktemp("ann")
    src = write_jsonl(tmp / "stdlib.jsonl", records)
    out = tmp / "tok"
    tokenize([str(src)], str(out), shard_size=40_000)
    return out


def test_it_reads_every_document_text_from_the_source_and_from_the_tokens(tokenized, records):
    ts = TokenizedSource(tokenized)
    assert len(ts.manifest["shards"]) >= 2
    got_src, got_tok = [], []
    for i in range(len(ts.manifest["shards"])):
        texts, origin = shard_texts(ts, i, text_from="source")
        assert origin == "source"
        got_src += texts
        got_tok += shard_texts(ts, i, text_from="tokens")[0]
    assert got_src == [r["text"] for r in records]
    assert got_tok == got_src


def test_it_writes_columns_aligned_with_documents_and_nothing_of_the_text(
    tokenized, records, tmp_path
):
    out = tmp_path / "q"
    m = annotate(tokenized, out, "quality")
    assert m["kind"] == "annotation" and m["annotator"]["name"] == "quality"
    table = read_annotation(out)
    assert table.column("doc_id").to_pylist() == list(range(len(records)))
    assert table.column("n_words").to_pylist() == [len(r["text"].split()) for r in records]
    assert table.column("n_chars").to_pylist() == [len(r["text"]) for r in records]
    # per tokenized shard one file, same row count as its sidecar
    ts = TokenizedSource(tokenized)
    for s, side in zip(m["shards"], ts.sidecar_paths(), strict=True):
        assert (
            pq.read_metadata(out / f"{s['prefix']}.parquet").num_rows
            == pq.read_metadata(side).num_rows
        )
    # no copy of the text: doc_id and the declared numbers only (Parquet's footer, ~1 KB
    # per file and column, dominates at this size)
    assert table.column_names == ["doc_id", *(name for name, _ in quality.FIELDS)]
    assert m["totals"]["bytes"] < sum(len(r["text"].encode()) for r in records) / 3
    assert m["totals"]["bytes_per_document"] == pytest.approx(
        m["totals"]["bytes"] / len(records), rel=1e-3
    )


def test_it_reruns_idempotently_and_heals_a_missing_unit(tokenized, tmp_path):
    out = tmp_path / "p"
    first = annotate(tokenized, out, "pii")
    files = {f["path"]: (out / f["path"]).read_bytes() for f in first["files"]}
    # a build interrupted after its first unit: manifest and one shard gone
    (out / "manifest.json").unlink()
    victim = first["files"][-1]["path"]
    (out / victim).unlink()
    ann = registry.create("pii")
    r = annotate_shard(tokenized, out, ann, 0)
    assert r["skipped"]
    again = annotate(tokenized, out, "pii")
    assert again["fingerprint"] == first["fingerprint"]
    assert {f["path"]: (out / f["path"]).read_bytes() for f in again["files"]} == files
    assert not list(out.rglob("*.tmp"))


def test_it_fingerprints_annotator_version_and_params(tokenized, tmp_path):
    from shardcore.annotate.artifact import plan

    a = plan(tokenized, registry.create("lang_id"))["fingerprint"]
    b = plan(tokenized, registry.create("lang_id", {"max_chars": 500}))["fingerprint"]
    assert a != b
    annotate(tokenized, tmp_path / "l", "lang_id")
    with pytest.raises(InputError, match="another annotation build|already holds"):
        annotate(tokenized, tmp_path / "l", "lang_id", {"max_chars": 500})


def test_it_refuses_unknown_annotators_and_params_by_name():
    with pytest.raises(InputError, match="no annotator named 'nope'"):
        registry.get("nope")
    with pytest.raises(InputError, match="--param max_chars=abc"):
        registry.parse_params(registry.get("lang_id"), ["max_chars=abc"])
    with pytest.raises(InputError, match="no such parameter"):
        registry.parse_params(registry.get("quality"), ["x=1"])
    assert registry.parse_params(registry.get("lang_id"), ["max_chars=7"]) == {"max_chars": 7}


def _install_plugin(where: Path) -> Path:
    """What ``pip install examples/annotator_plugin`` leaves on sys.path: the package and
    a dist-info directory whose entry_points.txt registers the annotator."""
    import shutil
    import tomllib

    meta = tomllib.loads((PLUGIN / "pyproject.toml").read_text())["project"]
    shutil.copytree(PLUGIN / "shardyard_example_annotator", where / "shardyard_example_annotator")
    dist = where / f"shardyard_example_annotator-{meta['version']}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {meta['name']}\nVersion: {meta['version']}\n"
    )
    eps = meta["entry-points"][registry.ENTRY_POINT_GROUP]
    (dist / "entry_points.txt").write_text(
        f"[{registry.ENTRY_POINT_GROUP}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items())
    )
    return where


def test_it_runs_a_team_annotator_registered_through_an_entry_point(
    tokenized, records, tmp_path, monkeypatch
):
    site = _install_plugin(tmp_path / "site")
    monkeypatch.syspath_prepend(str(site))
    assert "keyword_hits" in registry.names()
    m = annotate(tokenized, tmp_path / "k", "keyword_hits", {"words": "import,def"})
    hits = read_annotation(tmp_path / "k").column("hits").to_pylist()
    import re

    pat = re.compile(r"\b(?:import|def)\b", re.I)
    assert hits == [len(pat.findall(r["text"])) for r in records]
    assert sum(hits) > 0 and m["annotator"]["params"] == {"words": "import,def"}
    # and from the command line, in a fresh process that finds it the same way
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{ROOT}"}
    run = subprocess.run(
        [sys.executable, "-m", "shardcore.cli", "annotate", str(tokenized), "--annotator",
         "keyword_hits", "--param", "words=return", "--out", str(tmp_path / "k2"), "--json"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["annotator"]["params"] == {"words": "return"}


def test_the_command_line_reports_bytes_per_document_and_names_bad_input(tokenized, tmp_path):
    from shardcore.cli import main

    assert (
        main(["annotate", str(tokenized), "--annotator", "quality", "--out", str(tmp_path / "c")])
        == 0
    )
    assert (
        main(
            [
                "annotate",
                str(tokenized),
                "--annotator",
                "pii",
                "--param",
                "k",
                "--out",
                str(tmp_path / "d"),
            ]
        )
        == 2
    )


def test_quality_signals_measure_the_gopher_and_c4_quantities():
    text = "The cat sat.\nThe cat sat.\n- a bullet...\n\nwith the end of it\n#tag ok"
    s = quality.signals(text)
    assert s["n_words"] == 16 and s["n_lines"] == 5
    assert s["dup_line_frac"] == pytest.approx(1 / 5)
    assert s["bullet_lines_frac"] == pytest.approx(1 / 5)
    assert s["ellipsis_lines_frac"] == pytest.approx(1 / 5)
    assert s["lines_end_punct_frac"] == pytest.approx(3 / 5)
    assert s["stop_words"] == 5  # the x3, with, of
    assert s["symbol_word_ratio"] == pytest.approx(2 / 16)  # one '#', one '...'
    rep = quality.signals(" ".join(["lorem ipsum dolor sit amet"] * 20))
    assert rep["dup_10gram_char_frac"] == pytest.approx(1.0) and rep["has_lorem_ipsum"]
    assert rep["top_2gram_char_frac"] > 0.15


def test_personal_data_counts_planted_items_in_real_text(records):
    planted = (
        "Contact jane.doe@example.org or ops-team@mail.example.com, call +1 415 555 0132 or "
        "(020) 7946-0958. Hosts 192.168.10.7 and 2001:db8:85a3::8a2e:370:7334. Card "
        "4539 1488 0343 6467; not a card: 4539 1488 0343 6468."
    )
    base = [pii.counts(r["text"]) for r in records]
    for r, b in zip(records, base, strict=True):
        got = pii.counts(r["text"] + "\n" + planted)
        assert got["emails"] - b["emails"] == 2
        assert got["phones"] - b["phones"] == 2
        assert got["ipv4"] - b["ipv4"] == 1
        assert got["ipv6"] - b["ipv6"] == 1
        assert got["cards"] - b["cards"] == 1
    assert pii.luhn_ok("4539148803436467") and not pii.luhn_ok("4539148803436468")


def test_a_killed_build_heals_to_byte_identical_output(tmp_path):
    import signal
    import time

    records = [
        {"text": r["text"][i : i + 1500]}
        for r in stdlib_records(100, max_chars=60_000)
        for i in range(0, len(r["text"]), 1500)
    ][:500]
    src = write_jsonl(tmp_path / "many.jsonl", records)
    tok = tmp_path / "tok"
    tokenize([str(src)], str(tok), shard_size=15_000)
    assert len(TokenizedSource(tok).manifest["shards"]) >= 10
    clean = tmp_path / "clean"
    m = annotate(tok, clean, "pii")
    killed = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "shardcore.cli", "annotate", str(tok), "--annotator",
           "pii", "--batch-size", "16", "--out", str(killed)]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if len(list((killed / "shards").glob("shard-*.parquet"))) >= 2:
            break
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the build finished before it could be killed"
    assert not (killed / "manifest.json").exists()
    done = len(list((killed / "shards").glob("shard-*.parquet")))
    assert 2 <= done < len(m["shards"])
    healed = annotate(tok, killed, "pii")
    assert healed["fingerprint"] == m["fingerprint"]
    _assert_same_bytes(killed, clean, m)


def _assert_same_bytes(out: Path, clean: Path, m: dict) -> None:
    assert (out / "manifest.json").read_bytes() == (clean / "manifest.json").read_bytes()
    for f in m["files"]:
        assert (out / f["path"]).read_bytes() == (clean / f["path"]).read_bytes()
    assert sorted(p.name for p in (out / "shards").iterdir()) == sorted(
        Path(f["path"]).name for f in m["files"]
    )


def test_two_worker_processes_write_the_same_bytes_as_one(tokenized, tmp_path):
    one = annotate(tokenized, tmp_path / "one", "pii")
    two = annotate(tokenized, tmp_path / "two", "pii", workers=2)
    assert two["fingerprint"] == one["fingerprint"]
    _assert_same_bytes(tmp_path / "two", tmp_path / "one", one)


def test_an_edited_or_missing_source_is_refused_by_name_or_decoded(tmp_path, records):
    src = write_jsonl(tmp_path / "docs.jsonl", records[:6])
    tok = tmp_path / "tok"
    tokenize([str(src)], str(tok))
    ts = TokenizedSource(tok)
    before = shard_texts(ts, 0, text_from="source")[0]
    src.write_bytes(src.read_bytes() + b'{"text": "appended later"}\n')
    with pytest.raises(
        InputError, match=rf"{src}: \d+ bytes, the tokenized source's manifest recorded"
    ):
        shard_texts(ts, 0, text_from="source")
    assert shard_texts(ts, 0, text_from="auto") == (before, "tokens")
    src.unlink()
    with pytest.raises(InputError, match=rf"{src}: source file not found"):
        shard_texts(ts, 0, text_from="source")
    m = annotate(tok, tmp_path / "q", "quality")  # auto: decoded from the tokens
    assert read_annotation(tmp_path / "q").column("n_chars").to_pylist() == [len(t) for t in before]
    assert m["totals"]["documents"] == 6


def test_a_misregistered_or_misbehaving_annotator_is_refused_by_name(
    tokenized, tmp_path, monkeypatch
):
    site = _install_plugin(tmp_path / "site")
    eps = next(site.glob("*.dist-info")) / "entry_points.txt"
    eps.write_text(eps.read_text() + "wrong_name = shardyard_example_annotator:KeywordHits\n")
    monkeypatch.syspath_prepend(str(site))
    with pytest.raises(InputError, match="the class names itself 'keyword_hits', not 'wrong_name'"):
        registry.get("wrong_name")

    class Short(registry.Annotator):
        name = "short"
        defaults = {}

        def fields(self):
            return [pa.field("x", pa.int32())]

        def annotate(self, texts):
            return {"x": [1] * (len(texts) - 1)}

    with pytest.raises(
        InputError, match="annotator 'short': column 'x' has \\d+ values for \\d+ documents"
    ):
        annotate_shard(tokenized, tmp_path / "short", Short(), 0)
    assert not list((tmp_path / "short" / "shards").iterdir())
