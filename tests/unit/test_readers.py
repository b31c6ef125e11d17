"""Bad input is counted per file and reason, quoted with its line, never crashes a run and is
never dropped silently; --strict stops at the first with the same message."""

from __future__ import annotations

import gzip
import json

import pytest
import zstandard

from shardcore.errors import InputError
from shardcore.readers import REASONS, Document, read_segment, source_format
from shardcore.tokenize import tokenize
from tests.unit.tokenize_fixtures import jsonl_bytes, stdlib_records, write_parquet


@pytest.fixture(scope="module")
def recs() -> list[dict]:
    return stdlib_records(12)


def _bad_jsonl(recs) -> bytes:
    lines = [
        json.dumps({"text": recs[0]["text"], "module": "a"}).encode(),  # 1 good
        b'{"text": "def f(x):\\n    return x", "module": ',  # 2 cut JSON
        json.dumps({"body": "print(1)", "module": "b"}).encode(),  # 3 no text field
        json.dumps({"text": 42, "module": "c"}).encode(),  # 4 not a string
        b'{"text": "caf\xe9 au lait"}',  # 5 Latin-1 byte
        json.dumps({"text": "  \n", "module": "e"}).encode(),  # 6 whitespace only
        b"",  # 7 blank: not a document
        json.dumps({"text": recs[2]["text"], "module": "g"}).encode(),  # 8 good
        b'{"text": "half a pair \\ud800 here"}',  # 9 lone surrogate
        b'["text", "a list"]',  # 10 not an object
        json.dumps({"text": None}).encode(),  # 11 null
    ]
    return b"\n".join(lines) + b"\n"


def _sample(file, line, message, excerpt=""):
    return {"file": file, "line": line, "message": message, "excerpt": excerpt}


def test_it_reports_each_kind_of_bad_line_exactly(tmp_path, recs):
    src = tmp_path / "bad.jsonl"
    src.write_bytes(_bad_jsonl(recs))
    m = tokenize([str(src)], str(tmp_path / "out"))
    f = str(src)
    assert m["bad_input"] == {
        f: {
            "invalid_json": {
                "count": 2,
                "samples": [
                    _sample(
                        f,
                        2,
                        "Expecting value: line 1 column 47 (char 46)",
                        '{"text": "def f(x):\\n    return x", "module": ',
                    ),
                    _sample(f, 10, "expected a JSON object, got list", '["text", "a list"]'),
                ],
            },
            "missing_text_field": {
                "count": 2,
                "samples": [
                    _sample(
                        f,
                        3,
                        "no 'text' field (fields: body, module)",
                        '{"body": "print(1)", "module": "b"}',
                    ),
                    _sample(f, 11, "'text' is null", '{"text": null}'),
                ],
            },
            "text_not_string": {
                "count": 1,
                "samples": [
                    _sample(f, 4, "'text' is int, expected a string", '{"text": 42, "module": "c"}')
                ],
            },
            "invalid_utf8": {
                "count": 2,
                "samples": [
                    _sample(
                        f,
                        5,
                        "invalid UTF-8 at byte 13: invalid continuation byte",
                        '{"text": "caf\ufffd au lait"}',
                    ),
                    _sample(
                        f,
                        9,
                        "'text' has an unpaired surrogate at character 12",
                        '{"text": "half a pair \\ud800 here"}',
                    ),
                ],
            },
            "empty_document": {
                "count": 1,
                "samples": [
                    _sample(
                        f, 6, "'text' is empty or whitespace", '{"text": "  \\n", "module": "e"}'
                    )
                ],
            },
        }
    }
    assert m["totals"]["documents"] == 2
    assert m["totals"]["bad_documents"] == 8
    assert m["inputs"][0]["lines"] == 11
    assert m["inputs"][0]["blank_lines"] == 1
    assert set(m["bad_input"][f]) <= set(REASONS)


