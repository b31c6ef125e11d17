"""Where a plan's units run: the engines of DESIGN §6a behind one interface.

An executor takes a ``units.Plan`` and runs every unit of every phase, phase after phase,
then ``finalize``. What it builds depends on the plan alone (``shardcore.units``), never on
the engine, the number of workers or how units are grouped into tasks:

- ``local``: processes of the command (``units.run_local``);
- ``slurm``: job arrays on a Slurm cluster, phases chained by dependencies
  (``shardcore.executors.slurm``);
- ``ray``: one task per unit on a Ray cluster (``shardcore.executors.ray``).

Every engine saves the plan beside the output first and learns what is done from the units'
completion markers there, so a compute node needs the artifact's storage and nothing else
(no database, no broker), and a build is resumed by running it again: done units are
skipped, a finished artifact of the same plan is recognized and returned as it is.

``add_arguments`` puts the options every build command shares on its parser
(``--executor``, the Slurm and Ray options); ``from_args`` makes the executor they name.
The default engine is the environment's ``SHARDYARD_EXECUTOR`` (else ``local``).
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from shardcore.errors import InputError

if TYPE_CHECKING:
    from shardcore.executors.base import Executor, OnUnitDone, resume, undone

__all__ = ["Executor", "OnUnitDone", "add_arguments", "from_args", "resume", "undone"]


def __getattr__(name: str) -> Any:
    # The engines (and numpy under them) load when a build runs, not when a command's
    # parser is made: ``add_arguments`` is all ``shardyard CMD --help`` needs.
    if name in ("Executor", "OnUnitDone", "resume", "undone"):
        from shardcore.executors import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


NAMES = ("local", "slurm", "ray")
ENV = "SHARDYARD_EXECUTOR"


def default_name() -> str:
    """The engine named by ``SHARDYARD_EXECUTOR`` (``local`` when unset)."""
    name = os.environ.get("SHARDYARD_EXECUTOR", "").strip() or "local"
    if name not in NAMES:
        raise InputError(f"{ENV}={name!r}: expected one of {', '.join(NAMES)}")
    return name


def positive(text: str) -> int:
    """An argparse ``type``: an integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is below 1")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of where a build's units run, shared by every build command."""
    g = parser.add_argument_group("where the units run")
    g.add_argument(
        "--executor",
        choices=NAMES,
        default=None,
        help=f"local processes, Slurm job arrays or Ray tasks (default: ${ENV}, else local)",
    )
    g.add_argument(
        "--no-wait",
        action="store_true",
        help="slurm: submit and return (rerun the command to follow or resume the build)",
    )
    g.add_argument(
        "--dry-run",
        action="store_true",
        help="slurm: print the batch scripts and sbatch commands, submit nothing",
    )
    g.add_argument("--partition", help="slurm: partition (sbatch --partition)")
    g.add_argument("--account", help="slurm: account to charge (sbatch --account)")
    g.add_argument("--qos", help="slurm: quality of service (sbatch --qos)")
    g.add_argument("--time", help="slurm: time limit of one task, e.g. 2:00:00 (sbatch --time)")
    g.add_argument("--mem", help="slurm and ray: memory of one task (slurm) or unit (ray), e.g. 8G")
    g.add_argument(
        "--cpus-per-task",
        type=positive,
        default=1,
        help="slurm and ray: CPUs of one task (slurm) or unit (ray) (default 1)",
    )
    g.add_argument(
        "--units-per-task",
        type=positive,
        help="slurm: units one array task runs in turn (default: as few as keep a phase "
        "within --max-tasks); what is built is the same whatever it is",
    )
    g.add_argument(
        "--max-tasks",
        type=positive,
        default=1000,
        help="slurm: most array tasks of one phase (default %(default)s)",
    )
    g.add_argument(
        "--max-running",
        type=positive,
        help="slurm: most tasks of an array running at once (the array's %%N)",
    )
    g.add_argument(
        "--sbatch-option",
        action="append",
        default=[],
        metavar="OPTION",
        help="slurm: an extra sbatch option, e.g. --sbatch-option=--gres=gpu:1 (repeatable)",
    )
    g.add_argument(
        "--job-dir",
        help="slurm: where the batch scripts, the submitted job ids and the per-task logs go "
        "(default: OUT.slurm beside a local output)",
    )
    g.add_argument(
        "--retries",
        type=int,
        default=3,
        help="slurm and ray: times failed units are submitted again (default %(default)s)",
    )
    g.add_argument(
        "--ray-address",
        help="ray: the cluster to attach to (e.g. ray://head:10001 or auto); default: start "
        "a local one",
    )


def from_args(args: argparse.Namespace, *, workers: int = 1) -> Executor:
    """The executor a build command's options name."""
    name = args.executor or default_name()
    if args.retries < 0:
        raise InputError(f"--retries: {args.retries} is below 0")
    if name != "slurm" and (args.no_wait or args.dry_run):
        raise InputError(f"--no-wait and --dry-run submit Slurm jobs; --executor is {name}")
    if name == "local":
        from shardcore.executors.local import LocalExecutor

        return LocalExecutor(workers=workers)
    if name == "slurm":
        from shardcore.executors.slurm import SlurmExecutor, SlurmOptions

        return SlurmExecutor(
            SlurmOptions(
                partition=args.partition,
                account=args.account,
                qos=args.qos,
                time=args.time,
                mem=args.mem,
                cpus_per_task=args.cpus_per_task,
                units_per_task=args.units_per_task,
                max_tasks=args.max_tasks,
                max_running=args.max_running,
                sbatch_options=list(args.sbatch_option),
                job_dir=args.job_dir,
                wait=not args.no_wait,
                dry_run=args.dry_run,
                retries=args.retries,
            )
        )
    from shardcore.executors.ray import RayExecutor

    return RayExecutor(
        address=args.ray_address,
        cpus_per_unit=args.cpus_per_task,
        memory=args.mem,
        retries=args.retries,
    )
