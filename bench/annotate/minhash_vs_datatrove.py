"""MinHash signatures side by side on the same documents, one process, CPU time: the
``minhash`` annotator's signature step (``NearDuplicates.signatures``: normalization,
5-word shingles, datasketch MinHash with 128 permutations, exact hash), datatrove's
``MinhashDedupSignature`` (stage 1 of its MinHash pipeline; 5-grams, 16 buckets x 8
hashes = 128, writing its signature files; its spaCy word tokenizer replaced by a
whitespace split, since spaCy is not installed: that flatters datatrove), and the bare loop as the ceiling (shingles
and datasketch's update, nothing else).

    PYTHONPATH=$PWD python bench/annotate/minhash_vs_datatrove.py [--docs 3000]

(datatrove 0.10.1 is in requirements-dev.lock.)
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time


def cpu(fn) -> float:
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=3000)
    ap.add_argument("--extra-path", default=None)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    sys.path.insert(0, os.getcwd())
    if args.extra_path:
        sys.path.append(args.extra_path)
    import xxhash
    from datasketch import MinHash

    from bench.annotate.run import corpus
    from shardcore.annotate import create
    from shardcore.annotate.dedup import shingles

    texts = corpus(args.docs)
    print(
        f"{len(texts)} documents, {sum(map(len, texts)) / len(texts):.0f} chars mean; "
        f"{platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}"
    )
    ann = create("minhash")

    def ours():
        ann.signatures(texts)

    template = MinHash(128, seed=1, hashfunc=xxhash.xxh32_intdigest)

    def bare():
        for t in texts:
            m = MinHash(128, seed=1, hashfunc=xxhash.xxh32_intdigest,
                        permutations=template.permutations, scheme="affine32")  # fmt: skip
            m.update_batch(list(shingles(t, 5)))

    contenders = {"shardcore minhash signatures": ours, "bare datasketch loop": bare}
    try:
        import datatrove.pipeline.dedup.minhash as dt_minhash
        from datatrove.data import Document
        from datatrove.pipeline.dedup.minhash import MinhashConfig, MinhashDedupSignature
        from datatrove.utils.word_tokenizers import WordTokenizer

        class Whitespace(WordTokenizer):
            """Words split on whitespace: cheaper than datatrove's default spaCy tokenizer
            (not installed here), so datatrove's rate is, if anything, flattered."""

            def word_tokenize(self, text):
                return text.split()

            def sent_tokenize(self, text):
                return [text]

            def span_tokenize(self, text):
                return [(0, len(text))]

        dt_minhash.load_word_tokenizer = lambda language: Whitespace(language)
        # datatrove 0.10.1 hashes str with xxhash, which xxhash 4 refuses (3 encoded it
        # as UTF-8): give it the bytes, as xxhash 3 did
        import datatrove.utils.hashes.xxhash as dt_xxhash

        dt_xxhash.xxhash64 = lambda d: xxhash.xxh64_intdigest(
            d.encode() if isinstance(d, str) else d
        )
        dt_xxhash.xxhash32 = lambda d: xxhash.xxh32_intdigest(
            d.encode() if isinstance(d, str) else d
        )

        def datatrove():
            with tempfile.TemporaryDirectory(prefix="sy-annotate-dt-") as out:
                cfg = MinhashConfig(n_grams=5, num_buckets=16, hashes_per_bucket=8)
                step = MinhashDedupSignature(output_folder=out, config=cfg)
                docs = (Document(text=t, id=str(i)) for i, t in enumerate(texts))
                step.run(docs)  # consumes the documents, writes the signature files

        contenders["datatrove MinhashDedupSignature"] = datatrove
    except ImportError as exc:
        print(f"datatrove: {exc}", file=sys.stderr)
    rates = {}
    for name, fn in contenders.items():
        best = min(cpu(fn) for _ in range(args.repeat))
        rates[name] = len(texts) / best
        print(f"{name:<36} {rates[name]:>10,.0f} docs per CPU-second", flush=True)
    if "datatrove MinhashDedupSignature" in rates:
        r = rates["shardcore minhash signatures"] / rates["datatrove MinhashDedupSignature"]
        print(f"shardcore / datatrove: {r:.2f}x; / bare loop: "
              f"{rates['shardcore minhash signatures'] / rates['bare datasketch loop']:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
