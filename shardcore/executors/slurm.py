"""The ``slurm`` executor: a plan's phases as Slurm job arrays, chained by dependencies.

Each phase of the plan is one job array (several when it has more tasks than the cluster's
``MaxArraySize``, read from ``scontrol show config``). Array task ``t`` of a phase runs the
phase's units ``t*K`` to ``t*K + K - 1`` in turn (``K``: ``--units-per-task``, by default
as few as keep the phase within ``--max-tasks`` tasks) with ``shardyard unit run``, which
reads the plan from the artifact's storage and writes each unit's completion marker there:
a compute node needs the storage only, never the catalog's database or broker. Phase k+1's
arrays wait for phase k's (``--dependency=afterok``), and one last job runs ``shardyard unit
finalize``, which writes the manifest. ``K`` groups units into tasks and changes nothing
of what is built.

Every job is submitted ``--requeue``: a task preempted (or requeued with ``scontrol
requeue``) starts again and skips the units it finished (their markers); the unit it was
in rewrites the same bytes. A task that fails (killed, out of memory, past its time) leaves
the phases after it waiting on a dependency that can never be met; the command, while it
waits, sees that (``DependencyNeverSatisfied``, or nothing of its jobs left and no
manifest), cancels what still waits, and submits again the tasks that have units without
markers, up to ``--retries`` times. A rerun of the command does the same from the markers:
finished units are skipped, a finished artifact is recognized. While it waits it prints
the units done per phase (the markers) and its tasks' states (``squeue``; ``sacct`` for
the jobs the queue no longer lists, where the cluster keeps accounting).

The job directory (``--job-dir``, default ``OUT.slurm`` beside a local output) holds the
batch scripts, ``jobs.json`` (every submission's job ids) and the logs: one per task, named
after its phase and unit range (``logs/p1-units-0000010-0000019.log``), appended to by each
run of the task (a line per unit: started, done), and ``logs/finalize.log``.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import xxhash

from shardcore import storage, units
from shardcore.errors import InputError, ShardcoreError
from shardcore.executors.base import Executor, OnUnitDone, resume, undone
from shardcore.manifest import is_complete, read_manifest

DEFAULT_MAX_ARRAY_SIZE = 1001  # Slurm's default MaxArraySize
# Job states in which a job will still run (or is running): the command keeps waiting.
ACTIVE = {
    "PENDING",
    "RUNNING",
    "REQUEUED",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
    "CONFIGURING",
    "COMPLETING",
    "RESIZING",
    "SUSPENDED",
    "STAGE_OUT",
    "SIGNALING",
    "RESV_DEL_HOLD",
}
NEVER = "DependencyNeverSatisfied"


class SlurmError(ShardcoreError):
    """Slurm refused a command, or the build's jobs failed past their retries."""


@dataclass
class SlurmOptions:
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str | None = None
    mem: str | None = None
    cpus_per_task: int = 1
    units_per_task: int | None = None
    max_tasks: int = 1000
    max_running: int | None = None
    sbatch_options: list[str] = field(default_factory=list)
    job_dir: str | None = None
    wait: bool = True
    dry_run: bool = False
    retries: int = 3
    poll: float = 2.0  # seconds between looks at the markers and the queue
    python: str = sys.executable  # the interpreter the tasks run (shared by the nodes)


