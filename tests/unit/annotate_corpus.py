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


# Topic labels: the standard-library package a module belongs to (the Debian layout keeps
# no tests inside these packages).
PACKAGES = (
    "asyncio", "email", "xml", "multiprocessing", "importlib", "lib2to3", "distutils",
    "encodings", "unittest",
)  # fmt: skip


def stdlib_package_documents(
    per_package: int = 60, chars: int = 1500, packages: tuple[str, ...] = PACKAGES
) -> list[tuple[str, str]]:
    """[(package, text)]: the first three ``chars``-character pieces of each module of
    each stdlib package in ``packages`` (sorted by path), up to ``per_package`` per
    package; pieces shorter than 300 characters are skipped."""
    import sysconfig

    root = Path(sysconfig.get_paths()["stdlib"])
    docs: list[tuple[str, str]] = []
    for pkg in packages:
        mine: list[str] = []
        for path in sorted((root / pkg).rglob("*.py")):
            if "test" in path.relative_to(root).parts[1:-1]:
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            pieces = [text[i : i + chars] for i in range(0, len(text), chars)]
            mine += [t for t in pieces if len(t) >= 300][:3]
            if len(mine) >= per_package:
                break
        docs += [(pkg, t) for t in mine[:per_package]]
    return docs
