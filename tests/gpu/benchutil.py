"""What every benchmark under tests/gpu shares: the commit it measured and where the table goes."""

from __future__ import annotations

import os
import platform
import subprocess
import time
from typing import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def commit() -> str:
    """The commit measured: $INSITU_COMMIT first (the device machine gets a copy of the tree
    whose git metadata may be stale), else git's HEAD."""
    return os.environ.get("INSITU_COMMIT") or (subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip() or "unknown")


def best_of(f: Callable[[], object], reps: int = 3, clock: Callable[[], float] = time.perf_counter) -> float:
    """The shortest of `reps` runs of `f`, in seconds of `clock` (wall time by default;
    ``time.process_time`` for CPU time, steadier on a shared machine)."""
    best = float("inf")
    for _ in range(reps):
        t = clock()
        f()
        best = min(best, clock() - t)
    return best


def device_median_ms(f: Callable[[], object], reps: int = 9) -> float:
    """The median time of `reps` runs of `f` on the current CUDA stream, in ms between CUDA
    events (each run waited for, so runs do not overlap)."""
    import statistics

    import cupy as cp

    times = []
    for _ in range(reps):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        f()
        b.record()
        b.synchronize()
        times.append(cp.cuda.get_elapsed_time(a, b))
    return statistics.median(times)


def emit(text: str, md: str | None) -> None:
    """Print a Markdown table and append it to the file `md` (when given)."""
    print(text)
    if md:
        with open(md, "a") as fh:
            fh.write("\n" + text)


def host() -> str:
    """The CPU model and core count, for the device line of CPU-side tables."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return f"{line.split(':', 1)[1].strip()} ({os.cpu_count()} cores)"
    except OSError:
        pass
    return f"{platform.processor() or platform.machine()} ({os.cpu_count()} cores)"
