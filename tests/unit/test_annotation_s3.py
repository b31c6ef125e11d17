"""An annotation on object storage (a local moto_server): the stage's units read a
tokenized source on S3 from its checked local copy and write the annotation under an
``s3://`` prefix, manifest last, with the bytes of a local build; a pool joins it from S3."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from shardcore import storage, units
from shardcore.annotate.artifact import annotate
from shardcore.annotate.stage import plan_annotation
from shardcore.manifest import read_manifest
from shardcore.pool import PoolReader, build_pool
from shardcore.storage import artifact_cache
from shardcore.tokenize import tokenize
from tests.unit.test_tokenize_s3 import s3  # noqa: F401 - a fixture
from tests.unit.tokenize_fixtures import stdlib_records, write_jsonl

PLANTED = "Mail root.admin@python.example.org for access."


def _planted() -> list[dict]:
    """Records of real text, every third one with PLANTED."""
    recs = stdlib_records(16)
    for r in recs[::3]:
        r["text"] += "\n" + PLANTED
    return recs


def _with_copies() -> list[dict]:
    """Records of real text, six of them twice (exact copies)."""
    recs = stdlib_records(24)
    return recs + [dict(r) for r in recs[:6]]


def _tokenized(tmp_path, tok: str, recs: list[dict]) -> str:
    """``recs`` tokenized at ``tok``, in several shards."""
    tokenize([str(write_jsonl(tmp_path / "a.jsonl", recs))], tok, shard_size=30_000)
    return tok


def test_an_annotation_on_s3_has_the_bytes_of_a_local_one_and_joins_a_pool(
    tmp_path,
    s3,  # noqa: F811
):
    fs, bucket = s3
    recs = _planted()
    tok = _tokenized(tmp_path, f"s3://{bucket}/tok", recs)
    ann = f"s3://{bucket}/ann/pii"
    m = units.run_local(plan_annotation(tok, ann, annotator="pii"), workers=2)
    assert len(m["shards"]) > 1
    local = tmp_path / "local"
    ml = annotate(tok, local, "pii")
    assert ml["fingerprint"] == m["fingerprint"]
    store = storage.open_store(ann)
    for f in ml["files"]:
        assert store.read_bytes(f["path"]) == (local / f["path"]).read_bytes()
    copy = read_manifest(artifact_cache.local_artifact(ann))  # a checked copy: checksums agree
    assert copy["files"] == ml["files"] and copy["fingerprint"] == ml["fingerprint"]
    # A scratch-free artifact: no temporaries, no corpus-level work files.
    keys = set(store.sizes())
    assert not any(k.endswith(".tmp") or k.startswith("work/") for k in keys)

    out = tmp_path / "pool"
    build_pool([tok], str(out), seq_len=64, filter="pii.emails > 0", annotations=[ann])
    docs = PoolReader(out).documents
    from shardcore.annotate import pii

    want = [i for i, r in enumerate(recs) if pii.counts(r["text"])["emails"] > 0]
    assert sorted(docs.column("doc_id").to_pylist()) == want
    assert Path(out, "manifest.json").exists()


@pytest.mark.parametrize("declared", [True, False])
def test_minhash_units_on_s3_write_the_bytes_of_a_local_build(
    tmp_path,
    s3,  # noqa: F811
    monkeypatch,
    declared,
):
    """minhash's clusters as units (buckets, rounds over ranges, counts, tallies, writes)
    under an ``s3://`` prefix: the files of the one-process build, no scratch left; so
    too for a plan made before its round units' reads were declared (they list)."""
    from shardcore.annotate import neardup

    fs, bucket = s3
    tok = _tokenized(tmp_path, f"s3://{bucket}/tok-mh", _with_copies())
    monkeypatch.setattr(neardup, "partitions_for", lambda n, params: 2)
    ann = f"s3://{bucket}/ann/minhash"
    plan = plan_annotation(tok, ann, annotator="minhash")
    if not declared:
        del plan.meta["declared_reads"]
    m = units.run_local(plan, workers=2)
    ml = annotate(tok, tmp_path / "local", "minhash")
    assert ml["fingerprint"] == m["fingerprint"] and len(m["shards"]) > 1
    store = storage.open_store(ann)
    for f in ml["files"]:
        assert store.read_bytes(f["path"]) == (tmp_path / "local" / f["path"]).read_bytes()
    assert not any(k.startswith("work/") or k.endswith(".tmp") for k in store.sizes())


# ------------------------------------------------- units on hosts of their own, reads declared


