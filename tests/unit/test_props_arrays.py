"""The sidecars' arrays built from buffers (shardcore.props: numbers, strings, flat
properties) are the arrays pa.array makes, down to the Parquet bytes, and a tokenize run
imports neither pandas, awkward nor, for local files, fsspec (each costs hundredths to
tenths of a CPU-second a process)."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardcore import props


def _parquet(arr: pa.Array) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table({"c": arr}), buf)
    return buf.getvalue()


def _same(got: pa.Array, want: pa.Array) -> None:
    assert got.type == want.type
    assert got.null_count == want.null_count
    assert _parquet(got) == _parquet(want)  # the values, NaN and -0.0 included


@pytest.mark.parametrize(
    "values",
    [
        [3, -1, 2**62, 0],
        [0.5, -0.0, float("inf"), 1e-300],
        [True, False, True, True, False, False, True, True, False],
    ],
)
def test_numbers_are_what_pa_array_makes(values):
    _same(props.numbers(np.array(values)), pa.array(values))
    _same(props.numbers(np.array(values)[:0]), pa.array(values[:0], pa.array(values).type))


def test_numbers_with_nulls_are_what_pa_array_makes():
    values = [1, None, 3, None, None, 6, 7, 8, 9]
    valid = np.array([v is not None for v in values])
    filled = np.array([v or 0 for v in values], dtype=np.int64)
    _same(props.numbers(filled, valid), pa.array(values, type=pa.int64()))


@pytest.mark.parametrize(
    "values", [["a", "ünï", "", "日本語"], ["x", None, "", None], [], [None, None]]
)
def test_strings_are_what_pa_array_makes(values):
    _same(props.strings(values), pa.array(values, type=pa.string()))


@pytest.mark.parametrize(
    "rows",
    [
        [{"kind": "code", "round": 1}, {"kind": "multilingual", "round": 2}],
        [{"b": 1, "a": 2.5}, {"c": None, "a": -0.0}, {}, {"b": None, "d": True}],
        [{"a": None}, {"a": None}],
        [{"s": "x", "n": 2**63 - 1}, {"s": None, "n": -(2**63)}],
        [{"f": 1.0}, {"f": float("nan")}],
    ],
)
def test_flat_properties_are_what_pa_array_makes(rows):
    got = props._flat_struct(rows)
    assert got is not None
    _same(got, pa.array(rows))
    _same(props.to_arrow(rows), got)


@pytest.mark.parametrize(
    "rows",
    [
        [{"a": 1}, {"a": 2.5}],  # ints and floats: pyarrow's own rule
        [{"a": 1}, {"a": "x"}],  # mixed: the module's rule (text)
        [{"a": True}, {"a": 1}],
        [{"a": 2**64}],
        [{"a": {"b": 1}}],
        [{"a": [1, 2]}],
    ],
)
def test_other_properties_go_to_pa_array_and_the_rule(rows):
    assert props._flat_struct(rows) is None
    assert props.to_arrow(rows) is not None


def test_int64_values_reads_a_sliced_chunked_column():
    col = pa.chunked_array([pa.array([1, 2, 3]), pa.array([4, 5])]).slice(1, 3)
    assert props.int64_values(col).tolist() == [2, 3, 4]
    with pytest.raises(ValueError, match="without nulls"):
        props.int64_values(pa.array([1, None]))


def test_a_tokenize_run_imports_neither_pandas_awkward_nor_fsspec(tmp_path):
    src = tmp_path / "in.jsonl"
    docs = [{"text": f"document {i} " * 400, "kind": "k", "n": i} for i in range(50)]
    src.write_text("".join(json.dumps(d) + "\n" for d in docs))
    code = (
        "import sys; from shardcore.tokenize import tokenize; "
        f"m = tokenize([{str(src)!r}], {str(tmp_path / 'out')!r}, shard_size=4096); "
        "print(m['totals']['documents'], sorted({'pandas', 'awkward', 'fsspec'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["50", "[]"]
