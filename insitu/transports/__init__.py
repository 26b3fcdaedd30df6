"""Transports that move halo and shuffle buffers between ranks, chosen per peer pair.

=========  ===================================================  ==================
name       used for                                             host staging
=========  ===================================================  ==================
inproc     blocks of the same rank (direct device or host copy) never
ipc        another process on the same node and GPU (CUDA IPC)  never
nccl       a rank on another GPU (``cupy.cuda.nccl``)           never
mpi        everything else; host arrays                         device data, unless
                                                                the MPI is CUDA-aware
=========  ===================================================  ==================

:func:`choose` gives the default for a pair; ``transport=`` on the halo exchange
overrides it. :func:`get_transport` answers an unknown name with the known ones.
"""

from __future__ import annotations

from .base import PeerInfo, Transport, TransportContext, alloc_area, wait_requests
from .mpi import MPITransport, mpi_cuda_aware
from .nccl import NCCLTransport, nccl_available
from .ipc import IPCTransport

__all__ = [
    "IPCTransport",
    "MPITransport",
    "NCCLTransport",
    "PeerInfo",
    "TRANSPORTS",
    "Transport",
    "TransportContext",
    "alloc_area",
    "choose",
    "get_transport",
    "mpi_cuda_aware",
    "nccl_available",
    "wait_requests",
]

#: Remote transports by name. "inproc" (same rank) is the halo exchange's direct copy.
TRANSPORTS: dict[str, type[Transport]] = {
    "mpi": MPITransport,
    "nccl": NCCLTransport,
    "ipc": IPCTransport,
}
KNOWN = ("inproc", *TRANSPORTS)


def get_transport(name: str) -> type[Transport]:
    """The transport class registered as `name`."""
    try:
        return TRANSPORTS[name]
    except KeyError:
        raise ValueError(f"unknown transport {name!r}; known transports: {', '.join(KNOWN)}") from None


def choose(me: PeerInfo, peer: PeerInfo) -> str:
    """Default transport between two ranks (symmetric: both ends choose the same)."""
    if me.rank == peer.rank:
        return "inproc"
    if me.backend != "cupy" or peer.backend != "cupy":
        return "mpi"
    same_node = me.host == peer.host
    if same_node and me.device == peer.device:
        return "ipc"
    if nccl_available():
        return "nccl"
    return "ipc" if same_node else "mpi"
