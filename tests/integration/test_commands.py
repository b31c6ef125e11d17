"""``manage.py catalog``: operators script what the pages do; errors are one line."""

from __future__ import annotations

import json
import sysconfig
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from webapp.catalog.models import Flag, Source

STDLIB = Path(sysconfig.get_paths()["stdlib"])


def _call(*args) -> str:
    out = StringIO()
    call_command("catalog", *args, stdout=out)
    return out.getvalue()


def test_it_registers_a_source_and_flags_a_file(db, tmp_path, settings):
    settings.SOURCE_ROOTS = [tmp_path]
    docs = [{"text": p.read_text()} for p in sorted(STDLIB.glob("*.py"))[:3]]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))

    assert "3 documents" in _call("source-register", "std", str(tmp_path))
    source = Source.objects.get(name="std")
    assert "0 taint(s)" in _call("flag", str(source.pk), "PII", "--file", "a.jsonl")
    assert Flag.objects.get().target == "file"


def test_it_refuses_a_path_outside_the_roots_with_one_line(db, tmp_path, settings):
    settings.SOURCE_ROOTS = [tmp_path / "roots"]
    with pytest.raises(CommandError, match="outside the source roots"):
        _call("source-register", "etc", "/etc")
