"""The loader streams pools, mixtures and materialized mixtures from S3 (moto's server)
through a bounded local cache: the same samples in the same order as from local disk, for
any ranks and workers, the cache never above its limit, and an exact resume after the
cache is thrown away."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from shardcore import manifest as mf
from shardcore.errors import InputError
from shardcore.loader import Samples
from shardcore.materialize import materialize
from shardcore.mixture import build_mixture
from shardcore.pool import build_pool
from shardcore.storage import artifact_cache
from tests.support.s3 import apply_env
from tests.unit import mix_fixtures
from tests.unit import pool_fixtures as pf

BATCH = 4
SEQ = 63


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """A pool of many small shards, a two-pool mixture and its materialized copy, on disk."""
    root = tmp_path_factory.mktemp("stream")
    src = pf.write_tokenized(root / "src", pf.corpus("prose", 500), shard_docs=120)
    build_pool([str(src)], str(root / "pool"), seq_len=SEQ, memory=1 << 20, shard_size=12_000)
    code = mix_fixtures.tokenized_code(root / "code")
    pools = {}
    for name, expr in mix_fixtures.POOL_FILTERS.items():
        pools[name] = root / f"pool-{name}"
        build_pool([str(code)], str(pools[name]), seq_len=SEQ, seed=3, filter=expr,
                   memory=1 << 20, shard_size=8_000)  # fmt: skip
    return root, pools


@pytest.fixture(scope="module")
def remote(local, moto_server):
    """The same artifacts published to a bucket; the mixture is built over the pools'
    s3:// URLs so that it reads them there."""
    with pytest.MonkeyPatch.context() as mp:
        apply_env(moto_server, mp)
        yield _publish(local, f"s3://{moto_server.new_bucket()}")


@pytest.fixture(autouse=True)
def _s3_env(moto_server, monkeypatch):
    apply_env(moto_server, monkeypatch)


def _publish(local, s3_bucket):
    root, pools = local
    artifact_cache.publish_directory(root / "pool", f"{s3_bucket}/pool")
    urls = {}
    for name, path in pools.items():
        urls[name] = f"{s3_bucket}/pools/{name}"
        artifact_cache.publish_directory(path, urls[name])
    spec = {
        "tokens": SEQ * 301,
        "seed": 5,
        "components": [
            {"pool": urls["early"], "weight": 2},
            {"pool": urls["late"], "weight": 1},
        ],
    }
    build_mixture(spec, root / "mix-of-s3")  # reads the pools' manifests from S3
    artifact_cache.publish_directory(root / "mix-of-s3", f"{s3_bucket}/mix")
    for c, name in zip(spec["components"], ("early", "late"), strict=True):
        c["pool"] = str(pools[name])
    build_mixture(spec, root / "mix")  # the same schedule over the pools on disk
    materialize(root / "mix", root / "flat", shard_bytes=10_000)
    artifact_cache.publish_directory(root / "flat", f"{s3_bucket}/flat")
    return s3_bucket


def _read(path, *, rank=0, world_size=1, workers=0, state=None, steps=None, **cache):
    from shardcore.loader import ShardyardIterableDataset, ShardyardLoader

    ds = ShardyardIterableDataset(path, rank=rank, world_size=world_size, **cache)
    if state is not None:
        ds.load_state_dict(state)
    loader = ShardyardLoader(ds, batch_size=BATCH, num_workers=workers)
    out = []
    for step, batch in enumerate(loader):
        out.extend(zip(batch["sample"].tolist(), batch["tokens"].numpy().tolist(), strict=True))
        if steps is not None and step + 1 == steps:
            break
    return loader, out


@pytest.mark.parametrize(
    "artifact,world_size,workers", [("pool", 1, 0), ("pool", 2, 2), ("mix", 2, 1), ("flat", 3, 0)]
)
def test_it_streams_from_s3_exactly_what_it_reads_from_disk(
    local, remote, tmp_path, artifact, world_size, workers
):
    root = local[0]
    disk = {"pool": root / "pool", "mix": root / "mix", "flat": root / "flat"}[artifact]
    for rank in range(world_size):
        _, want = _read(disk, rank=rank, world_size=world_size, workers=workers)
        _, got = _read(
            f"{remote}/{artifact}",
            rank=rank,
            world_size=world_size,
            workers=workers,
            cache_dir=tmp_path / "cache",
        )
        assert got == want and len(got) > 0


def test_the_cache_never_holds_more_than_its_limit(local, remote, tmp_path):
    from shardcore.loader import ShardyardIterableDataset

    manifest = mf.read_manifest(f"{remote}/pool")
    sizes = {e["path"]: e["size"] for e in mf.file_entries(manifest)}
    shard_bytes = [
        sizes[f"{s['prefix']}.bin"] + sizes[f"{s['prefix']}.idx"] for s in manifest["shards"]
    ]
    assert len(shard_bytes) >= 8
    limit = 3 * max(shard_bytes)  # the open shard and one prefetched, with room to spare
    ds = ShardyardIterableDataset(
        f"{remote}/pool", cache_dir=tmp_path / "cache", cache_limit=limit, prefetch=1
    )
    cache = ds.source.cache
    want = Samples(local[0] / "pool")
    peak = 0
    for item in ds:
        peak = max(peak, cache.usage())
        assert cache.usage() <= limit
        assert np.array_equal(item["tokens"].numpy(), want[item["sample"]])
    cache.wait()
    assert cache.usage() <= limit
    assert peak > max(shard_bytes)  # it did cache more than one shard
    assert cache.downloads >= len(shard_bytes)  # every shard, some of them evicted


