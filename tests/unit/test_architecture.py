"""The import rules of docs/architecture.md, checked on every module of shardcore, webapp
and workers by parsing its imports (top-level and in-function, absolute and relative)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("shardcore", "webapp", "workers")

# (who, what it must never import, why): a module is "who" when its dotted name is it or
# starts with it and a dot; likewise for what it imports.
RULES = (
    ("shardcore", ("django", "celery", "rest_framework", "webapp", "workers"),
     "the library runs without a server"),
    ("webapp.api", ("webapp.dashboard",), "the API reads the catalog, not the pages"),
    ("webapp.dashboard", ("webapp.api",), "pages and API are siblings over the catalog"),
    ("webapp.catalog", ("webapp.dashboard", "webapp.api", "webapp.ops"),
     "the catalog knows nothing of who shows it"),
    ("webapp.jobs", ("webapp.dashboard", "webapp.api", "webapp.catalog", "webapp.ops"),
     "the job engine is generic: recorders are registered by name"),
    ("webapp.ops", ("webapp.dashboard", "webapp.api"), "operations run without the pages"),
    ("workers", ("webapp.dashboard", "webapp.api"), "tasks call services, never views"),
    ("webapp.roles", ("webapp.catalog", "webapp.jobs", "webapp.ops", "webapp.dashboard",
                      "webapp.api"), "every app may ask for a role"),
    ("webapp.links", ("webapp.catalog", "webapp.jobs", "webapp.ops", "webapp.dashboard",
                      "webapp.api"), "every app may link to a page"),
    ("webapp.paging", ("webapp.catalog", "webapp.jobs", "webapp.ops", "webapp.dashboard",
                       "webapp.api"), "every app may page a list"),
    ("shardcore.mixture.layout", ("shardcore",),
     "a mixture's file names are shared by its modules and depend on none"),
)  # fmt: skip


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(source: str, module: str, *, is_package: bool = False) -> set[str]:
    """Every module ``source`` (the text of ``module``) imports, as absolute dotted names:
    ``from a import b`` counts as ``a`` and ``a.b`` (b may be a module)."""
    out: set[str] = set()
    package = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            out.add(name)
            out.update(f"{name}.{alias.name}" for alias in node.names)
    return out


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _is_selectors(name: str) -> bool:
    return "selectors" in name.split(".")


def _is_services(name: str) -> bool:
    return "services" in name.split(".")


def violations(modules: dict[str, set[str]]) -> list[str]:
    """Every import of ``modules`` (name -> imported names) that breaks a rule."""
    out = []
    for module, imported in sorted(modules.items()):
        for who, banned, why in RULES:
            if not _under(module, who):
                continue
            for name in sorted(imported):
                if any(_under(name, b) for b in banned):
                    out.append(f"{module} imports {name} ({why})")
        if _is_selectors(module):
            # Reads never write: a selector that called a service could change rows.
            out += [
                f"{module} imports {name} (selectors import no services)"
                for name in sorted(imported)
                if _is_services(name)
            ]
    return out


def scan(root: Path, packages=PACKAGES) -> dict[str, set[str]]:
    modules = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            name = module_name(path, root)
            modules[name] = imports_of(
                path.read_text(), name, is_package=path.name == "__init__.py"
            )
    return modules


def test_it_finds_no_import_that_breaks_a_rule():
    modules = scan(ROOT)
    assert len(modules) > 100 and "webapp.catalog.selectors" in modules
    assert violations(modules) == []


def test_it_reports_each_kind_of_violation_in_a_crafted_tree(tmp_path):
    files = {
        "shardcore/__init__.py": "",
        "shardcore/bad.py": "def f():\n    from django.db import models\n",
        "webapp/__init__.py": "",
        "webapp/api/__init__.py": "",
        "webapp/api/views.py": "from webapp.dashboard import contexts\n",
        "webapp/catalog/__init__.py": "",
        "webapp/catalog/selectors/__init__.py": "from ..services import flag_create\n",
        "webapp/catalog/selectors/runs.py": "import webapp.catalog.models\n",
        "webapp/catalog/services.py": "import numpy\n",
        "webapp/jobs/__init__.py": "",
        "webapp/jobs/selectors.py": "from webapp.jobs import services\n",
        "workers/__init__.py": "",
        "workers/tasks.py": "from webapp.catalog import services\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = violations(scan(tmp_path))
    assert found == [
        "shardcore.bad imports django.db (the library runs without a server)",
        "shardcore.bad imports django.db.models (the library runs without a server)",
        "webapp.api.views imports webapp.dashboard (the API reads the catalog, not the pages)",
        "webapp.api.views imports webapp.dashboard.contexts "
        "(the API reads the catalog, not the pages)",
        "webapp.catalog.selectors imports webapp.catalog.services (selectors import no services)",
        "webapp.catalog.selectors imports webapp.catalog.services.flag_create "
        "(selectors import no services)",
        "webapp.jobs.selectors imports webapp.jobs.services (selectors import no services)",
    ]


def test_it_resolves_relative_imports_from_modules_and_packages():
    assert imports_of("from . import x\n", "webapp.catalog.selectors", is_package=True) == {
        "webapp.catalog.selectors",
        "webapp.catalog.selectors.x",
    }
    assert imports_of("from ..models import Pool\n", "webapp.catalog.selectors.pools") == {
        "webapp.catalog.models",
        "webapp.catalog.models.Pool",
    }


def test_it_loads_every_shardcore_module_without_django_in_sys_modules():
    modules = [
        ".".join(p.relative_to(ROOT).with_suffix("").parts)
        for p in sorted((ROOT / "shardcore").rglob("*.py"))
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


# --- module size and import cycles ------------------------------------------------------

MAX_LINES = 700
# Modules over the limit, each with what it is to be split into: a known debt, not a
# permission. None today.
KNOWN_LONG: dict[str, str] = {}


def _python_files(root: Path) -> list[Path]:
    return [
        p
        for package in PACKAGES
        for p in sorted((root / package).rglob("*.py"))
        if "migrations" not in p.parts
    ]


def test_no_module_is_over_700_lines_but_the_known_ones():
    # The product's packages, and its benchmarks, tests and examples (migrations aside).
    others = [
        p
        for folder in ("bench", "tests", "examples")
        for p in sorted((ROOT / folder).rglob("*.py"))
        if "migrations" not in p.parts and ".venv" not in p.parts[len(ROOT.parts) :]
    ]
    long = {
        p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines())
        for p in [*_python_files(ROOT), *others]
        if len(p.read_text().splitlines()) > MAX_LINES
    }
    assert set(long) - set(KNOWN_LONG) == set(), long
    # A known one that got short is taken off the list (so it stays short).
    assert [name for name in KNOWN_LONG if name not in long] == []


def module_graph(root: Path) -> dict[str, set[str]]:
    """Each module of the three packages -> the project modules it imports when it is
    imported: top-level statements only (an in-function import runs later, when called).
    ``from a import b`` counts as ``a.b`` when that is a module, else ``a``; importing a
    package's submodule runs the package's ``__init__`` too."""
    names = {module_name(p, root): p for p in _python_files(root)}

    def known(name: str) -> str | None:
        while name and name not in names:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in names.items():
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        found: set[str] = set()
        for node in _top_level(ast.parse(path.read_text()).body):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    base = ".".join(package[: len(package) - node.level + 1] + [base]).strip(".")
                targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
            for target in targets:
                hit = known(target)
                while hit:
                    found.add(hit)
                    hit = known(hit.rpartition(".")[0])
        found.discard(module)
        # A module's own packages run before it; an edge to them is no cycle of its making.
        graph[module] = {m for m in found if not module.startswith(m + ".")}
    return graph


def _top_level(body: list[ast.stmt]):
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        elif isinstance(node, (ast.If, ast.Try)):
            yield from _top_level(node.body)
            yield from _top_level(node.orelse)
            for handler in getattr(node, "handlers", []):
                yield from _top_level(handler.body)
            yield from _top_level(getattr(node, "finalbody", []))


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def test_no_import_cycle_among_the_modules():
    graph = module_graph(ROOT)
    assert len(graph) > 100 and "shardcore.storage" in graph["shardcore.manifest"]
    assert cycles(graph) == []


def test_it_finds_a_cycle_in_a_crafted_tree(tmp_path):
    files = {
        "shardcore/__init__.py": "",
        "shardcore/a.py": "from shardcore import b\n",
        "shardcore/b.py": "import shardcore.c\n",
        "shardcore/c.py": "from . import a\n",
        "shardcore/d.py": "def f():\n    from shardcore import a\n",  # in a function: no edge
        "webapp/__init__.py": "",
        "workers/__init__.py": "",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert cycles(module_graph(tmp_path)) == [["shardcore.a", "shardcore.b", "shardcore.c"]]


def test_views_catch_the_catalogs_errors_alone():
    """The one translation of shardcore's errors is at the service boundary
    (``webapp.catalog.errors.refused`` and ``boundary``): a page or an API view that
    caught shardcore's exceptions itself would be a second one."""
    found = []
    for package in ("webapp/api", "webapp/dashboard"):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.ExceptHandler) and node.type is not None:
                    names = {n.id for n in ast.walk(node.type) if isinstance(n, ast.Name)}
                    names |= {n.attr for n in ast.walk(node.type) if isinstance(n, ast.Attribute)}
                    if names & {
                        "ShardcoreError",
                        "FormatError",
                        "ManifestError",
                        "InputError",
                        "CorruptDataError",
                    }:
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == [], found


