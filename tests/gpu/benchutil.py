"""What every benchmark under tests/gpu shares: the commit it measured and where the table goes."""

from __future__ import annotations

import os
import platform
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def commit() -> str:
    """The commit measured: $INSITU_COMMIT first (the device machine gets a copy of the tree
    whose git metadata may be stale), else git's HEAD."""
    return os.environ.get("INSITU_COMMIT") or (subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip() or "unknown")


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
