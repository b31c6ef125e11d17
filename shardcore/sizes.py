"""Byte sizes as people type them: ``256MB``, ``1GiB``, ``64k``, ``1048576``.

One meaning everywhere (command line, library, benchmarks): SI prefixes are powers of
1000 and IEC prefixes powers of 1024, as the two standards define them::

    k, kB   = 1000        KiB = 1024
    M, MB   = 1000**2     MiB = 1024**2
    G, GB   = 1000**3     GiB = 1024**3
    T, TB   = 1000**4     TiB = 1024**4

Case does not matter, the ``B`` is optional, a decimal point is allowed (``1.5GB``) and a
bare number is bytes.
"""

from __future__ import annotations

import re

from shardcore.errors import InputError

__all__ = ["parse_size"]

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:([kmgt])(i)?)?b?\s*$", re.IGNORECASE)
_POWER = {"k": 1, "m": 2, "g": 3, "t": 4}


def parse_size(text: str | int, *, name: str | None = None) -> int:
    """Bytes of ``text`` (an int is returned as is). The error quotes what was given and
    starts with ``name`` when one is given (``SHARDYARD_X``, a form field)."""
    where = f"{name}: " if name else ""
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise InputError(f"{where}negative size: {text}")
        return text
    m = _SIZE.match(str(text))
    if not m:
        raise InputError(
            f"{where}not a size: {text!r} (e.g. 256MB = 256*10^6 bytes, "
            "256MiB = 256*2^20 bytes, 1000000)"
        )
    number, prefix, binary = m.groups()
    base = 1024 if binary else 1000
    power = _POWER[prefix.lower()] if prefix else 0
    return int(float(number) * base**power)


def format_size(num_bytes: int | float) -> str:
    """Bytes for a person, in the units ``parse_size`` reads back: powers of 1000 (``kB``,
    ``MB``, ``GB``, ``TB``, ``PB``) with one decimal, so 886,397 bytes is ``886.4 kB`` (as
    the docs count them), never 1024-based "865.6 KB"; under 1000, ``N bytes``."""
    n = float(num_bytes)
    if abs(n) < 1000:
        return f"{int(n):,} bytes" if abs(n) != 1 else "1 byte"
    for unit in ("kB", "MB", "GB", "TB"):
        n /= 1000
        if abs(n) < 999.95:
            return f"{n:.1f} {unit}"
    return f"{n / 1000:,.1f} PB"
