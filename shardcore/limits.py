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
- decontamination n-grams of 1 to 64 words; a benchmark index of at most 2^31 - 1 items
  and 2^32 n-grams (``MAX_DECON_*``).
- weights and repetitions in (0, 1e12], finite (what they can make is bounded again by
  the schedule-size cap, SHARDYARD_MAX_SCHEDULE_SAMPLES).
- a validation fraction in [0, 0.5]: past half the documents the "held-out slice" is the
  pool, and a fraction typed as a percentage (5 for 5%) is refused rather than read.
- every annotator parameter (``ANNOTATOR_PARAMS``, checked by ``annotator_params`` when an
  annotator is made, so before any plan or unit): what each costs is in its comment there.
  A team's own annotator's numbers are whole numbers within +-(2^31 - 1), finite floats.

Numbers typed by a person (a form field, a command-line flag) are read by ``parse`` first,
the same way everywhere: digits with ``_`` or ``,`` between groups, a decimal or scientific
notation (``1e6``), or an SI suffix (``1M`` = 10^6; k, M, G or B, T: the docs' kB =
1000), so that ``1e6`` is a budget of 1000000 on the page and on the command line alike.
"""

from __future__ import annotations

import math
import numbers
import re
from decimal import Decimal

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
# Decontamination: n-grams of up to 64 words (13 is the established size; past 64 an item
# shorter than n is the common case); a benchmark index of at most 2^31 - 1 items (int32
# postings) and 2^32 n-grams (about 150 GiB of arrays: past any set of benchmarks).
MAX_NGRAM = 64
MAX_DECON_ITEMS = 2**31 - 1
MAX_DECON_NGRAMS = 2**32


def check_int(name: str, value: object, low: int, high: int) -> int:
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
    name: str,
    value: object,
    low: float,
    high: float,
    *,
    low_open: bool = False,
    high_open: bool = False,
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


def seq_len(value: object) -> int:
    return check_int("seq_len", value, 1, MAX_SEQ_LEN)


def seed(value: object, name: str = "seed") -> int:
    return check_int(name, value, 0, MAX_SEED)


def workers(value: object) -> int:
    return check_int("workers", value, 1, MAX_WORKERS)


def size(name: str, value: object, low: int = 1) -> int:
    """A byte size (a memory budget, a shard size)."""
    return check_int(name, value, low, MAX_BYTES)


def tokens(name: str, value: object) -> int:
    """A token count (a budget, a stage's tokens)."""
    return check_int(name, value, 1, MAX_TOKENS)


def weight(name: str, value: object) -> float:
    return check_float(name, value, 0.0, MAX_WEIGHT, low_open=True)


def repetitions(value: object, name: str = "max_repetitions") -> float:
    """The most epochs a mixture may read of any pool."""
    return check_float(name, value, 0.0, MAX_REPETITIONS, low_open=True)


def val_fraction(value: object) -> float:
    """The share of a pool's documents held out for validation."""
    return check_float("val_fraction", value, 0.0, MAX_VAL_FRACTION)


MAX_VAL_FRACTION = 0.5

# Annotator parameters (shardcore.annotate): annotator -> parameter -> (low, high); a float
# range is open at low when a third item says so. Each bound is far past any use and keeps
# a unit's memory and time small beside the jobs around it.
ANNOTATOR_PARAMS: dict[str, dict[str, tuple]] = {
    "minhash": {
        # A signature is num_perm uint64 per document (8 KiB at 1024; 2^22 held 2.3 GB
        # for 79 documents); 128 is the usual size.
        "num_perm": (2, 1024),
        "bands": (1, 1024),
        "shingle": (1, MAX_NGRAM),  # words per shingle
        "threshold": (0.0, 1.0, "low_open"),
        # datasketch seeds numpy's legacy MT19937 with it: 32 bits.
        "seed": (0, 2**32 - 1),
        "memory_mb": (1, MAX_BYTES >> 20),  # a byte budget, in MiB
    },
    "lang_id": {"max_chars": (1, 1_000_000)},  # characters of a document read
    "topics": {
        # k-means: k centroids over ``sample`` vectors of the encoder's width (4 bytes each,
        # 256 wide for "static"): at most 1 GiB of sample and 4096 x 10^6 distances a step.
        "k": (1, 4096),
        "sample": (1, 1_000_000),
        "max_tokens": (1, 8192),  # tokens a document's head is encoded with
        "head_chars": (1, 1_000_000),
        "seed": (0, MAX_SEED),
        "top_terms": (0, 1000),
        "snippets": (0, 100),
        "snippet_chars": (0, 10_000),
    },
    "decon": {
        "ngram": (1, MAX_NGRAM),
        "min_words": (1, MAX_NGRAM),
        "threshold": (0.0, 1.0, "low_open"),
    },
}


def annotator_params(annotator: str, params: dict, defaults: dict) -> dict:
    """``params`` (an annotator's, its defaults' types) with every number checked against
    its bound in ANNOTATOR_PARAMS (a team's annotator's against +-MAX_COUNT, finite);
    an InputError names the annotator, the parameter and the range. Ints are whole
    numbers (``1e3`` is 1000), booleans stay booleans, text is not a number."""
    bounds = ANNOTATOR_PARAMS.get(annotator, {})
    out = dict(params)
    for key, value in params.items():
        default = defaults.get(key)
        if isinstance(default, bool) or not isinstance(default, numbers.Real):
            continue
        name = f"annotator {annotator!r} parameter {key}"
        bound = bounds.get(key)
        if isinstance(default, numbers.Integral):
            low, high = bound[:2] if bound else (-MAX_COUNT, MAX_COUNT)
            out[key] = check_int(name, value, low, high)
        else:
            low, high = bound[:2] if bound else (-float(MAX_COUNT), float(MAX_COUNT))
            open_low = bool(bound and bound[2:] == ("low_open",))
            out[key] = check_float(name, value, low, high, low_open=open_low)
    return out


# "1_000_000", "1,000,000", "2.5e9", "1M", "-1", "nan", "inf"; the suffixes are SI.
_TYPED = re.compile(
    r"^(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?|[+-]?(?:nan|inf|infinity))"
    r"\s*(?P<suffix>[kmgbt]?)$",
    re.IGNORECASE,
)
_SUFFIX = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "b": 10**9, "t": 10**12}


