"""Small C kernels of our own, compiled on first use and called through ctypes.

``compile_kernel(name, source)`` compiles ``source`` with the system C compiler (``$CC``,
else ``cc`` or ``gcc``) into the cache directory (``shardcore.storage.cache_root``, else
the system temp directory when that is read-only), once per source version (the file name
holds a hash of the source, the flags and the platform), renames it into place atomically
(so concurrent first uses are safe) and loads it. Without a compiler it returns None and
warns once; every caller keeps an exact (slower) numpy path for that case. Used by the
blend schedule (``shardcore.blend``) and the diversity order (``shardcore.order.diversity``).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path

from shardcore import atomic
from shardcore.storage import cache_root

__all__ = ["FLAGS", "compile_kernel"]

# -ffp-contract=off: a fused multiply-add would round once instead of twice, and the
# blend schedule must equal megatron-core's float for float.
FLAGS = ("-O3", "-ffp-contract=off", "-fno-fast-math", "-fPIC", "-shared")

_kernels: dict[str, ctypes.CDLL | None] = {}


def compile_kernel(name: str, source: str, flags: Sequence[str] = FLAGS) -> ctypes.CDLL | None:
    """Compile C ``source`` of our own (once per source version) with the system compiler
    into the cache directory and load it; None (with one warning) if that is impossible."""
    if name in _kernels:
        return _kernels[name]
    key = hashlib.sha256((source + " ".join(flags) + sys.platform).encode()).hexdigest()[:16]
    lib: ctypes.CDLL | None = None
    errors = []
    # The cache directory first; a read-only one falls back to the system temp directory.
    for directory in (cache_root(), Path(tempfile.gettempdir()) / "shardyard-cache"):
        try:
            lib = ctypes.CDLL(str(_build(name, source, flags, directory / f"{name}-{key}.so")))
            break
        except OSError as exc:
            errors.append(f"{directory}: {exc}")
    if lib is None:
        warnings.warn(
            f"shardcore: compiled {name} kernel unavailable ({'; '.join(errors)}); "
            "using the slow path",
            RuntimeWarning,
            stacklevel=3,
        )
    _kernels[name] = lib
    return lib


def _build(name: str, source: str, flags: Sequence[str], target: Path) -> Path:
    """Compile ``source`` to ``target`` unless it is there; raises OSError on failure."""
    if target.exists():
        return target
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise OSError("no C compiler (cc/gcc) on PATH")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        src = Path(tmp) / f"{name}.c"
        src.write_text(source)
        with atomic.atomic_path(target) as out:  # concurrent first uses are safe
            proc = subprocess.run(
                [cc, *flags, "-o", str(out), str(src)], capture_output=True, text=True
            )
            if proc.returncode != 0:
                raise OSError(f"{cc} failed: {proc.stderr.strip()[:500]}")
    return target