# --- no branch on an export format's name -----------------------------------------------

# Where export formats are looked up in or looped over shardcore.export.FORMATS, never
# named: each format's options, file names and rendering are hooks on its registry entry,
# so a new trainer is one entry, not an edit to every caller.
FORMAT_BLIND = (
    "shardcore/commands",
    "webapp/catalog/services",
    "webapp/catalog/management",
    "webapp/dashboard/views",
    "webapp/api",
)
# (file, format name) -> why that file may compare with or key by that name. None today.
FORMAT_NAME_ALLOWED: dict[tuple[str, str], str] = {}


Branch = tuple[str, int, str, str]  # (file, line, format name, how it is used)


def format_names() -> set[str]:
    """Every name a format answers to: shardcore's and the catalog's."""
    from shardcore.export import FORMATS

    return {n for f in FORMATS.values() for n in (f.name, f.catalog)}


def _strings(node: ast.expr) -> list[ast.Constant]:
    """The string constants of a comparison's operand, and of a tuple, list or set literal
    it is (``fmt in ("megatron", "olmo")``)."""
    items = [node, *node.elts] if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [c for c in items if isinstance(c, ast.Constant) and isinstance(c.value, str)]


def format_branches(root: Path, names: set[str], folders=FORMAT_BLIND) -> list[Branch]:
    """(file, line, name, how) for each format name (any case) that a module under
    ``folders`` compares with (``==``, ``in``), keys a dict by or matches a case on: a
    branch on a format. A call, a help text or a docstring naming one is no branch."""
    out = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            where = path.relative_to(root).as_posix()
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.Compare):
                    operands = [node.left, *node.comparators]
                    found = [(c, "compared") for op in operands for c in _strings(op)]
                elif isinstance(node, ast.Dict):
                    found = [(c, "a dict key") for k in node.keys if k for c in _strings(k)]
                elif isinstance(node, ast.MatchValue):
                    found = [(c, "a match case") for c in _strings(node.value)]
                else:
                    continue
                out += [
                    (where, c.lineno, c.value, how) for c, how in found if c.value.lower() in names
                ]
    return sorted(out)


