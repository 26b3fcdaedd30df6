"""Peer-to-peer transport: ranks on different GPUs of one node, CUDA IPC with device flags.

Push model, all stream-ordered (no host step, so an exchange can be a CUDA graph).
Each rank exports its exchange area and a small flag array once (``cudaIpcGetMemHandle``)
and maps its peers' (``cudaIpcOpenMemHandle``). Per exchange, on the current stream:

1. its epoch counter (on the device) goes up by one;
2. it tells every rank that sends to it "your segment in my area is free" by writing the
   epoch into that peer's flags (everything it read from its area before is done);
3. for every peer it sends to: it waits until that peer's "free" has reached the epoch,
   copies its packed segment straight into the peer's area (over NVLink) and then writes
   the epoch into the peer's "arrived" flag;
4. it waits until every peer that sends to it has written "arrived".

The halo exchange goes further (``HaloExchange(fuse=True)``, its default over p2p):
one kernel per exchange writes its boxes straight into the peers' areas (no pack, no
copy), each of its work items then setting a flag of its own in the peer's flag array
(``item_flags``), and unpacks each incoming work item once that item's flag is set; its
last work item moves the epoch on and posts "free" for the next exchange
(:meth:`P2PTransport.gates` hands it the addresses; :meth:`begin` runs once).

A waiting kernel gives up after the exchange's timeout, marking a device flag (which
later waits read) and a flag in mapped host memory that :meth:`P2PTransport.check`
turns into :class:`PeerTimeoutError`. Nothing
passes through the host per exchange; NCCL is not involved. Ranks sharing one GPU should
use ``ipc`` instead: a spinning wait would hold the GPU while the peer's process waits for
its time slice.
"""

from __future__ import annotations

import ctypes
import functools
import time

import numpy as np

from .. import arrays
from ..errors import PeerTimeoutError
from ..log import get_logger
from .base import Transport, recv_object, wait_requests, wait_stream

_log = get_logger(__name__)

__all__ = ["P2PTransport"]

_TAG = 7306
_DEFAULT = 4  # cudaMemcpyDefault
_HOST_MAPPED_PORTABLE = 3  # cudaHostAllocPortable | cudaHostAllocMapped

_SOURCE = r"""
// A new exchange: the epoch goes up, its "gave up" flag (device memory) is cleared,
// and the epoch is written into each of the n flags (our senders' "free" slots for us).
extern "C" __global__ void p2p_begin(long long* epoch, long long* gave_up,
                                     const unsigned long long* __restrict__ flags, const int n) {
    const long long e = epoch[0] + 1;
    epoch[0] = e;
    *gave_up = 0;
    __threadfence_system();  // earlier reads of our area (the last unpack) are done
    for (int i = 0; i < n; ++i) *(volatile long long*)flags[i] = e;
    __threadfence_system();
}

// Write this exchange's epoch into a flag, here or in a peer's memory (mapped by IPC).
extern "C" __global__ void p2p_post(const long long* __restrict__ epoch, unsigned long long flag) {
    __threadfence_system();  // what this stream wrote before (the pushed segment) lands first
    *(volatile long long*)flag = epoch[0];
    __threadfence_system();
}

// Wait until one of our flags, written by a peer, reaches this exchange's epoch. On
// giving up it marks gave_up (device memory, read by later waits: cheap) and failed
// (host-mapped, read by the host; a GPU read of it crosses PCIe, so kernels do not).
extern "C" __global__ void p2p_await(const long long* __restrict__ epoch, unsigned long long flag,
                                     const long long budget_ns, unsigned long long gave_up,
                                     unsigned long long failed) {
    const long long e = epoch[0];
    if (*(volatile long long*)gave_up) return;  // an earlier wait of this exchange gave up already
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    while (*(volatile long long*)flag < e) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        if ((long long)(t - t0) > budget_ns) {  // the peer never came: report, do not hang
            *(volatile long long*)gave_up = 1;
            *(volatile int*)failed = 1;
            break;
        }
        __nanosleep(100);
    }
    __threadfence_system();
}
"""


def source() -> tuple[str, list[str], tuple[str, ...]]:
    """The CUDA source of the transport's kernels, their names and the compile options."""
    return _SOURCE, ["p2p_begin", "p2p_post", "p2p_await"], ()


