"""Language id on real text of known language (translated gettext catalogs of the
installed Debian packages, 22 languages, 8 in non-Latin scripts): accuracy per language."""

from __future__ import annotations

from collections import defaultdict

from shardcore.annotate import create
from tests.unit.annotate_corpus import documents


def test_it_names_the_language_of_real_text_in_22_languages():
    docs = documents(per_language=12, min_chars=100)
    assert len({lang for lang, _ in docs}) >= 20
    assert all(len(t) >= 100 for _, t in docs)
    out = create("lang_id").annotate([t for _, t in docs])
    per = defaultdict(lambda: [0, 0])
    for (lang, _), got, score in zip(docs, out["lang"], out["score"], strict=True):
        per[lang][0] += got == lang
        per[lang][1] += 1
        assert 0.0 < score <= 1.0
    accuracy = {lang: ok / n for lang, (ok, n) in per.items()}
    assert min(accuracy.values()) >= 0.9, accuracy
    assert sum(ok for ok, _ in per.values()) / len(docs) >= 0.97
