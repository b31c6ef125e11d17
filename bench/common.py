"""What the benchmark scripts share: the machine, the process's CPU and peak memory for their
reports, real text and text cut into batches for the engines they time."""

from __future__ import annotations

import os
import platform
import resource
import sysconfig
from collections.abc import Iterator
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo ("unknown CPU" where it has none)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def memory_gib() -> float:
    """The machine's physical memory in GiB."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


def machine() -> str:
    """CPU model, cores, memory and Python version, for a report's header."""
    return (
        f"{cpu_model()}, {os.cpu_count()} cores, {memory_gib():.0f} GiB RAM, "
        f"Python {platform.python_version()}"
    )


def peak_rss_mb() -> float:
    """This process's peak resident set (VmHWM; ru_maxrss would carry the parent's peak
    across fork and exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds() -> float:
    """User plus system CPU seconds of this process so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def text_batches(texts: list[str], chars: int) -> list[list[str]]:
    """``texts`` in order, cut into batches of at least ``chars`` characters (the last
    batch: what is left)."""
    out, cur, n = [], [], 0
    for t in texts:
        cur.append(t)
        n += len(t)
        if n >= chars:
            out.append(cur)
            cur, n = [], 0
    if cur:
        out.append(cur)
    return out


def stdlib_texts() -> Iterator[str]:
    """The text of each .py, .rst, .txt and .md file of this interpreter's standard library
    that reads as UTF-8, in path order."""
    lib = Path(sysconfig.get_paths()["stdlib"])
    for p in sorted(lib.rglob("*")):
        if p.suffix in (".py", ".rst", ".txt", ".md") and p.is_file():
            try:
                yield p.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
