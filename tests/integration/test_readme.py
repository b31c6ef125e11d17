"""The README and the pages of docs/ are the truth about how to run Shardyard: every command
in their shell blocks is
either run here (the ``shardyard`` walk-through on real text, the PyTorch resume loop,
gunicorn serving the app) or mapped to the test that runs it; a command without an entry
fails. The configuration reference lists exactly the environment variables the code reads."""

from __future__ import annotations

import re
import shlex
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.support.docs import docs_text, page

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
DOCS = docs_text()  # README.md and every page of docs/
BIN = Path(sys.executable).parent

# The walk-through as written builds 2 MB of text per source; here 300 KB is enough.
WALKTHROUGH_SUBSTITUTIONS = {"max_bytes_per_source=2_000_000": "max_bytes_per_source=300_000"}

# Commands a test cannot run from here -> (test file, text that file must contain).
EXERCISED_ELSEWHERE = {
    "make run": ("tests/integration/test_embedded_stack.py", '"manage.py", "runstack"'),
    "make test": ("Makefile", "-m pytest $(PYTEST_ARGS)"),
    "torchrun pretrain_gpt.py": (
        "tests/unit/test_export_megatron.py",
        "BlendedMegatronDatasetBuilder",
    ),
    "manage.py runstack": ("tests/integration/test_embedded_stack.py", '"manage.py", "runstack"'),
    "manage.py load_demo": ("tests/integration/test_demo_load.py", '"load_demo"'),
    "manage.py ensure_admin": (
        "webapp/ops/management/commands/runstack.py",
        'call_command("ensure_admin")',  # run by the runstack test above
    ),
    "manage.py ping_workers": ("tests/integration/test_embedded_stack.py", '"ping_workers"'),
    "manage.py catalog source-register": (
        "tests/integration/test_commands.py",
        '"source-register"',
    ),
    "manage.py catalog tokenize": ("tests/integration/test_commands.py", '_call("tokenize"'),
    "manage.py catalog pool-build": ("tests/integration/test_commands.py", '"pool-build"'),
    "manage.py catalog materialize": ("tests/integration/test_commands.py", '_call("materialize"'),
    "manage.py catalog export": ("tests/integration/test_commands.py", '_call("export"'),
    "manage.py catalog run-resume": ("tests/integration/test_commands.py", '"run-resume"'),
    "manage.py catalog jobs-reap": ("tests/integration/test_jobs_lease.py", '"jobs-reap"'),
    "manage.py catalog scrub": ("tests/integration/test_scrub.py", '"catalog", "scrub"'),
    "export SHARDYARD_OIDC_": ("tests/unit/test_oidc_settings.py", "def readme_exports"),
    "manage.py storage report": ("tests/integration/test_ops_storage.py", '"storage", "report"'),
    "manage.py storage retire": ("tests/integration/test_ops_storage.py", '"storage", "retire"'),
    "manage.py storage gc": ("tests/integration/test_ops_storage.py", '"storage", "gc"'),
    "manage.py migrate": ("tests/integration/test_embedded_stack.py", '"manage.py", "runstack"'),
    "docker compose up": ("tests/unit/test_compose.py", "def test_workers_scale"),
    # The test workers start with the command line workers.celery.worker_command spells.
    "celery -A workers worker": ("tests/support/services.py", "worker_command("),
    # The object-storage block runs against moto's server there.
    "export AWS_ENDPOINT_URL=": (
        "tests/unit/test_s3_pipeline.py",
        "def test_it_runs_the_readme_s3_commands",
    ),
    "export DATABASE_URL=": ("tests/integration/test_settings.py", "DATABASE_URL"),
    "export CELERY_BROKER_URL=": ("tests/integration/test_settings.py", "CELERY_BROKER_URL"),
    "export SECRET_KEY=": ("tests/security/test_hardening.py", "SECRET_KEY"),
    # Ray's own command for a head; the Ray test's head is the same (ray.init in a process of
    # its own, on loopback), and the builds attach to it by address as the README's do.
    "ray start --head": ("tests/support/ray_head.py", "ray.init(num_cpus=2"),
    # The register test points the command line at a live server through these two.
    "export SHARDYARD_URL=": (
        "tests/integration/test_register.py",
        '"SHARDYARD_URL": live_server.url',
    ),
    "export SHARDYARD_SECURE_COOKIES=": (
        "tests/security/test_hardening.py",
        'SHARDYARD_SECURE_COOKIES="1"',
    ),
}
RUN_HERE = ("python -c", "shardyard ", "gunicorn webapp.wsgi")
# Read by the code but not configuration: Django's own bootstrap, and a former name read only
# to refuse it, naming the new one.
NOT_SETTINGS = {"DJANGO_SETTINGS_MODULE", "SHARDYARD_CACHE_LIMIT"}


