"""The allowed range of every numeric parameter of the library, in one place.

Each entry point (``plan_pool``, ``plan_tokenize``, ``MixtureSpec``, ``plan_materialize``,
``units.run_local``) checks its numbers here before any work: before a byte is read, a
directory is made or an array is allocated. So the command line, the API and the pages
refuse the same values with the same message, which names the parameter and its range
(``seq_len: 99999999999 is outside the allowed range [1, 1048576]``), instead of a job that
dies allocating 373 GiB.

Why each bound:

- ``seq_len`` <= 2^20 tokens: a record is seq_len + 1 tokens and units hold records in
  memory; 1 Mi tokens is past any pretraining context in use (the API's bound too), and a
  record (at most 4 MiB of int32 tokens) stays small beside any memory budget.
- seeds in [0, 2^63 - 1]: the catalog stores them as bigints; numpy takes any of them.
- workers in [1, 1024]: processes on one machine.
- byte sizes (memory budgets, shard sizes) up to 1 PiB, token budgets up to 2^62: beyond
  them a number is a typo, and 2^62 keeps sample and token arithmetic inside int64.
- weights and repetitions in (0, 1e12], finite (what they can make is bounded again by
  the schedule-size cap, SHARDYARD_MAX_SCHEDULE_SAMPLES).
"""

from __future__ import annotations

import math
import numbers

from shardcore.errors import InputError

MAX_SEQ_LEN = 1 << 20
MAX_SEED = 2**63 - 1
MAX_WORKERS = 1024
MIN_MEMORY = 1 << 20
MAX_BYTES = 1 << 50
MAX_TOKENS = 2**62
MAX_WEIGHT = 1e12
MAX_REPETITIONS = 1e12
MAX_BATCH = 2**31 - 1
MAX_COUNT = 2**31 - 1  # counts of things held in memory: grid columns, buffer slots


def check_int(name: str, value, low: int, high: int) -> int:
    """``value`` as an int when it is a whole number in [low, high]; else an InputError
    naming ``name`` and the range. Booleans and fractions are not whole numbers."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputError(f"{name}: {value!r} is not an integer (allowed range [{low}, {high}])")
    if isinstance(value, numbers.Integral):
        out = int(value)
    else:
        f = float(value)
        if not math.isfinite(f) or f != int(f):
            raise InputError(f"{name}: {value!r} is not an integer (allowed range [{low}, {high}])")
        out = int(f)
    if not low <= out <= high:
        raise InputError(f"{name}: {out} is outside the allowed range [{low}, {high}]")
    return out


def check_float(
    name: str, value, low: float, high: float, *, low_open: bool = False, high_open: bool = False
) -> float:
    """``value`` as a float when it is finite and within the range (``low_open`` /
    ``high_open`` exclude an end); else an InputError naming ``name`` and the range."""
    text = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputError(f"{name}: {value!r} is not a number (allowed range {text})")
    out = float(value)
    inside = (
        math.isfinite(out)
        and (low < out if low_open else low <= out)
        and (out < high if high_open else out <= high)
    )
    if not inside:
        raise InputError(f"{name}: {value!r} is outside the allowed range {text}")
    return out


def seq_len(value) -> int:
    return check_int("seq_len", value, 1, MAX_SEQ_LEN)


def seed(value, name: str = "seed") -> int:
    return check_int(name, value, 0, MAX_SEED)


def workers(value) -> int:
    return check_int("workers", value, 1, MAX_WORKERS)


def size(name: str, value, low: int = 1) -> int:
    """A byte size (a memory budget, a shard size)."""
    return check_int(name, value, low, MAX_BYTES)


def tokens(name: str, value) -> int:
    """A token count (a budget, a stage's tokens)."""
    return check_int(name, value, 1, MAX_TOKENS)


def weight(name: str, value) -> float:
    return check_float(name, value, 0.0, MAX_WEIGHT, low_open=True)
