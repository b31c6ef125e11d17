"""The unit-of-work protocol every long shardcore stage follows (tokenize, pool, mixture).

A stage is split into a ``Plan``: JSON-serializable, made of ordered *phases*, each a list of
independent *units* (a file byte range, an input shard, a bucket...). Every unit of a phase
may run at the same time, in any process or on any host that sees the output directory;
phase k+1 starts when phase k is complete; ``finalize`` then writes the manifest, the
artifact's commit point. So the same plan runs in a local process pool (``run_local``) or as
thousands of Celery tasks, and the output bytes depend on the plan, never on the workers.

Units are idempotent. A unit writes its files under temporary names, renames them, then
writes its completion marker ``_units/<fan>/<unit id>.done.json`` (``fan``: a hash of the
id modulo 1,000) holding its stats. A rerun of a finished unit returns the recorded stats
and writes nothing: an interrupted job loses nothing and duplicates nothing when rerun.

A plan too large for one JSON document keeps its bulk in *files of the plan*
(``Plan.files``: e.g. the pool's per-input table), which ``save_plan`` writes next to the
output before ``_plan.json``; the plan's meta names them and its units read the parts they
need, so the header a job's every unit loads stays small.

A unit's stats are a JSON object for its stage's ``finalize``; the names in ``UnitCounts``
mean the same in every stage, and they are all a runner (the job engine, a progress bar)
reads: a job's documents, tokens, bytes and bad input are the sums of its units' (see
``counts``). A stage that has nothing to count under a name leaves it out.

The output may be an object-store prefix (``s3://bucket/prefix``): the plan, the markers
and the artifact then live there, and each unit (and ``finalize``) works in a local
*work directory* that mirrors the prefix (``$SHARDYARD_CACHE/work/<hash of the URL>``):
it first downloads the files earlier units wrote that it lacks (on one host: none), runs
the stage's code unchanged on local files, uploads the files it wrote (each object
appears whole, see ``shardcore.storage``), and only then writes its marker to the store.
``finalize`` uploads the last files, the manifest last, deletes the objects the stage
removed (its scratch), and removes the work directory. A unit interrupted anywhere before
its marker runs again and rewrites the same keys with the same bytes; a prefix without
its manifest is never read as an artifact. Input artifacts on the store (a plan lists
them in ``meta["artifacts"]``) are read from checked local copies
(``shardcore.storage.artifact_cache.local_artifact``): in ``run_unit`` every path under an input's URL
is rewritten to its copy; ``finalize`` sees the URLs, which is what manifests record.
"""

from __future__ import annotations

import contextvars
import dataclasses
import importlib
import json
import multiprocessing as mp
import os
import shutil
import tempfile
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar, overload

import xxhash

from shardcore import atomic, limits, storage
from shardcore.manifest import MANIFEST_NAME, read_manifest
from shardcore.storage import artifact_cache

# Re-exported: the stages and the job engine name these as units.<name>.
from shardcore.unit_counts import (  # noqa: F401
    BAD_SAMPLES_PER_REASON,
    COUNT_NAMES,
    BadReason,
    UnitCounts,
    add_bad_input,
    counts,
    merge_bad_input,
)

MARKER_DIR = "_units"
PLAN_NAME = "_plan.json"
# Top-level directories of an output that hold a stage's scratch (removed by finalize).
SCRATCH_DIRS = ("_pass1",)


