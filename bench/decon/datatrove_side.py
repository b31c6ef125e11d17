"""datatrove's n-gram decontamination on the benchmark's plants, run by ``bench/decon/run.py``
in a separate environment that has datatrove with its own dependencies (spaCy's English word
tokenizer, xxhash 3):

    python3.11 -m venv /tmp/dt-venv && /tmp/dt-venv/bin/pip install datatrove regex spacy "xxhash<4"

The index is built as datatrove's ``NGramsDecontIndexer.compute_hashes`` builds it for an
item given as its label (``simplify_text``, the word tokenizer, ``ngrams``, the 64-bit
xxhash of each n-gram joined by spaces; the indexer's ``run`` itself needs lighteval's task
registry, which a user's own benchmark file does not come from), written as its
``<task>.index.hashes`` file; then ``NGramsDecontFilter.filter`` runs on each document as
its pipeline would. A document is contaminated when any of its n-grams is in the index.

Reads ``--items`` and ``--docs`` (JSON lines with ``text``); writes ``--out``: per document
whether it was flagged, and the CPU seconds of building the index and of filtering."""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
from datatrove.data import Document
from datatrove.pipeline.decont.n_grams import NGramsDecontConfig, NGramsDecontFilter
from datatrove.utils.hashing import create_hash_func
from datatrove.utils.text import ngrams, simplify_text
from datatrove.utils.word_tokenizers import load_word_tokenizer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", required=True)
    ap.add_argument("--docs", required=True)
    ap.add_argument("--ngram", type=int, default=13)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    items = [json.loads(line)["text"] for line in open(args.items)]
    docs = [json.loads(line)["text"] for line in open(args.docs)]
    config = NGramsDecontConfig(n_grams=args.ngram, find_query_ngrams=False)
    tokenizer = load_word_tokenizer("en")
    hash_func = create_hash_func(config.hash_config)
    t0 = time.process_time()
    hashes: set[int] = set()
    for label in items:
        words = tokenizer.word_tokenize(simplify_text(label, config.norm_config))
        hashes.update(hash_func(" ".join(g)) for g in ngrams(words, config.n_grams))
    build = time.process_time() - t0
    with tempfile.TemporaryDirectory() as tmp:
        arr = np.array(sorted(hashes), dtype=config.hash_config.np_descr)
        arr.tofile(Path(tmp) / "bench.index.hashes")
        step = NGramsDecontFilter(tmp, config=config)
        step.load_index_hashes()
        t0 = time.process_time()
        flagged = []
        for i, text in enumerate(docs):
            verdict = step.filter(Document(text=text, id=str(i)))
            flagged.append(verdict is not True)
        filtering = time.process_time() - t0
    Path(args.out).write_text(
        json.dumps(
            {"flagged": flagged, "build_cpu": build, "filter_cpu": filtering, "ngrams": len(hashes)}
        )
    )


if __name__ == "__main__":
    main()
