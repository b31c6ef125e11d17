"""Every reader and exporter refuses an artifact of another kind with one error, a
WrongKindError naming the artifact, the kind its manifest says and the kinds expected."""

import json

import numpy as np
import pytest

from shardcore import flagged_reads, locate
from shardcore import manifest as mf
from shardcore.annotate import artifact as annotation
from shardcore.annotate import neardup
from shardcore.annotate.join import load as load_annotation
from shardcore.decon import index as decon
from shardcore.errors import InputError, ManifestError, WrongKindError
from shardcore.export import export, megatron_data_args
from shardcore.export import nanotron as export_nanotron
from shardcore.export import olmo as export_olmo
from shardcore.export.megatron.stream import SampleSource
from shardcore.loader.samples import Samples
from shardcore.mixture.reader import Mixture
from shardcore.pool.plan import _load_tokenized
from shardcore.pool.reader import PoolReader
from shardcore.tokenized import TokenizedSource, read_documents

FOUND = "notes"


@pytest.fixture
def stranger(tmp_path):
    """A finished artifact of a kind no reader takes."""
    path = tmp_path / "stranger"
    mf.write_manifest(path, {"kind": FOUND, "fingerprint": "0" * 32, "files": []})
    return path


READERS = {
    "tokenized source": (TokenizedSource, ("tokenized",)),
    "tokenized documents": (read_documents, ("tokenized",)),
    "pool tokenized input": (lambda p: _load_tokenized(str(p)), ("tokenized",)),
    "pool": (PoolReader, ("pool",)),
    "pool ranged": (lambda p: PoolReader(p, ranged=True), ("pool",)),
    "flagged records": (lambda p: flagged_reads.flagged_records(p, np.arange(1)), ("pool",)),
    "mixture": (Mixture, ("mixture",)),
    "samples": (Samples, ("pool", "materialized", "mixture")),
    "megatron samples": (
        lambda p: SampleSource(p, mf.read_manifest(p)),
        ("mixture", "materialized"),
    ),
    "locate": (lambda p: locate.locate_any(p, sample=0), ("pool", "materialized", "mixture")),
    "locate mixture": (lambda p: locate.locate_mixture(p, sample=0), ("mixture",)),
    "annotation": (lambda p: list(annotation.annotation_shards(p)), ("annotation",)),
    "annotation join": (lambda p: load_annotation(str(p)), ("annotation",)),
    "near-duplicate group": (neardup.annotation_paths, (neardup.KIND,)),
    "json export": (lambda p: export(p, "json"), ("mixture",)),
    "megatron export": (megatron_data_args, ("mixture", "materialized")),
    "nanotron export": (export_nanotron.nanotron_config, ("mixture",)),
    "nanotron pool view": (lambda p: export_nanotron.pool_view(p, p.parent / "v"), ("pool",)),
    "olmo export": (
        lambda p: export_olmo._exact_source(str(p), None),
        ("pool", "materialized", "mixture"),
    ),
}


@pytest.mark.parametrize("name", sorted(READERS))
def test_it_refuses_an_artifact_of_another_kind_naming_path_and_kinds(stranger, name):
    read, expected = READERS[name]
    with pytest.raises(WrongKindError) as err:
        read(stranger)
    message = str(err.value)
    assert str(stranger) in message
    assert f"its manifest's kind is {FOUND!r}" in message
    assert all(repr(kind) in message for kind in expected), message
    assert err.value.found == FOUND and err.value.expected == expected


def test_the_error_is_both_a_manifest_error_and_an_input_error(stranger):
    # Callers that turned either of the two old errors into a message still catch it.
    with pytest.raises(ManifestError):
        mf.read_manifest(stranger, kind="pool")
    with pytest.raises(InputError):
        mf.read_manifest(stranger, kind=("pool", "mixture"))
    assert mf.read_manifest(stranger, kind=FOUND)["kind"] == FOUND


def test_it_says_when_a_manifest_has_no_kind(tmp_path):
    mf.write_manifest(tmp_path / "a", {"fingerprint": "0" * 32})
    with pytest.raises(WrongKindError, match="its manifest has no kind, expected 'pool'"):
        mf.read_manifest(tmp_path / "a", kind="pool")


def test_it_says_what_was_expected_in_words(stranger):
    with pytest.raises(WrongKindError) as err:
        mf.read_manifest(stranger, kind=("pool", "materialized", "mixture"))
    assert str(err.value) == (
        f"{stranger}: is not a pool, materialized or mixture: its manifest's kind is "
        f"{FOUND!r}, expected 'pool' or 'materialized' or 'mixture'"
    )


def test_a_benchmark_index_of_another_kind_is_refused(tmp_path):
    (tmp_path / decon.HEADER).write_text(json.dumps({"kind": FOUND, "format": decon.FORMAT}))
    with pytest.raises(WrongKindError, match=f"{decon.KIND!r}") as err:
        decon.load_index(tmp_path)
    assert str(tmp_path) in str(err.value)
