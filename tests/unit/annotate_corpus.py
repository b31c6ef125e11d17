"""Real text of known language, offline: the translated messages of the gettext catalogs
installed under /usr/share/locale (each catalog's directory names its language), joined
into documents of at least ``min_chars`` characters. Used by the language-id test and
bench/annotate."""

from __future__ import annotations

import gettext
import re
from pathlib import Path

LOCALE = Path("/usr/share/locale")
# catalog directory -> ISO 639-1 code; one non-Latin script at least (ru, uk, el, ar, he,
# hi, ja, ko, zh).
LANGUAGES = {
    "de": "de", "fr": "fr", "es": "es", "it": "it", "pt_BR": "pt", "nl": "nl", "pl": "pl",
    "sv": "sv", "cs": "cs", "tr": "tr", "fi": "fi", "hu": "hu", "vi": "vi", "ru": "ru",
    "uk": "uk", "el": "el", "ar": "ar", "he": "he", "hi": "hi", "ja": "ja", "ko": "ko",
    "zh_CN": "zh",
}  # fmt: skip
_PLACEHOLDER = re.compile(r"%[-+ #0-9.]*[a-zA-Z]|\{[^}]*\}|<[^>]*>|&\w+;|\\[nt]|_")


def _messages(mo: Path) -> list[str]:
    try:
        with mo.open("rb") as f:
            catalog = gettext.GNUTranslations(f)._catalog
    except (OSError, UnicodeDecodeError, ValueError, IndexError, SyntaxError):  # malformed
        return []
    out = []
    for k, v in catalog.items():
        msgid = k[0] if isinstance(k, tuple) else k
        if not msgid or not isinstance(v, str) or v == msgid:  # header or untranslated
            continue
        text = " ".join(_PLACEHOLDER.sub(" ", v).split())
        if len(text) >= 20 and sum(c.isalpha() for c in text) > len(text) / 2:
            out.append(text)
    return out


def documents(per_language: int = 30, min_chars: int = 200) -> list[tuple[str, str]]:
    """[(language, text)]: up to ``per_language`` documents per language of LANGUAGES,
    each at least ``min_chars`` characters of consecutive messages of one catalog."""
    docs: list[tuple[str, str]] = []
    for directory, lang in LANGUAGES.items():
        mine: list[str] = []
        for mo in sorted((LOCALE / directory / "LC_MESSAGES").glob("*.mo")):
            buf: list[str] = []
            for msg in _messages(mo):
                buf.append(msg)
                if sum(map(len, buf)) >= min_chars:
                    mine.append(" ".join(buf))
                    buf = []
                    if len(mine) == per_language:
                        break
            if len(mine) == per_language:
                break
        docs += [(lang, t) for t in mine]
    return docs
