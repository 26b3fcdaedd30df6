"""NCCL transport (``cupy.cuda.nccl``) between ranks on different GPUs.

NCCL refuses a communicator with two ranks on one GPU, and jobs often put several
ranks on a GPU, so this transport builds one two-rank communicator per pair of ranks
that talk (cached for the life of the job). Pairs are initialised in one global order,
which cannot deadlock: the smallest unfinished pair always has both ranks waiting on
it. The unique id travels over MPI with a timeout, so a dead peer is reported rather
than waited for. A caller that has a communicator over all its ranks already passes it
as :attr:`TransportContext.nccl <insitu.transports.TransportContext>`; it is used instead.
"""

from __future__ import annotations

import time

from .base import Transport, recv_object, wait_requests, wait_stream

__all__ = ["NCCLTransport", "nccl_available"]

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
