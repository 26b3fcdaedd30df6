"""The ``insitu`` command line.

    insitu info      what this machine offers insitu: versions, CUDA devices, MPI, NCCL
"""

from __future__ import annotations

import argparse
import importlib
import platform
import sys

__all__ = ["main"]


def _version(mod: str) -> str:
    try:
        return getattr(importlib.import_module(mod), "__version__", "installed")
    except Exception as exc:  # missing, or failing to load its native library
        return f"not available ({exc.__class__.__name__})"


def info() -> dict[str, str]:
    """What this machine offers: package versions, CUDA devices, MPI flavour, NCCL."""
    from . import __version__, arrays, transports

    out = {"insitu": __version__, "python": platform.python_version()}
    for mod in ("numpy", "numba", "mpi4py", "h5py", "adios2", "OpenGL", "pyspark", "cupy"):
        out[mod] = _version(mod)
    cp = arrays.cupy_or_none()
    if cp is None:
        out["cuda"] = arrays._cupy_status()[1]
    else:
        n = cp.cuda.runtime.getDeviceCount()
        names = [cp.cuda.runtime.getDeviceProperties(i)["name"].decode() for i in range(n)]
        out["cuda"] = f"{n} device(s): {', '.join(names)}"
        out["nccl"] = "available" if transports.nccl_available() else "not available"
    try:
        from mpi4py import MPI

        out["mpi"] = MPI.Get_library_version().splitlines()[0].strip()
        out["mpi cuda-aware"] = str(transports.mpi_cuda_aware())
    except Exception as exc:
        out["mpi"] = f"not available ({exc.__class__.__name__}: {exc})"
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="insitu", description="in-situ GPU visualization runtime")
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="versions, CUDA devices, MPI and NCCL on this machine")
    args = ap.parse_args(argv)
    if args.command == "info":
        for k, v in info().items():
            print(f"{k:>15}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
