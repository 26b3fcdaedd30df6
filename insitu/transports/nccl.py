"""NCCL transport (``cupy.cuda.nccl``) between ranks on different GPUs.

NCCL refuses a communicator with two ranks on one GPU, and jobs often put several
ranks on a GPU, so this transport builds one two-rank communicator per pair of ranks
that talk (cached for the life of the job). Pairs are initialised in one global order,
which cannot deadlock: the smallest unfinished pair always has both ranks waiting on
it. The unique id travels over MPI with a timeout, so a dead peer is reported rather
than waited for. A caller that has a communicator over all its ranks already passes it
as :attr:`TransportContext.nccl <insitu.transports.TransportContext>`; it is used instead.

Processes that are not MPI ranks (the worker daemons of Spark's tasks, on several hosts)
build a communicator from a unique id that travels by other means (:func:`unique_id`,
:func:`join`) and swap arrays through it (:func:`swap`): over NCCL's network transport
between hosts, without host copies in this library.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Hashable, Sequence

from ..errors import InsituError, PeerTimeoutError
from .base import Transport, recv_object, wait_requests, wait_stream

__all__ = ["NCCLTransport", "held", "join", "nccl_available", "stats", "swap", "unique_id"]

_TAG_UID = 7302
_pair_comms: dict[tuple[int, int], object] = {}  # (world rank lo, world rank hi) -> NcclCommunicator


def nccl_available() -> bool:
    """Whether CuPy was built with NCCL."""
    try:
        from cupy.cuda import nccl

        return bool(nccl.available) if hasattr(nccl, "available") else True
    except Exception:
        return False


def _pair_comm(ctx, peer: int, deadline: float):
    from cupy.cuda import nccl

    from mpi4py import MPI

    lo, hi = min(ctx.rank, peer), max(ctx.rank, peer)
    # Keyed by world ranks, so every exchange of the job shares one communicator per pair.
    key = tuple(MPI.Group.Translate_ranks(ctx.comm.Get_group(), [lo, hi], MPI.COMM_WORLD.Get_group()))
    if key in _pair_comms:
        return _pair_comms[key]
    if ctx.rank == lo:
        uid = nccl.get_unique_id()  # a tuple or bytes, by CuPy version: send it pickled as is
        wait_requests([ctx.comm.isend(uid, dest=peer, tag=_TAG_UID)], [peer], deadline,
                      f"NCCL set-up on rank {ctx.rank}")
    else:
        uid = recv_object(ctx.comm, peer, _TAG_UID, deadline, f"NCCL set-up on rank {ctx.rank}")
    c = nccl.NcclCommunicator(2, uid, 0 if ctx.rank == lo else 1)
    _pair_comms[key] = c
    return c


class NCCLTransport(Transport):
    """Grouped ``ncclSend``/``ncclRecv`` on the current stream; no host staging."""

    name = "nccl"
    stream_ordered = True

    def __init__(self, ctx, send, recv, area) -> None:
        super().__init__(ctx, send, recv, area)
        deadline = time.monotonic() + ctx.timeout
        if ctx.nccl is not None:
            self._comms = {p: ctx.nccl for p in self.peers}
            self._index = {p: p for p in self.peers}
        else:
            # Sorted peers give every rank the same global (lo, hi) order of pair set-ups.
            self._comms = {p: _pair_comm(ctx, p, deadline) for p in self.peers}
            self._index = {p: 0 if p < ctx.rank else 1 for p in self.peers}  # the peer's rank in the pair
        self._deadline = 0.0

    def start(self) -> None:
        import cupy
        from cupy.cuda import nccl

        stream = cupy.cuda.get_current_stream()
        nccl.groupStart()
        try:
            for p in self.peers:
                c, i = self._comms[p], self._index[p]
                if p in self.send:
                    b = self.send[p]
                    c.send(b.data.ptr, b.nbytes, nccl.NCCL_UINT8, i, stream.ptr)
                if p in self.recv:
                    b = self.recv[p]
                    c.recv(b.data.ptr, b.nbytes, nccl.NCCL_UINT8, i, stream.ptr)
        finally:
            nccl.groupEnd()
        self._deadline = time.monotonic() + self.ctx.timeout

    def wait(self, deadline) -> None:
        """Nothing to wait for on the host: unpacking is stream-ordered after the receives."""

    def release(self) -> None:
        import cupy

        wait_stream(cupy.cuda.get_current_stream(), self._deadline,
                    f"NCCL {self.ctx.purpose} on rank {self.ctx.rank} with peer(s) {self.peers}",
                    on_timeout=self.abort)

    def abort(self) -> None:
        for c in {id(c): c for c in self._comms.values()}.values():  # a given communicator serves every peer
            c.abort()
        for k in [k for k, v in _pair_comms.items() if v in self._comms.values()]:
            del _pair_comms[k]
        self._comms = {}


# --------------------------------------------------------------------------- communicators by unique id

_keyed_comms: dict[Hashable, Any] = {}  # in a worker daemon: key -> NcclCommunicator
_STATS = {"bytes_sent": 0, "bytes_received": 0, "swaps": 0, "joins": 0}


def stats() -> dict:
    """Bytes this process sent and received through :func:`swap`, swaps and joins."""
    return dict(_STATS)


def unique_id() -> Any:
    """A new NCCL unique id (its bootstrap root listens in this process: call it in one
    that lives through :func:`join`)."""
    from cupy.cuda import nccl

    return nccl.get_unique_id()


def held() -> tuple:
    """Keys of the communicators this process holds."""
    return tuple(_keyed_comms)


def join(key: Hashable, nranks: int, uid: Any, rank: int, *, timeout: float) -> None:
    """Become `rank` of the `nranks`-rank communicator of `uid`, kept under `key` (one held
    under `key` before is aborted first). On the current device.

    Raises
    ------
    PeerTimeoutError
        Some rank did not join within `timeout` seconds (NCCL's set-up has no timeout of its
        own: it runs in a thread, left behind).
    """
    import cupy
    from cupy.cuda import nccl

    old = _keyed_comms.pop(key, None)
    if old is not None:
        old.abort()
    device, got = cupy.cuda.Device().id, {}

    def init() -> None:
        try:
            with cupy.cuda.Device(device):
                got["comm"] = nccl.NcclCommunicator(nranks, uid, rank)
        except Exception as e:  # reported to the caller
            got["error"] = e

    t = threading.Thread(target=init, name="insitu-nccl-join", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise PeerTimeoutError(f"NCCL: rank {rank} of {nranks} waited {timeout:g} s for the other ranks to join "
                               f"communicator {key!r} (one died, or cannot reach this host)")
    if "error" in got:
        raise InsituError(f"NCCL: rank {rank} of {nranks} could not join communicator {key!r}: "
                          f"{got['error']}") from got["error"]
    _keyed_comms[key] = got["comm"]
    _STATS["joins"] += 1


def swap(key: Hashable, sends: Sequence[tuple[int, Any]], recvs: Sequence[tuple[int, tuple, str]], *,
         timeout: float) -> list:
    """Send and receive device arrays through the communicator held under `key`, in one
    NCCL group on the current stream; waits for it (or the deadline).

    Parameters
    ----------
    sends : sequence of (peer rank, cupy.ndarray)
        Arrays to send; to each peer, in the order the peer lists them in its `recvs`.
    recvs : sequence of (peer rank, shape, dtype)
        Arrays to receive, per peer in the order the peer sends them.

    Returns
    -------
    list of cupy.ndarray
        The received arrays, in the order of `recvs`.

    Raises
    ------
    PeerTimeoutError
        The exchange did not complete within `timeout` s (a peer died or never posted its
        half): the communicator is aborted and forgotten, so the next job joins a new one.
    """
    import cupy
    from cupy.cuda import nccl

    comm = _keyed_comms.get(key)
    if comm is None:
        raise InsituError(f"NCCL: this process holds no communicator {key!r} (join it first)")
    stream = cupy.cuda.get_current_stream()
    outs = [cupy.ascontiguousarray(a) for _, a in sends]
    ins = [cupy.empty(tuple(shape), dtype=dtype) for _, shape, dtype in recvs]
    nccl.groupStart()
    try:
        for (peer, _), a in zip(sends, outs):
            comm.send(a.data.ptr, a.nbytes, nccl.NCCL_UINT8, peer, stream.ptr)
        for (peer, _, _), b in zip(recvs, ins):
            comm.recv(b.data.ptr, b.nbytes, nccl.NCCL_UINT8, peer, stream.ptr)
    finally:
        nccl.groupEnd()

    def abort() -> None:
        _keyed_comms.pop(key, None)
        comm.abort()

    peers = sorted({p for p, _ in sends} | {p for p, *_ in recvs})
    wait_stream(stream, time.monotonic() + timeout, f"NCCL swap on communicator {key!r} with ranks {peers}",
                on_timeout=abort)
    _STATS["bytes_sent"] += sum(a.nbytes for a in outs)
    _STATS["bytes_received"] += sum(b.nbytes for b in ins)
    _STATS["swaps"] += 1
    return ins
