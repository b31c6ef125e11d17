"""shardcore is a pure library: no module under it may import django or celery."""

import ast
import subprocess
import sys
from pathlib import Path

SHARDCORE = Path(__file__).resolve().parents[2] / "shardcore"
FORBIDDEN = {"django", "celery", "rest_framework", "webapp", "workers"}


def _imported_roots(tree: ast.AST) -> set[str]:
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_it_finds_no_forbidden_import_in_any_shardcore_module():
    offenders = []
    files = sorted(SHARDCORE.rglob("*.py"))
    assert files, "shardcore has no modules"
    for path in files:
        bad = _imported_roots(ast.parse(path.read_text(), filename=str(path))) & FORBIDDEN
        if bad:
            offenders.append(f"{path.relative_to(SHARDCORE.parent)} imports {sorted(bad)}")
    assert offenders == []


def test_it_detects_a_forbidden_import():
    tree = ast.parse("import os\nfrom django.db import models\n")
    assert _imported_roots(tree) & FORBIDDEN == {"django"}


def test_it_loads_every_shardcore_module_without_django_in_sys_modules():
    modules = [
        ".".join(p.relative_to(SHARDCORE.parent).with_suffix("").parts)
        for p in sorted(SHARDCORE.rglob("*.py"))
        if p.name != "__main__.py"
    ]
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}:\n"
        "    importlib.import_module(m.removesuffix('.__init__'))\n"
        "bad = sorted(k for k in sys.modules if k.split('.')[0] in {'django', 'celery'})\n"
        "print(bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
