"""Document properties: how the fields of a record other than its text are stored, unified
across files and sources, and named in filters and ``--by``.

Layout of every documents sidecar (tokenized shards, pool shards, ``documents.parquet``):
Shardyard's own columns at the top level (``doc_id``, ``file``, ``line``, ``byte_offset``,
``n_tokens``; pools add ``source``, ``source_shard``, ``source_row``,
``source_fingerprint``) and the user's properties in one struct column, ``props``. A
property can have any name (``source``, ``file``, ``doc_id``, ``props``...): it lives in
its own namespace and round-trips unchanged.

Types, by the value a record holds: JSON objects become structs (so ``metadata.score``
is a field, not a string), lists stay lists, numbers stay numbers. When one property has
different types in different records, files or sources, one rule unifies them (the
same rule everywhere, in any order of inputs):

- absent or null, with anything: the other type (absent reads as NULL);
- integers with floats: float64; bools only with bools;
- structs with structs: the union of their fields, each unified by this rule;
- lists with lists: a list of the unified element type;
- any other mix (a number in one file, a string in another): string, each value written
  as its JSON text (``5``, ``true``, ``{"a": 1}``), strings unchanged.

An empty object ``{}`` is stored as NULL; an integer beyond 64 bits as its text.

Names in filters and ``--by``: the user's properties by their own names (dotted paths
for nested fields: ``metadata.score > 0.5``); Shardyard's per-document facts always as
``_doc.<name>`` (``_doc.n_tokens > 50``), and by their bare name when no input of the
pool has a user property of that name. ``_doc`` itself is reserved in filters: a user
property of that name is stored and round-trips, but a filter cannot name it.

Annotations a pool joins are one struct property per annotator (``lang_id.lang``,
``pii.emails``), their columns' types as the annotator declares them
(``shardcore.annotate.join``).
"""

from __future__ import annotations

import base64
import json
import operator
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

PROPS = "props"  # the struct column of the user's properties
FACTS = "_doc"  # the struct of Shardyard's per-document facts, as filters see it
_INT64 = (-(1 << 63), (1 << 63) - 1)


# ----------------------------------------------------------------- type inference


def _leaf_type(v: Any) -> pa.DataType:
    t = type(v)
    if v is None:
        return pa.null()
    if t is bool:
        return pa.bool_()
    if t is int:
        return pa.int64() if _INT64[0] <= v <= _INT64[1] else pa.string()
    if t is float:
        return pa.float64()
    if t is str:
        return pa.string()
    if isinstance(v, dict):
        return _struct_of(v)
    if isinstance(v, (list, tuple)):
        vt = pa.null()
        for x in v:
            vt = unify(vt, _leaf_type(x))
        return pa.list_(vt)
    try:  # dates, timestamps, decimals, bytes (from Parquet inputs)
        return pa.scalar(v).type
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return pa.string()


def _struct_of(d: dict) -> pa.DataType:
    if not d:
        return pa.null()
    return pa.struct([pa.field(str(k), _leaf_type(x)) for k, x in d.items()])


def unify(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    """The type that holds values of both ``a`` and ``b`` (the module's rule)."""
    if a.equals(b):
        return a
    if pa.types.is_null(a):
        return b
    if pa.types.is_null(b):
        return a
    num = (pa.types.is_integer, pa.types.is_floating)
    if any(f(a) for f in num) and any(f(b) for f in num):
        if pa.types.is_integer(a) and pa.types.is_integer(b):
            return pa.int64()
        return pa.float64()
    if pa.types.is_struct(a) and pa.types.is_struct(b):
        fields: dict[str, pa.DataType] = {f.name: f.type for f in a}
        for f in b:
            fields[f.name] = unify(fields[f.name], f.type) if f.name in fields else f.type
        return pa.struct([pa.field(n, t) for n, t in fields.items()])
    if _is_list(a) and _is_list(b):
        return pa.list_(unify(a.value_type, b.value_type))
    if _is_text(a) and _is_text(b):
        return pa.string()
    if a.equals(b, check_metadata=False) or str(a) == str(b):
        return a
    return pa.string()


def unify_all(types: Iterable[pa.DataType]) -> pa.DataType:
    out = pa.null()
    for t in types:
        out = unify(out, t)
    return out


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t)


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


# ----------------------------------------------------------------- values to a type


