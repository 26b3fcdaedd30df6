"""Transports that move halo and shuffle buffers between ranks, chosen per peer pair.

=========  ===================================================  ==================
name       used for                                             host staging
=========  ===================================================  ==================
inproc     blocks of the same rank (direct device or host copy) never
ipc        another process on the same node (CUDA IPC)          never
p2p        another GPU of the same node reached peer-to-peer    never
           (CUDA IPC, pushed, device-side flags, no host step:
           graph-capturable); the halo exchange's default there
nccl       a rank on another GPU (``cupy.cuda.nccl``)           never
mpi        everything else; host arrays                         device data, unless
                                                                the MPI is CUDA-aware
=========  ===================================================  ==================

:func:`choose` gives the default for a pair; ``transport=`` on the halo exchange (and
on compositing) overrides it: :func:`check_override` vets such an argument,
:func:`override_signature` is the part of it all ranks must pass alike,
:func:`choose_peers` applies it, and :func:`check_pairs` checks that both ends of every
pair agree (from what all ranks told, so that ends that differ fail alike everywhere).
:func:`open_transports` opens the transports of one communication pattern.
:func:`get_transport` answers an unknown name with the known ones.

Between the worker daemons of different hosts (the Spark engine with ``network=True``),
host blocks travel over TCP: :mod:`insitu.transports.tcp` (a block server per daemon,
and the driver's record exchange); it is not one of the per-rank transports above.
"""

from __future__ import annotations

import collections
from typing import Any, Iterable, Mapping, Sequence

from ..errors import MismatchError
from .base import (PeerInfo, Transport, TransportContext, allgather_object, alloc_area, recv_object, wait_requests,
                   wait_stream)
from .mpi import MPITransport, mpi_cuda_aware
from .nccl import NCCLTransport, nccl_available
from .ipc import IPCTransport
from .p2p import P2PTransport

__all__ = [
    "IPCTransport",
    "MPITransport",
    "NCCLTransport",
    "P2PTransport",
    "PeerInfo",
    "TRANSPORTS",
    "Transport",
    "TransportContext",
    "allgather_object",
    "alloc_area",
    "check_override",
    "choose",
    "check_pairs",
    "choose_peers",
    "get_transport",
    "mpi_cuda_aware",
    "nccl_available",
    "open_transports",
    "override_signature",
    "recv_object",
    "wait_requests",
    "wait_stream",
]

#: Remote transports by name. "inproc" (same rank) is the halo exchange's direct copy.
TRANSPORTS: dict[str, type[Transport]] = {
    "mpi": MPITransport,
    "nccl": NCCLTransport,
    "ipc": IPCTransport,
    "p2p": P2PTransport,
}
KNOWN = ("inproc", *TRANSPORTS)


def get_transport(name: str) -> type[Transport]:
    """The transport class registered as `name`."""
    try:
        return TRANSPORTS[name]
    except KeyError:
        raise ValueError(f"unknown transport {name!r}; known transports: {', '.join(KNOWN)}") from None


def choose(me: PeerInfo, peer: PeerInfo, infos: Sequence[PeerInfo] = (), *, persistent: bool = False) -> str:
    """Default transport between two ranks (symmetric: both ends choose the same).

    Same rank: inproc. Host arrays: mpi. Same node and GPU: ipc. Different GPUs:
    nccl, unless (on one node) a GPU of the pair is shared by several ranks of `infos`:
    NCCL kernels spin while waiting for their peer, which stalls the other processes
    time-sliced on that GPU, so such pairs use ipc (peer-to-peer copies) instead.
    `persistent` (a pattern set up once and repeated, like a halo exchange): GPUs of
    one node, neither shared, that reach each other peer-to-peer use p2p (its set-up
    maps memory once; each exchange is then one kernel, no NCCL launch).
    """
    if me.rank == peer.rank:
        return "inproc"
    if me.backend != "cupy" or peer.backend != "cupy":
        return "mpi"
    same_node = me.host == peer.host
    if same_node and me.device == peer.device:
        return "ipc"
    users = collections.Counter((i.host, i.device) for i in infos)
    shared = users[(me.host, me.device)] > 1 or users[(peer.host, peer.device)] > 1
    if persistent and same_node and not shared and peer.device in me.peers and me.device in peer.peers:
        return "p2p"
    if nccl_available() and not (same_node and shared):
        return "nccl"
    return "ipc" if same_node else "mpi"