def test_it_reports_truncated_compressed_files_and_keeps_the_lines_before(tmp_path, recs):
    data = jsonl_bytes(recs)
    gz = gzip.compress(data, mtime=0)
    (tmp_path / "t.jsonl.gz").write_bytes(gz[: len(gz) // 2])
    # several frames, cut inside the last: the earlier frames are whole
    cctx = zstandard.ZstdCompressor()
    frames = [cctx.compress(jsonl_bytes(recs[i : i + 4])) for i in range(0, 12, 4)]
    zst = b"".join(frames)
    (tmp_path / "t.jsonl.zst").write_bytes(zst[: len(zst) - len(frames[-1]) // 2])
    m = tokenize(
        [str(tmp_path / "t.jsonl.gz"), str(tmp_path / "t.jsonl.zst")], str(tmp_path / "out")
    )
    gz_in, zst_in = m["inputs"]
    assert 0 < gz_in["documents"] < 12
    assert m["bad_input"][gz_in["file"]] == {
        "truncated_compressed": {
            "count": 1,
            "samples": [
                _sample(
                    gz_in["file"],
                    gz_in["documents"] + 1,
                    m["bad_input"][gz_in["file"]]["truncated_compressed"]["samples"][0]["message"],
                )
            ],
        }
    }
    assert m["bad_input"][gz_in["file"]]["truncated_compressed"]["samples"][0][
        "message"
    ].startswith("compressed stream ends before its end marker, after ")
    assert zst_in["documents"] == 8  # the two whole frames
    assert m["bad_input"][zst_in["file"]]["truncated_compressed"]["count"] == 1
    assert m["bad_input"][zst_in["file"]]["truncated_compressed"]["samples"][0]["line"] == 9


def test_it_reports_empty_and_unreadable_files(tmp_path, recs):
    (tmp_path / "empty.jsonl").write_bytes(b"")
    (tmp_path / "garbage.parquet").write_bytes(recs[3]["text"].encode()[:500])
    (tmp_path / "plain.jsonl.gz").write_bytes(jsonl_bytes(recs[:2]))
    write_parquet(tmp_path / "good.parquet", recs[:3])
    names = ["empty.jsonl", "garbage.parquet", "plain.jsonl.gz", "good.parquet"]
    # A path that does not exist is the caller's mistake, refused before any work starts.
    with pytest.raises(InputError, match="missing.jsonl: no such file or directory"):
        tokenize([str(tmp_path / n) for n in [*names, "missing.jsonl"]], str(tmp_path / "o"))
    m = tokenize([str(tmp_path / n) for n in names], str(tmp_path / "out"))
    bad = {k.rsplit("/", 1)[1]: v for k, v in m["bad_input"].items()}
    p = str(tmp_path)
    assert bad == {
        "empty.jsonl": {
            "empty_file": {
                "count": 1,
                "samples": [_sample(f"{p}/empty.jsonl", None, "file is empty")],
            }
        },
        "garbage.parquet": {
            "unreadable_file": {
                "count": 1,
                "samples": [
                    _sample(
                        f"{p}/garbage.parquet",
                        None,
                        "not a readable Parquet file: Parquet magic bytes not found in footer. "
                        "Either the file is corrupted or this is not a parquet file.",
                    )
                ],
            }
        },
        "plain.jsonl.gz": {
            "unreadable_file": {
                "count": 1,
                "samples": [
                    _sample(
                        f"{p}/plain.jsonl.gz",
                        None,
                        "not a valid gzip stream: corrupt compressed data after 0 bytes: "
                        "Error -3 while decompressing data: incorrect header check",
                    )
                ],
            }
        },
    }
    assert m["totals"]["documents"] == 3  # the good file is still tokenized


def test_it_fails_fast_in_strict_mode_with_file_and_absolute_line(tmp_path, recs):
    good = jsonl_bytes(recs)
    src = tmp_path / "s.jsonl"
    src.write_bytes(good + b'{"text": 7}\n' + good)
    with pytest.raises(InputError) as err:
        # small units: the bad line sits in a later byte range, its line number is absolute
        tokenize([str(src)], str(tmp_path / "out"), strict=True, unit_bytes=10_000)
    assert str(err.value) == f"{src}:13: text_not_string: 'text' is int, expected a string"


def test_it_yields_documents_with_their_fields_offsets_and_lines(tmp_path, recs):
    src = tmp_path / "d.jsonl"
    src.write_bytes(jsonl_bytes(recs[:3]))
    docs = list(read_segment(str(src)))
    assert all(isinstance(d, Document) for d in docs)
    assert [d.line for d in docs] == [1, 2, 3]
    assert docs[0].byte_offset == 0
    assert docs[1].byte_offset == len(jsonl_bytes(recs[:1]))
    assert docs[2].props == {k: v for k, v in recs[2].items() if k != "text"}
    assert docs[2].nbytes == len(recs[2]["text"].encode())


def test_a_documents_byte_count_is_its_utf8_length_ascii_or_not(tmp_path):
    """n_bytes is the text's UTF-8 length: an ASCII text's characters, and for any other
    its encoded bytes (a CJK character is 3, an emoji 4), escapes decoded first."""
    texts = [
        "plain ASCII text",
        "naïve café",
        "漢字かな交じり文",
        "emoji 🙂 here",
        "tab\tand\u00e9",
    ]
    src = tmp_path / "u.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    docs = list(read_segment(str(src)))
    assert [d.nbytes for d in docs] == [len(t.encode("utf-8")) for t in texts]
    assert docs[0].nbytes == len(texts[0]) and docs[2].nbytes == 3 * len(texts[2])


def test_it_reads_properties_exactly_as_json_does(tmp_path, recs):
    """The fast JSON parser never changes a value: integers past 64 bits stay exact,
    NaN/Infinity and floats are read as json reads them."""
    text = recs[0]["text"]
    t = json.dumps(text)
    lines = [
        '{"text": ' + t + ', "id": 123456789012345678901234567890, "score": 0.1}',
        '{"text": ' + t + ', "ids": [1, -99999999999999999999999], '
        '"meta": {"n": 18446744073709551615}}',
        '{"text": ' + t + ', "score": NaN, "hi": Infinity, "big": 1e400}',
    ]
    src = tmp_path / "p.jsonl"
    src.write_bytes(("\n".join(lines) + "\n").encode())
    docs = list(read_segment(str(src)))
    assert all(isinstance(d, Document) for d in docs)
    assert [d.text for d in docs] == [text] * 3
    assert docs[0].props == {"id": 123456789012345678901234567890, "score": 0.1}
    assert type(docs[0].props["id"]) is int
    assert docs[1].props == {"ids": [1, -99999999999999999999999], "meta": {"n": 2**64 - 1}}
    nan = docs[2].props["score"]
    assert nan != nan and docs[2].props["hi"] == docs[2].props["big"] == float("inf")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("a.jsonl", ("jsonl", None)),
        ("a.JSONL.GZ", ("jsonl", "gzip")),
        ("s3://bucket/x/a.jsonl.zst", ("jsonl", "zstd")),
        ("a.parquet", ("parquet", None)),
        ("a.txt.zst", ("txt", "zstd")),
    ],
)
def test_it_knows_formats_by_file_name(name, expected):
    assert source_format(name) == expected


def test_it_rejects_an_unknown_format():
    with pytest.raises(ValueError, match="unknown source format"):
        source_format("a.csv")