def _probes(monkeypatch, stage: str) -> list[str]:
    """Record from now on every path the code of ``stage`` (its units and finalize, not
    the machinery around them) opens a file at or asks about (``open``, ``Path.open``,
    ``Path.exists``): its reads, whether the file is there or not."""
    import builtins
    import pathlib

    seen: list[str] = []
    on = [False]

    def recorded(fn):
        def run(*args, **kwargs):
            on[0] = True
            try:
                return fn(*args, **kwargs)
            finally:
                on[0] = False

        return run

    runner, finisher = units._stage(stage)
    monkeypatch.setitem(units._STAGES, stage, (recorded(runner), recorded(finisher)))
    real_open, real_path_open, real_exists = builtins.open, pathlib.Path.open, pathlib.Path.exists

    def opened(file, *args, **kwargs):
        if on[0] and isinstance(file, (str, pathlib.PurePath)):
            seen.append(str(file))
        return real_open(file, *args, **kwargs)

    def path_open(self, *args, **kwargs):
        if on[0]:
            seen.append(str(self))
        return real_path_open(self, *args, **kwargs)

    def exists(self):
        if on[0]:
            seen.append(str(self))
        return real_exists(self)

    monkeypatch.setattr(builtins, "open", opened)
    monkeypatch.setattr(pathlib.Path, "open", path_open)
    monkeypatch.setattr(pathlib.Path, "exists", exists)
    return seen


# A shard unit checks that the output holds no other build when its plan.json is at hand,
# and writes it otherwise (the same bytes): not a read the unit depends on.
_OWN_CHECK = ("plan.json",)


class _Hosts:
    """Units of ``plan`` run each on a host of its own (its own cache and work directory:
    they share only the bucket), recording per unit the keys it fetched, whether it
    listed the prefix, and the keys of the output it opened or looked for that were in
    the bucket but not among those it declared (an undeclared read)."""

    def __init__(self, plan: units.Plan, tmp_path: Path, monkeypatch) -> None:
        from tests.unit.test_s3_pipeline import _store_calls

        self.plan, self.tmp_path, self.monkeypatch = plan, tmp_path, monkeypatch
        self.got, self.listed = _store_calls(monkeypatch)
        self.seen = _probes(monkeypatch, plan.stage)
        self.put: list[str] = []  # the keys uploaded: a unit's own files
        real_put = storage.S3Store.put_file
        monkeypatch.setattr(
            storage.S3Store,
            "put_file",
            lambda store, key, path: (self.put.append(key), real_put(store, key, path))[1],
        )
        self.store = storage.open_store(plan.out)
        self.hosts = 0
        units.save_plan(plan)

    def _host(self) -> Path:
        self.hosts += 1
        self.monkeypatch.setenv("SHARDYARD_CACHE", str(self.tmp_path / f"host-{self.hosts}"))
        return units.work_dir(self.plan.out)

    def _undeclared(self, work: Path, before: set[str], declared: list[str]) -> list[str]:
        rels = {
            Path(p).relative_to(work).as_posix() for p in self.seen if Path(p).is_relative_to(work)
        }
        return sorted(rels & before - set(declared) - set(self.put) - set(_OWN_CHECK))

    def run(self, unit: dict) -> tuple[list[str], list[str], bool, list[str]]:
        """(fetched, declared, listed, undeclared reads) of ``unit`` on a new host."""
        reads = units._READS[self.plan.stage][0]
        work = self._host()
        before = set(self.store.list())
        declared = reads(self.plan, unit)
        self.got.clear(), self.listed.clear(), self.seen.clear(), self.put.clear()
        units.run_unit(self.plan, unit["id"])
        fetched = [k for p, k in self.got if p == self.store.prefix]
        return (
            fetched,
            declared,
            self.store.prefix in self.listed,
            self._undeclared(work, before, declared),
        )

    def run_all(self) -> int:
        """Every unit, asserting that each fetched exactly what it declared, listed
        nothing and read nothing else of the output; returns the number of keys fetched."""
        total = 0
        for unit in (u for phase in self.plan.phases for u in phase):
            fetched, declared, listed, undeclared = self.run(unit)
            assert sorted(fetched) == sorted(declared), unit["id"]
            assert not listed, unit["id"]
            assert not undeclared, (unit["id"], undeclared)
            total += len(fetched)
        return total

    def finalize(self) -> dict:
        """finalize on a host of its own: it fetches what it declares, reads nothing else
        of the output, and lists the prefix once (to delete the stage's scratch)."""
        work = self._host()
        before = set(self.store.list())
        stats = [units.unit_result(self.plan.out, u["id"]) for p in self.plan.phases for u in p]
        declared = units._READS[self.plan.stage][1](self.plan, stats)
        self.got.clear(), self.listed.clear(), self.seen.clear(), self.put.clear()
        manifest = units.finalize(self.plan)
        fetched = [k for p, k in self.got if p == self.store.prefix]
        assert sorted(fetched) == sorted(declared)
        assert self.listed.count(self.store.prefix) == 1
        assert not self._undeclared(work, before, declared)
        return manifest


