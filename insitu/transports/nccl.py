"""NCCL transport (``cupy.cuda.nccl``) between ranks on different GPUs.

NCCL refuses a communicator with two ranks on one GPU, and jobs often put several
ranks on a GPU, so this transport builds one two-rank communicator per pair of ranks
that talk (cached for the life of the job). Pairs are initialised in one global order,
which cannot deadlock: the smallest unfinished pair always has both ranks waiting on
it. The unique id travels over MPI with a timeout, so a dead peer is reported rather
than waited for.
"""

from __future__ import annotations

import time

from ..errors import PeerTimeoutError
from .base import Transport, wait_requests

__all__ = ["NCCLTransport", "nccl_available"]

_TAG_UID = 7302
_pair_comms: dict[tuple[int, int, int], object] = {}  # (id(comm), lo, hi) -> NcclCommunicator


def nccl_available() -> bool:
    """Whether CuPy was built with NCCL."""
    try:
        from cupy.cuda import nccl

        return bool(nccl.available) if hasattr(nccl, "available") else True
    except Exception:
        return False


def _pair_comm(ctx, peer: int, deadline: float):
    from cupy.cuda import nccl
    import numpy as np

    lo, hi = min(ctx.rank, peer), max(ctx.rank, peer)
    key = (id(ctx.comm), lo, hi)
    if key in _pair_comms:
        return _pair_comms[key]
    if ctx.rank == lo:
        uid = np.array(nccl.get_unique_id(), dtype=np.int8)  # 128 signed chars
        wait_requests([ctx.comm.Isend(uid, dest=peer, tag=_TAG_UID)], [peer], deadline,
                      f"NCCL set-up on rank {ctx.rank}")
    else:
        uid = np.empty(128, np.int8)
        wait_requests([ctx.comm.Irecv(uid, source=peer, tag=_TAG_UID)], [peer], deadline,
                      f"NCCL set-up on rank {ctx.rank}")
    c = nccl.NcclCommunicator(2, tuple(int(b) for b in uid), 0 if ctx.rank == lo else 1)
    _pair_comms[key] = c
    return c


class NCCLTransport(Transport):
    """Grouped ``ncclSend``/``ncclRecv`` on the current stream; no host staging."""

    name = "nccl"

    def __init__(self, ctx, send, recv, area) -> None:
        super().__init__(ctx, send, recv, area)
        deadline = time.monotonic() + ctx.timeout
        # Sorted peers give every rank the same global (lo, hi) order of pair set-ups.
        self._comms = {p: _pair_comm(ctx, p, deadline) for p in self.peers}
        self._event = None

    def start(self) -> None:
        import cupy
        from cupy.cuda import nccl

        stream = cupy.cuda.get_current_stream()
        nccl.groupStart()
        try:
            for p in self.peers:
                c = self._comms[p]
                peer_in_pair = 0 if p < self.ctx.rank else 1
                if p in self.send:
                    b = self.send[p]
                    c.send(b.data.ptr, b.nbytes, nccl.NCCL_UINT8, peer_in_pair, stream.ptr)
                if p in self.recv:
                    b = self.recv[p]
                    c.recv(b.data.ptr, b.nbytes, nccl.NCCL_UINT8, peer_in_pair, stream.ptr)
        finally:
            nccl.groupEnd()
        self._event = stream.record()

    def wait(self, deadline) -> None:
        # Poll rather than synchronize so a peer that never posts its half is reported.
        while not self._event.done:
            if time.monotonic() > deadline:
                for c in self._comms.values():
                    c.abort()
                _pair_comms.clear()
                raise PeerTimeoutError(
                    f"NCCL halo exchange on rank {self.ctx.rank}: peer(s) {self.peers} did not "
                    "complete in time; their NCCL communicators were aborted"
                )
            time.sleep(2e-5)
