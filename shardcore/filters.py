"""Select documents of a tokenized source by a filter over their properties.

A filter is a DuckDB boolean expression over the documents' properties, e.g.
``lang = 'de' AND metadata.score > 0.5 AND _doc.n_tokens > 50``: the user's properties by
their own names (nested ones as struct fields), Shardyard's facts under ``_doc`` (see
shardcore.props for the names and the type rule). Each sidecar is loaded with pyarrow and
registered as the table ``docs``; file system access is disabled before the user's
expression runs, so an expression can read the document properties and nothing else. A
bad expression or an unknown property raises InputError naming it.

A filter is never spliced into SQL. ``filter_parse`` (the one validation, used by the web
request before anything is planned) has DuckDB's own parser read it as one expression,
then walks the parsed tree: columns, constants, comparisons, AND/OR/NOT, IN, IS NULL,
BETWEEN, CASE, casts and an allowlist of scalar functions (``FILTER_FUNCTIONS``); a
subquery, a window, ``*`` or any other function (``range``, ``repeat``, ``read_csv``...)
is refused. The parsed expression is then applied through DuckDB's relation API. An
evaluation runs under a DuckDB memory limit (``SHARDYARD_FILTER_MEMORY``, default
512MB) and is interrupted after ``SHARDYARD_FILTER_SECONDS`` (default 300) per sidecar.
"""

from __future__ import annotations

import functools
import json
import os
import re
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shardcore import config, props
from shardcore.errors import InputError

if TYPE_CHECKING:
    import duckdb

ROW = "__row"  # the document's index in its shard, added before filtering
# Node classes of DuckDB's parse tree a filter may hold (json_serialize_sql's "class").
_FILTER_NODES = {
    "COLUMN_REF",
    "CONSTANT",
    "COMPARISON",
    "CONJUNCTION",
    "OPERATOR",
    "FUNCTION",
    "CASE",
    "CAST",
    "BETWEEN",
    "TYPE",
    "COLLATE",
}
# Scalar functions whose cost is bounded by their arguments (nothing that generates data,
# reads files or settings). Operators parse as functions too (+, ~~ for LIKE...).
FILTER_FUNCTIONS = frozenset(  # noqa: SIM905 - a word list reads better than 70 strings
    [
        "+",
        "-",
        "*",
        "/",
        "//",
        "%",
        "~~",
        "!~~",
        "~~*",
        "!~~*",
        "~~~",
        "like_escape",
        "ilike_escape",
        "regexp_matches",
        "regexp_full_match",
        "contains",
        "starts_with",
        "ends_with",
        "prefix",
        "suffix",
        "lower",
        "upper",
        "lcase",
        "ucase",
        "length",
        "strlen",
        "len",
        "char_length",
        "character_length",
        "trim",
        "ltrim",
        "rtrim",
        "substr",
        "substring",
        "strpos",
        "instr",
        "position",
        "abs",
        "round",
        "floor",
        "ceil",
        "ceiling",
        "sign",
        "isnan",
        "isinf",
        "isfinite",
        "greatest",
        "least",
        "nullif",
        "ifnull",
        "hash",
        "md5",
        "list_contains",
        "list_has",
        "array_contains",
        "list_has_any",
        "list_has_all",
        "array_has_any",
        "array_has_all",
        "array_length",
        "list_value",
        "struct_pack",
        "struct_extract",
        "list_extract",
        "array_extract",
        "element_at",
        "map_extract",
        "year",
        "month",
        "day",
        "date_part",
        "epoch",
    ]
)
_UNKNOWN_COLUMN = re.compile(r'Referenced column "([^"]+)" not found')


def read_sidecar(path: str | os.PathLike) -> pa.Table:
    # ParquetFile, not pq.read_table: the latter goes through pyarrow.dataset, whose import
    # (pandas with it) costs a pool unit about 0.4 CPU-s.
    try:
        with pq.ParquetFile(path) as f:
            return f.read()
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


def filter_parse(expression: str) -> duckdb.Expression:
    """``expression`` as DuckDB's parsed expression (``duckdb.Expression``), or InputError
    saying why it is not a filter. Reads nothing: the web request validates with this."""
    import duckdb

    (_check if len(expression) <= _CHECKED_CHARS else _check.__wrapped__)(expression)
    return duckdb.SQLExpression(expression)