@dataclass
class Plan:
    stage: str  # the registered stage name, e.g. "tokenize"
    out: str  # output directory (absolute path or fsspec URL)
    params: dict[str, Any]
    phases: list[list[dict[str, Any]]]  # each unit is a dict with at least a unique "id"
    meta: dict[str, Any] = field(default_factory=dict)
    # Files of the plan too large for its JSON (a table a unit reads a few rows of), by
    # path relative to the output: ``save_plan`` writes them before the plan. Not part of
    # ``to_json``: a stage names them in ``meta`` and reads them from the output (or from
    # here, for a plan not saved yet).
    files: dict[str, bytes] = field(default_factory=dict, repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "out": self.out,
            "params": self.params,
            "phases": self.phases,
            "meta": self.meta,
        }

    def header(self) -> dict[str, Any]:
        """``to_json`` without the units: what a runner keeps apart from the units' specs
        (a job engine stores each unit's spec on its own)."""
        return {"stage": self.stage, "out": self.out, "params": self.params, "meta": self.meta}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Plan:
        """A plan from ``to_json`` (or a ``header`` with the phases given separately: any
        sequence of sequences, e.g. one that loads the units' specs when first read)."""
        return cls(
            data["stage"], data["out"], data["params"], data.get("phases", []), data.get("meta", {})
        )

    def unit(self, unit_id: str) -> dict[str, Any]:
        for phase in self.phases:
            for unit in phase:
                if unit["id"] == unit_id:
                    return unit
        raise KeyError(f"plan for {self.out} has no unit {unit_id!r}")

    @property
    def num_units(self) -> int:
        return sum(len(p) for p in self.phases)


def save_plan(plan: Plan) -> Path | str:
    """Write the plan's files, then the plan (``_plan.json``) next to the output."""
    text = json.dumps(plan.to_json(), indent=1, sort_keys=True)
    if storage.is_remote(plan.out):
        store = storage.open_store(plan.out)
        for rel, data in sorted(plan.files.items()):
            store.put_bytes(rel, data)
        store.put_bytes(PLAN_NAME, text.encode())
        return store.location(PLAN_NAME)
    out = Path(plan.out)
    out.mkdir(parents=True, exist_ok=True)
    for rel, data in sorted(plan.files.items()):
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        atomic.write_bytes(out / rel, data)
    return atomic.write_text(out / PLAN_NAME, text)


def load_plan(out: str | os.PathLike) -> Plan:
    if storage.is_remote(out):
        return Plan.from_json(json.loads(storage.open_store(out).read_bytes(PLAN_NAME)))
    return Plan.from_json(json.loads((Path(out) / PLAN_NAME).read_text()))


# Unit markers are fanned out over MARKER_FANOUT directories by a hash of the unit's id: a
# job of a million units never makes a directory (or a prefix listing) of a million names.
MARKER_FANOUT = 1000
# Downloads at once of a unit's declared reads.
PULL_THREADS = 16


def _marker_rel(unit_id: str) -> str:
    fan = xxhash.xxh3_64_intdigest(unit_id.encode()) % MARKER_FANOUT
    return f"{MARKER_DIR}/{fan:03d}/{unit_id}.done.json"


def _flat_marker_rel(unit_id: str) -> str:
    """Where markers were written before the fan-out (read for outputs begun then)."""
    return f"{MARKER_DIR}/{unit_id}.done.json"


def marker_path(out: str | os.PathLike, unit_id: str) -> Path:
    return Path(out) / _marker_rel(unit_id)


def marker_key(unit_id: str) -> str:
    """The key of unit ``unit_id``'s marker under its output (for a stage's declared reads)."""
    return _marker_rel(unit_id)


def unit_result(out: str | os.PathLike, unit_id: str) -> dict[str, Any] | None:
    """The recorded stats of a finished unit, or None if it has not finished."""
    if storage.is_remote(out):
        store = storage.open_store(out)
        for key in (_marker_rel(unit_id), _flat_marker_rel(unit_id)):
            try:
                return json.loads(store.read_bytes(key))
            except FileNotFoundError:
                continue
        return None
    for rel in (_marker_rel(unit_id), _flat_marker_rel(unit_id)):
        path = Path(out) / rel
        if path.exists():
            return json.loads(path.read_text())
    return None


