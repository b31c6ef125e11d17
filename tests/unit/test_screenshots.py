"""The README's pictures come from the browser journeys: each one the README shows exists
and is taken by a journey (``screenshot("name")``), and no picture in the folder is left
over from a journey that no longer takes it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "tests" / "browser" / "screenshots"


def taken_by_journeys() -> set[str]:
    names = set()
    for path in (ROOT / "tests" / "browser").glob("test_journey_*.py"):
        names |= set(re.findall(r'screenshot\("([\w-]+)"\)', path.read_text()))
    return names


def test_it_shows_in_the_readme_only_pictures_the_journeys_take():
    shown = re.findall(r"tests/browser/screenshots/([\w-]+)\.png", (ROOT / "README.md").read_text())
    assert shown, "the README shows no screenshot"
    taken = taken_by_journeys()
    assert not set(shown) - taken, sorted(set(shown) - taken)
    missing = [n for n in shown if not (FOLDER / f"{n}.png").is_file()]
    assert not missing, missing


def test_it_keeps_no_picture_that_no_journey_takes():
    stale = {p.stem for p in FOLDER.glob("*.png")} - taken_by_journeys()
    assert not stale, sorted(stale)
