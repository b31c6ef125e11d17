"""Packing documents into records of seq_len + 1 tokens round-trips to the token stream."""

from __future__ import annotations

import numpy as np
import pytest

from shardcore import pack
from tests.unit import pool_fixtures as pf


def _stream(n_docs: int) -> tuple[np.ndarray, np.ndarray]:
    docs = [ids for _, ids in pf.corpus("prose", 400)[:n_docs]]
    return np.concatenate(docs), np.array([d.size for d in docs])


@pytest.mark.parametrize("seq_len", [1, 7, 64, 2047])
@pytest.mark.parametrize("n_docs", [1, 13, 400])
def test_it_round_trips_packed_records_to_the_original_token_stream(seq_len, n_docs):
    tokens, lengths = _stream(n_docs)
    packing = pack.plan_packing(lengths, seq_len)
    records = pack.pad_stream(tokens, packing, pad_id=-1).reshape(-1, seq_len + 1)
    assert records.shape == (packing.num_records, seq_len + 1)
    assert 0 <= packing.padding < seq_len + 1
    assert np.array_equal(pack.unpack(records, packing.segments), tokens)


@pytest.mark.parametrize("seq_len", [5, 100])
def test_it_describes_each_segment_by_its_document_and_offset(seq_len):
    tokens, lengths = _stream(50)
    starts = np.concatenate([[0], np.cumsum(lengths[:-1])])
    packing = pack.plan_packing(lengths, seq_len)
    seg = packing.segments
    records = pack.pad_stream(tokens, packing, pad_id=-1).reshape(-1, seq_len + 1)
    for r in range(packing.num_records):
        parts = seg.of_record(r)
        assert parts["start"][0] == 0
        assert int(parts["length"].sum()) == seq_len + 1
        for start, length, doc, offset in zip(*parts.values(), strict=True):
            got = records[r, start : start + length]
            if doc < 0:
                assert (got == -1).all()
            else:
                want = tokens[starts[doc] + offset : starts[doc] + offset + length]
                assert np.array_equal(got, want)


def test_it_names_the_document_contributing_most_tokens_to_each_record():
    lengths = np.array([3, 10, 1, 4])
    packing = pack.plan_packing(
        lengths, 4
    )  # records of 5: [0 0 0 1 1][1 ...][1 1 1 2 3][3 3 3 pad pad]
    assert packing.segments.main_document().tolist() == [0, 1, 1, 3]
    assert packing.padding == 2


def test_it_packs_nothing_into_no_records():
    packing = pack.plan_packing(np.zeros(0, dtype=np.int64), 8)
    assert packing.num_records == 0 and packing.padding == 0


def test_it_rejects_a_sequence_length_below_one():
    with pytest.raises(ValueError, match="seq_len must be >= 1"):
        pack.plan_packing(np.array([3]), 0)


def test_it_builds_gather_indices_for_ranges():
    assert pack.ranges(np.array([5, 0, 9]), np.array([2, 0, 3])).tolist() == [5, 6, 9, 10, 11]
