"""CUDA IPC transport: ranks in other processes on the same node (usually the same GPU).

Pull model. Each rank packs into its own send buffers, allocated outside CuPy's pool
(an IPC handle names a whole allocation) and opened once by the peer with
``cudaIpcOpenMemHandle``. Per exchange: pack, tell each peer "ready" (a one-word MPI
message), wait for the peers' "ready", unpack straight from their mapped buffers,
tell them "consumed". A rank waits for "consumed" before it packs again. Field data
never leaves the device; only the tokens go through MPI.
"""

from __future__ import annotations

import numpy as np

from .base import Transport, wait_requests

__all__ = ["IPCTransport"]

_TAG_HANDLE, _TAG_READY, _TAG_CONSUMED = 7303, 7304, 7305


class IPCTransport(Transport):
    name = "ipc"

    def __init__(self, ctx, send_counts, recv_counts, dtype, xp) -> None:
        super().__init__(ctx, send_counts, recv_counts, dtype, xp)
        import time

        cp = xp
        rt = cp.cuda.runtime
        comm = ctx.comm
        deadline = time.monotonic() + ctx.timeout
        self._mem = {}
        self._send = {}
        for p, n in self.send_counts.items():
            mem = cp.cuda.Memory(max(1, n * self.dtype.itemsize))  # own cudaMalloc, not pooled
            self._mem[p] = mem
            self._send[p] = cp.ndarray((n,), self.dtype, cp.cuda.MemoryPointer(mem, 0))
        # Handles are 64 bytes; send ours, receive the peers'.
        out = {p: np.frombuffer(rt.ipcGetMemHandle(self._send[p].data.ptr), np.uint8).copy()
               for p in self.send_counts}
        inc = {p: np.empty(64, np.uint8) for p in self.recv_counts}
        reqs = [comm.Irecv(inc[p], source=p, tag=_TAG_HANDLE) for p in sorted(inc)]
        reqs += [comm.Isend(out[p], dest=p, tag=_TAG_HANDLE) for p in sorted(out)]
        wait_requests(reqs, sorted(inc) + sorted(out), deadline, f"CUDA IPC set-up on rank {ctx.rank}")
        self._opened = {}
        self._recv = {}
        dev = cp.cuda.Device().id
        for p, n in self.recv_counts.items():
            ptr = rt.ipcOpenMemHandle(inc[p].tobytes())
            self._opened[p] = ptr
            # Tagged with our device: peer memory on another GPU is reached through UVA.
            um = cp.cuda.UnownedMemory(ptr, n * self.dtype.itemsize, self, device_id=dev)
            self._recv[p] = cp.ndarray((n,), self.dtype, cp.cuda.MemoryPointer(um, 0))
        self._token = np.zeros(1, np.int32)
        self._pending_consumed: list = []
        self._pending_consumed_peers: list[int] = []
        self._ready_reqs: list = []
        self._ready_peers: list[int] = []
        self._tokens_in = {p: np.zeros(1, np.int32) for p in self.peers}
        self._sent: list = []

    def send_buffer(self, peer):
        return self._send[peer]

    def prepare(self, deadline) -> None:
        wait_requests(self._pending_consumed, self._pending_consumed_peers, deadline,
                      f"CUDA IPC exchange on rank {self.ctx.rank} (waiting for peers to read)")
        self._pending_consumed, self._pending_consumed_peers = [], []
        wait_requests([r for r, _ in self._sent], [p for _, p in self._sent], deadline,
                      f"CUDA IPC exchange on rank {self.ctx.rank} (token sends)")
        self._sent = []

    def start(self) -> None:
        comm = self.ctx.comm
        self.xp.cuda.get_current_stream().synchronize()  # packed data must be in memory
        self._ready_peers = sorted(self.recv_counts)
        self._ready_reqs = [comm.Irecv(self._tokens_in[p], source=p, tag=_TAG_READY) for p in self._ready_peers]
        self._sent = [(comm.Isend(self._token, dest=p, tag=_TAG_READY), p) for p in sorted(self.send_counts)]

    def wait(self, deadline):
        wait_requests(self._ready_reqs, self._ready_peers, deadline,
                      f"CUDA IPC exchange on rank {self.ctx.rank}")
        self._ready_reqs = []
        return self._recv

    def release(self) -> None:
        comm = self.ctx.comm
        self.xp.cuda.get_current_stream().synchronize()  # unpack has finished reading peers
        senders = sorted(self.recv_counts)
        self._sent += [(comm.Isend(self._token, dest=p, tag=_TAG_CONSUMED), p) for p in senders]
        self._pending_consumed_peers = sorted(self.send_counts)
        self._pending_consumed = [comm.Irecv(self._tokens_in[p], source=p, tag=_TAG_CONSUMED)
                                  for p in self._pending_consumed_peers]

    def close(self) -> None:
        import time

        rt = self.xp.cuda.runtime
        self.prepare(time.monotonic() + self.ctx.timeout)  # peers are done with our buffers
        for ptr in self._opened.values():
            rt.ipcCloseMemHandle(ptr)
        self._opened.clear()
        self._recv.clear()
