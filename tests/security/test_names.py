"""Item: every name is validated at every entry, and artifact paths are built from
validated names and checked to resolve under the data root. The attacks: a mixture name
that is the absolute path of an existing version's directory (its schedule was rebuilt in
place: 469 samples became 235 while the catalog still said 469), names with CR/LF or
``"``, and pool names that are paths."""

from __future__ import annotations

import re

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from tests.security.conftest import tree_digest
from webapp.catalog.models import Mixture, MixtureVersion, Pool, Source, TrainingRun


def _draft(pools, name, tokens=32 * 400):
    return {
        "name": name,
        "tokens": tokens,
        "rows": [{"pool": pools["early"].pk, "weight": 1}, {"pool": pools["late"].pk, "weight": 1}],
    }


def _save(c, draft):
    return c.post("/mixtures/new/save/", draft, content_type="application/json")


def test_it_never_rebuilds_a_version_through_a_path_shaped_mixture_name(page, stdlib_pools,
                                                                        settings):  # fmt: skip
    c = page("editor")
    assert _save(c, _draft(stdlib_pools, "base")).status_code == 200
    v1 = MixtureVersion.objects.get(mixture__name="base")
    before = tree_digest(v1.path)
    mixture_dir = str(settings.DATA_ROOT / "mixtures" / "base")

    for name in (mixture_dir, "../mixtures/base", "base/../base", "./base"):
        resp = _save(c, _draft(stdlib_pools, name, tokens=32 * 200))
        assert resp.status_code == 400, name
        assert "not a valid name" in resp.json()["error"]

    assert tree_digest(v1.path) == before
    assert list(Mixture.objects.values_list("name", flat=True)) == ["base"]
    assert MixtureVersion.objects.count() == 1


def test_it_never_builds_into_an_existing_version_directory(page, stdlib_pools, settings):
    # A directory left where the next version would go (a failed save, someone's files):
    # the save is refused and the files stay as they were.
    c = page("editor")
    assert _save(c, _draft(stdlib_pools, "base")).status_code == 200
    squatter = settings.DATA_ROOT / "mixtures" / "base" / "v2"
    squatter.mkdir()
    (squatter / "keep.txt").write_text("not yours")
    resp = _save(c, _draft(stdlib_pools, "base", tokens=32 * 200))
    assert resp.status_code == 400
    assert "exists already" in resp.json()["error"]
    assert (squatter / "keep.txt").read_text() == "not yours"
    assert MixtureVersion.objects.count() == 1


@pytest.mark.parametrize("name", ["evil\r\nX-Injected: 1", 'quote"d', "tab\tname", "a b", ""])
def test_it_refuses_names_with_control_characters_or_quotes(page, api, stdlib_pools, name):
    resp = _save(page("editor"), _draft(stdlib_pools, name))
    assert resp.status_code == 400
    body = {**_draft(stdlib_pools, name), "rows": [{"pool": stdlib_pools["early"].pk,
                                                    "weight": 1}]}  # fmt: skip
    assert api("editor").post("/api/mixtures/", body, format="json").status_code == 400
    assert not Mixture.objects.exists()


def test_it_quotes_a_legacy_name_in_the_download_header(page, catalog):
    # A row written before names were checked: the header stays one well-formed value.
    Mixture.objects.filter(pk=catalog["mixture"].pk).update(name='x"; filename="evil.sh')
    resp = page("viewer").get(f"/mixtures/versions/{catalog['version'].pk}/version.json")
    assert resp.status_code == 200
    from email.message import Message

    msg = Message()
    msg["Content-Disposition"] = resp["Content-Disposition"]
    # One parameter, holding the whole name: nothing was injected.
    assert [k for k, _v in msg.get_params(header="content-disposition")] == [
        "attachment", "filename"
    ]  # fmt: skip
    assert msg.get_filename() == 'x"; filename="evil.sh-v1.json'


