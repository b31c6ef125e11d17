"""A small progress line for long stages: documents, tokens, MB/s and ETA, on stderr.

On a terminal the line is redrawn in place (at most every ``interval`` seconds); otherwise
(logs, CI, pipes) a full line is written every ``log_interval`` seconds and once at the end.
Feed it per unit with ``progress(unit, stats)`` (the ``on_unit_done`` hook of
``units.run_local``) or directly with ``update``.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from shardcore.units import counts as unit_counts


def human_count(n: float) -> str:
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.1f}{unit}"
    return f"{int(n)}"


def human_duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}"


class Progress:
    """Counts documents, tokens and input bytes against ``total_bytes``."""

    def __init__(
        self,
        total_bytes: int,
        *,
        label: str = "tokenize",
        stream: TextIO | None = None,
        interval: float = 0.2,
        log_interval: float = 10.0,
        enabled: bool = True,
    ):
        self.total_bytes = max(int(total_bytes), 0)
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval = interval if self.tty else log_interval
        self.enabled = enabled
        self.documents = 0
        self.tokens = 0
        self.bytes = 0
        self.start = time.monotonic()
        self._last = self.start

    def update(self, *, documents: int = 0, tokens: int = 0, nbytes: int = 0) -> None:
        self.documents += documents
        self.tokens += tokens
        self.bytes += nbytes
        now = time.monotonic()
        if now - self._last >= self.interval:
            self._last = now
            self._draw(final=False)

    def __call__(self, unit: dict[str, Any], stats: dict[str, Any]) -> None:

        counts = unit_counts(stats)
        self.update(
            documents=counts["documents"],
            tokens=counts["tokens"],
            nbytes=counts["bytes"] or int(unit.get("bytes") or 0),
        )

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.start, 1e-9)
        rate = self.bytes / elapsed
        parts = [
            self.label,
            f"{human_count(self.documents)} docs",
            f"{human_count(self.tokens)} tokens",
            f"{rate / 1e6:.1f} MB/s",
        ]
        if self.total_bytes:
            frac = min(self.bytes / self.total_bytes, 1.0)
            eta = (self.total_bytes - self.bytes) / rate if rate > 0 else float("inf")
            parts.append(f"{frac:4.0%}")
            parts.append(f"ETA {human_duration(eta)}" if eta != float("inf") else "ETA --:--:--")
        parts.append(f"elapsed {human_duration(elapsed)}")
        return "  ".join(parts)

    def _draw(self, *, final: bool) -> None:
        if not self.enabled:
            return
        if self.tty:
            end = "\n" if final else ""
            self.stream.write("\r\x1b[K" + self.line() + end)
        else:
            self.stream.write(self.line() + "\n")
        self.stream.flush()

    def close(self) -> None:
        self._draw(final=True)
