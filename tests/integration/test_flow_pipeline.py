"""The whole flow on real workers: a registered real-text source, tokenized, pooled (with a
validation slice), mixed into a version (its schedule built by shardcore), materialized by a
job spread over two workers, exported for trainers (megatron-core parses the Megatron
export back into the version's weights and prefixes), a registered run reporting progress,
and its resume position equal to ``shardcore.locate.locate_mixture``. A flag on a source
then taints the materialized copy with everything else downstream."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import pytest
import yaml

from shardcore.locate import locate_mixture
from shardcore.manifest import files_by_path, read_manifest
from shardcore.mixture import Mixture
from shardcore.pool import PoolReader
from tests.integration.test_jobs_workers import catalog_env, stdlib_docs, wait_job, write_jsonl
from tests.support.services import wait_for
from webapp.catalog import selectors
from webapp.catalog.models import ArtifactStatus, Export, Flag, Pool, Shard, Taint
from webapp.catalog.selectors.runs import run_resume_position
from webapp.catalog.services.exports import mixture_version_export, mixture_version_materialize
from webapp.catalog.services.flags import flag_create
from webapp.catalog.services.mixtures import mixture_get_or_create, mixture_version_create
from webapp.catalog.services.pools import pool_build
from webapp.catalog.services.runs import run_progress_record, run_register
from webapp.catalog.services.sources import source_register
from webapp.catalog.services.tokenized import tokenized_source_build
from webapp.jobs.models import JobState, JobUnit

pytestmark = pytest.mark.services
__all__ = ["catalog_env"]

SEQ = 128


def _catalog_prefixes(version) -> list[str]:
    """Every shard prefix of the version's pools, from catalog rows alone."""
    prefixes = []
    for comp in version.components.select_related("pool").order_by("id"):
        for s in Shard.objects.filter(pool=comp.pool).order_by("index"):
            if s.num_records:
                prefixes.append(s.prefix)
    return prefixes


