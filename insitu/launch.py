"""Start programs under MPI: find the ``mpiexec`` that matches this Python's mpi4py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Sequence

__all__ = ["mpiexec", "run_mpi", "share_cpu_threads"]


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
        raise FileNotFoundError("no mpiexec found: install an MPI (and mpi4py built against it), or "
                                "pip install 'insitu[mpich]'")
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


def share_cpu_threads(comm) -> int | None:
    """Give each rank of a node an equal share of its cores for Numba's threads.

    ``mpirun -n 8`` on a 16-core node would otherwise start 8 x 16 threads whenever
    the CPU kernels run in parallel, starving the simulation. Leaves an explicit
    ``NUMBA_NUM_THREADS`` alone. Returns the thread count set (``None``: unchanged).
    """
    if comm is None or comm.Get_size() == 1 or "NUMBA_NUM_THREADS" in os.environ:
        return None
    from mpi4py import MPI

    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    local = node.Get_size()
    node.Free()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    n = max(1, cores // local)
    import numba

    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    return n
