"""Quality signals: the measurements behind the Gopher (Rae et al. 2021, appendix A) and
C4 (Raffel et al. 2020) heuristic filters, as numbers per document, so that a filter
states the rule (``quality.n_words >= 50 and quality.symbol_word_ratio < 0.1``) instead
of the annotator deciding it.

Words are whitespace-separated tokens; lines split on ``\\n``; paragraphs on blank
lines. The duplicate fractions count every occurrence after the first of a repeated
line/paragraph (Gopher's ``dup_line_frac``/``dup_para_frac``, and the same by
characters). ``top_{n}gram_char_frac``: characters of the most frequent word n-gram
(counted once per occurrence) over all word characters; ``dup_{n}gram_char_frac``:
characters of words covered by any n-gram occurring more than once, over all word
characters (n = 5..10, Gopher's thresholds 0.15 .. 0.10).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, ClassVar

import pyarrow as pa

from shardcore.annotate import Annotator

# Gopher's stop-word rule: a document must contain at least two of these.
STOP_WORDS = frozenset(("the", "be", "to", "of", "and", "that", "have", "with"))
BULLETS = ("•", "●", "○", "▪", "■", "□", "-", "*", "‣", "⁃", "◦")
ELLIPSES = ("...", "…")
END_PUNCT = (".", "!", "?", '"', "'", "”", "’", "。", "！", "？")
_F32, _I32 = pa.float32(), pa.int32()

FIELDS = [
    ("n_chars", _I32),
    ("n_words", _I32),
    ("n_lines", _I32),
    ("mean_word_length", _F32),
    ("symbol_word_ratio", _F32),
    ("bullet_lines_frac", _F32),
    ("ellipsis_lines_frac", _F32),
    ("lines_end_punct_frac", _F32),
    ("dup_line_frac", _F32),
    ("dup_line_char_frac", _F32),
    ("dup_para_frac", _F32),
    ("dup_para_char_frac", _F32),
    ("top_2gram_char_frac", _F32),
    ("top_3gram_char_frac", _F32),
    ("top_4gram_char_frac", _F32),
    *[(f"dup_{n}gram_char_frac", _F32) for n in range(5, 11)],
    ("stop_words", _I32),
    ("alpha_word_frac", _F32),
    ("javascript_lines_frac", _F32),
    ("has_lorem_ipsum", pa.bool_()),
    ("has_curly_bracket", pa.bool_()),
]


def _frac(a: float, b: float) -> float:
    return a / b if b else 0.0


def _dup_fracs(items: list[str]) -> tuple[float, float]:
    """(fraction of items that repeat an earlier one, the same by characters)."""
    seen: set[str] = set()
    dup = dup_chars = total_chars = 0
    for it in items:
        total_chars += len(it)
        if it in seen:
            dup += 1
            dup_chars += len(it)
        else:
            seen.add(it)
    return _frac(dup, len(items)), _frac(dup_chars, total_chars)


def _top_ngram_frac(words: list[str], n: int, word_chars: int) -> float:
    if len(words) < n:
        return 0.0
    counts = Counter(tuple(words[i : i + n]) for i in range(len(words) - n + 1))
    gram, count = counts.most_common(1)[0]
    if count < 2:
        return 0.0
    return _frac(sum(map(len, gram)) * count, word_chars)


def _dup_ngram_frac(words: list[str], n: int, word_chars: int) -> float:
    if len(words) < n:
        return 0.0
    grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    counts = Counter(grams)
    covered = bytearray(len(words))
    for i, g in enumerate(grams):
        if counts[g] > 1:
            covered[i : i + n] = b"\x01" * n
    return _frac(sum(len(w) for w, c in zip(words, covered, strict=True) if c), word_chars)


def signals(text: str) -> dict[str, Any]:
    """Every field of ``FIELDS`` for one text."""
    words = text.split()
    n_words = len(words)
    word_chars = sum(map(len, words))
    lines = text.split("\n")
    stripped = [ln.strip() for ln in lines]
    nonempty = [ln for ln in stripped if ln]
    paras = [p.strip() for p in text.split("\n\n") if p.strip()]
    lower = [w.lower() for w in words]
    dup_line, dup_line_chars = _dup_fracs(nonempty)
    dup_para, dup_para_chars = _dup_fracs(paras)
    out: dict[str, Any] = {
        "n_chars": len(text),
        "n_words": n_words,
        "n_lines": len(nonempty),
        "mean_word_length": _frac(word_chars, n_words),
        "symbol_word_ratio": _frac(text.count("#") + text.count("...") + text.count("…"), n_words),
        "bullet_lines_frac": _frac(sum(ln.startswith(BULLETS) for ln in nonempty), len(nonempty)),
        "ellipsis_lines_frac": _frac(sum(ln.endswith(ELLIPSES) for ln in nonempty), len(nonempty)),
        "lines_end_punct_frac": _frac(
            sum(ln.endswith(END_PUNCT) for ln in nonempty), len(nonempty)
        ),
        "dup_line_frac": dup_line,
        "dup_line_char_frac": dup_line_chars,
        "dup_para_frac": dup_para,
        "dup_para_char_frac": dup_para_chars,
        "stop_words": sum(w.strip(".,;:!?\"'()") in STOP_WORDS for w in lower),
        "alpha_word_frac": _frac(sum(any(c.isalpha() for c in w) for w in words), n_words),
        "javascript_lines_frac": _frac(
            sum("javascript" in ln.lower() for ln in nonempty), len(nonempty)
        ),
        "has_lorem_ipsum": "lorem ipsum" in text.lower(),
        "has_curly_bracket": "{" in text,
    }
    for n in (2, 3, 4):
        out[f"top_{n}gram_char_frac"] = _top_ngram_frac(lower, n, word_chars)
    for n in range(5, 11):
        out[f"dup_{n}gram_char_frac"] = _dup_ngram_frac(lower, n, word_chars)
    return out


class QualitySignals(Annotator):
    name: ClassVar[str] = "quality"
    version: ClassVar[str] = "1"
    defaults: ClassVar[dict[str, Any]] = {}

    def fields(self) -> list[pa.Field]:
        return [pa.field(n, t) for n, t in FIELDS]

    def annotate(self, texts: list[str]) -> dict[str, Any]:
        rows = [signals(t) for t in texts]
        return {n: [r[n] for r in rows] for n, _ in FIELDS}