# The check opens a DuckDB connection (about 15 ms): planning a pool filters every input
# shard with one expression, so each process checks an expression once. A refusal is an
# exception, which the cache does not keep: a refused filter is checked again, and refused.
# Only expressions of up to _CHECKED_CHARS are kept (a web process keeps at most 32 x 4 KB).
_CHECKED_CHARS = 4096


@functools.lru_cache(maxsize=32)
def _check(expression: str) -> None:
    """Refuse ``expression`` (InputError saying why) unless it is one boolean expression of
    the nodes and functions a filter may hold."""
    import duckdb

    if ";" in expression:
        raise InputError(f"filter {expression!r}: ';' is not allowed in an expression")
    try:
        parsed = duckdb.SQLExpression(expression)
    except duckdb.Error as exc:
        raise InputError(f"filter {expression!r} is invalid: {_first_line(exc)}") from None
    # The tree of the parsed expression (rendered by DuckDB itself, not the user's text).
    con = duckdb.connect()
    try:
        tree = json.loads(
            con.execute("SELECT json_serialize_sql(?)", [f"SELECT 1 WHERE {parsed}"]).fetchall()[0][
                0
            ]
        )
    finally:
        con.close()
    nodes = tree.get("statements") or []
    node = nodes[0].get("node", {}) if len(nodes) == 1 else {}
    if tree.get("error") or node.get("type") != "SELECT_NODE" or "where_clause" not in node:
        raise InputError(f"filter {expression!r} is invalid: not one boolean expression")
    for cls, _kind, name in _tree_nodes(node["where_clause"]):
        if cls not in _FILTER_NODES:
            what = {
                "SUBQUERY": "a subquery (SELECT ...)",
                "WINDOW": "a window function",
                "STAR": "'*'",
            }.get(cls, f"a {cls.lower()} expression")
            raise InputError(f"filter {expression!r} is invalid: a filter cannot hold {what}")
        if cls == "FUNCTION" and name not in FILTER_FUNCTIONS:
            raise InputError(
                f"filter {expression!r} is invalid: function {name!r} is not allowed in a "
                "filter (see shardcore.filters.FILTER_FUNCTIONS)"
            )


class _Deadline(threading.Thread):
    """Calls ``interrupt`` after ``seconds``, then again every 10 ms until cancelled: an
    interrupt that arrives before the query starts must not be lost."""

    def __init__(self, seconds: float, interrupt: Callable[[], object]) -> None:
        super().__init__(daemon=True)
        self._seconds, self._interrupt, self._done = seconds, interrupt, threading.Event()

    def run(self) -> None:
        if self._done.wait(self._seconds):
            return
        while not self._done.is_set():
            self._interrupt()
            self._done.wait(0.01)

    def cancel(self) -> None:
        self._done.set()
        if self.is_alive():
            self.join()


