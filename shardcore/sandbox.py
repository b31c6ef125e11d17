"""Run a function in a child process with a time and a memory limit.

The web app plans jobs (reads sidecars, evaluates a filter, loads a tokenizer) from user
input; a plan must never take the web process down with it. ``run_limited`` forks a
child that lowers its own address-space limit (``RLIMIT_AS``: what it has now plus
``memory`` bytes) and CPU-time limit, runs the function and sends back its result or its
exception through a pipe. The parent waits at most ``seconds`` and kills the child after
that. Whatever the child does (allocates without end, loops, reads ``/dev/zero``), the
parent gets a ``LimitError`` or the function's own exception, and its memory is untouched.

Fork, not spawn: the child starts in a few milliseconds with the modules the parent has
imported. The child leaves with ``os._exit`` so that it never runs the parent's exit
handlers or closes the parent's database connections.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import resource
import signal
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from shardcore.errors import InputError


class LimitError(InputError):
    """The function ran out of its time or memory budget (or its process died)."""


def _vm_bytes() -> int:
    """This process's current virtual memory size (the base of the child's limit)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _child(
    conn: Connection,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    memory: int,
    seconds: float,
) -> None:
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        limit = _vm_bytes() + memory
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        cpu = int(seconds) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        try:
            result = ("ok", fn(*args, **kwargs))
        except MemoryError:
            result = ("limit", f"needs more than {memory >> 20} MiB of memory")
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the parent
            try:
                pickle.dumps(exc)
                result = ("error", exc)
            except Exception:  # noqa: BLE001 - an exception that cannot cross processes
                result = ("error", InputError(f"{type(exc).__name__}: {exc}"))
        try:
            conn.send(result)
        except Exception:  # noqa: BLE001 - e.g. an unpicklable result
            conn.send(("error", InputError(traceback.format_exc(limit=1))))
    finally:
        conn.close()
        os._exit(0)


def run_limited(
    fn: Callable[..., Any],
    args: tuple = (),
    kwargs: dict[str, Any] | None = None,
    *,
    seconds: float,
    memory: int,
    what: str = "",
) -> Any:
    """``fn(*args, **kwargs)`` in a child process limited to ``seconds`` of wall (and CPU)
    time and ``memory`` more bytes of address space; LimitError when it exceeds them."""
    kwargs = dict(kwargs or {})
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(send, fn, args, kwargs, memory, seconds))
    proc.start()
    send.close()
    label = what or getattr(fn, "__name__", "the work")
    try:
        if not recv.poll(seconds):
            raise LimitError(f"{label} took longer than {seconds:g} s and was stopped")
        try:
            status, value = recv.recv()
        except EOFError:
            raise LimitError(
                f"{label} stopped without an answer (out of its {memory >> 20} MiB memory or "
                f"{seconds:g} s CPU budget)"
            ) from None
    finally:
        recv.close()
        if proc.is_alive():
            proc.kill()
        proc.join()
    if status == "ok":
        return value
    if status == "limit":
        raise LimitError(f"{label} {value}")
    raise value
