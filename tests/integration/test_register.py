# ruff: noqa: F811 - pytest fixtures are imported by name and used as arguments
"""``shardyard register`` records artifacts built on Slurm into a running service: a pool
and a mixture schedule built by the command line through job arrays (a real one-node
cluster, ``tests.support.slurm``) from a tokenized source the catalog built, then
registered over the API of a live server. Their pages show their lineage, and a flag on
the source taints them."""

from __future__ import annotations

import os
import sysconfig
from pathlib import Path

import pytest
from rest_framework.authtoken.models import Token

from tests.integration.dashboard_fixtures import PASSWORD, users  # noqa: F401
from tests.support import services
from tests.support import slurm as slurm_support
from tests.support.builds import UNREACHABLE, ok, shardyard
from tests.support.flags import taint_computed
from webapp.catalog.models import ArtifactStatus, MixtureVersion, Pool, Taint

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

STDLIB = Path(sysconfig.get_paths()["stdlib"])


@pytest.fixture
def cluster(tmp_path):
    if not slurm_support.available():
        services.unavailable(
            "Slurm", "slurm-wlm and munge are not installed (.ci/run installs them)"
        )
    c = slurm_support.SlurmCluster(tmp_path / "slurm")
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def tokenized(tmp_path, settings, jobs_inline):
    """A source of standard-library modules tokenized by the catalog, in its data root."""
    import json

    from webapp.catalog.services.sources import source_register
    from webapp.catalog.services.tokenized import tokenized_source_build

    settings.SOURCE_ROOTS, settings.DATA_ROOT = [tmp_path], tmp_path / "data"
    (tmp_path / "data").mkdir()
    root = tmp_path / "stdlib"
    root.mkdir()
    files = sorted(p for p in STDLIB.glob("*.py") if p.stat().st_size > 2000)[:40]
    (root / "code.jsonl").write_text(
        "".join(json.dumps({"text": p.read_text(errors="replace"), "name": p.name}) + "\n"
                for p in files)
    )  # fmt: skip
    source = source_register(name="stdlib", uri=str(root))
    with jobs_inline():
        ts = tokenized_source_build(source_id=source.pk, shard_size=32 << 10)
    ts.refresh_from_db()
    assert ts.status == ArtifactStatus.READY
    return ts


def test_it_registers_a_slurm_built_pool_and_mixture_with_lineage_and_taints(
    live_server, users, tokenized, cluster, tmp_path, client
):
    from webapp.catalog.services.flags import flag_create

    built = Path(tokenized.path).parent.parent / "cli"  # under the data root
    env = {**os.environ, **UNREACHABLE, **cluster.env()}
    slurm = ["--executor", "slurm", "--units-per-task", "2"]
    ok(
        shardyard(
            [
                "pool",
                tokenized.path,
                "--out",
                str(built / "pool"),
                "--seq-len",
                "64",
                "--memory",
                "1MiB",
                "--shard-size",
                "64KB",
                "--quiet",
                *slurm,
            ],
            env,
            tmp_path,
        )
    )
    ok(shardyard(["mix", "--component", f"{built / 'pool'}:1", "--tokens", "20000",
                  "--out", str(built / "mix"), *slurm], env, tmp_path))  # fmt: skip

    token = Token.objects.get_or_create(user=users["editor"])[0].key
    server = {**env, "SHARDYARD_URL": live_server.url, "SHARDYARD_TOKEN": token}
    said = ok(shardyard(["register", str(built / "pool"), "--name", "cli-pool"], server, tmp_path))
    pool = Pool.objects.get(name="cli-pool")
    assert f"pool cli-pool (#{pool.pk})" in said
    assert pool.status == ArtifactStatus.READY and pool.params["registered"]
    assert list(pool.parents.all()) == [tokenized]
    assert pool.shards.count() == pool.num_shards > 1
    said = ok(shardyard(["register", str(built / "mix"), "--name", "cli-mix"], server, tmp_path))
    version = MixtureVersion.objects.get(mixture__name="cli-mix")
    assert version.number == 1 and version.status == ArtifactStatus.READY
    assert [(c.pool_id, c.weight) for c in version.components.all()] == [(pool.pk, 1.0)]
    # The same artifact registered again is the same row.
    ok(shardyard(["register", str(built / "pool"), "--name", "other"], server, tmp_path))
    assert Pool.objects.filter(path=pool.path).count() == 1

    # A tokenized source is not registered; nor is a directory outside the data root.
    refused = shardyard(["register", tokenized.path], server, tmp_path)
    assert refused.returncode == 2 and "pools and mixtures are registered" in refused.stderr
    (tmp_path / "outside").mkdir()
    os.rename(built / "pool", tmp_path / "outside" / "pool")
    refused = shardyard(["register", str(tmp_path / "outside" / "pool")], server, tmp_path)
    assert refused.returncode == 2 and "outside the data root" in refused.stderr
    os.rename(tmp_path / "outside" / "pool", built / "pool")

    # The pages show the lineage: the pool's tokenized source, the version's pool.
    assert client.login(username="viewer", password=PASSWORD)
    page = client.get(f"/pools/{pool.pk}/").content.decode()
    assert f'href="/sources/{tokenized.source_id}/"' in page and "stdlib" in page
    page = client.get(f"/mixtures/versions/{version.pk}/").content.decode()
    assert f'href="/pools/{pool.pk}/"' in page and "cli-pool" in page

    # A flag on the source taints what was registered from it.
    flag = flag_create(reason="license", source_id=tokenized.source_id)
    taint_computed(flag.pk)
    tainted = Taint.objects.filter(flag=flag)
    assert tainted.filter(pool=pool).exists()
    assert tainted.filter(mixture_version=version).exists()
