"""A real one-node Slurm cluster for tests: Debian's ``munged``, ``slurmctld`` and ``slurmd``
(package slurm-wlm) started in the foreground by the test, on 127.0.0.1, with their key,
state, spool and logs in a temporary directory and two CPUs. Clients reach it through
``SLURM_CONF`` (``env()``); ``stop()`` cancels every job, ends the job steps' processes and
the three daemons it started. Nothing of Slurm is patched.

``MaxArraySize`` is small on purpose (the phases of the demo builds have more tasks than
that, so their arrays are split), and requeued jobs may start again after a few seconds
(``cred_expire``; Slurm's default is two minutes)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from tests.support.s3 import free_port

MAX_ARRAY_SIZE = 4


def available() -> bool:
    return all(shutil.which(p) for p in ("munged", "mungekey", "slurmctld", "slurmd", "sbatch"))


class SlurmCluster:
    """``munged`` + ``slurmctld`` + ``slurmd`` under ``root``; ``stop()`` ends them."""

    def __init__(self, root: Path, *, cpus: int = 2) -> None:
        self.root = root
        self.procs: list[subprocess.Popen] = []
        self.node = socket.gethostname().split(".")[0]
        for d in ("munge", "state", "spool", "log"):
            (root / d).mkdir(parents=True, exist_ok=True)
        key = root / "munge" / "munge.key"
        subprocess.run(["mungekey", "--create", f"--keyfile={key}"], check=True)
        key.chmod(0o400)
        self.socket = root / "munge" / "munge.sock"
        self.conf = root / "slurm.conf"
        self.conf.write_text(self._config(cpus))
        try:
            self._start(
                [
                    "munged",
                    "--foreground",
                    "--force",
                    f"--socket={self.socket}",
                    f"--key-file={key}",
                    f"--pid-file={root / 'munge' / 'munged.pid'}",
                    f"--seed-file={root / 'munge' / 'seed'}",
                    f"--log-file={root / 'log' / 'munged.log'}",
                ],
                "munged",
            )
            self._wait(lambda: self.socket.exists(), "munged's socket")
            self._start(["slurmctld", "-D", "-f", str(self.conf)], "slurmctld")
            self._start(["slurmd", "-D", "-f", str(self.conf), "-N", self.node], "slurmd")
            self._wait(self._node_idle, "the node to be idle (sinfo)")
        except BaseException:
            self.stop()
            raise

    def _config(self, cpus: int) -> str:
        r = self.root
        return "\n".join(
            [
                "ClusterName=shardyard-test",
                f"SlurmctldHost={self.node}(127.0.0.1)",
                f"SlurmctldPort={free_port()}",
                f"SlurmdPort={free_port()}",
                "SlurmUser=root",
                "SlurmdUser=root",
                "AuthType=auth/munge",
                "CredType=cred/munge",
                f"AuthInfo=socket={self.socket},cred_expire=5",
                f"StateSaveLocation={r / 'state'}",
                f"SlurmdSpoolDir={r / 'spool'}",
                f"SlurmctldPidFile={r / 'slurmctld.pid'}",
                f"SlurmdPidFile={r / 'slurmd.pid'}",
                f"SlurmctldLogFile={r / 'log' / 'slurmctld.log'}",
                f"SlurmdLogFile={r / 'log' / 'slurmd.log'}",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_CPU",
                "SchedulerType=sched/backfill",
                "SchedulerParameters=sched_interval=2,bf_interval=1",
                "ReturnToService=2",
                "MpiDefault=none",
                "JobAcctGatherType=jobacct_gather/none",
                "AccountingStorageType=accounting_storage/none",
                "JobCompType=jobcomp/none",
                f"MaxArraySize={MAX_ARRAY_SIZE}",
                "MinJobAge=3600",
                "KillWait=2",
                f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=4000 State=UNKNOWN",
                "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
                "",
            ]
        )

    def env(self) -> dict[str, str]:
        """What a Slurm client (sbatch, squeue...) needs to reach this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    def command(self, *args: str) -> str:
        done = subprocess.run(
            list(args), capture_output=True, text=True, env={**os.environ, **self.env()}
        )
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def _start(self, args: list[str], name: str) -> None:
        log = open(self.root / "log" / f"{name}.out", "ab")  # the daemon keeps it open
        self.procs.append(
            subprocess.Popen(
                args,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env()},
                start_new_session=True,
            )
        )
        log.close()

    def _node_idle(self) -> bool:
        try:
            return "idle" in self.command("sinfo", "--noheader", "--format=%T")
        except RuntimeError:
            return False

    def _wait(self, ready, what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"{p.args[0]} exited ({p.returncode}); see {self.root}/log")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}; see {self.root}/log")
            time.sleep(0.2)

    def job_processes(self, job: str | None = None) -> list[int]:
        """The processes of this cluster's jobs (of one job or array task, ``12_3``, when
        given): ``slurmstepd`` and the tasks it runs carry this cluster's ``SLURM_CONF``
        (inherited from slurmd), the tasks also their job's id."""
        mine = f"SLURM_CONF={self.conf}".encode()
        daemons = {p.pid for p in self.procs}
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) in daemons:
                continue
            try:
                environ = (entry / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if mine not in environ:
                continue
            ids = {e.split(b"=", 1)[0]: e.split(b"=", 1)[-1].decode() for e in environ}
            if job is not None:
                base, _, task = job.partition("_")
                if (ids.get(b"SLURM_ARRAY_JOB_ID"), ids.get(b"SLURM_ARRAY_TASK_ID")) == (
                    base,
                    task,
                ) or (not task and ids.get(b"SLURM_JOB_ID") == base):
                    found.append(int(entry.name))
            elif b"SLURM_JOB_ID" in ids or _name(int(entry.name)) == "slurmstepd":
                found.append(int(entry.name))
        return found

    def stop(self) -> None:
        """Cancel every job, end the job steps left, then the daemons (each by its id)."""
        if any(p.poll() is None for p in self.procs[1:]):
            with contextlib.suppress(RuntimeError):
                self.command("scancel", "--user=root", "--full")
            deadline = time.monotonic() + 15
            while self.job_processes() and time.monotonic() < deadline:
                time.sleep(0.2)
        for pid in self.job_processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self.procs = []


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""
