"""The lock files are what every machine installs: they must cover pyproject.toml's
dependencies, agree with each other, satisfy pyproject's ranges, and be what this
environment actually runs."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]


def _lock(name: str) -> dict[str, Version]:
    out = {}
    for line in (ROOT / name).read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            pkg, _, version = line.partition("==")
            assert version, f"{name}: {line!r} is not pinned with =="
            out[canonicalize_name(pkg)] = Version(version)
    return out


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_it_pins_every_dependency_within_its_range():
    run, dev = _lock("requirements.lock"), _lock("requirements-dev.lock")
    project = _project()
    for lock, reqs in ((run, project["dependencies"]),
                       (dev, project["dependencies"] + project["optional-dependencies"]["dev"])):  # fmt: skip
        for text in reqs:
            req = Requirement(text)
            name = canonicalize_name(req.name)
            assert name in lock, f"{req.name} is in pyproject.toml but not in the lock file"
            assert req.specifier.contains(lock[name], prereleases=True), (
                f"{req.name}=={lock[name]} is outside pyproject's range {req.specifier}"
            )


def test_the_runtime_lock_agrees_with_the_dev_lock():
    run, dev = _lock("requirements.lock"), _lock("requirements-dev.lock")
    for name, version in run.items():
        assert dev.get(name) == version, f"{name}: {version} at run time, {dev.get(name)} in dev"


def test_this_environment_runs_the_locked_versions():
    for name, version in _lock("requirements-dev.lock").items():
        installed = Version(metadata.version(name))
        assert installed == version, f"{name}: {installed} installed, {version} locked"
