"""What ``make run`` and docker-compose install (requirements.lock, no dev extra) is enough
for every module the service, the workers and the command line import: a virtual
environment built from the runtime lock alone imports each module of shardcore, webapp and
workers, and runs the ``shardyard`` command line on an ``s3://`` location.

The environment is built once per lock (its path is keyed by the hash of requirements.lock,
pyproject.toml and this checkout), under the system's temporary directory; pip installs
from the local package caches. Modules that need the dev extra are listed in
``DEV_ONLY`` with the reason, and packages imported only inside the functions that need
them (torch, megatron-core) in ``DEV_ONLY_IMPORTS``; neither is reached by the service, the
workers or the command line."""

from __future__ import annotations

import ast
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Modules that need the dev extra (torch, megatron-core, ...), and why; the service, the
# workers and the command line import none of them.
DEV_ONLY: dict[str, str] = {
    "shardcore.loader.torch_data": "the loader's torch classes, imported by shardcore.loader "
    "when a trainer's process first asks for them (trainers install torch themselves)",
}
# Packages imported inside functions that the runtime lock leaves out, and why; neither is
# reached by the service, the workers or the command line.
DEV_ONLY_IMPORTS = {
    "torch": "shardcore.loader's torch Dataset/DataLoader classes, built on first use by a "
    "trainer's process (trainers install torch themselves); the topics annotator's minilm "
    "encoder (its model package comes with the dev extra; the default static one needs "
    "no torch)",
    "ray": "shardcore.executors.ray, run only by `--executor ray` on a Ray cluster whose "
    "image brings ray (or `pip install 'shardyard[ray]'`); without it the command says so",
    "megatron": "megatron-core's own cache-key code when installed; shardcore.export.megatron "
    "and shardcore.blend fall back to their tested replicas without it",
}


def _imported_packages() -> set[str]:
    """Every top-level package that shardcore, webapp and workers import anywhere (inside
    functions too: ``import boto3`` in the function that first reads s3://), besides the
    standard library and themselves."""
    names = set()
    for top in ("shardcore", "webapp", "workers"):
        for path in (ROOT / top).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names.update(a.name.split(".")[0] for a in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module.split(".")[0])
    own = {"shardcore", "webapp", "workers", "__future__"}
    return {n for n in names if n not in sys.stdlib_module_names and n not in own}


IMPORT_ALL = r"""
import importlib, os, pkgutil, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
import django
django.setup()
skip = set(sys.argv[1:])
failed = []
count = 0
for top in ("shardcore", "workers", "webapp"):
    pkg = importlib.import_module(top)
    names = [top] + [m.name for m in pkgutil.walk_packages(pkg.__path__, top + ".")]
    for name in names:
        if name in skip or ".migrations." in name:
            continue
        try:
            importlib.import_module(name)
            count += 1
        except Exception as exc:
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
for name in os.environ["SHARDYARD_IMPORTED_PACKAGES"].split():
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed.append(f"{name} (imported inside a function): {type(exc).__name__}: {exc}")
print(count)
print("\n".join(failed), file=sys.stderr)
sys.exit(1 if failed else 0)
"""


def _runtime_venv() -> Path:
    """A venv with requirements.lock and this checkout (no dependencies of its own)."""
    key = hashlib.sha256()
    for name in ("requirements.lock", "pyproject.toml"):
        key.update((ROOT / name).read_bytes())
    key.update(str(ROOT).encode())
    venv = Path(tempfile.gettempdir()) / f"shardyard-runtime-venv-{key.hexdigest()[:16]}"
    done = venv / ".installed"
    if done.exists():
        return venv
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
           "--disable-pip-version-check"]  # fmt: skip
    subprocess.run([*pip, "-r", str(ROOT / "requirements.lock")], check=True, timeout=1800)
    subprocess.run([*pip, "--no-deps", "-e", str(ROOT)], check=True, timeout=600)
    done.write_text("ok\n")
    return venv


@pytest.fixture(scope="module")
def runtime_env(tmp_path_factory) -> dict:
    venv = _runtime_venv()
    data = tmp_path_factory.mktemp("runtime-data")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV", "DJANGO_SETTINGS_MODULE")
    }
    env.update(
        PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        SHARDYARD_DATA=str(data),
        SHARDYARD_HOME=str(data / "home"),
        DEBUG="1",
    )
    return {"venv": venv, "env": env}


def test_the_runtime_lock_installs_nothing_from_the_dev_extra(runtime_env):
    python = runtime_env["venv"] / "bin" / "python"
    for dev in ("pytest", "torch", "moto"):
        out = subprocess.run([str(python), "-c", f"import {dev}"], capture_output=True,
                             env=runtime_env["env"], cwd="/")  # fmt: skip
        assert out.returncode != 0, f"{dev} is importable: the venv is not the runtime lock's"


def test_every_module_imports_from_the_runtime_lock_alone(runtime_env):
    python = runtime_env["venv"] / "bin" / "python"
    packages = sorted(_imported_packages() - set(DEV_ONLY_IMPORTS))
    assert "boto3" in packages and "django" in packages
    out = subprocess.run(
        [str(python), "-c", IMPORT_ALL, *DEV_ONLY],
        capture_output=True,
        text=True,
        env={**runtime_env["env"], "SHARDYARD_IMPORTED_PACKAGES": " ".join(packages)},
        cwd=str(ROOT),
        timeout=600,
    )
    assert out.returncode == 0, f"modules that do not import:\n{out.stderr[-4000:]}"
    assert int(out.stdout.split()[-1]) > 100  # every module was walked


def test_the_command_line_reads_s3_from_the_runtime_lock(runtime_env, moto_server, tmp_path):
    """``shardyard verify s3://...`` reaches boto3 (a missing bucket is the store's own
    one-line answer, not an ImportError)."""
    shardyard = runtime_env["venv"] / "bin" / "shardyard"
    env = {**runtime_env["env"], **moto_server.env()}
    out = subprocess.run(
        [str(shardyard), "verify", "s3://shardyard-no-such-bucket/pools/p"],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(tmp_path),
        timeout=300,
    )
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and "No module named" not in out.stderr, out.stderr
    assert "shardyard-no-such-bucket" in out.stderr, out.stderr


def test_the_ray_executor_without_ray_says_how_to_install_it(runtime_env, tmp_path):
    """The runtime lock leaves ray out: ``--executor ray`` says which extra brings it, in
    one line."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.jsonl").write_text('{"text": "the quick brown fox"}\n')
    shardyard = runtime_env["venv"] / "bin" / "shardyard"
    out = subprocess.run(
        [str(shardyard), "tokenize", str(corpus), "--out", str(tmp_path / "tok"),
         "--executor", "ray"],
        capture_output=True, text=True, env=runtime_env["env"], cwd=str(tmp_path), timeout=300,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    assert "pip install 'shardyard[ray]'" in out.stderr, out.stderr