def _tree_nodes(node: Any) -> Iterator[tuple[Any, Any, Any]]:  # JSON of DuckDB's parse tree
    """(class, type, function name) of every expression node under ``node``."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, dict):
            if "class" in n:
                yield n["class"], n.get("type"), n.get("function_name")
            stack.extend(n.values())
        elif isinstance(n, list):
            stack.extend(n)


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
    # Imported here: DuckDB costs ~20 MB of RSS and is needed only to evaluate a filter.
    import duckdb

    parsed = filter_parse(expression)
    table = filter_view(table, props_type)
    row = table.column_names[-1]
    con = duckdb.connect()
    # Interrupted when it runs too long (checked between vectors: with only bounded
    # functions allowed, each vector is quick).
    seconds, memory = config.filter_seconds(), config.filter_memory()
    timer = _Deadline(seconds, con.interrupt)
    try:
        con.register("docs", table)
        con.execute("SET enable_external_access = false")
        con.execute("SET memory_limit = ?", [memory])
        con.execute("SET lock_configuration = true")
        timer.start()
        result = (
            con.table("docs")
            .filter(parsed)
            .project(duckdb.ColumnExpression(row))
            .order(f'"{row}"')
            .fetchnumpy()
        )
    except duckdb.InterruptException:
        raise InputError(
            f"filter {expression!r} took longer than {seconds:g} s on {where} "
            "(SHARDYARD_FILTER_SECONDS)"
        ) from None
    except duckdb.OutOfMemoryException as exc:
        raise InputError(
            f"filter {expression!r} needs more than {memory} on {where} "
            f"(SHARDYARD_FILTER_MEMORY): {_first_line(exc)}"
        ) from None
    except duckdb.BinderException as exc:
        raise InputError(_binder_message(expression, exc, table, where)) from None
    except duckdb.Error as exc:
        raise InputError(f"filter {expression!r} is invalid: {_first_line(exc)}") from None
    finally:
        timer.cancel()
        con.close()
    return np.asarray(result[row], dtype=np.int64)


def select_shard(
    sidecar: str | os.PathLike,
    expression: str | None,
    props_type: pa.DataType | None = None,
    annotations: list[dict] | None = None,
) -> tuple[np.ndarray, pa.Table]:
    """The selected rows of one shard's sidecar and their metadata (in row order), the
    properties conformed to ``props_type`` when given, with the columns of the annotation
    files ``annotations`` joined in as ``<annotator>.<column>`` (shardcore.annotate.join)."""
    table = read_sidecar(sidecar)
    if annotations:
        from shardcore.annotate import join as annotation_join  # pools that join annotations

        table = annotation_join.attach(table, annotations, where=os.fspath(sidecar))
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
    """The names a filter may use: properties, each group's columns as
    ``<group>.<column>`` (an annotation's ``lang_id.lang``), Shardyard's own columns."""
    out = []
    for c in table.column_names[:-1]:
        kind = table.schema.field(c).type
        if c != props.FACTS and pa.types.is_struct(kind):
            out += [f"{c}.{f.name}" for f in kind]
        elif c != props.FACTS:
            out.append(c)
    if props.FACTS in table.column_names:
        out += [f"{props.FACTS}.{f.name}" for f in table.schema.field(props.FACTS).type]
    return out


_NO_KEY = re.compile(r'Could not find key "([^"]+)" in struct')
_NO_GROUP = re.compile(r'Referenced table "([^"]+)" not found')
_COMPARE = re.compile(r"Cannot compare values of type (\w+).*? and type (\w+)")


def _binder_message(expression: str, exc: Exception, table: pa.Table, where: str) -> str:
    """DuckDB's binder refusal in the filter's words: the property or annotation column it
    does not know (and the ones there are), or the comparison whose types do not meet."""
    text, known = str(exc), ", ".join(_known(table))
    for pattern in (_UNKNOWN_COLUMN, _NO_KEY, _NO_GROUP):
        m = pattern.search(text)
        if m:
            name = m.group(1)
            if pattern is _NO_KEY:  # a.b with no column b in group a: name it whole
                dotted = re.search(rf"([\w.]+)\.{re.escape(name)}\b", expression)
                name = f"{dotted.group(1)}.{name}" if dotted else name
            return f"filter {expression!r}: unknown property {name!r} in {where} (known: {known})"
    m = _COMPARE.search(text)
    if m:
        left, right = m.group(1).lower(), m.group(2).lower()
        hint = (
            "; text is compared with text in quotes, e.g. = 'en'"
            if "varchar" in (left, right)
            else ""
        )
        return (
            f"filter {expression!r}: {_column_word(left)} is compared with a "
            f"{_type_word(right)}{hint} (known: {known})"
        )
    return f"filter {expression!r} is invalid: {_first_line(exc)} (known: {known})"


def _column_word(duck: str) -> str:
    """The left side of a comparison: a column of a type, or a group (an annotation)."""
    if duck.startswith("struct"):
        return "a group of columns (name one of them)"
    return f"a {_type_word(duck)} column"


def _type_word(duck: str) -> str:
    """A DuckDB type as a person says it (VARCHAR: text, INTEGER_LITERAL: number)."""
    if duck.startswith(("varchar", "string")):
        return "text"
    if duck.startswith("struct"):
        return "group of columns"
    if duck.startswith("bool"):
        return "true/false"
    if duck.startswith("list") or duck.endswith("[]"):
        return "list"
    return "number"


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0]