def unexplained(
    found: list[Branch], allowed: dict[tuple[str, str], str]
) -> tuple[list[Branch], list[tuple[str, str]]]:
    """(the branches the allow-list does not name, the allow-list's entries that name no
    branch any more: taken off, so that the list stays the truth)."""
    hits = {(where, name) for where, _line, name, _how in found}
    return (
        [hit for hit in found if (hit[0], hit[2]) not in allowed],
        sorted(set(allowed) - hits),
    )


def test_no_caller_branches_on_an_export_formats_name():
    names = format_names()
    assert {"megatron", "olmo", "olmo-core", "nanotron"} <= names
    assert unexplained(format_branches(ROOT, names), FORMAT_NAME_ALLOWED) == ([], [])


def test_it_finds_a_branch_on_a_format_name_in_a_crafted_tree(tmp_path):
    files = {
        "shardcore/commands/export.py": (
            'def run(args):\n    if args.format == "megatron":\n        return 1\n'
            '    return export(args.mixture, args.format, help="megatron: the stage")\n'
        ),
        "webapp/catalog/services/exports.py": 'NAMES = {"olmo-core": "olmo-core.yaml"}\n',
        "webapp/dashboard/views/catalog.py": (
            'def view(fmt):\n    match fmt:\n        case "Nanotron":\n            pass\n'
        ),
        "webapp/api/views.py": (
            '"""Exports for megatron."""\n'
            'def post(fmt):\n    return fmt.name not in ("json", "parquet")\n'
        ),
        # Outside the folders: the registry itself names each format.
        "shardcore/export/__init__.py": 'if fmt == "megatron":\n    pass\n',
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = format_branches(tmp_path, {"megatron", "olmo", "olmo-core", "nanotron", "json"})
    assert found == [
        ("shardcore/commands/export.py", 2, "megatron", "compared"),
        ("webapp/api/views.py", 3, "json", "compared"),
        ("webapp/catalog/services/exports.py", 1, "olmo-core", "a dict key"),
        ("webapp/dashboard/views/catalog.py", 3, "Nanotron", "a match case"),
    ]
    # An allowed one passes, with its reason; an allowed one that is gone is reported.
    allowed = {
        ("webapp/api/views.py", "json"): "the API's own media type, not the export",
        ("webapp/api/views.py", "megatron"): "a stale entry",
    }
    assert unexplained(found, allowed) == (
        [hit for hit in found if hit[0] != "webapp/api/views.py"],
        [("webapp/api/views.py", "megatron")],
    )


# --- reads never write ------------------------------------------------------------------

# Calls that write rows or send work: on any receiver (save, delete) or on a query (the
# receiver names ``objects`` or is a queryset method's result: ``X.objects.filter().update``).
ROW_WRITES = {"save", "delete", "create", "get_or_create", "update_or_create", "bulk_create",
              "bulk_update", "update"}  # fmt: skip
QUERY_METHODS = {"filter", "exclude", "all", "select_for_update", "select_related", "order_by"}
SENDS = {"delay", "apply_async", "task_send", "send_task"}


def _writes_a_row(call: ast.Call) -> bool:
    if not isinstance(call.func, ast.Attribute) or call.func.attr not in ROW_WRITES:
        return False
    if call.func.attr in ("save", "delete"):
        return True
    receiver = call.func.value
    if isinstance(receiver, ast.Attribute) and receiver.attr == "objects":
        return True
    return (
        isinstance(receiver, ast.Call)
        and isinstance(receiver.func, ast.Attribute)
        and receiver.func.attr in QUERY_METHODS
    )


def selector_writes(root: Path) -> list[str]:
    """Each call in a selector module that writes a row or sends a task, and each import of
    a module that writes (the services, the task sender): "file:line what"."""
    out = []
    for path in sorted((root / "webapp").rglob("*.py")):
        name = module_name(path, root)
        if not _is_selectors(name):
            continue
        where = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _writes_a_row(node):
                out.append(f"{where}:{node.lineno} {ast.unparse(node.func)}")
            elif isinstance(node, ast.Call):
                called = node.func.attr if isinstance(node.func, ast.Attribute) else (
                    node.func.id if isinstance(node.func, ast.Name) else "")  # fmt: skip
                if called in SENDS:
                    out.append(f"{where}:{node.lineno} {called}")
        for imported in sorted(imports_of(path.read_text(), name,
                                          is_package=path.name == "__init__.py")):  # fmt: skip
            if _is_services(imported) or _under(imported, "webapp.tasks"):
                out.append(f"{where} imports {imported}")
    return out


def test_no_selector_writes_a_row_or_sends_a_task():
    """Reads never write: what a page's read finds missing it notes as asked
    (``selectors.facts``), and a service asks for it after the view answered."""
    assert selector_writes(ROOT) == []


def test_it_finds_a_selector_that_writes_in_a_crafted_tree(tmp_path):
    files = {
        "webapp/catalog/selectors/pools.py": (
            "from webapp.tasks import task_send\n"
            "def read(pk):\n"
            "    row = {}\n"
            "    row.update(a=1)\n"  # a dict: no write
            "    Fact.objects.get_or_create(kind='k', object_id=pk)\n"
            "    Flag.objects.filter(pk=pk).update(state='queued')\n"
            "    task_send('workers.fact_compute', object_id=pk)\n"
            "    return row\n"
        ),
        "webapp/catalog/selectors/runs.py": "def read(run):\n    run.save()\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert selector_writes(tmp_path) == [
        "webapp/catalog/selectors/pools.py:5 Fact.objects.get_or_create",
        "webapp/catalog/selectors/pools.py:6 Flag.objects.filter(pk=pk).update",
        "webapp/catalog/selectors/pools.py:7 task_send",
        "webapp/catalog/selectors/pools.py imports webapp.tasks",
        "webapp/catalog/selectors/pools.py imports webapp.tasks.task_send",
        "webapp/catalog/selectors/runs.py:2 run.save",
    ]


# --- imports inside functions -----------------------------------------------------------

# (importing module, imported module): why the import waits for the call. A module or
# package prefix on either side. Anything else imports at the top (ruff's PLC0415 covers
# the outside packages; these are the project's own modules).
IN_FUNCTION_ALLOWED: dict[tuple[str, str], str] = {
    ("shardcore.cli", "shardcore"): "`shardyard --help` loads no command's library",
    ("shardcore.commands", "shardcore"): "a command's parser loads none of what run() does",
    ("shardcore.executors", "shardcore.executors"): "an executor's module (ray's, slurm's) "
    "loads only when the command runs on it",
    ("shardcore.loader", "shardcore.loader.torch_data"): "torch loads only when a trainer "
    "asks for the torch classes; reading samples needs none",
    ("shardcore.filters", "shardcore.annotate.join"): "pyarrow's joins, only for pools "
    "that join annotations",
    ("shardcore.shuffle", "shardcore.shuffle"): "each algorithm registers in the package "
    "that imports it (a registry cycle)",
    ("webapp.catalog.services.flags", "webapp.catalog.services.annotations"): "the taint "
    "of a flag over an annotation evaluates its filter with the annotation service, which "
    "records flags through this one",
    ("webapp.dashboard.apps", "webapp.dashboard"): "ready() connects the login signals "
    "once the app registry is loaded",
    ("workers.celery", "workers"): "the worker's threads (sweeper, beat, webhooks) load "
    "Django's models, so they import when a worker starts, after the app registry",
}


def in_function_imports(root: Path) -> list[tuple[str, int, str]]:
    """(module, line, imported module) for every import of shardcore, webapp or workers
    inside a function or class body."""
    out = []
    for path in _python_files(root):
        module = module_name(path, root)
        tree = ast.parse(path.read_text(), filename=str(path))
        top = {id(node) for node in _top_level(tree.body)}
        top |= {id(n) for n in tree.body if isinstance(n, ast.If)
                for n in ast.walk(n) if isinstance(n, (ast.Import, ast.ImportFrom))}  # fmt: skip
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or id(node) in top:
                continue
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:  # ``from a import b``: ``a.b`` (b may be a module or a name in a)
                base = node.module or ""
                if node.level:
                    base = ".".join(package[: len(package) - node.level + 1] + [base]).strip(".")
                names = [f"{base}.{alias.name}" for alias in node.names]
            out += [(module, node.lineno, n) for n in names if n.split(".")[0] in PACKAGES]
    return sorted(out)


def test_no_import_inside_a_function_but_the_listed_ones():
    found = in_function_imports(ROOT)
    unlisted = [
        hit for hit in found
        if not any(_under(hit[0], who) and _under(hit[2], what)
                   for who, what in IN_FUNCTION_ALLOWED)
    ]  # fmt: skip
    assert unlisted == []
    unused = [
        entry for entry in IN_FUNCTION_ALLOWED
        if not any(_under(m, entry[0]) and _under(i, entry[1]) for m, _, i in found)
    ]  # fmt: skip
    assert unused == []  # an entry no import needs is taken off


def test_it_finds_an_import_inside_a_function_in_a_crafted_tree(tmp_path):
    files = {
        "shardcore/__init__.py": "",
        "shardcore/a.py": "import numpy\n\ndef f():\n    import json\n    from shardcore import b\n",
        "webapp/__init__.py": "",
        "webapp/catalog/facts.py": "class C:\n    def send(self):\n        from workers.tasks import t\n",
        "workers/__init__.py": "",
        "workers/tasks.py": "def run():\n    from ..webapp import x\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert in_function_imports(tmp_path) == [
        ("shardcore.a", 5, "shardcore.b"),
        ("webapp.catalog.facts", 3, "workers.tasks.t"),
        ("workers.tasks", 2, "webapp.x"),
    ]


# --- views and the API query through the read model -------------------------------------

# Pages and the API call selectors, page contexts and services, never the ORM (as the
# annotations' do: selectors/annotations.py). (file, model) -> why that module still queries
# it: a debt to move into the read model, not a permission. None is left.
ORM_QUERY_ALLOWED: dict[tuple[str, str], str] = {}


def orm_queries(root: Path, folders=("webapp/dashboard/views", "webapp/api")) -> list[Branch]:
    """(file, line, model, how) for each ORM query a module under ``folders`` makes: a
    model's manager (``Model.objects``), or a model handed to ``get_object_or_404``. A
    related manager of a row read elsewhere (``source.files``) is none."""
    out = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            where = path.relative_to(root).as_posix()
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.Attribute) and node.attr == "objects":
                    out.append((where, node.lineno, ast.unparse(node.value), "objects"))
                elif (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id == "get_object_or_404"
                    and isinstance(node.args[0], ast.Name)
                ):
                    out.append((where, node.lineno, node.args[0].id, node.func.id))
    return sorted(out)


