"""The newest megatron-core release reads the Megatron export exactly: every sample of the
printed command equal to Shardyard's schedule, no index built. Not a test (it needs its own
Python 3.12 virtual environment; see bench/README.md).

    .venv/bin/python bench/megatron/newest.py [--venv /work/venv312] [--version 0.19.2]
        [--also 0.17.1,0.18.2] [--workdir /tmp/bench-megatron-newest]

megatron-core 0.17 and later need Python >= 3.12 and the project's environment is 3.11, so
the check runs in a separate virtual environment: ``--venv`` (created with pyenv's 3.12 and
``pip install megatron-core==VERSION transformers`` when missing; PyPI has no CPU torch for
3.12, so pip takes the CUDA build, about 5.5 GB installed, which runs on the CPU). Each
``--also`` release is installed alone (``pip --target``) beside the venv and put ahead of
the venv's megatron-core on the path.

Setup, in this (project) environment: the unit tests' two-pool, multi-shard, two-stage
mixture of real text (CPython's standard library, cl100k tokenizer), its materialized copy,
``shardyard export --format megatron --out`` of each (default arguments), and the expected
tokens of every sample (``Mixture.tokens``). Then, in the 3.12 environment, for each export
and each stage's printed command line: the dataset as Megatron-LM's ``pretrain_gpt.py``
builds it by default (``tests/unit/megatron_lm.py``: the arguments parsed as that release
defines them, the tokenizer from megatron-core's own ``build_tokenizer``), under a
one-process gloo group; counted: samples equal to the schedule, and calls of megatron-core's
index builders. A control runs the same line with another ``--seed``: the builders must be
called and the samples differ.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

SEQ = 32


def ensure_venv(venv: Path, version: str) -> Path:
    python = venv / "bin" / "python"
    if python.exists():
        return python
    pyenv_root = subprocess.run(["pyenv", "root"], capture_output=True, text=True).stdout.strip()
    candidates = sorted(Path(pyenv_root, "versions").glob("3.12.*"))
    if not candidates:
        raise SystemExit("no Python 3.12 under pyenv; megatron-core >= 0.17 needs it")
    subprocess.run([str(candidates[-1] / "bin" / "python"), "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", f"megatron-core=={version}", "transformers"],
        check=True,
    )
    return python


def setup(work: Path) -> list[dict]:
    """Exports of the mixture and of its materialized copy; per export, the stage lines
    and the expected samples file."""
    import numpy as np

    from shardcore.mixture import Mixture
    from tests.unit import mix_fixtures

    mixture = work / "mixture"
    if not (mixture / "manifest.json").exists():
        mix_fixtures.package_split_world(work, seq_len=SEQ, samples=16_608, anneal_samples=2_936)
    mix = Mixture(mixture)
    expected = work / "expected.npy"
    np.save(expected, np.stack([mix.tokens(i) for i in range(mix.num_samples)]))
    return exports(work)


def exports(work: Path) -> list[dict]:
    """Fresh exports of the mixture and its copy (a control's megatron-core build left in a
    cache directory would otherwise be loaded by the next run)."""
    from shardcore.export import export

    expected = work / "expected.npy"
    mixture = work / "mixture"
    out = []
    for name, artifact in (("mixture", mixture), ("materialized", work / "flat")):
        d = work / f"export-{name}"
        shutil.rmtree(d, ignore_errors=True)  # and what a control run of megatron-core built
        text = export(artifact, "megatron", out=d)
        lines = [x for x in text.splitlines() if x.startswith("--seq-length")]
        record = json.loads((d / "export.json").read_text())
        out.append({"export": name, "lines": lines, "expected": str(expected),
                    "prefixes": len(record["stages"][-1]["keys"][0]["gpt"])})  # fmt: skip
    return out


def identity_jobs(work: Path, vocab: int) -> list[dict]:
    """Tokenizer argument lines and the identity Shardyard keys for megatron-core 0.18-0.19
    (``TrainerTokenizer.identity("core-0.18")``), to hold against what 0.19 builds."""
    import shlex

    from shardcore.export import megatron as mc

    hf = work / "hf-tokenizer"
    if not (hf / "tokenizer.json").exists():
        from tokenizers import Tokenizer, models, pre_tokenizers, trainers

        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["</s>"], show_progress=False)
        tok.train_from_iterator(["def f(x):\n    return x + 1\n"] * 20, trainer)
        hf.mkdir(parents=True, exist_ok=True)
        tok.save(str(hf / "tokenizer.json"))
        (hf / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    lines = [
        f"--tokenizer-type NullTokenizer --vocab-size {vocab}",
        f"--tokenizer-type NullTokenizer --vocab-size {vocab} --null-tokenizer-eod-id 5",
        f"--tokenizer-type NullTokenizer --vocab-size {vocab} --null-tokenizer-pad-id 7",
        f"--tokenizer-type HuggingFaceTokenizer --tokenizer-model {hf}",
        f"--tokenizer-type HuggingFaceTokenizer --tokenizer-model {hf} --trust-remote-code "
        "--tokenizer-hf-no-use-fast --tokenizer-hf-no-include-special-tokens",
    ]
    jobs = []
    for line in lines:
        tok, problems = mc._tokenizer_of_argv(mc._flags(shlex.split(line)))
        assert not problems, problems
        want = {b: tok.identity(b) for b in ("core-0.17", "core-0.18")}
        jobs.append({"line": f"--seq-length {SEQ} {line}", "want": want})
    return jobs


def child(spec_path: str) -> None:
    """In the newest megatron-core's environment: build each line's dataset, count."""
    import numpy as np
    import torch.distributed as td
    from megatron.core.datasets import gpt_dataset, helpers

    from bench.megatron.counting import count_calls
    from tests.unit import megatron_lm

    calls = count_calls(
        [
            (helpers, "build_sample_idx"),
            (helpers, "build_blending_indices"),
            (gpt_dataset, "_build_document_index"),
            (gpt_dataset, "_build_shuffle_index"),
        ]
    )
    spec = json.loads(Path(spec_path).read_text())
    store = td.FileStore(str(Path(spec_path).with_suffix(".store")), 1)
    td.init_process_group("gloo", store=store, rank=0, world_size=1)
    from importlib.metadata import version

    results = []
    for job in spec["jobs"]:
        expected = np.load(job["expected"], mmap_mode="r")
        for k, line in enumerate(job["lines"]):
            for control in (False, True):
                if control and k:
                    continue
                run = line.replace("--seed 1234", "--seed 1235") if control else line
                before = calls["n"]
                t = time.perf_counter()
                ds, _, _, tok = megatron_lm.build_datasets(run)
                build_s = time.perf_counter() - t
                end = int(run.split("--train-samples ")[1].split()[0])
                n = min(end, 2_000) if control else end
                equal = 0
                for i in range(n):
                    item = ds[i]
                    got = np.concatenate([item["tokens"].numpy(), item["labels"].numpy()[-1:]])
                    equal += bool(np.array_equal(got, expected[i]))
                results.append({
                    "export": job["export"], "stage": k, "control": control,
                    "samples_equal": equal, "samples": n, "index_builds": calls["n"] - before,
                    "build_s": round(build_s, 3), "tokenizer": dict(tok.unique_identifiers),
                })  # fmt: skip
    td.destroy_process_group()
    identities = []
    build = "core-0.17" if megatron_lm.core_version() < (0, 18) else "core-0.18"
    for job in spec["identities"]:
        want = job["want"][build]
        try:
            got = dict(
                megatron_lm.build_tokenizer(megatron_lm.parse(job["line"])).unique_identifiers
            )
        except ImportError as exc:  # a HuggingFace tokenizer needs transformers
            got = f"not built: {exc}"
        except SystemExit:  # argparse: an argument this release does not have
            got = None
        identities.append({"line": job["line"], "want": want, "got": got, "build": build})
    print(json.dumps({"megatron_core": version("megatron-core"), "torch": version("torch"),
                      "python": sys.version.split()[0], "results": results,
                      "identities": identities}))  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--venv", default="/work/venv312")
    ap.add_argument("--version", default="0.19.2")
    ap.add_argument(
        "--also",
        default="0.17.1,0.18.2",
        help="older 3.12-only releases to check too (pip --target beside the venv)",
    )
    ap.add_argument("--workdir", default="/tmp/bench-megatron-newest")
    ap.add_argument("--child")
    args = ap.parse_args()
    if args.child:
        child(args.child)
        return
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    python = ensure_venv(Path(args.venv), args.version)
    jobs = setup(work)
    from shardcore.mixture import Mixture

    vocab = int(Mixture(work / "mixture").manifest["tokenizer"]["vocab_size"])
    idents = identity_jobs(work, vocab)
    ok = True
    for v in [args.version, *[x for x in args.also.split(",") if x]]:
        path = [str(ROOT)]
        if v != args.version:  # megatron-core alone, ahead of the venv's on the path
            extra = Path(f"{args.venv}-extra") / f"mc-{v}"
            if not (extra / "megatron").exists():
                subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--target",
                                str(extra), f"megatron-core=={v}"], check=True)  # fmt: skip
            path.insert(0, str(extra))
        jobs = exports(work)
        spec = work / "jobs.json"
        spec.write_text(json.dumps({"jobs": jobs, "identities": idents}))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
        proc = subprocess.run([str(python), __file__, "--child", str(spec)], capture_output=True,
                              text=True, env=env)  # fmt: skip
        if proc.returncode != 0:
            raise SystemExit(f"child failed:\n{proc.stdout}\n{proc.stderr[-4000:]}")
        ok &= report(json.loads(proc.stdout.strip().splitlines()[-1]), jobs)
    print("EXACT" if ok else "NOT EXACT")
    sys.exit(0 if ok else 1)


def report(rep: dict, jobs: list[dict]) -> bool:
    print(f"megatron-core {rep['megatron_core']} (torch {rep['torch']}, "
          f"Python {rep['python']}), {jobs[0]['prefixes']} prefixes in the last stage")  # fmt: skip
    ok = True
    for r in rep["results"]:
        what = "control --seed 1235" if r["control"] else "printed line"
        print(f"  {r['export']:12s} stage {r['stage']} {what:20s} samples equal "
              f"{r['samples_equal']:>6} / {r['samples']:<6} index builds {r['index_builds']:>3}"
              f"  ({r['build_s']} s)")  # fmt: skip
        if r["control"]:
            ok &= r["index_builds"] > 0 and r["samples_equal"] < r["samples"] // 10
        else:
            ok &= r["index_builds"] == 0 and r["samples_equal"] == r["samples"]
    print("  tokenizer identity built:", json.dumps(rep["results"][0]["tokenizer"]))
    print(f"  tokenizer identities, Shardyard's ({rep['identities'][0]['build']}) vs built:")
    for r in rep["identities"]:
        same = r["want"] == r["got"]
        ok &= same or str(r["got"]).startswith("not built")
        said = "equal" if same else "DIFFERENT"
        if r["want"] is None and r["got"] is None:
            said = "refused by both (an argument this release does not have)"
        print(f"    {said}: {r['line'].split(' ', 2)[2]}")
        if not same:
            print(f"      want {json.dumps(r['want'])}\n      got  {json.dumps(r['got'])}")
    return ok


if __name__ == "__main__":
    main()