def mark_done(out: str | os.PathLike, unit_id: str, stats: dict[str, Any]) -> None:
    """Record a unit as finished (after its files are renamed into place)."""
    text = json.dumps(stats, sort_keys=True, default=str)
    if storage.is_remote(out):
        storage.open_store(out).put_bytes(marker_key(unit_id), text.encode())
        return
    path = marker_path(out, unit_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(path, text)


# ------------------------------------------------------------ outputs on object storage


def work_dir(out: str) -> Path:
    """The local directory that mirrors the remote output ``out`` while a stage runs."""
    key = xxhash.xxh3_64_hexdigest(storage.resolve(out).encode())
    return storage.cache_root() / "work" / key


def _artifact_file(rel: str) -> bool:
    """A file of the artifact (not bookkeeping, not a temporary)."""
    # A temporary is a file or a directory being filled (a unit's batches appended to the
    # files of a temporary directory): nothing under it is the artifact's yet.
    temporary = any(part.endswith(".tmp") for part in rel.split("/"))
    return not (rel == PLAN_NAME or rel.startswith(f"{MARKER_DIR}/") or temporary)


def _snapshot(work: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for p in work.rglob("*"):
        rel = p.relative_to(work).as_posix()
        if not _artifact_file(rel):
            continue
        try:
            st = p.stat()
        except OSError:
            continue  # a concurrent unit's temporary, renamed meanwhile
        if not p.is_dir():
            out[rel] = (st.st_size, st.st_mtime_ns)
    return out


def _pull(store: storage.Store, work: Path) -> dict[str, int]:
    """Download the objects (and markers) of the prefix the work directory lacks; returns
    the sizes of the objects listed."""

    sizes = store.sizes()
    for key, size in sizes.items():
        if key in (PLAN_NAME, MANIFEST_NAME):
            continue
        local = work / key
        if not local.exists() or local.stat().st_size != size:
            store.get_file(key, local)
    return sizes


def _pull_keys(store: storage.Store, work: Path, keys: list[str]) -> dict[str, int]:
    """Download exactly ``keys`` (those the work directory lacks), listing nothing, several
    at a time (a unit that reads many small objects, such as markers, waits for one round
    trip per ``PULL_THREADS`` objects, not per object); returns their local sizes."""
    missing = [key for key in dict.fromkeys(keys) if not (work / key).exists()]
    if len(missing) == 1:
        store.get_file(missing[0], work / missing[0])  # atomic: a local file is a whole download
    elif missing:
        with ThreadPoolExecutor(min(PULL_THREADS, len(missing))) as pool:
            for done in as_completed([pool.submit(store.get_file, k, work / k) for k in missing]):
                done.result()
    return {key: (work / key).stat().st_size for key in keys}


def _push(
    store: storage.Store,
    work: Path,
    before: dict[str, tuple[int, int]],
    remote: dict[str, int] | None,
    *,
    skip: tuple[str, ...] = (),
) -> None:
    """Upload the work directory's files that are new, changed, or absent from the store
    (``remote``: the store's listing; None when the unit listed nothing: then the files it
    wrote, which are new or changed, since a unit rewrites every file it makes)."""
    for rel, state in sorted(_snapshot(work).items()):
        if rel in skip:
            continue
        if before.get(rel) != state or (remote is not None and remote.get(rel) != state[0]):
            store.put_file(rel, work / rel)


def _localize(value: Any, mapping: dict[str, str]) -> Any:
    if isinstance(value, str):
        for url, local in mapping.items():
            if value == url or value.startswith(url + "/"):
                return local + value[len(url) :]
        return value
    if isinstance(value, list):
        return [_localize(v, mapping) for v in value]
    if isinstance(value, dict):
        return {k: _localize(v, mapping) for k, v in value.items()}
    return value


def with_local_inputs(plan: Plan) -> Plan:
    """The plan with every path under a remote input artifact (``meta["artifacts"]``)
    pointing into that artifact's checked local copy."""
    urls = [u for u in plan.meta.get("artifacts", []) if storage.is_remote(u)]
    if not urls:
        return plan
    mapping = {storage.resolve(u): artifact_cache.local_artifact(u) for u in urls}
    return dataclasses.replace(
        plan, params=_localize(plan.params, mapping), meta=_localize(plan.meta, mapping)
    )


# stage name -> (run_unit(plan, unit) -> stats, finalize(plan, [stats...]) -> manifest)
_STAGES: dict[str, tuple[Callable[..., dict], Callable[..., dict]]] = {}
# stage name -> (reads(plan, unit), finalize_reads(plan, stats)): the files of the output a
# unit (or finalize) reads, relative to it. A stage that declares them has its units on
# object storage fetch exactly those, and list nothing. None for a unit (or finalize) whose
# reads are not known (a plan made before its stage declared them): it lists the prefix
# and downloads what it lacks.
_READS: dict[
    str, tuple[Callable[..., list[str] | None], Callable[..., list[str] | None] | None]
] = {}
# stage name -> the key prefixes of its scratch: with declared reads finalize has only some
# files at hand, and deletes from the store what lies under these (and SCRATCH_DIRS).
_SCRATCH: dict[str, tuple[str, ...]] = {}
# Stages whose finalize takes the units' stats as ``UnitResults`` (read from a local spill
# one at a time), not a list of every unit's stats in memory.
_STREAMED: set[str] = set()


def register_stage(
    name: str,
    *,
    run_unit: Callable[[Plan, dict], dict],
    finalize: Callable[[Plan, list[dict]], dict],
    reads: Callable[[Plan, dict], list[str] | None] | None = None,
    finalize_reads: Callable[[Plan, list[dict]], list[str] | None] | None = None,
    scratch: tuple[str, ...] = (),
    streamed_results: bool = False,
) -> None:
    """``streamed_results``: ``finalize`` (and ``finalize_reads``) take the units' stats as
    a ``UnitResults`` sequence, read from a local spill by position, so that a stage of a
    million units never holds every unit's stats at once."""
    _STAGES[name] = (run_unit, finalize)
    if reads is not None:
        _READS[name] = (reads, finalize_reads)
    _SCRATCH[name] = scratch
    if streamed_results:
        _STREAMED.add(name)


# The module of a stage whose name is not its module's (plans saved on disk name the stage).
_STAGE_MODULES = {"annotation": "annotate.stage"}


def _stage(name: str) -> tuple[Callable[..., dict], Callable[..., dict]]:
    if name not in _STAGES:
        # Stages register on import of their module.
        importlib.import_module(f"shardcore.{_STAGE_MODULES.get(name, name)}")
    try:
        return _STAGES[name]
    except KeyError:
        raise KeyError(f"unknown stage {name!r}; known: {sorted(_STAGES)}") from None


class UnitSuperseded(Exception):
    """The unit's work was done but not published: ``may_publish`` said another run of it
    took over (its claim lapsed and the unit was given to someone else)."""


def run_unit(
    plan: Plan,
    unit_id: str,
    *,
    may_publish: Callable[[], bool] | None = None,
    unit: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run one unit unless it already finished; returns its stats either way.

    ``unit`` is the unit's spec when the caller has it (a job engine keeps each unit's spec
    in its own row): then ``plan.phases`` is not searched, and need not be loaded at all
    unless the stage itself reads it.

    ``may_publish``, when given, is asked once the work is done and before anything of it
    is published (uploaded to an object store, or its marker written): False raises
    UnitSuperseded and publishes nothing, so that a run whose claim was taken over (a host
    cut off past its lease) leaves no late objects in an artifact another run finished.
    The local copies of its remote inputs are in use (never evicted) until it returns."""
    with artifact_cache.artifact_scope():
        return _run_unit(plan, unit_id, may_publish, unit)


_REMOTE_OUT: contextvars.ContextVar[str | None] = contextvars.ContextVar("remote_out", default=None)


def remote_output() -> str | None:
    """The object-storage URL of the output whose unit runs in this thread (its runner
    sees the local work directory as ``plan.out``), None for a local output: for a unit
    that reads some files of the output by ranges rather than fetching them whole."""
    return _REMOTE_OUT.get()


def _run_unit(
    plan: Plan,
    unit_id: str,
    may_publish: Callable[[], bool] | None,
    unit: dict[str, Any] | None,
) -> dict[str, Any]:
    done = unit_result(plan.out, unit_id)
    if done is not None:
        return done
    runner, _ = _stage(plan.stage)

    def check() -> None:
        if may_publish is not None and not may_publish():
            raise UnitSuperseded(f"{plan.out}: unit {unit_id} was taken over; not published")

    if not storage.is_remote(plan.out):
        stats = runner(with_local_inputs(plan), unit if unit is not None else plan.unit(unit_id))
        check()
        mark_done(plan.out, unit_id, stats)
        return stats
    store, work = storage.open_store(plan.out), work_dir(plan.out)
    work.mkdir(parents=True, exist_ok=True)
    keys = None
    if plan.stage in _READS:
        keys = _READS[plan.stage][0](plan, unit if unit is not None else plan.unit(unit_id))
    if keys is not None:
        _pull_keys(store, work, keys)
        remote = None
    else:  # a stage (or a plan made before its stage declared them) without declared reads
        remote = _pull(store, work)
    before = _snapshot(work)
    local = dataclasses.replace(with_local_inputs(plan), out=str(work))
    running = _REMOTE_OUT.set(plan.out)
    try:
        stats = runner(local, unit if unit is not None else local.unit(unit_id))
    finally:
        _REMOTE_OUT.reset(running)
    check()
    _push(store, work, before, remote)
    # The push may have waited out a cut-off past the lease: asked again before the commit
    # point, and another run's marker (the same files; its stats hold other timings) stays.
    check()
    mark_done(work, unit_id, stats)  # later units and finalize on this host read it here
    if unit_result(plan.out, unit_id) is None:
        mark_done(plan.out, unit_id, stats)  # the commit point of the unit
    return stats


# Markers read at once on object storage (one GET each, in parallel threads), and per batch.
MARKER_READ_THREADS = 32
MARKER_READ_BATCH = 4096


class UnitResults(Sequence[dict[str, Any]]):
    """Every unit's recorded stats in plan order, spilled to a local temporary file as they
    were read (``read_unit_results``): an item is parsed from its bytes when asked for, so
    reading a million units' stats holds one at a time (and 8 bytes of offset per unit)."""

    def __init__(self, spill: IO[bytes], offsets: array) -> None:
        self._spill, self._offsets = spill, offsets

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def _read(self, i: int) -> dict[str, Any]:
        start, end = self._offsets[i], self._offsets[i + 1]
        return json.loads(os.pread(self._spill.fileno(), end - start, start))

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, i: slice) -> list[dict[str, Any]]: ...
    def __getitem__(self, i: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(i, slice):
            return [self._read(k) for k in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self._read(i)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for i in range(len(self)):
            yield self._read(i)

    def close(self) -> None:
        self._spill.close()


def _marker_bytes(out: str, store: storage.Store | None, unit_id: str) -> bytes | None:
    if store is None:
        for rel in (_marker_rel(unit_id), _flat_marker_rel(unit_id)):
            try:
                return (Path(out) / rel).read_bytes()
            except FileNotFoundError:
                continue
        return None
    for key in (_marker_rel(unit_id), _flat_marker_rel(unit_id)):
        try:
            return store.read_bytes(key)
        except FileNotFoundError:
            continue
    return None


def read_unit_results(plan: Plan, *, threads: int | None = None) -> UnitResults:
    """The recorded stats of every unit of ``plan`` in plan order (``UnitResults``), read a
    batch of ``MARKER_READ_BATCH`` markers at a time, on object storage with
    ``MARKER_READ_THREADS`` GETs in flight. Raises RuntimeError naming the unfinished
    units if any has no marker."""
    remote = storage.is_remote(plan.out)
    store = storage.open_store(plan.out) if remote else None
    workers = threads or (MARKER_READ_THREADS if remote else 1)
    spill = tempfile.TemporaryFile(prefix="shardyard-units-")
    offsets, missing = array("q", [0]), []
    ids = (unit["id"] for phase in plan.phases for unit in phase)

    def read(unit_id: str) -> tuple[str, bytes | None]:
        return unit_id, _marker_bytes(str(plan.out), store, unit_id)

    try:
        with ThreadPoolExecutor(max_workers=workers) if workers > 1 else _Inline() as pool:
            while batch := [
                unit_id for _, unit_id in zip(range(MARKER_READ_BATCH), ids, strict=False)
            ]:
                for unit_id, data in pool.map(read, batch):
                    if data is None:
                        missing.append(unit_id)
                        data = b"null"
                    spill.write(data)
                    offsets.append(offsets[-1] + len(data))
        spill.flush()
    except BaseException:
        spill.close()
        raise
    if missing:
        spill.close()
        raise RuntimeError(
            f"{plan.out}: cannot finalize, {len(missing)} unit(s) unfinished: {missing[:5]}"
        )
    return UnitResults(spill, offsets)


_T = TypeVar("_T")
_R = TypeVar("_R")


class _Inline:
    """A pool of no threads: ``map`` in this one (local markers)."""

    def __enter__(self) -> _Inline:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def map(self, fn: Callable[[_T], _R], items: Iterable[_T]) -> Iterator[_R]:
        return map(fn, items)


def finalize(plan: Plan) -> dict[str, Any]:
    """Write the artifact's manifest from the stats of every unit (all must be done)."""
    _, finisher = _stage(plan.stage)
    results = read_unit_results(plan)
    try:
        stats: Sequence[dict[str, Any]] = results if plan.stage in _STREAMED else list(results)
        return _finalize_with(plan, finisher, stats)
    finally:
        results.close()


def _finalize_with(
    plan: Plan, finisher: Callable[..., dict], stats: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    if not storage.is_remote(plan.out):
        # Every unit is done: a temporary left in the output is a killed writer's.
        atomic.remove_temporaries(plan.out)
        return finisher(plan, stats)

    store, work = storage.open_store(plan.out), work_dir(plan.out)
    work.mkdir(parents=True, exist_ok=True)
    reads = _READS.get(plan.stage, (None, None))[1]
    declared = reads(plan, stats) if reads is not None else None
    if declared is not None:
        # One listing per artifact, for the scratch to delete; only what finalize reads is
        # downloaded.
        remote = store.sizes()
        _pull_keys(store, work, declared)
    else:
        remote = _pull(store, work)
    before = _snapshot(work)
    manifest = finisher(dataclasses.replace(plan, out=str(work)), stats)
    _push(store, work, before, remote, skip=(MANIFEST_NAME,))
    store.put_file(MANIFEST_NAME, work / MANIFEST_NAME)  # the commit point, last
    for key in remote:  # what the stage removed (its scratch) goes from the store too
        if not _artifact_file(key) or key == MANIFEST_NAME or (work / key).exists():
            continue
        # With declared reads the work directory holds only some files: what goes is the
        # scratch (SCRATCH_DIRS), whichever host wrote it.
        scratch = key.split("/", 1)[0] in SCRATCH_DIRS or key.startswith(_SCRATCH[plan.stage])
        if declared is None or scratch:
            store.delete(key)
    if isinstance(store, storage.S3Store):
        store.abort_uploads()  # parts of uploads whose writer died: every unit is done
    shutil.rmtree(work, ignore_errors=True)
    if plan.stage in _STREAMED:
        # Its manifest as a reader gets it, from the store: the work directory is gone.
        return read_manifest(plan.out)
    return manifest


def _run_unit_by_id(plan_json: dict, unit_id: str) -> dict:
    return run_unit(Plan.from_json(plan_json), unit_id)


def run_local(
    plan: Plan,
    *,
    workers: int = 1,
    on_unit_done: Callable[[dict[str, Any], dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run every phase of ``plan`` in this process (workers=1) or a process pool, then
    finalize. ``on_unit_done(unit, stats)`` is called as units finish (progress bars).

    One pool serves every phase: starting spawned workers costs each about half a
    CPU-second of imports, which a pool per phase would pay again at every phase boundary.
    Within a phase, units that give their size (``"bytes"``) are submitted largest first,
    so a big unit never starts last and leaves the other workers idle at the end of the
    phase (the output does not depend on the order)."""

    workers = limits.workers(workers)  # before the plan is saved: nothing written on refusal
    save_plan(plan)
    if workers <= 1 or max((len(p) for p in plan.phases), default=0) <= 1:
        for phase in plan.phases:
            for unit in phase:
                stats = run_unit(plan, unit["id"])
                if on_unit_done:
                    on_unit_done(unit, stats)
        return finalize(plan)

    plan_json = plan.to_json()
    with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool:
        for phase in plan.phases:
            ordered = sorted(phase, key=lambda u: -(u.get("bytes") or 0))  # stable
            futures = {pool.submit(_run_unit_by_id, plan_json, u["id"]): u for u in ordered}
            for fut in as_completed(futures):
                stats = fut.result()
                if on_unit_done:
                    on_unit_done(futures[fut], stats)
    return finalize(plan)