def test_no_view_or_api_module_queries_the_orm_but_the_listed_ones():
    found = orm_queries(ROOT)
    assert unexplained(found, ORM_QUERY_ALLOWED) == ([], [])  # nor a stale entry
    assert [q for q in found if "annotations" in q[0]] == []


def test_it_finds_an_orm_query_in_a_view_in_a_crafted_tree(tmp_path):
    files = {
        "webapp/dashboard/views/annotations.py": (
            "def detail(request, pk):\n"
            "    ann = get_object_or_404(Annotation.objects.only('id'), pk=pk)\n"
            "    return ann.source.files.order_by('path')\n"  # a related manager: no query
        ),
        "webapp/api/annotations.py": "def f(pk):\n    return get_object_or_404(Source, pk=pk)\n",
        "webapp/api/views.py": "queryset = Pool.objects.all()\n",
        # Outside the folders: the read model is where queries belong.
        "webapp/catalog/selectors/annotations.py": "rows = Annotation.objects.all()\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = orm_queries(tmp_path)
    assert found == [
        ("webapp/api/annotations.py", 2, "Source", "get_object_or_404"),
        ("webapp/api/views.py", 1, "Pool", "objects"),
        ("webapp/dashboard/views/annotations.py", 2, "Annotation", "objects"),
    ]
    # An allowed one passes; an allowed one that is gone is reported.
    allowed = {("webapp/api/views.py", "Pool"): "a viewset", ("webapp/api/views.py", "Job"): "gone"}
    assert unexplained(found, allowed) == (
        [q for q in found if q[0] != "webapp/api/views.py"],
        [("webapp/api/views.py", "Job")],
    )