def blocks(language: str, text: str = DOCS) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def commands(block: str) -> list[str]:
    """Shell commands of a block: continuation lines joined, comments dropped, ``&&`` and
    ``&`` split; an executable path is reduced to its name."""
    out = []
    for line in block.replace("\\\n", " ").splitlines():
        line = re.sub(r"\s+#\s.*$", "", line).strip()  # a trailing comment
        for part in re.split(r"\s&&\s|\s&$|\s&\s", line):
            part = part.strip().rstrip("&").strip()
            if part:
                out.append(re.sub(r"^(\.venv/bin/|\S*/)", "", part))
    return out


def all_commands() -> list[str]:
    return [c for b in blocks("sh") for c in commands(b)]


def test_it_maps_every_readme_command_to_a_test_that_runs_it():
    unmapped = []
    for command in all_commands():
        if command.startswith(RUN_HERE):
            continue
        key = next((k for k in EXERCISED_ELSEWHERE if k in command), None)
        if key is None:
            unmapped.append(command)
            continue
        path, marker = EXERCISED_ELSEWHERE[key]
        assert marker in (ROOT / path).read_text(), f"{command!r}: {path} lacks {marker!r}"
    assert not unmapped, f"documented commands no test exercises: {unmapped}"
    assert commands(blocks("sh", README)[0]) == ["make run", "make test"]  # the quick start


def test_it_documents_every_cli_command_with_an_example():
    listed = subprocess.run(
        [BIN / "shardyard", "--help"], capture_output=True, text=True, check=True
    ).stdout
    names = re.findall(r"^    (\w+)", listed, flags=re.M)
    examples = {c.split()[1] for c in all_commands() if c.startswith("shardyard ")}
    assert set(names) == examples, (names, examples)


def test_it_runs_the_cli_walkthrough_and_the_resume_loop_on_real_text(tmp_path, monkeypatch):
    (walkthrough,) = [
        b for b in blocks("sh") if "shardyard tokenize corpus/docstrings --out tok/" in b
    ]
    for command in commands(walkthrough):
        for old, new in WALKTHROUGH_SUBSTITUTIONS.items():
            command = command.replace(old, new)
        argv = shlex.split(command)
        argv[0] = str(BIN / argv[0])
        done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"

    megatron = (tmp_path / "megatron" / "megatron.txt").read_text()
    assert "--data-cache-path" in megatron and "ORDER NOT GUARANTEED" not in megatron
    names = (
        "data-args.txt",
        "olmo.yaml",
        "nanotron.yaml",
        "mixes/prose-code-flat",
        "megatron/cache",
    )
    for name in names:
        assert (tmp_path / name).exists(), name

    (olmo,) = [b for b in blocks("python") if "NumpyFSLDatasetConfig.from_dict" in b]
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(olmo, "docs/trainers.md", "exec"), scope)  # builds OLMo-core's dataset and loader
    assert len(scope["dataset"]) == 782 and scope["loader"].shuffle is False

    (loop,) = [b for b in blocks("python") if "Resume on 4 ranks" in b]
    monkeypatch.chdir(tmp_path)
    exec(compile(loop, "docs/trainers.md", "exec"), {})  # its own assert checks the resume


def test_it_serves_the_app_with_gunicorn_as_the_readme_says(db, tmp_path):
    from tests.support.services import worker_env

    (command,) = [c for c in all_commands() if c.startswith("gunicorn webapp.wsgi")]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = shlex.split(command.replace("0.0.0.0:8000", f"127.0.0.1:{port}"))
    env = worker_env(SHARDYARD_DATA=str(tmp_path))
    proc = subprocess.Popen([BIN / argv[0], *argv[1:]], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        deadline, status = time.monotonic() + 60, None
        while status is None and time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/") as r:
                    status = r.status
            except OSError:
                time.sleep(0.3)
        assert status == 200, proc.poll()
        # Slow clients (requests whose headers never end) hold a thread each; the app
        # still answers the probe beside them (a single sync worker would not).
        slow = []
        for _ in range(3):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            slow.append(s)
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=20) as r:
                assert r.status == 200 and b'"ok"' in r.read()
        finally:
            for s in slow:
                s.close()
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_it_lists_exactly_the_environment_variables_the_code_reads():
    read = set()
    pattern = re.compile(
        r"""(?:env_(?:str|bool|int|list|paths|roots)\(|_raw\(|_number\(|os\.environ\.get\(|os\.environ\[)\s*"([A-Z][A-Z0-9_]*)\""""
    )
    # The loader reads its rank and world size as pairs: _env_rank("RANK", "WORLD_SIZE").
    pairs = re.compile(r'_env_rank\(\s*"([A-Z][A-Z0-9_]*)",\s*"([A-Z][A-Z0-9_]*)"')
    for directory in ("webapp", "workers", "shardcore"):
        for path in (ROOT / directory).rglob("*.py"):
            text = path.read_text()
            read |= set(pattern.findall(text))
            read |= {name for pair in pairs.findall(text) for name in pair}
    table = page("reference/configuration.md")
    first_column = re.findall(r"^\| (`[^|]*`) \|", table, flags=re.M)
    documented = {name for cell in first_column for name in re.findall(r"`(\w+)`", cell)}
    assert read - NOT_SETTINGS == documented, {
        "read but not documented": sorted(read - NOT_SETTINGS - documented),
        "documented but not read": sorted(documented - read),
    }
