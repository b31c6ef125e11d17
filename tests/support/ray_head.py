"""A real Ray head for tests, on loopback: ``ray.init`` in a process of its own (two CPUs,
no dashboard, its session under a temporary directory), which prints the cluster's address
and shuts Ray down when its standard input closes. ``env()`` is what a client (the command
line with ``--executor ray --ray-address``) needs beside the address: Ray's loopback mode
(it otherwise advertises the host's outside address) and no token authentication (the
cluster listens on 127.0.0.1 only). ``stop()`` ends the head and every process it started
(found by the session directory in their command lines, each ended by its id)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled"}

_HEAD = """
import sys, ray
context = ray.init(num_cpus=2, include_dashboard=False, _temp_dir=sys.argv[1],
                   configure_logging=False)
print(context.address_info["gcs_address"], flush=True)
sys.stdin.read()
ray.shutdown()
"""


class RayHead:
    def __init__(self, root: Path) -> None:
        # Unix socket paths under the session directory must stay short.
        self.root = root
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _HEAD, str(root)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, **ENV},
            text=True,
        )
        line = self.proc.stdout.readline().strip() if self.proc.stdout else ""
        if not line:
            self.stop()
            raise RuntimeError(f"the Ray head did not start; see {root}")
        self.address = line

    def env(self) -> dict[str, str]:
        return dict(ENV)

    def logs(self) -> Path:
        return self.root / "session_latest" / "logs"

    def processes(self) -> list[int]:
        """The processes of this cluster (their command lines name its directory)."""
        mine = str(self.root).encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                if mine in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
        return found

    def stop(self) -> None:
        if self.proc.poll() is None and self.proc.stdin:
            self.proc.stdin.close()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        deadline = time.monotonic() + 10
        while self.processes() and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid in self.processes():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