def test_a_per_shard_annotation_on_s3_fetches_nothing_and_finalize_reads_no_shard(
    tmp_path,
    s3,  # noqa: F811
    monkeypatch,
):
    """Each ``pii`` unit on a host of its own fetches nothing of the annotation and lists
    nothing; finalize fetches nothing either (the units' stats hold their files' entries)
    but the file of a unit recorded without its entry, and the artifact is the local
    build's, byte for byte."""
    fs, bucket = s3
    tok = _tokenized(tmp_path, f"s3://{bucket}/tok-hosts", _planted())
    ml = annotate(tok, tmp_path / "local", "pii")
    plan = plan_annotation(tok, f"s3://{bucket}/ann/pii-hosts", annotator="pii")
    hosts = _Hosts(plan, tmp_path, monkeypatch)
    assert len(hosts.plan.phases[0]) > 1
    assert hosts.run_all() == 0
    # a unit recorded before units held their file's entry: finalize fetches that file
    old = units.unit_result(plan.out, "shard-00001")
    units.mark_done(plan.out, "shard-00001", {k: v for k, v in old.items() if k != "file"})
    stats = [units.unit_result(plan.out, u["id"]) for u in plan.phases[0]]
    assert units._READS[plan.stage][1](plan, stats) == [old["file"]["path"]]
    m = hosts.finalize()
    assert m["fingerprint"] == ml["fingerprint"] and m["files"] == ml["files"]
    for f in ml["files"]:
        assert hosts.store.read_bytes(f["path"]) == (tmp_path / "local" / f["path"]).read_bytes()


def test_minhash_units_on_s3_fetch_exactly_what_they_declare_and_list_nothing(
    tmp_path,
    s3,  # noqa: F811
    monkeypatch,
):
    """Each unit of a ``minhash`` annotation (signatures, buckets, rounds, resolve, counts,
    tallies, writes) on a host of its own fetches exactly the files it declares, reads no
    other file of the annotation and lists nothing; finalize fetches nothing; the work
    files are gone from the bucket and the artifact is the local build's. A unit that
    left out a file it reads is caught (a write unit without one tally file)."""
    from shardcore.annotate import neardup

    fs, bucket = s3
    tok = _tokenized(tmp_path, f"s3://{bucket}/tok-mh-hosts", _with_copies())
    monkeypatch.setattr(neardup, "partitions_for", lambda n, params: 2)
    ml = annotate(tok, tmp_path / "local", "minhash")
    plan = plan_annotation(tok, f"s3://{bucket}/ann/mh-hosts", annotator="minhash")
    hosts = _Hosts(plan, tmp_path, monkeypatch)
    assert len(plan.phases[0]) > 1 and plan.meta["partitions"] == 2
    assert hosts.run_all() > 0
    _an_undeclared_read_is_caught(hosts, "write-00000")
    m = hosts.finalize()
    assert m["fingerprint"] == ml["fingerprint"] and m["files"] == ml["files"]
    for f in ml["files"]:
        assert hosts.store.read_bytes(f["path"]) == (tmp_path / "local" / f["path"]).read_bytes()
    assert not any(k.startswith("work/") for k in hosts.store.list())


