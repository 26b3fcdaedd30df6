"""MPI transport (mpi4py): host buffers, or device buffers where the MPI is CUDA-aware.

Where it is not (Open MPI and MPICH builds without CUDA, the pip ``mpich`` wheel),
device data is staged through page-locked host buffers by the counted gateway in
:mod:`insitu.arrays`, so the staging shows in the transfer counts.
"""

from __future__ import annotations

import ctypes
import functools
import os

from .. import arrays
from .base import Transport, wait_requests

__all__ = ["MPITransport", "mpi_cuda_aware"]

_TAG = 7301


@functools.cache
def mpi_cuda_aware() -> bool:
    """Whether the loaded MPI library accepts CUDA device buffers.

    ``INSITU_MPI_CUDA_AWARE=0|1`` overrides. Otherwise asks the library itself:
    Open MPI's ``MPIX_Query_cuda_support`` or MPICH's ``MPIX_GPU_query_support``.
    """
    env = os.environ.get("INSITU_MPI_CUDA_AWARE")
    if env is not None:
        return env.strip().lower() in ("1", "true", "yes", "on")
    from mpi4py import MPI  # noqa: F401  (loads libmpi)

    for lib in _loaded_mpi_libraries():
        try:
            h = ctypes.CDLL(lib)
        except OSError:
            continue
        if hasattr(h, "MPIX_Query_cuda_support"):
            return bool(h.MPIX_Query_cuda_support())
        if hasattr(h, "MPIX_GPU_query_support"):
            ok = ctypes.c_int(0)
            MPIX_GPU_SUPPORT_CUDA = 0
            if h.MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, ctypes.byref(ok)) == 0:
                return bool(ok.value)
    return False


def _loaded_mpi_libraries() -> list[str]:
    libs = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                name = os.path.basename(path)
                if name.startswith(("libmpi.", "libmpich.", "libmpi_")) and path not in libs:
                    libs.append(path)
    except OSError:
        pass
    return libs


class MPITransport(Transport):
    """Point-to-point ``Isend``/``Irecv`` of one buffer per peer."""

    name = "mpi"

    def __init__(self, ctx, send, recv, area) -> None:
        super().__init__(ctx, send, recv, area)
        self.staged = self.on_device and not mpi_cuda_aware()
        if self.staged:
            self._hsend = {p: arrays.pinned_empty(v.shape, v.dtype) for p, v in self.send.items()}
            self._hrecv = {p: arrays.pinned_empty(v.shape, v.dtype) for p, v in self.recv.items()}
        self._reqs: list = []
        self._req_peers: list[int] = []

    @property
    def label(self) -> str:
        if not self.on_device:
            return "mpi"
        return "mpi-staged" if self.staged else "mpi-cuda-aware"

    def start(self) -> None:
        comm = self.ctx.comm
        if self.on_device:
            # MPI reads device memory outside CUDA's stream order: packing must be done.
            import cupy

            cupy.cuda.get_current_stream().synchronize()
        reqs, peers = [], []
        for p in sorted(self.recv):
            reqs.append(comm.Irecv(self._hrecv[p] if self.staged else self.recv[p], source=p, tag=_TAG))
            peers.append(p)
        for p in sorted(self.send):
            if self.staged:
                arrays.to_host(self.send[p], out=self._hsend[p])
            reqs.append(comm.Isend(self._hsend[p] if self.staged else self.send[p], dest=p, tag=_TAG))
            peers.append(p)
        self._reqs, self._req_peers = reqs, peers

    def wait(self, deadline) -> None:
        wait_requests(self._reqs, self._req_peers, deadline, f"MPI {self.ctx.purpose} on rank {self.ctx.rank}")
        self._reqs = []
        if self.staged:
            for p, h in self._hrecv.items():
                arrays.to_device(h, out=self.recv[p])
