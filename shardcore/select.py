"""Select documents of a tokenized source by a filter over their properties.

A filter is a DuckDB boolean expression over the columns of the Parquet sidecars, e.g.
``lang = 'de' AND n_tokens > 50``. Each sidecar is loaded with pyarrow and registered as
the table ``docs``; file system access is disabled before the user's expression runs, so
an expression can read the document properties and nothing else. A bad expression or an
unknown property raises InputError naming it.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shardcore.errors import InputError

ROW = "__row"  # the document's index in its shard, added before filtering
_UNKNOWN_COLUMN = re.compile(r'Referenced column "([^"]+)" not found')


def read_sidecar(path: str | os.PathLike) -> pa.Table:
    try:
        return pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise InputError(f"{path}: cannot read document sidecar: {exc}") from exc


def filter_rows(table: pa.Table, expression: str | None, *, where: str = "") -> np.ndarray:
    """Indices (ascending) of the rows of ``table`` for which ``expression`` is true.
    ``where`` names the data in error messages."""
    if expression is None or not expression.strip():
        return np.arange(table.num_rows, dtype=np.int64)
    if ";" in expression:
        raise InputError(f"filter {expression!r}: ';' is not allowed in an expression")
    if ROW in table.column_names:
        raise InputError(f"{where}: sidecar has a reserved column {ROW!r}")
    # Imported here: DuckDB costs ~20 MB of RSS and is needed only to evaluate a filter.
    import duckdb

    table = table.append_column(ROW, pa.array(np.arange(table.num_rows, dtype=np.int64)))
    con = duckdb.connect()
    try:
        con.register("docs", table)
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
        result = con.execute(
            f"SELECT {ROW} FROM docs WHERE ({expression}) ORDER BY {ROW}"
        ).fetchnumpy()
    except duckdb.BinderException as exc:
        missing = _UNKNOWN_COLUMN.search(str(exc))
        if missing:
            known = ", ".join(c for c in table.column_names if c != ROW)
            raise InputError(
                f"filter {expression!r}: unknown property {missing.group(1)!r} in {where} "
                f"(known: {known})"
            ) from None
        raise InputError(f"filter {expression!r} is invalid: {_first_line(exc)}") from None
    except duckdb.Error as exc:
        raise InputError(f"filter {expression!r} is invalid: {_first_line(exc)}") from None
    finally:
        con.close()
    return np.asarray(result[ROW], dtype=np.int64)


def select_shard(sidecar: str | os.PathLike, expression: str | None) -> tuple[np.ndarray, pa.Table]:
    """The selected rows of one shard's sidecar and their metadata (in row order)."""
    table = read_sidecar(sidecar)
    rows = filter_rows(table, expression, where=os.fspath(sidecar))
    return rows, table.take(pa.array(rows)) if rows.size != table.num_rows else table


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0]