@pytest.mark.parametrize("ranged", [True, False])
def test_minhash_bucket_units_on_s3_read_only_their_candidates_signatures(
    tmp_path,
    s3,  # noqa: F811
    monkeypatch,
    ranged,
):
    """A bucket unit on object storage reads the signatures and exact hashes of its
    candidates by ranges (here every run of rows on its own: GAP 0), never a signature
    file whole: fewer bytes than the files hold. A plan made before (without
    ``ranged_signatures``) fetches them whole, as it declares. Both write the local
    build's bytes."""
    from shardcore.annotate import neardup
    from shardcore.npy_rows import RemoteRows

    fs, bucket = s3
    tok = _tokenized(tmp_path, f"s3://{bucket}/tok-mh-ranged", _with_copies())
    monkeypatch.setattr(neardup, "partitions_for", lambda n, params: 2)
    monkeypatch.setattr(RemoteRows, "GAP", 0)
    ml = annotate(tok, tmp_path / "local", "minhash")
    plan = plan_annotation(tok, f"s3://{bucket}/ann/mh-ranged-{ranged}", annotator="minhash")
    if not ranged:
        del plan.meta["ranged_signatures"]
    hosts = _Hosts(plan, tmp_path, monkeypatch)
    read: list[tuple[str, int, int]] = []
    real_range = storage.S3Store.read_range

    def read_range(store, key, start, stop):
        read.append((key, start, stop))
        return real_range(store, key, start, stop)

    monkeypatch.setattr(storage.S3Store, "read_range", read_range)
    signature = ("sig.npy", "exact.npy")
    rows_read = 0
    for unit in (u for phase in plan.phases for u in phase):
        read.clear()
        fetched, declared, listed, undeclared = hosts.run(unit)
        assert sorted(fetched) == sorted(declared) and not listed and not undeclared, unit["id"]
        if unit["id"].startswith("bucket"):
            whole = [k for k in fetched if k.endswith(signature)]
            by_range = [(k, a, b) for k, a, b in read if k.endswith(signature)]
            assert (not whole and by_range) if ranged else (whole and not by_range)
            rows_read += sum(b - a for _, a, b in by_range if a > 0)  # not the headers
    files = sum(n for k, n in hosts.store.sizes().items() if k.endswith(signature))
    assert 0 < rows_read < files if ranged else rows_read == 0
    m = hosts.finalize()
    assert m["fingerprint"] == ml["fingerprint"] and m["files"] == ml["files"]
    for f in ml["files"]:
        assert hosts.store.read_bytes(f["path"]) == (tmp_path / "local" / f["path"]).read_bytes()


def _an_undeclared_read_is_caught(hosts: _Hosts, unit_id: str) -> None:
    """Rerun a finished unit (its marker removed) declaring one file fewer than it reads:
    the run shows the read, whether the unit fails or writes something else without it
    (the checks of ``run_all`` cannot pass such a unit); then run it as declared."""
    plan, unit = hosts.plan, hosts.plan.unit(unit_id)
    reads = units._READS[plan.stage]
    left_out = next(k for k in reads[0](plan, unit) if "/tally/" in k and "cuts" not in k)

    def fewer(plan: units.Plan, u: dict) -> list[str]:
        return [k for k in reads[0](plan, u) if k != left_out]

    hosts.monkeypatch.setitem(units._READS, plan.stage, (fewer, reads[1]))
    hosts.store.delete(units.marker_key(unit_id))
    work = hosts._host()
    before = set(hosts.store.list())
    hosts.got.clear(), hosts.seen.clear(), hosts.put.clear()
    with contextlib.suppress(Exception):
        units.run_unit(plan, unit_id)
    assert left_out not in [k for _, k in hosts.got]
    assert hosts._undeclared(work, before, fewer(plan, unit)) == [left_out]
    hosts.monkeypatch.setitem(units._READS, plan.stage, reads)
    if units.unit_result(plan.out, unit_id) is not None:
        hosts.store.delete(units.marker_key(unit_id))
    fetched, declared, _, undeclared = hosts.run(unit)
    assert sorted(fetched) == sorted(declared) and not undeclared


def test_cross_source_units_on_s3_fetch_exactly_what_they_declare_and_list_nothing(
    tmp_path,
    s3,  # noqa: F811
    monkeypatch,
):
    """The cross-source stage's units (signatures, buckets, rounds, resolve, counts,
    tallies, writes) each on a host of its own fetch exactly the files they declare, read
    no other file of the group and list nothing; finalize fetches nothing; the scratch is
    gone from the bucket and every source's annotation is the local build's."""
    from shardcore.annotate.neardup import annotation_paths, dedup_group, plan_group

    fs, bucket = s3
    recs = stdlib_records(30)
    toks = []
    for name, part in (("a", recs[:18]), ("b", recs[12:] + [dict(r) for r in recs[:4]])):
        src = write_jsonl(tmp_path / f"{name}.jsonl", part)
        toks.append(f"s3://{bucket}/tok-{name}")
        tokenize([str(src)], toks[-1], shard_size=30_000)
    local = dedup_group(toks, str(tmp_path / "local"))
    assert local["totals"]["clustered_documents"] > 0
    hosts = _Hosts(plan_group(toks, f"s3://{bucket}/group", partitions=2), tmp_path, monkeypatch)
    assert hosts.run_all() > 0
    m = hosts.finalize()
    assert m["fingerprint"] == local["fingerprint"] and m["totals"] == local["totals"]
    for mine, theirs in zip(
        annotation_paths(f"s3://{bucket}/group"), annotation_paths(tmp_path / "local"), strict=True
    ):
        files = read_manifest(theirs)["files"]
        assert read_manifest(mine)["files"] == files
        for f in files:
            ours = storage.open_store(mine).read_bytes(f["path"])
            assert ours == (Path(theirs) / f["path"]).read_bytes()
    assert not any(k.startswith("_work/") for k in hosts.store.list())
