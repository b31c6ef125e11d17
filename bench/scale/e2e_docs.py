"""Every stage of a dataset's life over a growing tokenized source of small documents, each
stage the process a user runs, with its peak RSS and CPU at each size and the growth fitted.
Not a test.

    DATABASE_URL=postgresql://... CELERY_BROKER_URL=redis://.../N SECRET_KEY=... \\
    PYTHONPATH=$PWD .venv/bin/python bench/scale/e2e_docs.py \\
        [--docs 1000000,10000000,100000000] [--annotate-max 10000000] [--work DIR]
        [--stages REGEX] [--again]

Per size N (``bench/scale/synthetic_source.py``): a tokenized source of N documents of
16-48 synthetic tokens in shards of 2^19 documents (64 MiB of tokens, what ``tokenize
--shard-size 64MiB`` cuts) with 6% copies of earlier documents (half exact, half one token
longer), and for the near-duplicate annotation at 43% a second one. Then, each a fresh
process, as a user runs them (the command line, one worker, the local executor):

- ``pool`` twice over the source, split by a filter on length (``n_tokens < 32`` and
  ``>= 32``, a 1% validation slice, 128 MiB of memory): the plan, both passes, finalize;
- ``register``: the service records the source and both pools as a build does (the pool's
  recorder: its quality report and recipe measurement, ``pool_register``) and the diversity
  mixture's version (``mixture_version_register``), on Postgres;
- ``quality --by n_tokens`` and ``quality --recipe`` over the first pool;
- ``mix --order diversity`` and ``mix --order greedy_block`` of the same number of
  samples at every N over the two pools;
- ``export --format megatron`` of the diversity mixture (the index cache for megatron-core);
- ``annotate --annotator minhash`` over the 6% and the 43% source (sizes up to
  ``--annotate-max``: signing costs ~100 us of CPU a document, ~3 hours a source at 10^8);
- ``taint``: a flag on 10 documents of the source, its taint computed (``flag_propagate``:
  the pools and the mixture version holding them).

Peak RSS is the process tree's high-water mark as GNU time reports it (``ru_maxrss``: the
process or the largest of its waited-for children), CPU its user + system time with its
children's.
Results: a table on stdout, ``results.json`` in the work directory, written as each stage
ends and kept across runs: a stage measured at a size is not measured again unless
``--again`` (``--stages`` picks stages by a regular expression over their names).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.scale import synthetic_source  # noqa: E402
from bench.scale.common import fit_power, machine, markdown_table  # noqa: E402

SEQ_LEN = 1024
SAMPLES = 16_384
FLAGGED = 10
CLI = [sys.executable, "-m", "shardcore.cli"]
TIME = "/usr/bin/time"  # GNU time (Debian: time)

DJANGO_STEP = r"""
import json, os, sys
sys.path.insert(0, {root!r})
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
import django
django.setup()
from bench.scale import e2e_docs
result = e2e_docs.{step}({args!r})
open({out!r}, "w").write(json.dumps(result))
"""


def run(cmd: list[str], log_path: Path) -> dict:
    """Run ``cmd`` to its end, its output appended to ``log_path``: its wall time, CPU
    (user + system, with its waited-for children's) and peak RSS (its own or its largest
    child's). GNU time starts it: a process this one forks carries this one's peak as its
    own ``ru_maxrss`` (the memory it was forked with), one that ``time`` forks does not."""
    times = log_path.parent / "time.txt"
    with open(log_path, "ab") as log:
        log.write(f"$ {' '.join(cmd)}\n".encode())
        log.flush()
        code = subprocess.call(
            [TIME, "-f", "%e %U %S %M", "-o", str(times), *cmd], stdout=log, stderr=log
        )
    if code != 0:
        tail = log_path.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{' '.join(cmd[2:5])} ... exited {code}:\n{tail}")
    wall, user, system, peak_kb = times.read_text().split()[-4:]
    return {
        "wall_s": float(wall),
        "cpu_s": float(user) + float(system),
        "peak_mb": int(peak_kb) / 1024,
    }


def django_step(step: str, args: dict, log_path: Path) -> dict:
    """A service step in a fresh interpreter with Django set up: its costs and its answer."""
    out = log_path.parent / f"{step}.json"
    code = DJANGO_STEP.format(root=str(ROOT), step=step, args=args, out=str(out))
    result = run([sys.executable, "-c", code], log_path)
    return {**result, "answer": json.loads(out.read_text())}


# -- the service's steps (run in a child interpreter with Django set up) -------------


def register_step(args: dict) -> dict:
    """Record the source (as the tokenize job's recorder does), both pools (the recorder:
    quality report and recipe) and the diversity mixture's version."""
    from bench.scale.e2e import record_tokenized
    from shardcore import manifest as mf
    from webapp.catalog.models import Source
    from webapp.catalog.services.mixtures import mixture_version_register
    from webapp.catalog.services.pools import pool_register

    forget(args["tag"])
    source = Source.objects.create(name=args["tag"], uri=args["text"])
    record_tokenized(source, Path(args["source"]), mf.read_manifest(args["source"]))
    pools = [pool_register(path=p, name=f"{args['tag']}-{i}") for i, p in enumerate(args["pools"])]
    version = mixture_version_register(path=args["mixture"], mixture=args["tag"])
    return {"source": source.pk, "pools": [p.pk for p in pools], "version": version.pk}


def taint_step(args: dict) -> dict:
    """A flag on ``FLAGGED`` documents of the source, its taint computed as the task does."""
    import numpy as np

    from webapp.catalog.models import Source, Taint
    from webapp.catalog.services.flags import flag_create, flag_propagate

    source = Source.objects.get(name=args["tag"])
    ids = np.linspace(0, args["documents"] - 1, FLAGGED).astype(np.int64)
    flag = flag_create(reason="e2e", source_id=source.pk, document_ids=ids)
    flag_propagate(flag_id=flag.pk)
    kinds = ("tokenized_source", "pool", "mixture_version")
    found = [
        (next(k for k in kinds if getattr(t, f"{k}_id")), t.documents)
        for t in Taint.objects.filter(flag=flag)
    ]
    return {"taints": sorted(found)}


def forget(tag: str) -> None:
    from webapp.catalog.models import (
        Flag,
        Mixture,
        MixtureVersion,
        Pool,
        Source,
        TokenizedSource,
    )

    Flag.objects.filter(source__name=tag).delete()
    MixtureVersion.objects.filter(mixture__name=tag).delete()
    Mixture.objects.filter(name=tag).delete()
    Pool.objects.filter(name__startswith=f"{tag}-").delete()
    TokenizedSource.objects.filter(source__name=tag).delete()
    Source.objects.filter(name=tag).delete()


# -- the stages of one size --------------------------------------------------------------


def commands(work: Path, n: int) -> list[tuple[str, str]]:
    """(stage, command line) of size ``n``, in order."""
    d = work / f"n{n}"
    src, pools = d / "source", (d / "pool-short", d / "pool-long")
    pool = f"pool {src} --seq-len {SEQ_LEN} --memory 128MiB --val-fraction 0.01 --quiet"
    mix = f"mix --component {pools[0]}:1 --component {pools[1]}:1 --max-repetitions 1000"
    mix += f" --tokens {SAMPLES * SEQ_LEN}"
    minhash = "annotate --annotator minhash --text-from tokens"
    return [
        ("pool (short)", f"{pool} --out {pools[0]} --filter 'n_tokens < 32'"),
        ("pool (long)", f"{pool} --out {pools[1]} --filter 'n_tokens >= 32'"),
        ("quality --by n_tokens", f"quality {pools[0]} --by n_tokens --json"),
        ("quality --recipe", f"quality {pools[0]} --by n_tokens --recipe --json"),
        ("mix --order diversity", f"{mix} --order diversity --out {d}/mix-diversity"),
        ("mix --order greedy_block", f"{mix} --order greedy_block --out {d}/mix-greedy"),
        (
            "export --format megatron",
            f"export --format megatron {d}/mix-diversity --out {d}/export",
        ),
        ("annotate minhash 6%", f"{minhash} {src} --out {d}/minhash-6"),
        ("annotate minhash 43%", f"{minhash} {d}/source-43 --out {d}/minhash-43"),
    ]


def size_stages(
    work: Path,
    n: int,
    wanted: Callable[[str], bool],
    annotate_max: int,
    record: Callable[[dict], None],
    log=print,
) -> None:
    """Build and measure the stages of size ``n`` that ``wanted`` names (each output made
    anew), each stage's row given to ``record`` as it ends."""
    d = work / f"n{n}"
    d.mkdir(parents=True, exist_ok=True)
    log_path = d / "run.log"
    template = synthetic_source.seed(work)
    t0 = time.process_time()
    synthetic_source.write(d / "source", n, 0.06, template, log=log)
    log(f"  source: {time.process_time() - t0:.0f} CPU-s")
    for name, line in commands(work, n):
        if not wanted(name) or (name.startswith("annotate") and n > annotate_max):
            continue
        if "43%" in name:
            synthetic_source.write(d / "source-43", n, 0.43, template, log=log)
        argv = shlex.split(line)
        if "--out" in argv:
            shutil.rmtree(argv[argv.index("--out") + 1], ignore_errors=True)
        log(f"  {name} ...")
        r = run([*CLI, *argv], log_path)
        record({"documents": n, "stage": name, **r})
        log(f"  {name}: {r['wall_s']:.1f} s, {r['cpu_s']:.1f} CPU-s, {r['peak_mb']:.0f} MB")
    args = {
        "tag": f"e2e-docs-{n}",
        "source": str(d / "source"),
        "text": str(work / "sources" / "seed-text"),
        "pools": [str(d / "pool-short"), str(d / "pool-long")],
        "mixture": str(d / "mix-diversity"),
        "documents": n,
    }
    for step, name in (("register_step", "register (recorder)"), ("taint_step", "flag taint")):
        if not wanted(name):
            continue
        log(f"  {name} ...")
        r = django_step(step, args, log_path)
        record({"documents": n, "stage": name, **r})
        log(f"  {name}: {r['wall_s']:.1f} s, {r['cpu_s']:.1f} CPU-s, {r['peak_mb']:.0f} MB")
        log(f"    {r['answer']}")


def growth(rows: list[dict]) -> list[list[object]]:
    """Per stage: peak and CPU at each size, the peak's ratio largest/smallest size and the
    fitted exponents."""
    out = []
    for name in dict.fromkeys(r["stage"] for r in rows):
        rs = sorted((r for r in rows if r["stage"] == name), key=lambda r: r["documents"])
        if len(rs) < 2:
            continue
        sizes = [r["documents"] for r in rs]
        peak = [r["peak_mb"] for r in rs]
        cpu = [max(r["cpu_s"], 1e-3) for r in rs]
        out.append(
            [
                name,
                " / ".join(f"{p:,.0f}" for p in peak),
                " / ".join(f"{c:,.1f}" for c in cpu),
                round(peak[-1] / peak[0], 2),
                round(fit_power(sizes, peak).slope, 3),
                round(fit_power(sizes, cpu).slope, 2),
            ]
        )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", default="1000000,10000000,100000000")
    ap.add_argument("--annotate-max", type=float, default=1e7)
    ap.add_argument("--work", default="/tmp/sy-e2e-docs")
    ap.add_argument("--stages", default="", help="a regular expression: the stages to run")
    ap.add_argument("--again", action="store_true", help="measure stages already in results.json")
    a = ap.parse_args()
    work = Path(a.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("SHARDYARD_DATA", str(work))
    results_path = work / "results.json"
    report = json.loads(results_path.read_text()) if results_path.exists() else {"rows": []}
    pick = re.compile(a.stages)
    for n in (int(float(x)) for x in a.docs.split(",")):
        done = {r["stage"] for r in report["rows"] if r["documents"] == n}

        def wanted(name: str, done: set = done) -> bool:
            return bool(pick.search(name)) and (a.again or name not in done)

        print(f"{n:,} documents ({machine()})", flush=True)

        def record(row: dict, n: int = n) -> None:
            key = (row["documents"], row["stage"])
            report["rows"] = [r for r in report["rows"] if (r["documents"], r["stage"]) != key]
            report["rows"].append(row)
            report.setdefault("machine", {})[str(n)] = machine()
            results_path.write_text(json.dumps(report, indent=1))

        size_stages(
            work, n, wanted, int(a.annotate_max), record, log=lambda m: print(m, flush=True)
        )
    rows = report["rows"]
    print(
        markdown_table(
            ["documents", "stage", "wall s", "CPU s", "peak MB"],
            [
                [r["documents"], r["stage"], r["wall_s"], r["cpu_s"], r["peak_mb"]]
                for r in sorted(rows, key=lambda r: (r["stage"], r["documents"]))
            ],
        )
    )
    print()
    print(
        markdown_table(
            ["stage", "peak MB", "CPU s", "peak largest/smallest", "peak ~docs^", "CPU ~docs^"],
            growth(rows),
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