def check_override(override: str | Mapping[int, str] | None) -> None:
    """Raise :class:`ValueError` for a ``transport=`` argument naming no remote transport.

    `override`: ``None``, one name for every peer, or ``{peer_rank: name}``.
    """
    if override is None:
        return
    if not isinstance(override, (str, Mapping)):
        raise ValueError(f"transport must be a name or a {{peer rank: name}} mapping, got {type(override).__name__}")
    for name in [override] if isinstance(override, str) else override.values():
        if name == "inproc":
            raise ValueError("transport 'inproc' serves only blocks of the same rank; "
                             f"for other ranks choose one of {', '.join(KNOWN[1:])}")
        get_transport(name)  # unknown names raise with the list of known ones


def override_signature(override: str | Mapping[int, str] | None) -> str | None:
    """What of a ``transport=`` argument every rank must pass alike: ``None`` or the one
    name; a per-peer map becomes ``"per-peer"`` (its entries differ between ranks by nature)."""
    return override if override is None or isinstance(override, str) else "per-peer"


def choose_peers(me: PeerInfo, peers: Iterable[int], infos: Sequence[PeerInfo],
                 override: str | Mapping[int, str] | None = None, *, persistent: bool = False) -> dict[int, str]:
    """The transport for each of `peers` (ranks indexing `infos`): `override` where it
    names one (see :func:`check_override`), else :func:`choose`."""
    out = {}
    for p in peers:
        if isinstance(override, str):
            out[p] = override
        elif isinstance(override, Mapping) and p in override:
            out[p] = override[p]
        else:
            out[p] = choose(me, infos[p], infos, persistent=persistent)
    return out


def check_pairs(infos: Sequence[PeerInfo], overrides: Sequence[str | Mapping[int, str] | None],
                pairs: Iterable[tuple[int, int]], what: str, *, persistent: bool = False) -> None:
    """Raise :class:`MismatchError` where the two ends of a pair would choose different transports.

    Parameters
    ----------
    infos, overrides : sequences indexed by rank
        What every rank told: its :class:`PeerInfo` and its ``transport=`` argument.
    pairs : iterable of (rank, rank)
        The pairs that talk.
    what : str
        The caller, as the error names it.

    Every rank checks every pair from the same inputs, so per-peer overrides that
    disagree fail alike everywhere instead of pairing two transports that never meet.
    Cheap for large jobs: :func:`choose` is symmetric, so only an end that names the
    pair explicitly is compared.
    """
    def named(x: int, y: int) -> str | None:
        o = overrides[x]
        return o if isinstance(o, str) else o.get(y) if isinstance(o, Mapping) else None

    for a, b in sorted(pairs):
        ends = [named(a, b), named(b, a)]
        if ends == [None, None]:
            continue
        ends = [n if n is not None else choose(infos[x], infos[y], infos, persistent=persistent)
                for n, (x, y) in zip(ends, ((a, b), (b, a)))]
        if ends[0] != ends[1]:
            raise MismatchError(f"{what}: rank {a} chose transport {ends[0]!r} for rank {b}, rank {b} chose "
                                f"{ends[1]!r} for rank {a}; both ends of a pair must choose the same")


def open_transports(ctx: TransportContext, names: Mapping[int, str], send: Mapping[int, Any],
                    recv: Mapping[int, Any], area, options: Mapping[str, dict] | None = None) -> list[Transport]:
    """Open one transport per name in `names` (``{peer: name}``) for those peers' segments.

    Parameters
    ----------
    send, recv : mapping peer -> 1-D array
        Views into `area`, as :class:`Transport` takes them.
    options : mapping name -> dict, optional
        Extra keyword arguments for the transport of that name.

    Every rank opens its transports in sorted name order, so the set-ups that pair
    ranks (handles, NCCL communicators) meet in the same order on both ends.
    """
    by_name: dict[str, tuple[dict, dict]] = {}
    for p, name in sorted(names.items()):
        s, r = by_name.setdefault(name, ({}, {}))
        if p in send:
            s[p] = send[p]
        if p in recv:
            r[p] = recv[p]
    options = options or {}
    return [get_transport(n)(ctx, s, r, area, **options.get(n, {})) for n, (s, r) in sorted(by_name.items())]
