"""Registering sources: only below SHARDYARD_SOURCE_ROOTS or on s3://, scanned with counts
and per-file bad-input reports."""

from __future__ import annotations

import json
import sysconfig
from pathlib import Path

import pytest

from webapp.catalog.errors import CatalogError, SourcePathError
from webapp.catalog.models import Source, SourceFile
from webapp.catalog.services.sources import source_register

STDLIB = Path(sysconfig.get_paths()["stdlib"])


@pytest.fixture
def roots(tmp_path, settings):
    root = tmp_path / "sources"
    root.mkdir()
    settings.SOURCE_ROOTS = [root]
    return root


def _real_docs(n: int) -> list[dict]:
    docs = []
    for path in sorted(STDLIB.glob("*.py"))[:n]:
        docs.append({"text": path.read_text(errors="replace"), "lang": "py", "name": path.name})
    return docs


def _write_jsonl(path: Path, docs: list[dict], extra: bytes = b"") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    body = b"".join(json.dumps(d).encode() + b"\n" for d in docs)
    path.write_bytes(body + extra)


def test_it_registers_and_scans_a_source_under_a_root(db, roots):
    _write_jsonl(roots / "code" / "a.jsonl", _real_docs(5))
    _write_jsonl(roots / "code" / "sub" / "b.jsonl", _real_docs(3))
    (roots / "code" / "notes.md").write_text("ignored: not a source format")

    source = source_register(name="code", uri=str(roots / "code"))

    assert source.status == Source.Status.SCANNED
    assert source.num_files == 2
    assert source.num_documents == 8
    assert source.num_bytes == sum(f.stat().st_size for f in (roots / "code").rglob("*.jsonl"))
    assert list(SourceFile.objects.filter(source=source).values_list("path", flat=True)) == [
        "a.jsonl",
        "sub/b.jsonl",
    ]
    assert source.fingerprint


def test_it_counts_and_samples_bad_lines_per_file(db, roots):
    bad = b'{"text": broken json\n{"body": "no text field"}\n{"text": "bad \xff utf8"}\n'
    _write_jsonl(roots / "mixed" / "a.jsonl", _real_docs(4), extra=bad)

    source = source_register(name="mixed", uri=str(roots / "mixed"))

    f = SourceFile.objects.get(source=source)
    assert (f.num_documents, f.bad_lines) == (4, 3)
    assert set(f.bad_input) == {"invalid_json", "missing_text_field", "invalid_utf8"}
    assert f.bad_input["invalid_json"]["samples"][0].startswith("a.jsonl:5: invalid_json")
    assert source.bad_lines == 3


@pytest.mark.parametrize(
    "uri, message",
    [
        ("/etc", "outside the source roots"),
        ("ftp://example.org/data.jsonl", "scheme 'ftp' is not supported"),
        ("http://example.org/data.jsonl", "scheme 'http' is not supported"),
        ("relative/path", "absolute path"),
        ("s3:///no-bucket", "needs a bucket"),
        ("s3://bucket/a/../b", "'..' is not allowed"),
    ],
)
def test_it_refuses_locations_outside_the_roots(db, roots, uri, message):
    with pytest.raises(SourcePathError, match=message):
        source_register(name="bad", uri=uri)
    assert not Source.objects.exists()


def test_it_refuses_dot_dot_even_when_it_resolves_inside_a_root(db, roots):
    _write_jsonl(roots / "a" / "x.jsonl", _real_docs(1))
    (roots / "b").mkdir()

    with pytest.raises(SourcePathError, match="'..' is not allowed"):
        source_register(name="dots", uri=f"{roots}/b/../a")


def test_it_refuses_a_symlink_that_leads_out_of_the_root(db, roots, tmp_path):
    outside = tmp_path / "outside"
    _write_jsonl(outside / "secret.jsonl", _real_docs(1))
    (roots / "link").symlink_to(outside)

    with pytest.raises(SourcePathError, match="symlink to .* outside the source roots"):
        source_register(name="link", uri=str(roots / "link"))


def test_it_refuses_a_symlinked_file_inside_a_source_that_leads_out(db, roots, tmp_path):
    _write_jsonl(roots / "src" / "ok.jsonl", _real_docs(2))
    _write_jsonl(tmp_path / "elsewhere" / "secret.jsonl", _real_docs(1))
    (roots / "src" / "secret.jsonl").symlink_to(tmp_path / "elsewhere" / "secret.jsonl")

    with pytest.raises(SourcePathError, match="secret.jsonl is a symlink"):
        source_register(name="src", uri=str(roots / "src"))
    assert not Source.objects.filter(name="src").exists()  # refused before any row


def test_it_accepts_an_s3_uri_without_touching_the_network(db, roots, settings):
    settings.SOURCE_ROOTS = [roots, "s3://corpus"]
    source = source_register(name="remote", uri="s3://corpus/web/", scan=False)

    assert source.uri == "s3://corpus/web"
    assert source.is_remote


def test_it_refuses_a_duplicate_name(db, roots):
    _write_jsonl(roots / "a.jsonl", _real_docs(1))
    source_register(name="dup", uri=str(roots / "a.jsonl"))

    with pytest.raises(CatalogError, match="already exists"):
        source_register(name="dup", uri=str(roots / "a.jsonl"))
