"""A mixture's quality reads only the samples it measures, labelled by integer codes, and
measures the same numbers as labelling every sample of the schedule by its text did."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shardcore import quality
from shardcore.cli import main
from shardcore.mixture import Mixture
from tests.unit import mix_fixtures

SEQ = 32


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    root = tmp_path_factory.mktemp("quality-codes")
    return mix_fixtures.staged_mixture(
        root, root / "mix", seq_len=SEQ, shard_size=4096, tokens=SEQ * 3000,
        anneal_tokens=SEQ * 600, seed=5,
    )  # fmt: skip


def _by_text(path, by: str, *, max_samples: int) -> dict:
    """The previous computation: every sample of the schedule labelled by its text
    (``Mixture.labels``), each stage's first ``max_samples`` measured."""
    mix = Mixture(path)
    labels = mix.labels(by)
    out = {"stages": []}
    for i, st in enumerate(mix.manifest["stages"]):
        first, n = int(st["first_sample"]), int(st["num_samples"])
        seg = labels[first : first + min(n, max_samples)]
        if np.unique(seg).size == 1:
            out["stages"].append({"name": st["name"], "value": str(np.unique(seg)[0])})
            continue
        rep = quality.report(seg, batch_size=min(256, seg.size))
        rep["batches"].pop("per_batch", None)
        sizes = rep["windows"]["window_sizes"]
        ref = quality.sample_shuffle_reference(seg, sizes, trials=4, seed=i)
        verdict = quality.verdict(sizes, rep["windows"]["max_all"], ref["mean"])
        out["stages"].append({"name": st["name"], "verdict": verdict,
                              "labels": quality.label_verdicts(rep["windows"], ref)})  # fmt: skip
        if i == 0:
            out.update(rep, reference=ref)
    return out


@pytest.mark.parametrize("by", ["pool", "stage", "package", "kind"])
@pytest.mark.parametrize("max_samples", [1 << 16, 700])
def test_the_same_numbers_as_labelling_every_sample_by_its_text(staged, by, max_samples):
    got = quality.mixture_quality(str(staged), by=by, max_samples=max_samples)
    want = _by_text(staged, by, max_samples=max_samples)
    for part in ("windows", "batches", "composition", "reference"):
        assert got.get(part) == want.get(part), part
    for g, w in zip(got["stages"], want["stages"], strict=True):
        assert g["name"] == w["name"]
        if "value" in w:  # one value only: nothing to mix
            assert g["verdict"]["value"] == w["value"]
        else:
            assert g["verdict"] == w["verdict"] and g["labels"] == w["labels"]
    first = Mixture(staged).manifest["stages"][0]
    assert got["stages"][0]["measured"] == min(max_samples, int(first["num_samples"]))


def test_only_the_measured_range_is_labelled_as_integer_codes(staged):
    mix = Mixture(staged)
    start, stop = 1000, 1700  # across no boundary: the first stage's middle
    coded = quality.mixture_labels(mix, "package", start, stop)
    assert coded.codes.dtype == np.int32 and coded.codes.shape == (stop - start,)
    text = mix.labels("package")[start:stop]
    assert [coded.names[c] for c in coded.codes.tolist()] == [str(x) for x in text.tolist()]
    # Codes numbered in the labels' own sort order: measuring them is measuring the text.
    assert quality.window_deviation(coded) == quality.window_deviation(text)
    # A range across the stage boundary labels each sample by its stage.
    first_anneal = int(mix.manifest["stages"][1]["first_sample"])
    stages = quality.mixture_labels(mix, "stage", first_anneal - 3, first_anneal + 2)
    assert [stages.names[c] for c in stages.codes.tolist()] == ["main"] * 3 + ["anneal"] * 2


def test_the_command_measures_the_first_samples_and_says_so(staged, capsys):
    mix = Mixture(staged)
    # Below --max-samples: the whole schedule, the numbers the command printed before.
    assert main(["quality", str(staged), "--by", "pool", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got == json.loads(json.dumps(quality.report(mix.labels("pool"), batch_size=1024)))
    # Above it: the first samples only, and the text says of how many.
    assert main(["quality", str(staged), "--by", "package", "--max-samples", "512"]) == 0
    out = capsys.readouterr().out
    assert f"512 samples (the first of {mix.num_samples:,})" in out
    expected = quality.report(mix.labels("package")[:512], batch_size=512)
    first_row = out.splitlines()[2].split()
    assert float(first_row[1]) == pytest.approx(expected["windows"]["max_all"][0], abs=1e-5)
    assert main(["quality", str(staged), "--by", "pool", "--max-samples", "4"]) == 2
    assert "--max-samples: need at least 8 samples, got 4" in capsys.readouterr().err