@pytest.mark.parametrize("name", ["/tmp/owned", "../../outside", "a/b", "..", "x\ny"])
def test_it_refuses_pool_names_that_are_paths(api, catalog, settings, tmp_path, name):
    settings.DATA_ROOT = tmp_path / "data"
    resp = api("editor").post(
        "/api/pools/",
        {"name": name, "tokenized_ids": [catalog["tokenized"].pk], "seq_len": 16},
        format="json",
    )
    assert resp.status_code == 400
    assert "name" in str(resp.json())
    assert Pool.objects.count() == 1  # the fixture's
    assert not (tmp_path / "data").exists()


def test_it_refuses_run_names_with_line_breaks(api, catalog):
    resp = api("editor").post(
        "/api/runs/", {"name": "run\r\nforged", "mixture_version": catalog["version"].pk},
        format="json",
    )  # fmt: skip
    assert resp.status_code == 400
    assert not TrainingRun.objects.filter(name__contains="forged").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["source-register", "../x", "/tmp"],
        ["pool-build", "/tmp/owned", "1", "--seq-len", "16"],
        ["mixture-version", "/tmp/owned", '[{"pool": 1, "weight": 1}]', "--token-budget", "64"],
        ["run-register", "a\nb", "1"],
    ],
)
def test_the_management_command_checks_names_too(catalog, roots, args):
    counts = (Source.objects.count(), Pool.objects.count(), Mixture.objects.count(),
              TrainingRun.objects.count())  # fmt: skip
    with pytest.raises(CommandError, match="not a valid name|control character"):
        call_command("catalog", *args)
    assert counts == (Source.objects.count(), Pool.objects.count(), Mixture.objects.count(),
                      TrainingRun.objects.count())  # fmt: skip


# --- Item: duplicate pool names (two "demo-code") -------------------------------------


def _pool_body(tokenized, name, **extra):
    return {"name": name, "tokenized_ids": [tokenized.pk], "seq_len": 64, **extra}


def test_a_pool_name_names_one_pool(api, page, tokenized):
    c = api("editor")
    first = c.post("/api/pools/", _pool_body(tokenized, "demo-code"), format="json")
    assert first.status_code == 201, first.content
    # Other parameters under the same name: refused, naming the field and the pool.
    again = c.post("/api/pools/", _pool_body(tokenized, "demo-code", seed=3), format="json")
    assert again.status_code == 400
    detail = again.json()["detail"]
    assert detail.startswith("pool name:") and "'demo-code' exists already" in detail
    assert f"pool {first.json()['id']}" in detail
    # The pool form says so too, beside what the user typed.
    form = page("editor").post("/pools/build/", {**_pool_body(tokenized, "demo-code", seed=4),
                                                 "shuffle": "exact", "val_fraction": "0"})  # fmt: skip
    assert form.status_code == 400
    assert "exists already" in form.content.decode().replace("&#x27;", "'")
    assert Pool.objects.filter(name="demo-code").count() == 1
    # A failed build frees its name.
    Pool.objects.filter(name="demo-code").update(status="failed")
    retry = c.post("/api/pools/", _pool_body(tokenized, "demo-code", seed=3), format="json")
    assert retry.status_code == 201, retry.content


def test_the_database_refuses_a_second_pool_of_a_name(catalog):
    from django.db import IntegrityError, transaction

    pool = catalog["pool"]
    with pytest.raises(IntegrityError), transaction.atomic():
        Pool.objects.create(name=pool.name, status="ready", path="/elsewhere", seq_len=64)
    # Another split (the held-out slice "<name>-val" is a val pool) or a failed build: fine.
    Pool.objects.create(name=pool.name, split="val", status="ready", path="/v", seq_len=64)
    Pool.objects.create(name=pool.name, status="failed", path="/f", seq_len=64)


