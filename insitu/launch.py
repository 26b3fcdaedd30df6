"""Start programs under MPI: find the ``mpiexec`` that matches this Python's mpi4py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Sequence

__all__ = ["mpiexec", "run_mpi"]


def mpiexec() -> list[str]:
    """The ``mpiexec`` command (as an argument list) for this interpreter's MPI.

    ``INSITU_MPIEXEC`` overrides (split on spaces). Otherwise the one beside the
    interpreter (the ``mpich`` wheel installs it there), then ``mpiexec``/``mpirun``
    on ``PATH``. Open MPI gets ``--oversubscribe`` so small CI machines can run
    more ranks than cores.
    """
    env = os.environ.get("INSITU_MPIEXEC")
    if env:
        return env.split()
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    exe = here if os.access(here, os.X_OK) else shutil.which("mpiexec") or shutil.which("mpirun")
    if exe is None:
        raise FileNotFoundError("no mpiexec found: install the 'mpich' wheel (pip install mpich) or an MPI")
    cmd = [exe]
    try:
        ver = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        ver = ""
    if "Open MPI" in ver or "OpenRTE" in ver:
        cmd.append("--oversubscribe")
    return cmd


def run_mpi(n: int, args: Sequence[str], *, timeout: float = 300, env: dict | None = None,
            check: bool = False) -> subprocess.CompletedProcess:
    """Run ``python ARGS`` on `n` ranks; return the completed process (text output)."""
    cmd = [*mpiexec(), "-n", str(n), sys.executable, *args]
    e = dict(os.environ)
    if env:
        e.update(env)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=e, check=check)
