"""Celery workers as the end-to-end scale run starts them (``bench.scale.e2e``): each a
``celery worker`` subprocess in its own process group, its processes (the main process
and its pool children) sampled from ``/proc`` for CPU time and peak RSS, SIGKILLed as a
whole group when the run kills one."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TICK = os.sysconf("SC_CLK_TCK")


def _proc_stat(pid: int) -> tuple[float, float] | None:
    """(CPU seconds, peak RSS MB) of one process, or None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / TICK
    hwm = next((int(x.split()[1]) for x in status.splitlines() if x.startswith("VmHWM")), 0)
    return cpu, hwm / 1024


def _tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        with contextlib.suppress(OSError):
            todo += [int(c) for c in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
    return out


@dataclass
class Worker:
    """A ``celery worker`` subprocess (prefork, concurrency 1, as the tests start them),
    in its own process group; its processes sampled for CPU time and peak RSS."""

    name: str
    proc: subprocess.Popen
    log_path: Path
    seen: dict[int, tuple[float, float]] = field(default_factory=dict)
    killed_at: float | None = None

    @classmethod
    def start(cls, name: str, *, queue: str, env: dict, log_dir: Path) -> Worker:
        from workers.celery import worker_command

        log_path = log_dir / f"worker-{name}.log"
        cmd = worker_command(
            hostname=f"{name}@%h",
            options=("-Q", queue, "--without-gossip", "--without-mingle", "--without-heartbeat"),
        )
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                cmd, cwd=ROOT, env={**env, "SHARDYARD_QUEUE": queue}, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        return cls(name=name, proc=proc, log_path=log_path)

    def sample(self) -> None:
        if self.proc.poll() is not None:
            return
        for pid in _tree(self.proc.pid):
            got = _proc_stat(pid)
            if got is not None:
                self.seen[pid] = got

    @property
    def cpu_s(self) -> float:
        return sum(cpu for cpu, _ in self.seen.values())

    @property
    def peak_rss_mb(self) -> float:
        return max((rss for _, rss in self.seen.values()), default=0.0)

    def split(self) -> dict:
        """CPU seconds and peak RSS of the main process (consumer, heartbeats, sweeper)
        and of its pool children (the units)."""
        main = self.seen.get(self.proc.pid, (0.0, 0.0))
        kids = [v for pid, v in self.seen.items() if pid != self.proc.pid]
        return {"main_cpu_s": main[0], "main_peak_rss_mb": main[1],
                "units_cpu_s": sum(c for c, _ in kids),
                "units_peak_rss_mb": max((r for _, r in kids), default=0.0)}  # fmt: skip

    def kill(self) -> None:
        """SIGKILL the whole process group (the worker and its pool child), by its id."""
        self.sample()
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        self.killed_at = time.monotonic()

    def stop(self) -> None:
        self.sample()
        if self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


class Sampler(threading.Thread):
    """Samples the workers' processes every ``interval`` seconds until stopped."""

    def __init__(self, workers: list[Worker], interval: float = 1.0):
        super().__init__(daemon=True)
        self.workers, self.interval, self.done = workers, interval, threading.Event()

    def run(self) -> None:
        while not self.done.wait(self.interval):
            for w in list(self.workers):
                w.sample()

    def stop(self) -> None:
        self.done.set()
        self.join()