def units_per_task(n: int, options: SlurmOptions) -> int:
    """Units each task of a phase of ``n`` units runs: ``--units-per-task`` when given,
    raised to keep the phase within ``--max-tasks`` tasks."""
    least = -(-n // options.max_tasks) if n else 1
    return max(options.units_per_task or 1, least)


def index_ranges(indices: list[int]) -> str:
    """Sorted array indices as Slurm writes them: ``0-4,7,9-12``."""
    parts: list[str] = []
    start = prev = None
    for i in sorted(indices):
        if prev is not None and i == prev + 1:
            prev = i
            continue
        if start is not None:
            parts.append(f"{start}" if start == prev else f"{start}-{prev}")
        start = prev = i
    if start is not None:
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ",".join(parts)


def _slurm(args: list[str], *, what: str) -> str:
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        raise SlurmError(f"{args[0]} not found: is this a Slurm login node?") from None
    if done.returncode != 0:
        raise SlurmError(f"{what}: {' '.join(done.stderr.split()) or done.stdout.strip()}")
    return done.stdout


def max_array_size() -> int:
    """The cluster's ``MaxArraySize`` (array indices must be below it)."""
    out = _slurm(["scontrol", "show", "config"], what="scontrol show config")
    found = re.search(r"^MaxArraySize\s*=\s*(\d+)", out, re.MULTILINE)
    return int(found.group(1)) if found else DEFAULT_MAX_ARRAY_SIZE


def default_job_dir(out: str) -> Path:
    """``OUT.slurm`` beside a local output; for one on object storage, a directory under the
    current one named after it (the logs need a file system the nodes share)."""
    if not storage.is_remote(out):
        return Path(out.rstrip("/") + ".slurm")
    key = xxhash.xxh3_64_hexdigest(out.encode())[:8]
    return Path.cwd() / "shardyard-slurm" / f"{out.rstrip('/').rsplit('/', 1)[-1]}-{key}"


@dataclass
class Job:
    """One submitted job: a phase's array (tasks ``offset + i`` for its indices) or the
    finalize job (phase None)."""

    id: str
    phase: int | None
    tasks: list[int]
    per_task: int
    offset: int
    script: str = ""


class SlurmExecutor(Executor):
    name = "slurm"

    def __init__(self, options: SlurmOptions) -> None:
        self.o = options
        if options.max_running is not None and options.max_running < 1:
            raise InputError(f"--max-running: {options.max_running} is below 1")

    # ------------------------------------------------------------------ the build

    def run(
        self, plan: units.Plan, *, on_unit_done: OnUnitDone | None = None
    ) -> dict[str, Any] | None:
        finished = resume(plan)
        if finished is not None:
            print(f"{plan.out}: finished earlier (its manifest is there)", file=sys.stderr)
            return finished
        job_dir = Path(self.o.job_dir) if self.o.job_dir else default_job_dir(plan.out)
        if self.o.dry_run:
            for job, command in self._submit(plan, job_dir, dry=True):
                print(f"# {' '.join(shlex.quote(c) for c in command)}\n{job.script}")
            return None
        units.save_plan(plan)
        jobs, states = self._last_jobs(job_dir)
        stuck = any(r == NEVER for _, r in states.values())
        if any(s in ACTIVE for s, _ in states.values()) and (self.o.wait or not stuck):
            # A rerun follows what will still run rather than submit the same units twice
            # (while it waits it also recovers the jobs stuck behind a failed task).
            print(
                f"slurm: following jobs {', '.join(j.id for j in jobs)} submitted earlier",
                file=sys.stderr,
            )
        else:
            running: list[str] = []
            if stuck:  # and not waiting: cancel what can never run, start after the rest
                self._cancel_pending(states)
                running = sorted(
                    {
                        t.partition("_")[0]
                        for t, (s, _) in states.items()
                        if s in ACTIVE and s != "PENDING"
                    }
                )
            jobs = [job for job, _ in self._submit(plan, job_dir, after_any=running)]
        if not self.o.wait:
            print(
                f"slurm: submitted {', '.join(j.id for j in jobs)}; logs in {job_dir}/logs; "
                "run the same command again to follow or resume the build",
                file=sys.stderr,
            )
            return None
        return self._follow(plan, job_dir, jobs, on_unit_done)

    def _submit(
        self,
        plan: units.Plan,
        job_dir: Path,
        *,
        dry: bool = False,
        after_any: Sequence[str] = (),
    ) -> list[tuple[Job, list[str]]]:
        """Submit the tasks that have units without markers, phase after phase, then the
        finalize job; returns the jobs with their sbatch commands (not submitted if dry).
        The first waits for the jobs ``after_any`` to end (tasks of an earlier submission
        still running), whatever their outcome."""
        try:
            limit = max_array_size()
        except SlurmError:
            if not dry:
                raise
            limit = DEFAULT_MAX_ARRAY_SIZE  # a dry run may be made away from the cluster
        logs = job_dir / "logs"
        if not dry:
            logs.mkdir(parents=True, exist_ok=True)
        submitted: list[tuple[Job, list[str]]] = []
        after: list[str] = []
        first = f"afterany:{':'.join(after_any)}" if after_any else None
        for p, phase in enumerate(plan.phases):
            todo = undone(plan, p) if not dry else list(range(len(phase)))
            if not todo:
                continue
            per_task = units_per_task(len(phase), self.o)
            tasks = sorted({i // per_task for i in todo})
            # Indices must be below MaxArraySize: task t goes to array t // limit.
            chunks: dict[int, list[int]] = {}
            for t in tasks:
                chunks.setdefault(t // limit, []).append(t)
            ids = []
            for c, chunk in sorted(chunks.items()):
                offset = c * limit
                script = self._array_script(plan, job_dir, p, len(phase), per_task, offset)
                path = job_dir / f"p{p + 1}-array{c}.sh"
                spec = index_ranges([t - offset for t in chunk])
                if self.o.max_running:
                    spec += f"%{self.o.max_running}"
                command = self._sbatch(path, after, first, [f"--array={spec}"], logs, array=True)
                job = self._launch(path, script, command, dry)
                submitted.append((Job(job, p, chunk, per_task, offset, script), command))
                ids.append(job)
            after, first = ids, None
        path = job_dir / "finalize.sh"
        script = self._finalize_script(plan, job_dir)
        command = self._sbatch(path, after, first, [], logs, array=False)
        job = self._launch(path, script, command, dry)
        submitted.append((Job(job, None, [], 0, 0, script), command))
        if not dry:
            self._record(job_dir, [j for j, _ in submitted])
        return submitted

    def _launch(self, path: Path, script: str, command: list[str], dry: bool) -> str:
        if dry:
            return f"<{path.stem}>"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(script)
        out = _slurm(command, what=f"sbatch {path}")
        return out.strip().split(";")[0]

    def _sbatch(
        self,
        path: Path,
        after: list[str],
        first: str | None,
        extra: list[str],
        logs: Path,
        *,
        array: bool,
    ) -> list[str]:
        command = ["sbatch", "--parsable", "--requeue", "--kill-on-invalid-dep=no"]
        needs = ([f"afterok:{':'.join(after)}"] if after else []) + ([first] if first else [])
        if needs:
            command.append(f"--dependency={','.join(needs)}")
        # Slurm's own output (what happens before the task's log is open).
        command.append(
            f"--output={logs}/slurm-%A_%a.out" if array else f"--output={logs}/slurm-%j.out"
        )
        command.append("--open-mode=append")
        for flag, value in (
            ("--partition", self.o.partition),
            ("--account", self.o.account),
            ("--qos", self.o.qos),
            ("--time", self.o.time),
            ("--mem", self.o.mem),
        ):
            if value:
                command.append(f"{flag}={value}")
        command.append(f"--cpus-per-task={self.o.cpus_per_task}")
        return command + extra + list(self.o.sbatch_options) + [str(path)]

    def _header(self, plan: units.Plan, name: str) -> list[str]:
        return [
            "#!/bin/bash",
            f"#SBATCH --job-name={name}",
            f"# shardyard {plan.stage} -> {plan.out}",
            "set -euo pipefail",
        ]

    def _array_script(
        self, plan: units.Plan, job_dir: Path, p: int, n: int, per_task: int, offset: int
    ) -> str:
        lines = self._header(plan, f"sy-{plan.stage}-p{p + 1}")
        lines += [
            f"K={per_task}; N={n}; OFFSET={offset}",
            "T=$((OFFSET + SLURM_ARRAY_TASK_ID))",
            'A=$((T * K)); B=$((A + K - 1)); if [ "$B" -ge "$N" ]; then B=$((N - 1)); fi',
            f'LOG={shlex.quote(str(job_dir / "logs"))}/p{p + 1}-units-$(printf %07d "$A")-$(printf %07d "$B").log',
            'exec >>"$LOG" 2>&1',
            'echo "== $(date -u +%FT%TZ) job ${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID} '
            'on $(hostname) restart ${SLURM_RESTART_COUNT:-0}"',
            f"exec {shlex.quote(self.o.python)} -m shardcore.cli unit run "
            f'{shlex.quote(plan.out)} --phase {p + 1} --units "$A-$B"',
        ]
        return "\n".join(lines) + "\n"

    def _finalize_script(self, plan: units.Plan, job_dir: Path) -> str:
        lines = self._header(plan, f"sy-{plan.stage}-finalize")
        lines += [
            f"exec >>{shlex.quote(str(job_dir / 'logs' / 'finalize.log'))} 2>&1",
            'echo "== $(date -u +%FT%TZ) job ${SLURM_JOB_ID} on $(hostname) restart '
            '${SLURM_RESTART_COUNT:-0}"',
            f"exec {shlex.quote(self.o.python)} -m shardcore.cli unit finalize "
            f"{shlex.quote(plan.out)}",
        ]
        return "\n".join(lines) + "\n"

    # ------------------------------------------------------------------ what was submitted

    def _record(self, job_dir: Path, jobs: list[Job]) -> None:
        path = job_dir / "jobs.json"
        history = json.loads(path.read_text()) if path.exists() else []
        history.append(
            {
                "submitted": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "jobs": [
                    {
                        "id": j.id,
                        "phase": j.phase,
                        "tasks": j.tasks,
                        "per_task": j.per_task,
                        "offset": j.offset,
                    }
                    for j in jobs
                ],
            }
        )
        path.write_text(json.dumps(history, indent=1))

    def _last_jobs(self, job_dir: Path) -> tuple[list[Job], dict[str, tuple[str, str]]]:
        """The last submission's jobs and the states the controller knows of them."""
        path = job_dir / "jobs.json"
        if not path.exists():
            return [], {}
        last = json.loads(path.read_text())[-1]["jobs"]
        jobs = [Job(j["id"], j["phase"], j["tasks"], j["per_task"], j["offset"]) for j in last]
        return jobs, job_states([j.id for j in jobs])

    # ------------------------------------------------------------------ following the build

    def _follow(
        self,
        plan: units.Plan,
        job_dir: Path,
        jobs: list[Job],
        on_unit_done: OnUnitDone | None,
    ) -> dict[str, Any]:
        seen: set[str] = set()
        waiting = [list(range(len(phase))) for phase in plan.phases]
        retries = self.o.retries
        last_line = ""
        while True:
            self._collect(plan, waiting, seen, on_unit_done)
            if is_complete(plan.out):
                self._collect(plan, waiting, seen, on_unit_done)
                return read_manifest(plan.out)
            states = job_states([j.id for j in jobs])
            line = self._status(plan, waiting, states)
            if line != last_line:
                print(line, file=sys.stderr, flush=True)
                last_line = line
            stuck = any(r == NEVER for _, r in states.values())
            alive = any(s in ACTIVE and r != NEVER for s, r in states.values())
            if stuck or not alive:
                time.sleep(self.o.poll)  # the manifest may have appeared meanwhile
                if is_complete(plan.out):
                    continue
                failed = self._failed_logs(plan, job_dir, jobs, states)
                if retries <= 0:
                    raise SlurmError(
                        f"{plan.out}: tasks failed and --retries are used up; see "
                        + (", ".join(failed[:5]) if failed else f"{job_dir}/logs")
                    )
                retries -= 1
                self._cancel_waiting(jobs, states)
                print(
                    "slurm: a task failed ("
                    + (", ".join(failed[:3]) if failed else "see the logs")
                    + "); submitting the units without markers again",
                    file=sys.stderr,
                    flush=True,
                )
                jobs = [job for job, _ in self._submit(plan, job_dir)]
                continue
            time.sleep(self.o.poll)

    def _collect(
        self,
        plan: units.Plan,
        waiting: list[list[int]],
        seen: set[str],
        on_unit_done: OnUnitDone | None,
    ) -> None:
        """Report the units whose markers appeared since the last look (phase by phase:
        a later phase's units cannot be done before an earlier one is)."""
        for p, phase in enumerate(plan.phases):
            still = []
            for i in waiting[p]:
                unit = phase[i]
                stats = units.unit_result(plan.out, unit["id"])
                if stats is None:
                    still.append(i)
                elif unit["id"] not in seen:
                    seen.add(unit["id"])
                    if on_unit_done:
                        on_unit_done(unit, stats)
            waiting[p] = still
            if still:
                return

    def _status(
        self, plan: units.Plan, waiting: list[list[int]], states: dict[str, tuple[str, str]]
    ) -> str:
        counts: dict[str, int] = {}
        for state, _ in states.values():
            counts[state.lower()] = counts.get(state.lower(), 0) + 1
        phases = ", ".join(
            f"phase {p + 1}: {len(phase) - len(waiting[p])}/{len(phase)}"
            for p, phase in enumerate(plan.phases)
        )
        jobs = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        return f"slurm {plan.stage}: units done {phases}; tasks: {jobs or 'none listed'}"

    def _failed_logs(
        self,
        plan: units.Plan,
        job_dir: Path,
        jobs: list[Job],
        states: dict[str, tuple[str, str]],
    ) -> list[str]:
        """The logs of the tasks that ended without finishing (by their unit range)."""
        out = []
        by_id = {j.id: j for j in jobs}
        for task_id, (state, _) in sorted(states.items()):
            if state in ACTIVE or state == "COMPLETED":
                continue
            base, _, index = task_id.partition("_")
            job = by_id.get(base)
            if job is None:
                continue
            if job.phase is None:
                out.append(f"{job_dir}/logs/finalize.log ({state.lower()})")
                continue
            if not index.isdigit():
                continue
            t = job.offset + int(index)
            n = len(plan.phases[job.phase])
            a = t * job.per_task
            b = min(a + job.per_task, n) - 1
            out.append(
                f"{job_dir}/logs/p{job.phase + 1}-units-{a:07d}-{b:07d}.log ({state.lower()})"
            )
        return out

    def _cancel_pending(self, states: dict[str, tuple[str, str]]) -> None:
        pending = sorted({t for t, (s, _) in states.items() if s == "PENDING"})
        if pending:
            _slurm(["scancel", *pending], what="scancel")

    def _cancel_waiting(self, jobs: list[Job], states: dict[str, tuple[str, str]]) -> None:
        """Cancel the jobs still pending (they wait on a failed dependency), then wait for
        the running tasks to end: their units must not run twice at once."""
        self._cancel_pending(states)
        ids = [j.id for j in jobs]
        while any(s in ACTIVE for s, _ in job_states(ids).values()):
            time.sleep(self.o.poll)


def job_states(ids: list[str]) -> dict[str, tuple[str, str]]:
    """State and reason of every task of the jobs ``ids``: ``{"12_3": ("RUNNING", "None"),
    "13": ("PENDING", "Dependency")}``, from the controller's queue (``squeue``, which lists
    the pending tasks of an array one by one and ended jobs for ``MinJobAge``); the jobs it
    no longer lists from the accounting (``sacct``), where the cluster keeps one."""
    if not ids:
        return {}
    wanted = set(ids)
    out = _slurm(
        ["squeue", "--noheader", "--array", "--states=all", "--format=%F|%i|%T|%r"],
        what="squeue",
    )
    states: dict[str, tuple[str, str]] = {}
    for line in out.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 4 or parts[0] not in wanted:
            continue
        states[parts[1]] = (parts[2], parts[3])
    listed = {t.partition("_")[0] for t in states}
    gone = sorted(wanted - listed)
    if gone:
        states.update(_accounted(gone))
    return states


def _accounted(ids: list[str]) -> dict[str, tuple[str, str]]:
    """What ``sacct`` says of jobs the queue forgot; nothing when accounting is off."""
    try:
        out = _slurm(
            [
                "sacct",
                "--noheader",
                "--parsable2",
                "--array",
                "--allocations",
                f"--jobs={','.join(ids)}",
                "--format=JobID,State",
            ],
            what="sacct",
        )
    except SlurmError:
        return {}
    states = {}
    for line in out.splitlines():
        job, _, state = line.strip().partition("|")
        if job and state:
            states[job] = (state.split()[0], "None")  # "CANCELLED by 0": the state
    return states