def _text(v: Any) -> str:
    if isinstance(v, str):
        return v
    return json.dumps(v, ensure_ascii=False, default=str)


def _fit(v: Any, t: pa.DataType) -> Any:
    """``v`` shaped to be stored as type ``t`` (which unify made to hold it)."""
    if v is None or pa.types.is_null(t):
        return None
    if _is_text(t):
        return _text(v)
    if pa.types.is_struct(t):
        if not isinstance(v, dict) or not v:
            return None
        return {f.name: _fit(v.get(f.name), f.type) for f in t}
    if _is_list(t):
        return [_fit(x, t.value_type) for x in v]
    if pa.types.is_floating(t) and type(v) is int:
        return float(v)
    return v


def _has_empty_struct(t: pa.DataType) -> bool:
    if pa.types.is_struct(t):
        return t.num_fields == 0 or any(_has_empty_struct(f.type) for f in t)
    if _is_list(t):
        return _has_empty_struct(t.value_type)
    return False


# ----------------------------------------------------------------- arrays without pandas
# Before pyarrow converts anything with pa.array (a list, a numpy array) or to numpy, it
# asks whether it is a pandas object, and imports pandas to ask (~0.2 CPU-s a process that
# has no other use for it). The sidecars' own columns and flat properties are built from
# their buffers instead; these functions give the arrays pa.array would.


def numbers(values: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    """A numeric or boolean numpy array as an Arrow array of its type; ``valid`` (bools)
    marks the non-null values."""
    values = np.ascontiguousarray(values)
    n = len(values)
    if values.dtype == np.bool_:
        data = pa.py_buffer(np.packbits(values, bitorder="little"))
    else:
        data = pa.py_buffer(values)
    mask, nulls = None, 0
    if valid is not None and not valid.all():
        mask = pa.py_buffer(np.packbits(valid, bitorder="little"))
        nulls = n - int(np.count_nonzero(valid))
    return pa.Array.from_buffers(
        pa.from_numpy_dtype(values.dtype), n, [mask, data], null_count=nulls
    )


def repeated_string(value: str, n: int) -> pa.Array:
    """``strings([value] * n)``, encoding the value once."""
    data = value.encode("utf-8")
    if len(data) * n >= 1 << 31:
        return strings([value] * n)
    offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(data))
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(data * n)]
    return pa.Array.from_buffers(pa.string(), n, buffers, null_count=0)