def test_it_goes_from_a_source_to_a_materialized_mixture_and_a_resumable_run(
    postgres, redis_url, celery_workers, catalog_env
):
    from megatron.core.datasets.indexed_dataset import IndexedDataset
    from megatron.core.datasets.utils import get_blend_from_list

    write_jsonl(catalog_env / "prose" / "a.jsonl", stdlib_docs(25))
    write_jsonl(catalog_env / "code" / "b.jsonl", stdlib_docs(20, offset=40))
    prose = source_register(name="prose", uri=str(catalog_env / "prose"))
    code = source_register(name="code", uri=str(catalog_env / "code"))
    left, right = celery_workers("left"), celery_workers("right")

    built = []
    for source in (prose, code):
        ts = tokenized_source_build(source_id=source.pk, shard_size=32 << 10)
        assert wait_job(ts.job_id).state == JobState.SUCCEEDED
        built.append(ts)
    pools = [
        pool_build(name=f"p-{ts.source.name}", tokenized_ids=[ts.pk], seq_len=SEQ,
                            val_fraction=0.2, memory=1 << 20, shard_size=16 << 10)
        for ts in built
    ]  # fmt: skip
    for pool in pools:
        job = wait_job(pool.job_id)
        assert job.state == JobState.SUCCEEDED, job.log_tail
        pool.refresh_from_db()
        assert pool.status == ArtifactStatus.READY
        assert pool.num_records == PoolReader(pool.path).num_records
        assert Shard.objects.filter(pool=pool).count() == len(
            PoolReader(pool.path).manifest["shards"]
        )
        # Which documents are held out hashes their identity (paths included), so a small
        # source may hold none out: the catalog mirrors the pool's manifest either way.
        held_out = PoolReader(pool.path).manifest.get("val")
        if held_out:
            val = Pool.objects.get(train_pool=pool)
            assert val.split == Pool.Split.VAL
            assert val.num_documents == held_out["documents"] > 0
            assert val.num_documents + pool.num_documents == pool.parents.get().num_documents
        else:
            assert not Pool.objects.filter(train_pool=pool).exists()
    assert Pool.objects.filter(split=Pool.Split.VAL).exists()  # P(none of 45 held) < 1e-4

    # The version: its schedule built into its directory and recorded.
    mixture = mixture_get_or_create(name="blend")
    version = mixture_version_create(
        mixture_id=mixture.pk,
        components=[{"pool": pools[0].pk, "weight": 0.7}, {"pool": pools[1].pk, "weight": 0.3}],
        token_budget=300_000,
        seed=1,
    )
    assert version.number == 1 and version.status == ArtifactStatus.BUILDING
    # Built by a job like every other stage.
    assert wait_job(version.job_id).state == JobState.SUCCEEDED
    version.refresh_from_db()
    assert version.status == ArtifactStatus.READY
    mix = Mixture(version.path)
    assert Path(version.manifest_path) == Path(version.path) / "manifest.json"
    assert version.fingerprint == mix.manifest["fingerprint"]
    assert version.num_samples == mix.num_samples == -(-300_000 // SEQ)
    assert version.num_tokens == mix.num_samples * SEQ
    planned = {p["path"]: p["epochs"] for p in mix.pools}
    for comp in version.components.select_related("pool"):
        assert comp.epochs == pytest.approx(planned[comp.pool.path])
        assert comp.epochs == pytest.approx(
            np.count_nonzero(np.asarray(mix.pool_index) == list(planned).index(comp.pool.path))
            / comp.pool.num_records
        )
    assert version.components.get(pool=pools[0]).epochs > 1  # prose rolls over

    # Materialized by a job that both workers share.
    job = mixture_version_materialize(version_id=version.pk, shard_bytes=128 << 10)
    assert mixture_version_materialize(version_id=version.pk).pk == job.pk
    job = wait_job(job.pk)
    assert job.state == JobState.SUCCEEDED, job.log_tail + left.log() + right.log()
    assert {w.split("@")[0] for w in JobUnit.objects.filter(job=job).values_list("worker", flat=True)} == {"left", "right"}  # fmt: skip
    flat = Export.objects.get(version=version, format=Export.Format.MATERIALIZED)
    assert flat.status == ArtifactStatus.READY and flat.job_id == job.pk
    manifest = read_manifest(flat.path)
    assert flat.manifest_path == str(Path(flat.path) / "manifest.json")
    assert flat.fingerprint == manifest["fingerprint"]
    assert flat.num_records == version.num_samples
    shards = list(flat.shards.order_by("index"))
    assert len(shards) == len(manifest["shards"]) > 2
    assert sum(s.num_records for s in shards) == version.num_samples
    assert flat.num_bytes == sum(f["size"] for f in manifest["files"])
    first = 0
    for s in shards:
        assert s.checksum == files_by_path(manifest)[f"{Path(s.prefix).relative_to(flat.path)}.bin"]["xxh3"]  # fmt: skip
        assert s.num_bytes == Path(s.prefix + ".bin").stat().st_size
        ds = IndexedDataset(s.prefix)
        for k in (0, len(ds) - 1):
            np.testing.assert_array_equal(ds[k], mix.tokens(first + k))
        first += len(ds)

    # Exports for trainers, as files under the version's directory.
    megatron = mixture_version_export(version_id=version.pk, fmt="megatron")
    assert Path(megatron.path).parent == Path(version.path) / "exports"
    line = next(x for x in Path(megatron.path).read_text().splitlines() if x.startswith("--data-path "))  # fmt: skip
    prefixes, weights = get_blend_from_list(shlex.split(line)[1:])
    # Per shard, the main stage's samples from it; the index cache beside it holds the order.
    assert set(prefixes) <= set(_catalog_prefixes(version)) and len(prefixes) > 2
    assert sum(weights) == version.params["stages"][0]["num_samples"]
    cache = Path(version.path) / "exports" / "megatron" / "cache"
    assert f"--data-cache-path {cache}" in Path(megatron.path).read_text()
    assert len(list(cache.glob("*-BlendedDataset-train-dataset_index.npy"))) >= 1
    assert mixture_version_export(version_id=version.pk, fmt="megatron").pk == megatron.pk
    olmo = mixture_version_export(version_id=version.pk, fmt="olmo")
    olmo_cfg = yaml.safe_load(Path(olmo.path).read_text())  # exact: from the materialized copy
    assert olmo_cfg["shardyard"]["exact"] is True
    assert [Path(p).resolve() for p in olmo_cfg["dataset"]["paths"]] == [
        Path(f"{s.prefix}.bin").resolve() for s in flat.shards.order_by("index")
    ]
    nano = mixture_version_export(version_id=version.pk, fmt="nanotron")
    nano_launches = list(yaml.safe_load_all(Path(nano.path).read_text()))
    assert [[s["name"] for s in d["data_stages"]] for d in nano_launches] == [["main"]]
    plain = mixture_version_export(version_id=version.pk, fmt="json")
    assert json.loads(Path(plain.path).read_text())["num_samples"] == version.num_samples
    for e in (megatron, olmo, nano, plain):
        assert e.status == ArtifactStatus.READY
        assert e.num_bytes == Path(e.path).stat().st_size > 0
    assert set(version.exports.values_list("format", flat=True)) == {
        "materialized", "megatron", "olmo-core", "nanotron", "json",
    }  # fmt: skip

    # A run reports progress; its resume position is shardcore's, with catalog ids.
    run = run_register(name="run-1", mixture_version_id=version.pk, external_id="wandb/x")
    for step, samples in ((10, 333), (20, version.num_samples - 1)):
        run = run_progress_record(run_id=run.pk, step=step, consumed_samples=samples)
        position = run_resume_position(run_id=run.pk)
        expected = locate_mixture(version.path, tokens=run.consumed_tokens)
        assert expected["sample"] == samples
        assert position["pool_index"] == expected["pool"]
        assert {k: position[k] for k in expected if k != "pool"} == {
            k: v for k, v in expected.items() if k != "pool"
        }
        pool = next(p for p in pools if p.path == expected["pool_path"])
        assert (position["pool_id"], position["pool"]) == (pool.pk, pool.name)
    last_prose = int(np.flatnonzero(np.asarray(mix.pool_index) == 0)[-1])
    position = run_resume_position(run_id=run.pk, sample=last_prose)
    # The epoch of a repeated pool: how many whole passes over it precede the sample.
    before = int(np.count_nonzero(np.asarray(mix.pool_index)[:last_prose] == 0))
    passes = before // PoolReader(pools[0].path).num_records
    assert passes >= 1  # the prose pool rolls over in this mixture
    assert position["pool_id"] == pools[0].pk and position["epoch"] == passes
    assert run_resume_position(run_id=run.pk, sample=0)["epoch"] == 0
    lineage = selectors.run_lineage(run_id=run.pk)
    assert {s.name for s in lineage["sources"]} == {"prose", "code"}

    # A flag on one source reaches the materialized copy (it holds the tokens), not the
    # configs (they name the pools' files, which are tainted themselves).
    flag = flag_create(reason="PII", source_id=code.pk)
    # What it taints is computed by a worker once the flag is recorded.
    wait_for(lambda: Flag.objects.get(pk=flag.pk).taint_state == "ready", timeout=120,
             what="the flag's taint")  # fmt: skip
    assert Taint.objects.filter(flag=flag, export=flat).exists()
    assert Taint.objects.filter(flag=flag, run=run).exists()
    assert not Taint.objects.filter(flag=flag, export__in=[megatron, olmo, nano, plain]).exists()
    assert not Taint.objects.filter(flag=flag, pool=pools[0]).exists()