def parse(name: str, value: object) -> int | float:
    """A number as a person types it (``1000000``, ``1_000_000``, ``1,000,000``, ``1e6``,
    ``1M``, ``0.05``): an int when it is a whole number, else a float (so ``1e6`` is the
    integer 1000000 and ``1.5e0`` is 1.5, which an integer parameter then refuses). A
    number (not text) is returned as is. Else an InputError naming ``name``. No range is
    checked here: the parameter's own check (``tokens``, ``seq_len``, ...) does that."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return value  # type: ignore[return-value]
    text = str(value).strip()
    compact = text.replace("_", "")
    if re.fullmatch(r"[+-]?\d{1,3}(,\d{3})+(\.\d*)?", compact):
        compact = compact.replace(",", "")
    m = _TYPED.match(compact) if "__" not in text else None
    if m is None:
        raise InputError(
            f"{name}: {text!r} is not a number (write e.g. 1000000, 1_000_000, 1e6 or 1M)"
        )
    number, scale = m["number"].lower(), _SUFFIX[m["suffix"].lower()]
    if number.lstrip("+-") in ("nan", "inf", "infinity"):
        return float(number)
    try:
        exact = Decimal(number) * scale
    except ArithmeticError:  # an exponent past Decimal's: inf or 0.0
        return float(number) * scale
    # Past 10^30 no parameter is in range: a float (inf beyond ~1e308) says so without
    # spelling a number of a billion digits for "1e999999999".
    if exact.adjusted() <= 30 and exact == exact.to_integral_value():
        return int(exact)
    return float(exact)