def strings(values: Sequence[str | None]) -> pa.Array:
    """Python strings (or None) as an Arrow ``string`` array."""
    n = len(values)
    if None not in values and all(map(str.isascii, values)):  # type: ignore[arg-type]
        # ASCII only: one join, sizes from lengths (no encoding per string).
        joined = "".join(values).encode("ascii")  # type: ignore[arg-type]  # no None
        sizes = np.fromiter(map(len, values), dtype=np.int64, count=n)  # type: ignore[arg-type]
        valid = None
    else:
        data = [b"" if v is None else v.encode("utf-8") for v in values]
        joined = b"".join(data)
        sizes = np.fromiter(map(len, data), dtype=np.int64, count=n)
        valid = np.fromiter((v is not None for v in values), dtype=bool, count=n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    if offsets[-1] >= 1 << 31:  # beyond a string array's 32-bit offsets: pyarrow chunks it
        return pa.array(values, type=pa.string())
    mask, nulls = None, 0
    if valid is not None and not valid.all():
        nulls = n - int(np.count_nonzero(valid))
        mask = pa.py_buffer(np.packbits(valid, bitorder="little"))
    buffers = [mask, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(joined)]
    return pa.Array.from_buffers(pa.string(), n, buffers, null_count=nulls)


def int64_values(col: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The values of an int64 column without nulls, as numpy."""
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    if col.null_count or not pa.types.is_int64(col.type):
        raise ValueError(f"expected int64 values without nulls, got {col.type}")
    parts = [
        np.frombuffer(c.buffers()[1], dtype=np.int64)[c.offset : c.offset + len(c)]
        for c in chunks
        if len(c)
    ]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


# A Python value's type -> the Arrow type pa.array infers for a field of only such values.
_FLAT = {str: pa.string(), bool: pa.bool_(), int: pa.int64(), float: pa.float64()}


def _uniform_struct(rows: Sequence[dict[str, Any]]) -> pa.Array | None:
    """``_flat_struct`` for the usual rows of one source: every row has the same keys and
    each key's values are all str, all bool, all int (64-bit) or all float, none None; a
    column at a time by calls over all rows (none per value). None for any other rows."""
    first = rows[0]
    keys = first.keys()
    if not all(map(keys.__eq__, map(dict.keys, rows))):
        return None
    fields, arrays = [], []
    for k in first:
        values = list(map(operator.itemgetter(k), rows))
        kinds = set(map(type, values))
        if len(kinds) != 1:
            return None
        kind = kinds.pop()
        if kind is str:
            arrays.append(strings(values))
        elif kind is int:
            if min(values) < _INT64[0] or max(values) > _INT64[1]:
                return None
            arrays.append(numbers(np.array(values, dtype=np.int64)))
        elif kind is float or kind is bool:
            arrays.append(
                numbers(np.array(values, dtype=np.float64 if kind is float else np.bool_))
            )
        else:
            return None
        fields.append(pa.field(str(k), arrays[-1].type))
    return pa.StructArray.from_arrays(arrays, fields=fields)


def _flat_struct(rows: Sequence[dict[str, Any]]) -> pa.Array | None:
    """``pa.array(rows)`` for rows whose values are all None, str, bool, int (64-bit) or
    float, each key's values of one type (None aside): the same struct, fields in order of
    first appearance, built from buffers. None for any other rows (pa.array decides)."""
    uniform = _uniform_struct(rows)
    if uniform is not None:
        return uniform
    kinds: dict[str, type | None] = {}
    for r in rows:
        for k, v in r.items():
            t = type(v)
            if v is None:
                kinds.setdefault(k, None)
            elif t not in _FLAT or kinds.setdefault(k, t) not in (t, None):
                return None
            elif kinds[k] is None:
                kinds[k] = t
            if t is int and not _INT64[0] <= v <= _INT64[1]:
                return None
    fields, arrays = [], []
    for k, kind in kinds.items():
        values = [r.get(k) for r in rows]
        if kind is None:
            arrays.append(pa.nulls(len(rows)))
        elif kind is str:
            arrays.append(strings(values))
        else:
            valid = np.fromiter((v is not None for v in values), dtype=bool, count=len(rows))
            np_type = {bool: np.bool_, int: np.int64, float: np.float64}[kind]
            filled: np.ndarray = np.fromiter(
                (0 if v is None else v for v in values), np_type, len(rows)
            )
            arrays.append(numbers(filled, valid))
        fields.append(pa.field(str(k), arrays[-1].type))
    return pa.StructArray.from_arrays(arrays, fields=fields)


def to_arrow(rows: Sequence[dict[str, Any]]) -> pa.Array | None:
    """The properties of ``rows`` (one dict per document) as one struct array, or None when
    no document has any property."""
    if not any(rows):
        return None
    flat = _flat_struct(rows)
    if flat is not None:
        return flat
    try:  # pyarrow's own inference agrees with the rule wherever it succeeds
        arr = pa.array(rows)
        if pa.types.is_struct(arr.type) and not _has_empty_struct(arr.type):
            return arr
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
        pass
    t = pa.null()
    for r in rows:
        t = unify(t, _struct_of(r))
    if pa.types.is_null(t):
        return None
    return pa.array([_fit(r, t) for r in rows], type=t)


def conform(arr: pa.Array | pa.ChunkedArray, t: pa.DataType) -> pa.Array | pa.ChunkedArray:
    """``arr`` as type ``t``, where ``t`` = unify(arr.type, ...)."""
    if arr.type.equals(t):
        return arr
    try:
        if not _needs_text(arr.type, t):
            return arr.cast(t)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        pass
    values = arr.to_pylist()
    return pa.array([_fit(v, t) for v in values], type=t)


def _needs_text(src: pa.DataType, dst: pa.DataType) -> bool:
    """Whether casting src to dst turns a non-text value into text somewhere (Arrow's cast
    would write ``1.0``/``true`` differently from JSON, or refuse structs)."""
    if _is_text(dst):
        return not (_is_text(src) or pa.types.is_null(src))
    if pa.types.is_struct(dst) and pa.types.is_struct(src):
        have = {f.name: f.type for f in src}
        return any(_needs_text(have[f.name], f.type) for f in dst if f.name in have)
    if _is_list(dst) and _is_list(src):
        return _needs_text(src.value_type, dst.value_type)
    return False


# ----------------------------------------------------------------- tables


def props_type(schema: pa.Schema) -> pa.DataType:
    """The type of a sidecar's ``props`` column (null when it has none)."""
    i = schema.get_field_index(PROPS)
    return schema.field(i).type if i >= 0 else pa.null()


def with_props(table: pa.Table, t: pa.DataType) -> pa.Table:
    """``table`` with its ``props`` column conformed to ``t`` (added as nulls if absent;
    dropped when ``t`` is null)."""
    i = table.schema.get_field_index(PROPS)
    if pa.types.is_null(t):
        return table.remove_column(i) if i >= 0 else table
    if i < 0:
        return table.append_column(PROPS, pa.nulls(table.num_rows, type=t))
    return table.set_column(i, PROPS, conform(table.column(i), t))


def concat(tables: Sequence[pa.Table]) -> pa.Table:
    """Sidecar tables concatenated, their properties unified by the module's rule."""
    t = unify_all(props_type(x.schema) for x in tables)
    return pa.concat_tables([with_props(x, t) for x in tables], promote_options="permissive")


def user_columns(table: pa.Table) -> list[tuple[str, pa.Array]]:
    """The user's top-level properties of a sidecar as (name, values) pairs; nested ones
    stay structs and lists. A document without properties reads NULL in each."""
    i = table.schema.get_field_index(PROPS)
    if i < 0 or pa.types.is_null(table.schema.field(i).type):
        return []
    arr = _one_chunk(table.column(i))
    return [(f.name, _field(arr, f.name)) for f in arr.type]


def _one_chunk(col: pa.ChunkedArray) -> pa.Array:
    return pa.concat_arrays(col.chunks) if col.num_chunks else pa.array([], type=col.type)


def names(t: pa.DataType) -> list[str]:
    """Every property path of a props type: top-level names and dotted nested ones."""
    out: list[str] = []

    def walk(tt: pa.DataType, prefix: str) -> None:
        for f in tt:
            out.append(prefix + f.name)
            if pa.types.is_struct(f.type):
                walk(f.type, prefix + f.name + ".")

    if pa.types.is_struct(t):
        walk(t, "")
    return out


def column(table: pa.Table, path: str) -> pa.Array | None:
    """The values of a user property (a dotted path for nested fields), or None if the
    sidecar has no such property."""
    i = table.schema.get_field_index(PROPS)
    if i < 0:
        return None
    arr = _one_chunk(table.column(i))
    for part in _split_path(path, arr.type):
        if part is None:
            return None
        arr = _field(arr, part)
    return arr


def _split_path(path: str, t: pa.DataType) -> list[str | None]:
    """A dotted path resolved against struct fields; field names may contain dots, so the
    longest name that matches at each level wins."""
    parts = path.split(".")
    out: list[str | None] = []
    while parts:
        if not pa.types.is_struct(t):
            return [None]
        have = {f.name: f.type for f in t}
        for n in range(len(parts), 0, -1):
            name = ".".join(parts[:n])
            if name in have:
                out.append(name)
                t = have[name]
                parts = parts[n:]
                break
        else:
            return [None]
    return out


def _field(arr: pa.StructArray, name: str) -> pa.Array:
    """A struct field with the struct's own nulls applied (``StructArray.field`` ignores
    them)."""
    import pyarrow.compute as pc

    return pc.struct_field(arr, [arr.type.get_field_index(name)])


def as_text_if_nested(arr: pa.Array) -> pa.Array:
    """Struct and list values as their JSON text (sorted keys), so that they can serve as
    labels; other arrays unchanged."""
    if not pa.types.is_nested(arr.type):
        return arr
    return pa.array(
        [
            None if v is None else json.dumps(v, sort_keys=True, default=str)
            for v in arr.to_pylist()
        ],
        type=pa.string(),
    )


def type_to_text(t: pa.DataType) -> str:
    """A props type as text, for plans and manifests (JSON)."""

    return base64.b64encode(pa.schema([pa.field(PROPS, t)]).serialize().to_pybytes()).decode()


def type_from_text(text: str | None) -> pa.DataType | None:
    if not text:
        return None

    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text))).field(PROPS).type
