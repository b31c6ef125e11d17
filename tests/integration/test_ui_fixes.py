"""What a newcomer read wrong, checked where a page or the README cannot show it in a
browser: the pool form's default sequence length before any pool exists, and the trainers
page's word that the PyTorch loop needs torch, which ``make run`` does not install. The rest is
driven in Chromium by tests/browser/test_journey_fixes.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.docs import page

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.django_db
def test_the_pool_form_defaults_to_the_demo_sequence_length_then_the_common_one():
    from webapp.catalog.models import Pool
    from webapp.dashboard.forms import PoolBuildForm

    assert PoolBuildForm().fields["seq_len"].initial == 512  # a fresh install: the demo's
    for name, seq_len in (("a", 2048), ("b", 1024), ("c", 1024)):
        Pool.objects.create(name=name, seq_len=seq_len, path=f"/x/{name}")
    assert PoolBuildForm().fields["seq_len"].initial == 1024


def test_the_readme_says_the_pytorch_loop_needs_torch_which_make_run_does_not_install():
    readme = page("trainers.md")
    section = readme.split("**A plain PyTorch loop**", 1)[1].split("```python", 1)[0]
    assert "`make run` does not install" in section
    pin = re.search(r"pip install torch==([\d.]+)", section)
    assert pin, section
    # True of the lock files: the runtime lock has no torch, the Makefile pins this one.
    assert not re.search(r"^torch==", (ROOT / "requirements.lock").read_text(), flags=re.M)
    assert f"pip install -q torch=={pin.group(1)}" in (ROOT / "Makefile").read_text()


@pytest.mark.django_db
def test_a_pool_recorded_before_per_label_verdicts_keeps_its_report_when_its_files_are_gone(
    tmp_path,
):
    """A pool built before its build recorded each label's verdict is measured again on
    its page; when its files cannot be read, its recorded report still shows."""
    from webapp.catalog.models import Pool
    from webapp.catalog.selectors.pools import pool_quality

    recorded = {"verdict": {"ok": True, "text": "within 1.00x of a perfect shuffle"}}
    pool = Pool.objects.create(
        name="old", seq_len=512, path=str(tmp_path / "gone"), params={"quality": recorded}
    )
    assert pool_quality(pool=pool) == recorded
