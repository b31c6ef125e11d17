"""Unit stats name what a job adds up the same way in every stage (units.UnitCounts):
a runner reads documents, tokens, bytes, bad_lines and bad_input, nothing stage-specific."""

from __future__ import annotations

from pathlib import Path

from shardcore import units
from shardcore.tokenize import plan_tokenize
from tests.unit.tokenize_fixtures import jsonl_bytes, stdlib_records


def test_counts_reads_the_fixed_names_only() -> None:
    stats = {
        "documents": 3,
        "tokens": 120,
        "bytes": 4096,
        "selected_documents": 99,  # a stage's own stat: not a job count
        "bad_input": {"a.jsonl": {"invalid_json": {"count": 2, "samples": ["line 4: x"]}}},
    }
    assert units.counts(stats) == {"documents": 3, "tokens": 120, "bytes": 4096, "bad_lines": 2}
    assert units.counts({"records": 5}) == {"documents": 0, "tokens": 0, "bytes": 0, "bad_lines": 0}
    assert units.counts({"bad_lines": 1, "bad_input": stats["bad_input"]})["bad_lines"] == 1


def test_a_tokenize_unit_reports_its_bad_input_by_file(tmp_path: Path) -> None:
    src = tmp_path / "a.jsonl"
    bad = b'{"text": "unterminated\n{"body": "no text here"}\n'
    src.write_bytes(jsonl_bytes(stdlib_records(3)) + bad)
    plan = plan_tokenize([str(src)], str(tmp_path / "out"))
    first = plan.phases[0][0]
    stats = units.run_unit(plan, first["id"])
    c = units.counts(stats)
    assert (c["documents"], c["bad_lines"]) == (3, 2)
    assert c["tokens"] > 0 and c["bytes"] == src.stat().st_size
    reasons = stats["bad_input"][str(src)]
    assert {r: v["count"] for r, v in reasons.items()} == {
        "invalid_json": 1,
        "missing_text_field": 1,
    }
    assert reasons["invalid_json"]["samples"][0].startswith("segment line 4: ")
