"""The ``shardyard`` console script is installed and answers --help."""

import shutil
import subprocess
import sys
from pathlib import Path


def _shardyard() -> list[str]:
    script = Path(sys.executable).parent / "shardyard"
    return [str(script)] if script.exists() else [shutil.which("shardyard") or "shardyard"]


def test_it_prints_help_from_the_console_script():
    out = subprocess.run([*_shardyard(), "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "usage: shardyard" in out.stdout


def test_it_rejects_an_unknown_command():
    out = subprocess.run(
        [*_shardyard(), "no-such-command"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2
    assert "invalid choice" in out.stderr
