"""What every benchmark report states about the process and the machine it ran on."""

from __future__ import annotations

import os
import platform
import resource
from pathlib import Path


def machine() -> str:
    """CPU model, cores, memory and Python version, for a report's header."""
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{cpu}, {os.cpu_count()} cores, {mem:.0f} GiB RAM, Python {platform.python_version()}"


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
