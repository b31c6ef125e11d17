"""The whole pipeline with every artifact on S3 (moto's server, reached over HTTP):
tokenize -> pool -> mix -> materialize -> verify -> stream with resume gives the artifacts,
fingerprints and samples of the same run on local disk; a run killed in the middle of an
upload leaves nothing that reads as complete, and its rerun loses and duplicates nothing."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from shardcore import manifest as mf
from shardcore import storage, units
from shardcore.errors import ManifestError
from shardcore.loader import Samples
from shardcore.materialize import materialize, plan_materialize
from shardcore.mixture import MixtureSpec, build_mixture
from shardcore.pool import build_pool
from shardcore.storage import artifact_cache
from shardcore.tokenize import tokenize
from shardcore.verify import verify
from tests.support.s3 import apply_env
from tests.unit.tokenize_fixtures import stdlib_records, write_jsonl, write_parquet

SEQ = 63
SPEC = {
    "tokens": SEQ * 257,
    "seed": 3,
    "components": [{"pool": "pools/all", "weight": 2}, {"pool": "pools/public", "weight": 1}],
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    recs = stdlib_records(60)
    return [
        str(write_jsonl(root / "a.jsonl", recs[:30])),
        str(write_jsonl(root / "b.jsonl.zst", recs[30:45], "zstd")),
        str(write_parquet(root / "c.parquet", recs[45:])),
    ]


def _pipeline(root: str, corpus: list[str]) -> dict[str, dict]:
    """Every stage with its output under ``root`` (a directory or an s3:// prefix), with
    two worker processes where a stage has units.

    The validation slice is drawn by a hash salted with the tokenized source's fingerprint,
    which names the corpus files by path and modification time: it differs in every run.
    With 60 documents a 5% slice is empty in 1 run in 22 (then no pool has a ``val/``);
    a 30% slice is empty in 1 run in 2e9."""
    at = lambda rel: storage.join(root, rel)  # noqa: E731
    out = {"tok": tokenize(corpus, at("tok"), workers=2, shard_size=60_000, unit_bytes=40_000)}
    for name, filt in (("all", None), ("public", "meta.private = false")):
        out[name] = build_pool(
            [at("tok")],
            at(f"pools/{name}"),
            seq_len=SEQ,
            filter=filt,
            memory=1 << 20,
            shard_size=16_000,
            val_fraction=0.3,
            workers=2,
        )
    out["mix"] = build_mixture(MixtureSpec.from_dict(SPEC, base_dir=root), at("mix"))
    out["flat"] = materialize(at("mix"), at("flat"), workers=2, shard_bytes=8_000)
    return out


def _stream(path, *, world_size, rank, state=None, steps=None, **cache):
    from shardcore.loader import ShardyardIterableDataset, ShardyardLoader

    ds = ShardyardIterableDataset(path, rank=rank, world_size=world_size, **cache)
    if state is not None:
        ds.load_state_dict(state)
    loader = ShardyardLoader(ds, batch_size=4)
    got = []
    for step, batch in enumerate(loader):
        got += zip(batch["sample"].tolist(), batch["tokens"].numpy().tolist(), strict=True)
        if step + 1 == steps:
            break
    return loader, got


def test_every_stage_runs_on_s3_with_the_bytes_and_fingerprints_of_a_local_run(
    corpus, s3_bucket, tmp_path, monkeypatch
):
    monkeypatch.setenv("SHARDYARD_CACHE", str(tmp_path / "cache"))
    local = _pipeline(str(tmp_path / "disk"), corpus)
    remote = _pipeline(f"{s3_bucket}/data", corpus)
    assert "val" in local["all"]  # the validation pool is compared below
    for name in local:
        assert remote[name]["fingerprint"] == local[name]["fingerprint"], name
        assert mf.content_digest(remote[name]) == mf.content_digest(local[name]), name
    store = storage.open_store(f"{s3_bucket}/data")
    for rel in ("tok", "pools/all", "pools/public", "pools/all/val", "mix", "flat"):
        url = f"{s3_bucket}/data/{rel}"
        # Equal but for where the inputs are (a manifest records its inputs' locations).
        # The header as written; the shard table and checksums byte for byte.
        ours = storage.open_store(url).read_bytes(mf.MANIFEST_NAME).decode()
        theirs = (tmp_path / "disk" / rel / mf.MANIFEST_NAME).read_text()
        assert ours.replace(f"{s3_bucket}/data", str(tmp_path / "disk")) == theirs, rel
        for name in (mf.TABLE_NAME, mf.BLOCKS_NAME):
            ours_table = storage.open_store(url).read_bytes(name)
            assert ours_table == (tmp_path / "disk" / rel / name).read_bytes(), (rel, name)
        assert mf.read_manifest(url)["files"] == mf.read_manifest(tmp_path / "disk" / rel)["files"]
        report = verify(url)
        assert report.ok and report.directory == url and report.files_checked > 0, report
    # The same files as on disk (the artifact's, its markers and plan): no scratch left,
    # no temporaries, nothing twice.
    for rel in ("tok", "pools/all", "mix", "flat"):
        ours = storage.open_store(f"{s3_bucket}/data/{rel}").list()
        theirs = storage.open_store(tmp_path / "disk" / rel).list()
        assert ours == theirs, rel
    assert store.multipart_uploads() == []
    assert not (tmp_path / "cache" / "work").exists() or not any(
        (tmp_path / "cache" / "work").iterdir()
    )  # every work directory removed after its upload

    # Stream the mixture and its materialized copy from S3, resume on a cold cache.
    for rel in ("mix", "flat"):
        url = f"{s3_bucket}/data/{rel}"
        _, want = _stream(tmp_path / "disk" / rel, world_size=1, rank=0)
        loader, head = _stream(url, world_size=2, rank=0, steps=6, cache_dir=tmp_path / "c1")
        state = loader.state_dict()
        assert head == [w for w in want if w[0] % 2 == 0][: len(head)]
        tail = []
        for rank in range(3):  # another world size, a cache that never saw the artifact
            tail += _stream(url, world_size=3, rank=rank, state=state, cache_dir=tmp_path / "c2")[1]
        assert sorted(tail) == [w for w in want if w[0] >= state["next_sample"]]


_KILL_MID_UPLOAD = """
import os, sys
from shardcore import storage, units
from shardcore.materialize import plan_materialize

plan = plan_materialize(sys.argv[1], sys.argv[2], shard_bytes=int(sys.argv[3]))
units.save_plan(plan)
ids = [u["id"] for u in plan.phases[0]]
for unit_id in ids[:3]:
    units.run_unit(plan, unit_id)
# The fourth unit dies in the middle of uploading a file: one part sent, never completed.
storage.PART_SIZE = 4096
send = storage._MultipartWriter._send

def send_then_die(self, part):
    send(self, part)
    os._exit(9)

storage._MultipartWriter._send = send_then_die
units.run_unit(plan, ids[3])
"""


def test_a_run_killed_mid_upload_leaves_nothing_complete_and_reruns_exactly(
    corpus, moto_server, tmp_path, monkeypatch
):
    apply_env(moto_server, monkeypatch)
    monkeypatch.setenv("SHARDYARD_CACHE", str(tmp_path / "cache"))
    bucket = f"s3://{moto_server.new_bucket()}"
    disk = tmp_path / "disk"
    tokenize(corpus, str(disk / "tok"), shard_size=60_000)
    for name, filt in (("all", None), ("public", "meta.private = false")):
        build_pool([str(disk / "tok")], str(disk / "pools" / name), seq_len=SEQ, filter=filt,
                   memory=1 << 20, shard_size=16_000)  # fmt: skip
    build_mixture(MixtureSpec.from_dict(SPEC, base_dir=str(disk)), disk / "mix")
    artifact_cache.publish_directory(disk / "mix", f"{bucket}/mix")
    want = materialize(disk / "mix", disk / "flat", shard_bytes=8_000)
    out = f"{bucket}/flat"
    store = storage.open_store(out)

    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_KILL_MID_UPLOAD), f"{bucket}/mix", out, "8000"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 9, done.stderr
    # The killed upload is pending on the server, invisible; the three units before it are
    # recorded; nothing reads as an artifact.
    assert len(store.multipart_uploads()) == 1
    pending = store.multipart_uploads()[0].removeprefix(f"{store.prefix}/")
    assert not store.exists(pending)
    markers = [k for k in store.list() if k.startswith(units.MARKER_DIR)]
    assert len(markers) == 3
    assert not mf.is_complete(out)
    with pytest.raises(ManifestError, match="build did not finish"):
        Samples(out)
    assert not verify(out).ok

    # The rerun (another process, a cold work directory) finishes the job.
    import shutil

    shutil.rmtree(tmp_path / "cache")
    plan = plan_materialize(f"{bucket}/mix", out, shard_bytes=8_000)
    got = units.run_local(plan, workers=2)
    assert got["fingerprint"] == want["fingerprint"]
    assert mf.content_digest(got) == mf.content_digest(want)
    assert store.list() == storage.open_store(disk / "flat").list()
    assert store.multipart_uploads() == []
    assert verify(out).ok


def test_it_runs_the_readme_s3_commands(s3_bucket, tmp_path, monkeypatch):
    """The object-storage page's block, command by command, on a bucket of moto's
    server (its endpoint set as the block's first line sets it)."""
    import re
    import shlex
    from pathlib import Path

    from shardcore.demo import build_demo_corpus
    from tests.support.docs import page

    section = page("object-storage.md")
    (block,) = re.findall(r"```sh\n(.*?)```", section, flags=re.S)
    lines = [ln.split("  #")[0].strip() for ln in block.splitlines() if ln.strip()]
    assert lines[0].startswith("export AWS_ENDPOINT_URL=")
    build_demo_corpus(tmp_path / "corpus", max_bytes_per_source=300_000)
    monkeypatch.setenv("SHARDYARD_CACHE", str(tmp_path / "cache"))
    for line in lines[1:]:
        argv = shlex.split(line.replace("s3://corpus", s3_bucket))
        argv[0] = str(Path(sys.executable).parent / argv[0])
        done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
    flat = mf.read_manifest(f"{s3_bucket}/mixes/prose-flat")
    assert flat["kind"] == "materialized" and flat["num_records"] > 0
    assert "ok: materialized" in done.stdout


def test_units_on_hosts_that_share_only_the_bucket_build_the_local_bytes(
    corpus, s3_bucket, tmp_path, monkeypatch
):
    """Each unit runs with its own local disk (a cache directory of its own, as on another
    host): it fetches what earlier phases wrote elsewhere from the bucket."""
    from shardcore.pool import plan_pool
    from shardcore.tokenize import plan_tokenize

    disk = tmp_path / "disk"
    want_tok = tokenize(corpus, str(disk / "tok"), shard_size=60_000, unit_bytes=40_000)
    want_pool = build_pool([str(disk / "tok")], str(disk / "pool"), seq_len=SEQ,
                           memory=1 << 20, shard_size=16_000, val_fraction=0.05)  # fmt: skip

    def on_hosts(plan) -> dict:
        units.save_plan(plan)
        n = 0
        for phase in plan.phases:
            for unit in phase:
                n += 1
                monkeypatch.setenv("SHARDYARD_CACHE", str(tmp_path / f"host-{n % 3}"))
                units.run_unit(plan, unit["id"])
        monkeypatch.setenv("SHARDYARD_CACHE", str(tmp_path / "host-final"))
        return units.finalize(plan)

    tok = on_hosts(plan_tokenize(corpus, f"{s3_bucket}/tok", shard_size=60_000, unit_bytes=40_000))
    assert len(plan_tokenize(corpus, "x", unit_bytes=40_000).phases[0]) > 1
    pool = on_hosts(
        plan_pool(
            [f"{s3_bucket}/tok"],
            f"{s3_bucket}/pool",
            seq_len=SEQ,
            memory=1 << 20,
            shard_size=16_000,
            val_fraction=0.05,
        )  # fmt: skip
    )
    for got, want in ((tok, want_tok), (pool, want_pool)):
        assert got["fingerprint"] == want["fingerprint"]
        assert mf.content_digest(got) == mf.content_digest(want)
    for rel in ("tok", "pool"):
        assert storage.open_store(f"{s3_bucket}/{rel}").list() == (
            storage.open_store(disk / rel).list()
        )
    assert verify(f"{s3_bucket}/pool").ok


def _store_calls(monkeypatch) -> tuple[list[tuple[str, str]], list[str]]:
    """Record the S3 store's downloads ((prefix, key)) and listings (prefix) from now on."""
    got: list[tuple[str, str]] = []
    listed: list[str] = []
    real_get, real_sizes = storage.S3Store.get_file, storage.S3Store.sizes
    monkeypatch.setattr(
        storage.S3Store,
        "get_file",
        lambda self, key, path: (got.append((self.prefix, key)), real_get(self, key, path))[1],
    )
    monkeypatch.setattr(
        storage.S3Store,
        "sizes",
        lambda self, prefix="": (listed.append(self.prefix), real_sizes(self, prefix))[1],
    )
    return got, listed


def each_unit_on_a_host(plan, reads, tmp_path, monkeypatch, calls) -> dict[str, list[str]]:
    """Run every unit of ``plan`` (saved) on a host of its own (its own cache), asserting
    that each downloads exactly what ``reads(plan, unit)`` declares of the output and never
    lists its prefix; ``calls``: ``_store_calls``' lists. Returns each unit's downloads."""
    got, listed = calls
    prefix = storage.open_store(plan.out).prefix
    downloads = {}
    for n, unit in enumerate(u for phase in plan.phases for u in phase):
        monkeypatch.setenv("SHARDYARD_CACHE", str(tmp_path / f"host-{n}"))
        got.clear()
        units.run_unit(plan, unit["id"])
        fetched = downloads[unit["id"]] = sorted(k for p, k in got if p == prefix)
        assert fetched == sorted(reads(plan, unit)), unit["id"]
        assert prefix not in listed, unit["id"]
    return downloads


@pytest.mark.parametrize("fan_in", [None, 2])
def test_pool_units_on_s3_fetch_exactly_what_they_read_and_list_nothing(
    corpus, s3_bucket, tmp_path, monkeypatch, fan_in
):
    """Each pool unit on its own host downloads exactly the files it declares (a merge
    unit the files of the level below it that it merges, a pass-2 unit its group's file)
    and never lists the prefix; finalize downloads the shards' documents sidecars only.
    With a fan-in of 2 the merge is a tree of several levels, each unit fetching at most
    two files."""
    from shardcore.pool import layout, plan_pool, unit_reads

    if fan_in:
        monkeypatch.setattr(layout, "MERGE_FAN_IN", fan_in)
    tokenize(corpus, f"{s3_bucket}/tok", shard_size=30_000, unit_bytes=40_000)
    plan = plan_pool([f"{s3_bucket}/tok"], f"{s3_bucket}/pool", seq_len=SEQ,
                     memory=1 << 20, shard_size=8_000)  # fmt: skip
    assert len(plan.phases[0]) > 1 and len(plan.phases[-1]) > len(plan.phases[-2])
    assert len(plan.phases) == 2 + plan.meta["merge_levels"]
    if fan_in:
        assert plan.meta["merge_levels"] > 1
        merges = [u for phase in plan.phases[1:-1] for u in phase]
        assert max(len(unit_reads(plan, u)) for u in merges) == fan_in
    got, listed = _store_calls(monkeypatch)
    units.save_plan(plan)
    pool_prefix = storage.open_store(plan.out).prefix
    each_unit_on_a_host(plan, unit_reads, tmp_path, monkeypatch, (got, listed))
    monkeypatch.setenv("SHARDYARD_CACHE", str(tmp_path / "host-final"))
    got.clear()
    manifest = units.finalize(plan)
    fetched = [k for p, k in got if p == pool_prefix]
    assert fetched and all(k.endswith(".docs.parquet") for k in fetched)
    assert not [k for k in storage.open_store(plan.out).list() if k.startswith("_pass1/")]
    assert manifest["num_records"] and verify(f"{s3_bucket}/pool").ok


def test_tokenize_units_on_s3_fetch_exactly_what_they_read_and_list_nothing(
    corpus, s3_bucket, tmp_path, monkeypatch
):
    """Each tokenize unit on its own host: a tokenize unit fetches nothing of the output,
    the index unit the tokenize units' markers, an assemble unit the chunk index and the
    chunks its shards take documents from; none lists the prefix, finalize fetches
    nothing, the parts are gone from the bucket and the bytes are the local build's."""
    from shardcore.tokenize import _reads, plan_tokenize

    want = tokenize(corpus, str(tmp_path / "disk" / "tok"), shard_size=20_000, unit_bytes=30_000)
    plan = plan_tokenize(corpus, f"{s3_bucket}/tok", shard_size=20_000, unit_bytes=30_000)
    assert len(plan.phases[0]) > 2 and len(plan.phases[-1]) > 2
    got, listed = _store_calls(monkeypatch)
    units.save_plan(plan)
    prefix = storage.open_store(plan.out).prefix
    downloads = each_unit_on_a_host(plan, _reads, tmp_path, monkeypatch, (got, listed))
    chunk_reads = [len(downloads[u["id"]]) - 1 for u in plan.phases[-1] if "part" in u]
    # an assemble unit reads the two chunks its shards span (three files each), not all
    chunks = sum(len(units.unit_result(plan.out, u["id"])["chunks"]) for u in plan.phases[0])
    assert 0 < max(chunk_reads) <= 3 * 2 < 3 * chunks
    monkeypatch.setenv("SHARDYARD_CACHE", str(tmp_path / "host-final"))
    got.clear()
    manifest = units.finalize(plan)
    assert not [k for p, k in got if p == prefix]
    assert not [k for k in storage.open_store(plan.out).list() if k.startswith("_parts/")]
    assert manifest["fingerprint"] == want["fingerprint"]
    assert mf.content_digest(manifest) == mf.content_digest(want)
    assert verify(f"{s3_bucket}/tok").ok


@pytest.mark.parametrize("order", ["blend", "diversity"])
def test_mixture_units_on_s3_fetch_exactly_what_they_read_and_list_nothing(
    corpus, s3_bucket, tmp_path, monkeypatch, order
):
    """The blend unit fetches nothing of the schedule, the record unit the counts and the
    blend's pool column, finalize the three columns it checksums; none lists the prefix,
    the blend's column of an ordered schedule is gone from the bucket, and the schedule is
    the local build's, file for file."""
    from shardcore.mixture.stages import _finalize_reads, _reads, plan_mixture

    tok = f"{s3_bucket}/tok-x"
    tokenize(corpus, tok, shard_size=30_000)
    build_pool([tok], f"{s3_bucket}/pool-x", seq_len=SEQ, memory=1 << 20)
    build_pool([tok], str(tmp_path / "pool-x"), seq_len=SEQ, memory=1 << 20)

    def spec(pool: str) -> MixtureSpec:
        return MixtureSpec.from_dict(
            {"tokens": SEQ * 301, "seed": 3, "order": order,
             "components": [{"pool": pool, "weight": 1}]}
        )  # fmt: skip

    want = build_mixture(spec(str(tmp_path / "pool-x")), tmp_path / "mix-x")
    plan = plan_mixture(spec(f"{s3_bucket}/pool-x"), f"{s3_bucket}/mix-x")
    got, listed = _store_calls(monkeypatch)
    units.save_plan(plan)
    prefix = storage.open_store(plan.out).prefix
    for n, unit in enumerate(u for phase in plan.phases for u in phase):
        monkeypatch.setenv("SHARDYARD_CACHE", str(tmp_path / f"mix-host-{n}"))
        got.clear()
        units.run_unit(plan, unit["id"])
        assert sorted(k for p, k in got if p == prefix) == sorted(_reads(plan, unit))
        assert prefix not in listed, unit["id"]
    monkeypatch.setenv("SHARDYARD_CACHE", str(tmp_path / "mix-final"))
    got.clear()
    manifest = units.finalize(plan)
    assert sorted(k for p, k in got if p == prefix) == sorted(_finalize_reads(plan, []))
    assert manifest["files"] == want["files"]  # the same bytes (the specs name other paths)
    listing = [k for k in storage.open_store(plan.out).list() if not k.startswith("_")]
    assert listing == [
        k for k in storage.open_store(tmp_path / "mix-x").list() if not k.startswith("_")
    ]


def test_a_late_run_of_a_finished_unit_leaves_the_finished_runs_marker(
    corpus, moto_server, tmp_path, monkeypatch
):
    """A run whose upload waited out a cut-off (its claim lapsed, another run finished the
    unit meanwhile): asked again before its commit point, and the marker the other run
    wrote stays (its files are the same bytes; its stats hold other timings)."""
    from shardcore.tokenize import plan_tokenize

    apply_env(moto_server, monkeypatch)
    monkeypatch.setenv("SHARDYARD_CACHE", str(tmp_path / "cache"))
    out = f"s3://{moto_server.new_bucket()}/tok"
    plan = plan_tokenize(corpus, out, shard_size=60_000, unit_bytes=40_000)
    units.save_plan(plan)
    unit_id = plan.phases[0][0]["id"]
    store = storage.open_store(out)
    key = units.marker_key(unit_id)
    push = units._push

    def others_finish_during_the_push(*args, **kwargs):
        push(*args, **kwargs)
        store.put_bytes(key, b'{"from": "the run that took the unit over"}')

    monkeypatch.setattr(units, "_push", others_finish_during_the_push)
    units.run_unit(plan, unit_id)
    assert store.read_bytes(key) == b'{"from": "the run that took the unit over"}'
    # Its claim lost before the commit point: it publishes no marker at all.
    store.delete(key)
    asked = []

    def lapses_during_the_push() -> bool:
        asked.append(1)
        return len(asked) < 2

    monkeypatch.setattr(units, "_push", push)
    with pytest.raises(units.UnitSuperseded):
        units.run_unit(plan, unit_id, may_publish=lapses_during_the_push)
    assert not store.exists(key) and len(asked) == 2


def test_materialize_and_scrub_units_on_s3_fetch_and_list_nothing_of_their_output(
    corpus, s3_bucket, tmp_path, monkeypatch
):
    """A materialize unit writes its shard and records its files' checksums; finalize
    builds the manifest from them: neither downloads a file of the copy nor lists its
    prefix (on a host of its own each), and the copy is the local one. A scrub's units and
    finalize read nothing of the report's prefix either."""
    from shardcore.scrub import plan_scrub

    tokenize(corpus, f"{s3_bucket}/tok-m", shard_size=30_000)
    build_pool([f"{s3_bucket}/tok-m"], f"{s3_bucket}/pool-m", seq_len=SEQ, memory=1 << 20)
    spec = {"tokens": SEQ * 257, "seed": 3, "components": [{"pool": "pool-m", "weight": 1}]}
    build_mixture(MixtureSpec.from_dict(spec, base_dir=s3_bucket), f"{s3_bucket}/mix-m")
    got, listed = _store_calls(monkeypatch)
    for plan in (
        plan_materialize(f"{s3_bucket}/mix-m", f"{s3_bucket}/flat-m", shard_bytes=8_000),
        plan_scrub([{"key": "pool:1", "path": f"{s3_bucket}/pool-m"}], f"{s3_bucket}/scrub-m"),
    ):
        units.save_plan(plan)
        prefix = storage.open_store(plan.out).prefix
        for n, unit in enumerate(plan.phases[0]):
            monkeypatch.setenv("SHARDYARD_CACHE", str(tmp_path / f"{plan.stage}-host-{n}"))
            units.run_unit(plan, unit["id"])
        assert len(plan.phases[0]) > 1 or plan.stage == "scrub"
        assert not [k for p, k in got if p == prefix] and prefix not in listed, plan.stage
        monkeypatch.setenv("SHARDYARD_CACHE", str(tmp_path / f"{plan.stage}-final"))
        manifest = units.finalize(plan)
        assert not [k for p, k in got if p == prefix], plan.stage
    local = materialize(f"{s3_bucket}/mix-m", tmp_path / "flat-local", shard_bytes=8_000)
    assert mf.read_manifest(f"{s3_bucket}/flat-m")["files"] == local["files"]
    assert manifest["checked"] == 1 and manifest["corrupt"] == 0