@pytest.mark.django_db(transaction=True)
def test_the_migration_renames_later_pools_of_a_taken_name(catalog):
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    pool = catalog["pool"]  # wiki-2048
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes("catalog")
    executor.migrate([("catalog", "0008_run_progress_once_per_step")])
    try:
        with connection.cursor() as cur:
            for status in ("ready", "failed", "building"):
                cur.execute(
                    "INSERT INTO catalog_pool (name, split, status, path, filter, seq_len, "
                    "num_records, fingerprint, params, manifest_path, num_documents, "
                    "num_tokens, num_bytes, created_at) VALUES (%s, 'train', %s, '/p', '', 64, "
                    "0, '', '{}', '', 0, 0, 0, now()) RETURNING id",
                    [pool.name, status],
                )
        executor = MigrationExecutor(connection)
        executor.migrate(latest)
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
    rows = list(Pool.objects.order_by("pk").values_list("pk", "name", "status"))
    assert rows[0] == (pool.pk, "wiki-2048", "ready")  # the first keeps its name
    (r1, n1, _), (r2, n2, s2), (r3, n3, _) = rows[1:]
    assert (n1, n2, s2, n3) == (f"wiki-2048-{r1}", "wiki-2048", "failed", f"wiki-2048-{r3}")


# --- Item: numeric parameters of a pool (seq_len 99999999999 started a job that died) ---


def test_an_out_of_range_sequence_length_starts_nothing(api, page, tokenized):
    from webapp.jobs.models import Job

    jobs = Job.objects.count()
    resp = api("editor").post("/api/pools/", _pool_body(tokenized, "huge", seq_len=99999999999),
                              format="json")  # fmt: skip
    assert resp.status_code == 400
    assert "seq_len" in resp.json() and "1048576" in resp.json()["seq_len"][0]
    form = page("editor").post("/pools/build/", {**_pool_body(tokenized, "huge",
                                                               seq_len=99999999999),
                                                 "shuffle": "exact", "val_fraction": "0"})  # fmt: skip
    assert form.status_code == 400
    # The form says what the library and the command line say.
    message = "seq_len: 99999999999 is outside the allowed range [1, 1048576]"
    assert form.context["form"].errors["seq_len"] == [message]
    assert message in form.content.decode()
    assert Job.objects.count() == jobs and not Pool.objects.filter(name="huge").exists()


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("seq_len", 99999999999, "seq_len: 99999999999 is outside the allowed range [1, 1048576]"),
        ("memory", 1024, "memory: 1024 is outside the allowed range [1048576, "),
        ("val_fraction", 1.5, "val_fraction: 1.5 is outside the allowed range [0, 0.5]"),
        ("seed", -1, "seed: -1 is outside the allowed range [0, 9223372036854775807]"),
    ],
)
def test_the_service_refuses_what_the_library_refuses(db, tokenized, field, value, message):
    """Whatever the entry (a management command, a script), the library's check names the
    parameter and its range before a job exists."""
    from webapp.catalog.errors import CatalogError
    from webapp.catalog.services.pools import pool_build
    from webapp.jobs.models import Job

    jobs = Job.objects.count()
    kwargs = {"name": "svc", "tokenized_ids": [tokenized.pk], "seq_len": 64, field: value}
    with pytest.raises(CatalogError, match=re.escape(message)):
        pool_build(**kwargs)
    assert Job.objects.count() == jobs and not Pool.objects.filter(name="svc").exists()


def test_a_retried_build_whose_name_was_taken_meanwhile_gets_a_name_of_its_own(
    db, tokenized, jobs_inline
):
    """A failed build frees its name; if its job is retried and succeeds after another
    pool took the name, the recorder names it ``<name>-<id>`` instead of failing."""
    from shardcore.manifest import read_manifest
    from webapp.catalog.services.pools import pool_build, pool_record

    with jobs_inline():
        first = pool_build(name="edge", tokenized_ids=[tokenized.pk], seq_len=64)
    first.refresh_from_db()
    Pool.objects.filter(pk=first.pk).update(status="failed")  # its build failed
    with jobs_inline():
        second = pool_build(name="edge", tokenized_ids=[tokenized.pk], seq_len=64, seed=2)
    second.refresh_from_db()
    assert second.status == "ready"
    pool_record(job=first.job, manifest=read_manifest(first.path))  # the retry succeeded
    first.refresh_from_db()
    assert (first.name, first.status) == (f"edge-{first.pk}", "ready")
    assert Pool.objects.get(pk=second.pk).name == "edge"
