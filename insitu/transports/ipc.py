"""CUDA IPC transport: ranks in other processes on the same node (usually the same GPU).

Pull model. Each rank exports its exchange area (its own ``cudaMalloc``, see
:func:`~insitu.transports.base.alloc_area`) once with ``cudaIpcGetMemHandle``; each
peer maps it once with ``cudaIpcOpenMemHandle``. Per exchange: pack, tell each peer
"ready" (a one-word MPI message), wait for the peers' "ready", copy each peer's
segment straight from its mapped area into ours (one device-to-device copy per peer),
tell them "consumed". A rank waits for "consumed" before it packs again. Field data
never leaves the device; only the tokens go through MPI.
"""

from __future__ import annotations

import time

import numpy as np

from .base import Transport, wait_requests

__all__ = ["IPCTransport"]

_TAG_HANDLE, _TAG_READY, _TAG_CONSUMED = 7303, 7304, 7305
_DEFAULT = 4  # cudaMemcpyDefault: direction (and peer device) from unified addresses


class IPCTransport(Transport):
    name = "ipc"

    def __init__(self, ctx, send, recv, area) -> None:
        super().__init__(ctx, send, recv, area)
        import cupy

        rt = cupy.cuda.runtime
        comm = ctx.comm
        deadline = time.monotonic() + ctx.timeout
        itemsize = area.dtype.itemsize
        base = area.data.ptr
        handle = np.frombuffer(rt.ipcGetMemHandle(base), np.uint8)
        # Per peer we send: our handle (64 bytes) + the byte offset of its segment.
        out = {p: np.concatenate([handle, np.frombuffer(np.int64(v.data.ptr - base).tobytes(), np.uint8)])
               for p, v in self.send.items()}
        inc = {p: np.empty(72, np.uint8) for p in self.recv}
        reqs = [comm.Irecv(inc[p], source=p, tag=_TAG_HANDLE) for p in sorted(inc)]
        reqs += [comm.Isend(out[p], dest=p, tag=_TAG_HANDLE) for p in sorted(out)]
        wait_requests(reqs, sorted(inc) + sorted(out), deadline, f"CUDA IPC set-up on rank {ctx.rank}")
        self._opened = {}
        self._src = {}
        for p in sorted(self.recv):
            ptr = rt.ipcOpenMemHandle(inc[p][:64].tobytes())
            self._opened[p] = ptr
            self._src[p] = ptr + int(inc[p][64:].view(np.int64)[0])
        self._nbytes = {p: v.size * itemsize for p, v in self.recv.items()}
        self._token = np.zeros(1, np.int32)
        self._tokens_in = {p: np.zeros(1, np.int32) for p in self.peers}
        self._pending: list = []  # (request, peer): "consumed" tokens we wait for
        self._sent: list = []  # (request, peer): our token sends
        self._ready: list = []

    def prepare(self, deadline) -> None:
        pend = self._pending + self._sent
        wait_requests([r for r, _ in pend], [p for _, p in pend], deadline,
                      f"CUDA IPC {self.ctx.purpose} on rank {self.ctx.rank} (waiting for peers to read)")
        self._pending, self._sent = [], []

    def start(self) -> None:
        import cupy

        comm = self.ctx.comm
        cupy.cuda.get_current_stream().synchronize()  # packed data must be in memory
        self._ready = [(comm.Irecv(self._tokens_in[p], source=p, tag=_TAG_READY), p) for p in sorted(self.recv)]
        self._sent = [(comm.Isend(self._token, dest=p, tag=_TAG_READY), p) for p in sorted(self.send)]

    def wait(self, deadline) -> None:
        import cupy

        wait_requests([r for r, _ in self._ready], [p for _, p in self._ready], deadline,
                      f"CUDA IPC {self.ctx.purpose} on rank {self.ctx.rank}")
        self._ready = []
        stream = cupy.cuda.get_current_stream()
        for p, v in self.recv.items():
            cupy.cuda.runtime.memcpyAsync(v.data.ptr, self._src[p], self._nbytes[p], _DEFAULT, stream.ptr)

    def release(self) -> None:
        import cupy

        comm = self.ctx.comm
        cupy.cuda.get_current_stream().synchronize()  # our copies out of the peers' areas are done
        self._sent += [(comm.Isend(self._token, dest=p, tag=_TAG_CONSUMED), p) for p in sorted(self.recv)]
        self._pending = [(comm.Irecv(self._tokens_in[p], source=p, tag=_TAG_CONSUMED), p) for p in sorted(self.send)]

    def close(self) -> None:
        import cupy

        self.prepare(time.monotonic() + self.ctx.timeout)  # peers are done with our area
        for ptr in self._opened.values():
            cupy.cuda.runtime.ipcCloseMemHandle(ptr)
        self._opened.clear()
