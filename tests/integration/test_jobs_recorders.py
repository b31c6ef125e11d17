"""Job recorders by name: every name the code gives a job is registered (and is the name the
data migration gives the paths stored before), a name is taken once, and a job whose
recorder nobody registered fails saying which name, instead of staying active."""

from __future__ import annotations

import ast
from importlib import import_module
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from tests.integration.test_jobs_engine import RECORDED, RECORDER, _plan, eager, held
from webapp.jobs import recorders, services
from webapp.jobs.models import JobState, JobUnit

pytestmark = pytest.mark.services
__all__ = ["eager", "held"]

ROOT = Path(__file__).resolve().parents[2]
MIGRATION = import_module("webapp.jobs.migrations.0007_recorder_names")


def _strings(node: ast.AST, constants: dict[str, ast.AST]) -> set[str]:
    """The string constants ``node`` can evaluate to: literals, either branch of a
    conditional, and module-level names bound to those."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.IfExp):
        return _strings(node.body, constants) | _strings(node.orelse, constants)
    if isinstance(node, ast.Name) and node.id in constants:
        return _strings(constants[node.id], constants)
    return set()


def names_in_code(root: Path = ROOT) -> dict[str, set[str]]:
    """Every recorder name the code passes (``recorder=...``) or registers
    (``@recorders.register(...)``), with the modules that do; a value the scan cannot
    read (a name built at run time) is reported as itself, so that it fails the test."""
    found: dict[str, set[str]] = {}
    for path in sorted((root / "webapp").rglob("*.py")) + sorted((root / "workers").rglob("*.py")):
        if "migrations" in path.parts:
            continue
        tree = ast.parse(path.read_text())
        constants = {
            target.id: node.value
            for node in tree.body
            if isinstance(node, ast.Assign)
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        values: list[ast.AST] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                values += [k.value for k in node.keywords if k.arg == "recorder"]
                if ast.unparse(node.func) == "recorders.register":
                    values += node.args
        for value in values:
            if isinstance(value, ast.Name) and value.id not in constants:
                continue  # a parameter passed on (launch's ``recorder=recorder``)
            strings = _strings(value, constants) or {f"<unreadable: {ast.unparse(value)}>"}
            for name in strings:
                found.setdefault(name, set()).add(str(path.relative_to(root)))
    return found


CATALOG_NAMES = {
    "tokenized", "pool", "pool.planned", "mixture.version", "mixture.materialized",
    "annotation", "annotation.groups", "scrub",
}  # fmt: skip


def test_it_registers_every_recorder_name_the_code_uses():
    used = names_in_code()
    assert set(used) - {""} == CATALOG_NAMES, used
    assert recorders.names() >= CATALOG_NAMES


def test_the_migration_names_exactly_the_registered_recorders_and_their_paths():
    # Backwards, each name becomes the path of the function registered under it now.
    assert set(MIGRATION.PATHS) == CATALOG_NAMES
    for name, path in MIGRATION.PATHS.items():
        fn = recorders.recorder(name)
        assert f"{fn.__module__}.{fn.__qualname__}" == path
    assert set(MIGRATION.NAMES.values()) == CATALOG_NAMES
    assert set(MIGRATION.PATHS.values()) <= set(MIGRATION.NAMES)


def test_it_refuses_a_second_recorder_under_a_taken_name():
    def pool_record(*, job, manifest):
        pass

    with pytest.raises(ImproperlyConfigured, match="recorder name 'pool' is taken by "):
        recorders.register("pool")(pool_record)
    assert recorders.recorder("pool").__module__ == "webapp.catalog.services.pools"
    # The registered function again (a module imported twice) is the same recorder.
    recorders.register("pool")(recorders.recorder("pool"))
    with pytest.raises(ImproperlyConfigured):
        recorders.register(" pool")


def test_a_scan_reports_a_name_it_cannot_read(tmp_path):
    (tmp_path / "webapp").mkdir()
    (tmp_path / "workers").mkdir()
    (tmp_path / "webapp" / "a.py").write_text(
        'NAME = "pool"\n'
        "job_create(plan=p, recorder=NAME)\n"
        'job_create(plan=p, recorder="scrub" if x else "pool.planned")\n'
        'job_create(plan=p, recorder=f"pools.{kind}")\n'
    )
    found = names_in_code(tmp_path)
    assert set(found) == {"pool", "scrub", "pool.planned", "<unreadable: f'pools.{kind}'>"}


def test_it_refuses_to_create_a_job_with_an_unknown_recorder(eager, tmp_path):
    with pytest.raises(recorders.UnknownRecorder, match="'webapp.gone.record'"):
        services.job_create(plan=_plan(tmp_path / "out", n=1), recorder="webapp.gone.record")


def test_a_job_whose_recorder_is_unknown_fails_naming_it(eager, held, tmp_path):
    job = services.job_create(plan=_plan(tmp_path / "out", n=1), recorder=RECORDER)
    # A row stored by an older release, naming a recorder this one no longer has.
    type(job).objects.filter(pk=job.pk).update(recorder="webapp.catalog.services.pool_record")
    for unit_id in ("count-0", "sum"):
        unit = JobUnit.objects.get(job=job, unit_id=unit_id)
        assert services.job_unit_execute(unit_id=unit.pk, worker="w") == "succeeded"

    assert services.job_finalize_execute(job_id=job.pk) == "failed"
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert job.error.startswith(
        "recording the result failed: no recorder is registered under the name "
        "'webapp.catalog.services.pool_record' (known: "
    )
    assert "Traceback" not in job.log_tail and "ImportError" not in job.error
    assert "nothing recorded: no recorder is registered" in job.log_tail
    assert RECORDED == []


def test_a_job_whose_recorder_is_unknown_can_still_be_cancelled(eager, held, tmp_path):
    job = services.job_create(plan=_plan(tmp_path / "out", n=1), recorder=RECORDER)
    type(job).objects.filter(pk=job.pk).update(recorder="gone")

    services.job_cancel(job_id=job.pk)
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED
    assert "nothing recorded: no recorder is registered under the name 'gone'" in job.log_tail
