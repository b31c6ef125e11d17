"""The API's JSON parser: DRF's, with a bound on nesting. Python's json module recurses
once per level, so a body of a few thousand ``[`` raises RecursionError (a 500); and a
body just under the interpreter's limit parses, then fails wherever it is walked again.
No field of the API nests deeper than a few levels, so anything deeper than
``MAX_DEPTH`` is refused as a 400 that says so."""

from __future__ import annotations

from rest_framework import parsers
from rest_framework.exceptions import ParseError

# The deepest body the API takes: weights and stages nest 4 levels; room to spare.
MAX_DEPTH = 32


class TooDeep(ValueError):
    """A JSON value nested deeper than allowed."""


def depth_check(value, max_depth: int = MAX_DEPTH) -> None:
    """Raise TooDeep when ``value`` (parsed JSON) nests lists and objects deeper than
    ``max_depth``. Iterative: walking a deep value never recurses."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = list(item.values())
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > max_depth:
            raise TooDeep(f"JSON nested deeper than {max_depth} levels")
        stack.extend((child, depth + 1) for child in children)


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            value = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError(f"JSON parse error - nested deeper than {MAX_DEPTH} levels") from None
        try:
            depth_check(value)
        except TooDeep as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
        return value
