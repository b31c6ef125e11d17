"""lm-evaluation-harness's decontamination janitor on the benchmark's plants, run by
``bench/decon/run.py`` in a separate environment that has ``lm_eval`` (its CPU torch pinned
first, so pip does not fetch another):

    python3.11 -m venv /tmp/lm-venv && /tmp/lm-venv/bin/pip install torch==2.13.0 \\
        && /tmp/lm-venv/bin/pip install lm_eval

``lm_eval.decontamination.janitor.Janitor`` with its defaults (13-grams; ASCII letters
lowered and ``string.punctuation`` deleted, words split on whitespace). Each item is
registered as a contaminant; each document is cleaned. The wheel ships no compiled
``janitor_util``, so the janitor runs its Python path: ``register_contaminant_python`` and
``clean_python``, which its ``register_contaminant`` and ``clean`` call in that mode (called
directly here, so their per-call warning print is not timed). A document is contaminated
when cleaning changes it: ``clean_python`` returns the document whole only when none of its
n-grams is registered (and it is longer than ``minimum_slice_length``, 200 characters).

Reads ``--items`` and ``--docs`` (JSON lines with ``text``); writes ``--out``: per document
whether it was flagged, and the CPU seconds of registering the items and of cleaning."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import time
from pathlib import Path

with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    from lm_eval.decontamination import janitor


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", required=True)
    ap.add_argument("--docs", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    items = [json.loads(line)["text"] for line in open(args.items)]
    docs = [json.loads(line)["text"] for line in open(args.docs)]
    jan = janitor.Janitor()
    t0 = time.process_time()
    for text in items:
        jan.register_contaminant_python(text)
    build = time.process_time() - t0
    t0 = time.process_time()
    flagged = [jan.clean_python(text) != [text] for text in docs]
    cleaning = time.process_time() - t0
    Path(args.out).write_text(
        json.dumps(
            {
                "flagged": flagged,
                "build_cpu": build,
                "filter_cpu": cleaning,
                "ngrams": len(jan.dirt_ngrams),
                "cpp": janitor.JANITOR_CPP,
                "short_docs": sum(len(t) <= jan.minimum_slice_length for t in docs),
            }
        )
    )


if __name__ == "__main__":
    main()
