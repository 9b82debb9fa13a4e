"""What a handler's run uses: its CPU time and, in a process of its own, its peak memory; and
the memory a process holds now, against `--max-memory`.

Read from the operating system without a dependency: `time.thread_time()` (the CPU of the
handler's thread), `resource.getrusage()` (of a whole process), and on Linux
`/proc/self/status` (`VmRSS`, the resident memory now, and `VmHWM`, its peak, which writing
`5` to `/proc/self/clear_refs` resets, so that a reused child process measures each task's
peak on its own).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path

try:
    import resource
except ImportError:  # pragma: no cover - Windows
    resource = None  # type: ignore[assignment]

MB = 1024 * 1024
"""Bytes in a megabyte, as `--max-memory` counts them."""

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")
_RESET_PEAK = "5"  # clear_refs: reset the peak resident set size (VmHWM), Linux 4.0+


@dataclasses.dataclass(frozen=True)
class Usage:
    """What a run used: CPU seconds, and its peak resident memory in bytes (None: unknown)."""

    cpu_time: float | None = None
    peak_memory: int | None = None


class ThreadMeter:
    """Measures the CPU time of the current thread between `__init__` and `usage()`."""

    def __init__(self) -> None:
        self._started = time.thread_time()

    def usage(self) -> Usage:
        """The CPU time this thread used since the meter was made (peak memory: unknown,
        threads share the process's memory)."""
        return Usage(cpu_time=max(0.0, time.thread_time() - self._started))


class ProcessMeter:
    """Measures the CPU time of this whole process, and its peak resident memory, between
    `__init__` and `usage()`: for a child process that runs one task at a time."""

    def __init__(self) -> None:
        self._peak_reset = reset_peak_memory()
        self._started = process_cpu_time()

    def usage(self) -> Usage:
        """The CPU time since the meter was made, and the peak memory: since then where the
        peak could be reset (Linux), else the process's peak over its life."""
        cpu = max(0.0, process_cpu_time() - self._started)
        return Usage(cpu_time=cpu, peak_memory=peak_memory())


def process_cpu_time() -> float:
    """User and system CPU seconds of this process (all its threads)."""
    if resource is None:  # pragma: no cover - Windows
        return time.process_time()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def reset_peak_memory() -> bool:
    """Reset this process's peak resident memory (Linux); whether it could be."""
    try:
        _CLEAR_REFS.write_text(_RESET_PEAK)
    except OSError:
        return False
    return True


def peak_memory() -> int | None:
    """This process's peak resident memory in bytes (since the last reset, on Linux)."""
    peak = _status_bytes("VmHWM")
    if peak is not None:
        return peak
    if resource is None:  # pragma: no cover - Windows
        return None
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Kilobytes on Linux and the BSDs, bytes on macOS.
    return maxrss if sys.platform == "darwin" else maxrss * 1024


def current_memory() -> int | None:
    """This process's resident memory now, in bytes (its peak where the current size cannot
    be read)."""
    current = _status_bytes("VmRSS")
    return current if current is not None else peak_memory()


def _status_bytes(field: str) -> int | None:
    """A `kB` field of `/proc/self/status`, in bytes; None where there is no such file."""
    try:
        text = _STATUS.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    return None


def host_load() -> float:
    """The host's load average over the last minute (`os.getloadavg()`): the runnable
    processes, on average, that the `--max-load` of a worker compares with."""
    return os.getloadavg()[0]