@functools.cache
def _kernels():
    src = source()
    mod = arrays.cuda_module(src, "the p2p transport kernels", _log)
    return tuple(mod.get_function(name) for name in src[1])


class P2PTransport(Transport):
    name = "p2p"
    stream_ordered = True

    def __init__(self, ctx, send, recv, area, *, item_flags: dict[int, int] | None = None) -> None:
        super().__init__(ctx, send, recv, area)
        if not self.on_device:
            raise ValueError("transport 'p2p' moves device arrays only; use 'mpi' for host arrays")
        import cupy

        rt = cupy.cuda.runtime
        me, size = ctx.rank, ctx.comm.Get_size()
        dev = cupy.cuda.Device().id
        ordinal = {cupy.cuda.Device(d).pci_bus_id: d for d in range(rt.getDeviceCount())}
        for p in self.peers:
            info = ctx.infos[p] if ctx.infos else None
            if info is not None and info.host != ctx.infos[me].host:
                raise ValueError(f"transport 'p2p': rank {p} runs on another node ({info.host}); use 'nccl' or 'mpi'")
            if info is not None and info.device is not None:
                pdev = ordinal.get(info.device)
                if pdev is None:
                    raise ValueError(f"transport 'p2p': the GPU of rank {p} ({info.device}) is not visible here; "
                                     "use 'nccl'")
                if pdev != dev and not rt.deviceCanAccessPeer(dev, pdev):
                    raise ValueError(f"transport 'p2p': GPU {dev} cannot reach GPU {pdev} of rank {p} "
                                     "peer-to-peer; use 'nccl'")
        self._size = size
        # Flags: [epoch, free_from[0..size), arrived_from[0..size), gave_up, then per
        # receive peer q its item_flags[q] "arrived" flags (one per work item of a fused
        # exchange kernel)], a cudaMalloc of its own so that its IPC handle names exactly
        # this buffer.
        item_flags = {q: int(item_flags.get(q, 0)) for q in sorted(self.recv)} if item_flags else {}
        self._item_base, at = {}, 2 + 2 * size
        for q, k in item_flags.items():
            self._item_base[q] = at
            at += k
        self._flags_mem = cupy.cuda.Memory(8 * at)
        self._flags = self._flags_mem.ptr
        self._gave_up = self._flags + 8 * (1 + 2 * size)
        rt.memset(self._flags, 0, 8 * at)
        rt.deviceSynchronize()  # zeroed before any peer can map and write them
        self._failed_host = rt.hostAlloc(4, _HOST_MAPPED_PORTABLE)
        ctypes.c_int.from_address(self._failed_host).value = 0
        self._failed = self._failed_host  # unified addressing: the device sees it at the same address
        base = area.data.ptr
        mine = {p: (rt.ipcGetMemHandle(base), rt.ipcGetMemHandle(self._flags),
                    (recv[p].data.ptr - base) if p in recv else -1, self._item_base.get(p, -1))
                for p in self.peers}
        deadline = time.monotonic() + ctx.timeout
        comm = ctx.comm
        reqs = [comm.isend(mine[p], dest=p, tag=_TAG) for p in self.peers]
        theirs = {}
        for p in self.peers:
            theirs[p] = recv_object(comm, p, _TAG, deadline, f"p2p set-up on rank {me}")
        wait_requests(reqs, self.peers, deadline, f"p2p set-up on rank {me}")
        self._opened = []
        self._peer_flags, self._peer_dst, self._peer_items = {}, {}, {}
        for p in self.peers:
            area_h, flags_h, off, items = theirs[p]
            fl = rt.ipcOpenMemHandle(flags_h)
            self._opened.append(fl)
            self._peer_flags[p] = fl
            if items >= 0:
                self._peer_items[p] = fl + 8 * items
            if p in self.send:
                if off < 0:
                    raise RuntimeError(f"p2p set-up on rank {me}: rank {p} expects nothing from us")
                ar = rt.ipcOpenMemHandle(area_h)
                self._opened.append(ar)
                self._peer_dst[p] = ar + off
        self._nbytes = {p: v.nbytes for p, v in self.send.items()}
        self._free_for = arrays.to_device(  # our "free" slot in each sender's flags
            np.array([self._free_slot(self._peer_flags[q], me) for q in sorted(self.recv)] or [0], np.uint64))
        self._failed_flag = ctypes.c_int.from_address(self._failed_host)
        self._budget = np.int64(ctx.timeout * 1e9)

    def _free_slot(self, base: int, rank: int) -> np.uint64:
        return np.uint64(base + 8 * (1 + rank))

    def _arrived_slot(self, base: int, rank: int) -> np.uint64:
        return np.uint64(base + 8 * (1 + self._size + rank))

    def begin(self) -> None:
        """Steps 1 and 2: a new epoch; tell our senders their segments are free (one kernel)."""
        begin = _kernels()[0]
        begin((1,), (1,), (np.uint64(self._flags), np.uint64(self._gave_up), self._free_for,
                           np.int32(len(self.recv))))

    def start(self) -> None:
        import cupy

        _, post, wait = _kernels()
        stream = cupy.cuda.get_current_stream()
        me = self.ctx.rank
        epoch = np.uint64(self._flags)
        one = ((1,), (1,))
        self.begin()
        for p in sorted(self.send):
            wait(*one, (epoch, self._free_slot(self._flags, p), self._budget, np.uint64(self._gave_up),
                               np.uint64(self._failed)))
            cupy.cuda.runtime.memcpyAsync(self._peer_dst[p], self.send[p].data.ptr, self._nbytes[p], _DEFAULT,
                                          stream.ptr)
            post(*one, (epoch, self._arrived_slot(self._peer_flags[p], me)))
        for q in sorted(self.recv):
            wait(*one, (epoch, self._arrived_slot(self._flags, q), self._budget, np.uint64(self._gave_up),
                               np.uint64(self._failed)))

    def gates(self) -> dict:
        """Addresses for a kernel that writes into the peers' areas itself (steps 3-4 fused).

        ``dst[p]``: our segment in peer p's area (mapped); ``free[p]``: our flag that p
        sets when that segment may be written; ``item_dst[p]``: the first of p's
        per-item "arrived" flags for our data; ``item_inbox[q]``: the first of ours for
        q's (the transport must be built with ``item_flags``);
        ``frees``: the senders' flags that say their segment in our area is free. Such a
        kernel moves the epoch on itself when done (see :class:`insitu._halo_copy.Gates`),
        so :meth:`begin` runs once, before the first exchange, and :meth:`start` not at all.
        """
        me = self.ctx.rank
        return {
            "epoch": self._flags, "gave_up": self._gave_up, "failed": self._failed, "budget_ns": int(self._budget),
            "dst": dict(self._peer_dst),
            "free": {p: int(self._free_slot(self._flags, p)) for p in self.send},
            "frees": [int(self._free_slot(self._peer_flags[q], me)) for q in sorted(self.recv)],
            "item_dst": dict(self._peer_items),
            "item_inbox": {q: self._flags + 8 * b for q, b in self._item_base.items()},
        }

    def wait(self, deadline) -> None:
        """Nothing on the host: the receive segments are stream-ordered after the waits."""

    def release(self) -> None:
        import cupy

        wait_stream(cupy.cuda.get_current_stream(), time.monotonic() + self.ctx.timeout,
                    f"p2p {self.ctx.purpose} on rank {self.ctx.rank} with peer(s) {self.peers}")
        self.check()

    def check(self) -> None:
        flag = self._failed_flag
        if flag.value:
            flag.value = 0
            raise PeerTimeoutError(f"p2p {self.ctx.purpose} on rank {self.ctx.rank}: peer(s) {self.peers} did not take "
                                   f"part within {self.ctx.timeout:g} s (dead, hung, or in another exchange)")

    def close(self) -> None:
        import cupy

        if self._flags_mem is None:
            return
        cupy.cuda.get_current_stream().synchronize()
        for ptr in self._opened:
            cupy.cuda.runtime.ipcCloseMemHandle(ptr)
        self._opened = []
        cupy.cuda.runtime.freeHost(self._failed_host)
        self._flags_mem = None
