"""Item: ``hf:<path>`` tokenizers come only from the configured tokenizer roots
(``SHARDYARD_TOKENIZER_ROOTS``) and are loaded in a limited child process, never in the
web process. The attack: ``hf:<any server path>`` was loaded by the web process (an
existence oracle; ``/dev/zero`` read without limit)."""

from __future__ import annotations

import pytest

from shardcore.encoders import load_tokenizer
from tests.unit.test_tokenizers import _train_hf
from tests.unit.tokenize_fixtures import stdlib_records
from webapp.catalog.models import TokenizedSource, Tokenizer
from webapp.jobs.models import Job


@pytest.fixture
def tok_roots(tmp_path, settings):
    root = tmp_path / "tokenizers"
    root.mkdir()
    settings.TOKENIZER_ROOTS = [root]
    settings.DATA_ROOT = tmp_path / "data"
    return root


def _tokenize(c, source, spec):
    return c.post(f"/sources/{source.pk}/tokenize/", {"tokenizer": spec}, follow=True)


@pytest.mark.parametrize("spec", ["hf:/etc/passwd", "hf:/dev/zero", "hf:/nonexistent/x.json",
                                  "hf:/etc", "hf:relative/tok", "hf:/tmp/../etc/passwd"])  # fmt: skip
def test_it_refuses_tokenizers_outside_the_roots_without_saying_whether_they_exist(
    page, catalog, tok_roots, spec
):
    resp = _tokenize(page("editor"), catalog["source"], spec)
    text = resp.content.decode()
    assert "outside the tokenizer roots" in text or "absolute path without" in text
    assert "does not exist" not in text and "No such file" not in text
    assert not Tokenizer.objects.filter(spec=spec).exists()
    assert Job.objects.count() == 1  # the fixture's


def test_a_symlink_in_the_roots_to_dev_zero_is_refused(page, catalog, tok_roots):
    (tok_roots / "zero").mkdir()
    (tok_roots / "zero" / "tokenizer.json").symlink_to("/dev/zero")
    (tok_roots / "link.json").symlink_to("/dev/zero")
    for spec in (f"hf:{tok_roots / 'zero'}", f"hf:{tok_roots / 'link.json'}"):
        resp = _tokenize(page("editor"), catalog["source"], spec)
        text = resp.content.decode()
        assert "outside the tokenizer roots" in text or "no tokenizer.json" in text
        assert not Tokenizer.objects.filter(spec=spec).exists()


def test_a_tokenizer_in_the_roots_is_loaded_in_a_child_process(page, catalog, roots, tok_roots):
    d = _train_hf(tok_roots / "bpe", [r["text"] for r in stdlib_records(20)], 400)
    spec = f"hf:{d}"
    load_tokenizer.cache_clear()
    resp = _tokenize(page("editor"), catalog["source"], spec)
    assert resp.status_code == 200
    row = Tokenizer.objects.get(spec=spec)
    assert row.vocab_size > 256 and row.fingerprint
    ts = TokenizedSource.objects.get(tokenizer=row)
    assert ts.job_id is not None
    # The web process never loaded it (the catalog's facts came from the child).
    assert load_tokenizer.cache_info().currsize == 0


def test_the_tokenizer_field_cannot_name_a_path_through_the_command(catalog, tok_roots):
    from django.core.management import call_command
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="outside the tokenizer roots"):
        call_command("catalog", "tokenize", str(catalog["source"].pk), "--tokenizer",
                     "hf:/etc/passwd")  # fmt: skip
