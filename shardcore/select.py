"""Select documents of a tokenized source by a filter over their properties.

A filter is a DuckDB boolean expression over the documents' properties, e.g.
``lang = 'de' AND metadata.score > 0.5 AND _doc.n_tokens > 50``: the user's properties by
their own names (nested ones as struct fields), Shardyard's facts under ``_doc`` (see
shardcore.props for the names and the type rule). Each sidecar is loaded with pyarrow and
registered as the table ``docs``; file system access is disabled before the user's
expression runs, so an expression can read the document properties and nothing else. A
bad expression or an unknown property raises InputError naming it.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shardcore import props
from shardcore.errors import InputError

ROW = "__row"  # the document's index in its shard, added before filtering
_UNKNOWN_COLUMN = re.compile(r'Referenced column "([^"]+)" not found')


def read_sidecar(path: str | os.PathLike) -> pa.Table:
    try:
        return pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise InputError(f"{path}: cannot read document sidecar: {exc}") from exc


def filter_view(table: pa.Table, props_type: pa.DataType | None = None) -> pa.Table:
    """The table a filter reads: the user's properties by name (``props_type``, the type
    unified over every input of the pool, makes a property absent here read NULL), each of
    Shardyard's columns by its bare name where no property shadows it, all of them as
    the struct ``_doc`` (a reserved name), and the row number ``__row``."""
    if props_type is not None:
        table = props.with_props(table, props_type)
    cols = dict(props.user_columns(table))
    facts = [(n, table.column(n)) for n in table.column_names if n != props.PROPS]
    for name, values in facts:
        cols.setdefault(name, values)
    if facts:  # reserved: a user property called _doc is stored but not filterable
        cols[props.FACTS] = pa.StructArray.from_arrays(
            [v.combine_chunks() if isinstance(v, pa.ChunkedArray) else v for _, v in facts],
            names=[n for n, _ in facts],
        )
    row = ROW
    while row in cols:  # a property may be called __row too
        row += "_"
    cols[row] = pa.array(np.arange(table.num_rows, dtype=np.int64))
    return pa.table(cols)


def filter_rows(
    table: pa.Table,
    expression: str | None,
    *,
    where: str = "",
    props_type: pa.DataType | None = None,
) -> np.ndarray:
    """Indices (ascending) of the rows of ``table`` (a sidecar) for which ``expression`` is
    true. ``where`` names the data in error messages."""
    if expression is None or not expression.strip():
        return np.arange(table.num_rows, dtype=np.int64)
    if ";" in expression:
        raise InputError(f"filter {expression!r}: ';' is not allowed in an expression")
    # Imported here: DuckDB costs ~20 MB of RSS and is needed only to evaluate a filter.
    import duckdb

    table = filter_view(table, props_type)
    row = table.column_names[-1]
    con = duckdb.connect()
    try:
        con.register("docs", table)
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
        result = con.execute(
            f'SELECT "{row}" FROM docs WHERE ({expression}) ORDER BY "{row}"'
        ).fetchnumpy()
    except duckdb.BinderException as exc:
        missing = _UNKNOWN_COLUMN.search(str(exc))
        if missing:
            known = ", ".join(_known(table))
            raise InputError(
                f"filter {expression!r}: unknown property {missing.group(1)!r} in {where} "
                f"(known: {known})"
            ) from None
        raise InputError(f"filter {expression!r} is invalid: {_first_line(exc)}") from None
    except duckdb.Error as exc:
        raise InputError(f"filter {expression!r} is invalid: {_first_line(exc)}") from None
    finally:
        con.close()
    return np.asarray(result[row], dtype=np.int64)


def select_shard(
    sidecar: str | os.PathLike, expression: str | None, props_type: pa.DataType | None = None
) -> tuple[np.ndarray, pa.Table]:
    """The selected rows of one shard's sidecar and their metadata (in row order), the
    properties conformed to ``props_type`` when given."""
    table = read_sidecar(sidecar)
    if props_type is not None:
        table = props.with_props(table, props_type)
    rows = filter_rows(table, expression, where=os.fspath(sidecar))
    return rows, table.take(pa.array(rows)) if rows.size != table.num_rows else table


def sidecars_props_type(sidecars: list[str]) -> pa.DataType:
    """The properties' type unified over many sidecars (read from their footers only)."""
    import pyarrow.parquet as pq

    types = []
    for path in sidecars:
        try:
            types.append(props.props_type(pq.read_schema(path)))
        except (OSError, pa.ArrowException) as exc:
            raise InputError(f"{path}: cannot read document sidecar: {exc}") from exc
    return props.unify_all(types)


def _known(table: pa.Table) -> list[str]:
    out = [c for c in table.column_names[:-1] if c != props.FACTS]
    if props.FACTS in table.column_names:
        out += [f"{props.FACTS}.{f.name}" for f in table.schema.field(props.FACTS).type]
    return out


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0]