def test_a_limit_below_one_shard_is_refused_with_the_numbers(remote, tmp_path):
    from shardcore.loader import ShardyardIterableDataset

    ds = ShardyardIterableDataset(f"{remote}/pool", cache_dir=tmp_path / "c", cache_limit="1kB")
    with pytest.raises(
        InputError, match=r"cache limit 1000 bytes .* \(SHARDYARD_STREAM_CACHE_LIMIT\)"
    ):
        next(iter(ds))


@pytest.mark.parametrize("artifact", ["mix", "flat"])
def test_it_resumes_exactly_after_the_cache_is_thrown_away(remote, tmp_path, artifact):
    url = f"{remote}/{artifact}"
    _, full = _read(url, world_size=2, cache_dir=tmp_path / "warm")
    loader, head = _read(url, world_size=2, steps=5, cache_dir=tmp_path / "warm")
    state = loader.state_dict()
    assert state["next_sample"] == 2 * 5 * BATCH
    shutil.rmtree(tmp_path / "warm")
    # A cold cache elsewhere, and another world size: the global stream continues.
    tails = [
        _read(url, rank=r, world_size=3, state=state, cache_dir=tmp_path / "cold")[1]
        for r in range(3)
    ]
    resumed = sorted(sample for tail in tails for sample in tail)
    _, everything = _read(url, world_size=1, cache_dir=tmp_path / "cold")
    assert resumed == [s for s in everything if s[0] >= state["next_sample"]]
    assert [k for k, _ in head] == [k for k, _ in full[: len(head)]]


@pytest.mark.parametrize("artifact", ["pool", "mix"])
def test_it_prefetches_the_next_shards_in_reading_order(remote, tmp_path, artifact):
    from shardcore.loader import ShardyardIterableDataset

    ds = ShardyardIterableDataset(
        f"{remote}/{artifact}", cache_dir=tmp_path / "cache", cache_limit="1GB", prefetch=2
    )
    src = ds.source
    # The shards the stream reads, in order of first use (the schedule's order for a mixture).
    order = []
    for k in range(len(src)):
        records, shard = src.shard_of(ds.index_of(k))
        if (records.path, shard) not in order:
            order.append((records.path, shard))
    assert len(order) > 3
    it = iter(ds)
    next(it)  # opens the first shard and queues the next two
    src.cache.wait()
    cached = {p.relative_to(src.cache.directory).parts[1:] for p in src.cache._files()}
    cached = {"/".join(parts) for parts in cached}

    def files(path, shard):
        records = next(r for r in _all_records(src) if r.path == path)
        prefix = records.manifest["shards"][shard]["prefix"]
        return {f"{prefix}.idx", f"{prefix}.bin"}

    want = set().union(*(files(p, s) for p, s in order[:3]))
    assert cached == want  # the open shard and the next two, nothing else


def _all_records(src):
    return [src._records_] if src.kind != "mixture" else list(src._pools.values())


def test_locate_reads_s3_artifacts_and_trainer_exports_refuse_them_by_name(local, remote):
    from shardcore.export import export, megatron_data_args
    from shardcore.locate import locate_any

    root = local[0]
    for rel, disk in (
        ("mix", root / "mix-of-s3"),
        ("flat", root / "flat"),
        ("pool", root / "pool"),
    ):
        assert locate_any(f"{remote}/{rel}", sample=17) == locate_any(disk, sample=17), rel
    for fmt in ("megatron", "olmo", "nanotron"):
        with pytest.raises(InputError, match=rf"{remote}/mix: on object storage; the {fmt} export"):
            export(f"{remote}/mix", fmt, global_batch_size=2)
    with pytest.raises(InputError, match=rf"{remote}/pools/early: on object storage"):
        megatron_data_args(root / "mix-of-s3")  # a local mixture of pools on S3


def test_each_shard_file_is_downloaded_once_while_prefetches_run_beside_the_reads(
    local, remote, tmp_path
):
    from shardcore.loader import ShardyardIterableDataset

    ds = ShardyardIterableDataset(
        f"{remote}/pool", cache_dir=tmp_path / "cache", cache_limit="1GB", prefetch=3
    )
    want = Samples(local[0] / "pool")
    for item in ds:
        assert np.array_equal(item["tokens"].numpy(), want[item["sample"]])
    cache = ds.source.cache
    cache.wait()
    shards = len(ds.source._records_.manifest["shards"])
    # A read that needs a file a prefetch is fetching waits for it: no file twice.
    assert cache.downloads == 2 * shards
    assert len(cache._files()) == 2 * shards


def test_a_process_that_streams_a_mixture_exits_without_a_word(remote, tmp_path):
    """The mixture's pools are read from local copies the process holds until it exits;
    releasing them at exit prints nothing (no 'Exception ignored' from a finalizer)."""
    import os
    import subprocess
    import sys

    script = (
        "from shardcore.loader import ShardyardIterableDataset\n"
        f"ds = ShardyardIterableDataset({remote + '/mix'!r}, rank=0, world_size=1)\n"
        "print(next(iter(ds))['sample'])\n"
    )
    env = {**os.environ, "SHARDYARD_CACHE": str(tmp_path / "cache")}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0"]
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr
