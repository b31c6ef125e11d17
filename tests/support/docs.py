"""The documentation the tests read facts from: README.md (the front door) and the pages
under docs/ (the topics, and the references docs/gen.py writes)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def doc_pages() -> list[Path]:
    """README.md, then every page of docs/ in name order."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def docs_text() -> str:
    """Every page, one after the other (a fact the tests look for may be on any of them)."""
    return "\n\n".join(path.read_text() for path in doc_pages())


def page(name: str) -> str:
    """One page of docs/ by its path there (``"object-storage.md"``)."""
    return (DOCS / name).read_text()
