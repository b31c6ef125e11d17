"""Every performance number the README, the pages of docs/ and the benchmark READMEs publish names the command
that produced it: a ratio (``0.68x``) or a rate (``13.3 M tokens per CPU-second``,
``1,316 M tokens/s``) must sit in a section (or under a heading above it) that quotes a
benchmark command in a code span (``bench/tokenize/run.py ...``,
``python -m bench.scale.jobs ...``, ``make bench``), so that a reader can rerun it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").rglob("*.md")),
    ROOT / "bench" / "README.md",
    *sorted((ROOT / "bench").glob("*/README.md")),
]

# A measurement of speed: a rate (a number per second), or a ratio (``0.68x``) in a table
# row or in a sentence about time or throughput (not a threshold such as "within 2x the
# spread").
RATE = re.compile(
    r"(?<![\w.])\d[\d,.]*\s?(?:(?:M |k )?(?:tokens|documents|docs|samples|requests|records)"
    r"(?:/s| per (?:CPU[- ])?s(?:econd)?\b)|MB/s|GB/s|/s\b)"
)
RATIO = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?(?:x|×)(?!\w)")
SPEED = re.compile(
    r"faster|slower|speed|\btimes?\b|CPU|wall|throughput|per second|/s\b|tokens|records|"
    r"samples|documents|\bms\b|µs|seconds|\d ?s\b",
    re.I,
)


def is_performance(line: str) -> bool:
    if RATE.search(line):
        return True
    return bool(RATIO.search(line)) and (line.lstrip().startswith("|") or bool(SPEED.search(line)))


COMMAND = re.compile(r"`[^`]*(?:bench/[\w/]+\.py|python -m bench\.[\w.]+|make bench)[^`]*`")
HEADING = re.compile(r"^(#{1,6}) ")


def sections(text: str) -> list[tuple[list[str], int, str]]:
    """(the headings from the top down to the section's, first line number, text) of each
    section; code blocks are not headings."""
    out, path, start, lines, fenced = [], [], 1, [], False
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
        m = None if fenced else HEADING.match(line)
        if m:
            out.append((list(path), start, "\n".join(lines)))
            level = len(m.group(1))
            path = [h for h in path if len(HEADING.match(h).group(1)) < level] + [line]
            start, lines = n, [line]
        else:
            lines.append(line)
    out.append((list(path), start, "\n".join(lines)))
    return out


def unattributed(path: Path) -> list[str]:
    """The lines of ``path`` that publish a performance number with no command above them."""
    text = path.read_text()
    commanded: dict[str, bool] = {}
    missing = []
    for headings, start, body in sections(text):
        key = "\n".join(headings)
        own = bool(COMMAND.search(body))
        parents = any(commanded.get("\n".join(headings[:i])) for i in range(1, len(headings)))
        commanded[key] = own or parents
        if commanded[key]:
            continue
        fenced = False
        for k, line in enumerate(body.splitlines()):
            if line.startswith("```"):
                fenced = not fenced
            if not fenced and is_performance(line):
                missing.append(f"{path.relative_to(ROOT)}:{start + k}: {line.strip()[:100]}")
    return missing


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_it_names_the_command_of_every_performance_number(doc):
    assert unattributed(doc) == []


def test_it_finds_a_number_without_its_command(tmp_path):
    doc = tmp_path / "README.md"
    doc.write_text(
        "# Bench\n\n## Tokenize\n\n`bench/tokenize/run.py --size-mb 60`\n\n| a | 2.9x |\n\n"
        "### Long runs\n\n13.3 M tokens per CPU-second\n\n## Loader\n\nreads 1,316 M tokens/s\n"
    )
    global ROOT
    root, ROOT = ROOT, tmp_path
    try:
        assert unattributed(doc) == ["README.md:15: reads 1,316 M tokens/s"]
    finally:
        ROOT = root


def test_readme_table_is_the_last_make_bench_run():
    """The table of ratios the README and docs/benchmarks.md show is the one ``make bench``
    wrote with bench/results.md: generated from bench/results.json, never edited by hand."""
    import json

    from bench.run_all import README_END, README_START, TABLE_PAGES, readme_block

    results = json.loads((ROOT / "bench" / "results.json").read_text())
    assert results["rows"], "bench/results.json holds no comparison"
    for page in TABLE_PAGES:
        text = page.read_text()
        shown = text[text.index(README_START) : text.index(README_END) + len(README_END)]
        assert shown == readme_block(results), f"{page.name}: edit bench/run_all.py, not the table"
