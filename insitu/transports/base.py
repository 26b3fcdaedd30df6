"""Transport interface, peer description and the timed wait every transport uses.

A transport moves one flat segment per peer in each direction per exchange. The halo
exchange (or a shuffle) owns one flat area holding every segment; per exchange it
calls :meth:`Transport.prepare`, packs the send segments, calls :meth:`Transport.start`,
then :meth:`Transport.wait`, unpacks the receive segments and finally calls
:meth:`Transport.release`. Who synchronizes: the caller
enqueues packing on the current CUDA stream; ``start`` makes sure that work is done
(or ordered) before the data leaves; after ``wait`` the received buffers may be read
by work enqueued on the current stream; ``release`` makes sure that work is done
before the sender may overwrite them.
"""

from __future__ import annotations

import abc
import dataclasses
import os
import pickle
import socket
import time
from typing import Any, Sequence

import numpy as np

from ..errors import PeerTimeoutError

__all__ = ["PeerInfo", "Transport", "TransportContext", "alloc_area", "allgather_object", "recv_object",
           "wait_requests", "wait_stream"]


@dataclasses.dataclass(frozen=True)
class PeerInfo:
    """Where a rank runs: used to choose the transport for each pair of ranks."""

    rank: int
    host: str
    pid: int
    backend: str  # "numpy" or "cupy"
    device: str | None  # PCI bus id of the rank's CUDA device
    peers: tuple[str, ...] = ()  # PCI bus ids of the GPUs it reaches peer-to-peer

    @classmethod
    def here(cls, rank: int, backend: str) -> "PeerInfo":
        dev, peers = None, ()
        if backend == "cupy":
            import cupy

            rt = cupy.cuda.runtime
            me = cupy.cuda.Device()
            dev = me.pci_bus_id
            peers = tuple(cupy.cuda.Device(d).pci_bus_id for d in range(rt.getDeviceCount())
                          if d != me.id and rt.deviceCanAccessPeer(me.id, d))
        return cls(rank, socket.gethostname(), os.getpid(), backend, dev, peers)


@dataclasses.dataclass
class TransportContext:
    """What a transport needs from the job: a private communicator and the peers."""

    comm: Any  # mpi4py communicator, duplicated for the library's own traffic
    rank: int
    infos: Sequence[PeerInfo]
    timeout: float
    purpose: str = "halo exchange"  # what the exchanges serve, as error messages name it
    #: A NCCL communicator over all ranks of `comm` (NCCL rank = rank of `comm`) for the
    #: nccl transport to use instead of building one per pair of ranks.
    nccl: Any = None


class Transport(abc.ABC):
    """Moves one flat segment per peer in each direction per exchange.

    Parameters
    ----------
    ctx : TransportContext
    send, recv : dict peer -> 1-D array
        Views into `area`: what to send to each peer, where to receive from each peer.
    area : 1-D array
        The caller's whole exchange area (from :func:`alloc_area`); a transport that
        shares memory across processes exports it.
    """

    name = "base"
    #: Whether all its work is ordered on the current CUDA stream (no host steps), so
    #: an exchange over it can be captured into a CUDA graph.
    stream_ordered = False

    def __init__(self, ctx: TransportContext, send: dict[int, Any], recv: dict[int, Any], area) -> None:
        self.ctx = ctx
        self.send = dict(send)
        self.recv = dict(recv)
        self.area = area
        self.on_device = not isinstance(area, np.ndarray)

    @property
    def peers(self) -> list[int]:
        return sorted(set(self.send) | set(self.recv))

    @property
    def label(self) -> str:
        """The name, qualified where one transport moves data in different ways."""
        return self.name

    def prepare(self, deadline: float) -> None:
        """Called before packing: wait until the send segments may be overwritten."""

    @abc.abstractmethod
    def start(self) -> None:
        """Send the packed segments and post the receives."""

    @abc.abstractmethod
    def wait(self, deadline: float) -> None:
        """Block (until `deadline`, a ``time.monotonic()`` value) until the receive
        segments may be read by work enqueued on the current stream."""

    def release(self) -> None:
        """Called after unpacking was enqueued."""

    def check(self) -> None:
        """After the exchange's GPU work completed: raise what a device-side wait
        recorded (a peer that never came), if anything."""

    def abort(self) -> None:
        """Give up on an exchange that timed out (free what a hung peer holds)."""

    def close(self) -> None:
        """Free buffers and peer resources."""


def alloc_area(count: int, dtype, backend: str):
    """A flat exchange area of `count` elements.

    On the device it is its own ``cudaMalloc`` allocation (not from CuPy's pool), so
    its IPC handle names exactly this buffer and offsets into it are known.
    """
    if backend == "numpy":
        return np.empty(count, dtype)
    import cupy

    dtype = np.dtype(dtype)
    mem = cupy.cuda.Memory(max(1, count * dtype.itemsize))
    return cupy.ndarray((count,), dtype, cupy.cuda.MemoryPointer(mem, 0))


def wait_requests(requests: Sequence, peers: Sequence[int | None], deadline: float, what: str) -> None:
    """Wait for mpi4py requests until `deadline`; name the silent peers on timeout.

    `peers` gives the rank each request waits for (``None`` for a collective).

    Point-to-point requests that did not complete are cancelled before raising, so their
    buffers can be freed. Collective ones are left pending: MPI forbids cancelling them
    (Open MPI blocks in the attempt).
    """
    from mpi4py import MPI

    if not requests:
        return
    done = [False] * len(requests)
    spin = 0
    while True:
        for i, r in enumerate(requests):
            if not done[i]:
                done[i] = r.Test()
        if all(done):
            return
        if time.monotonic() > deadline:
            missing = sorted({p for p, d in zip(peers, done) if not d and p is not None})
            collective = any(p is None for p, d in zip(peers, done) if not d)
            for r, d, p in zip(requests, done, peers):
                if not d and p is not None:
                    try:
                        r.Cancel()
                    except MPI.Exception:
                        pass
            who = f"rank(s) {missing}" if missing else "some rank of the communicator"
            if collective and missing:
                who += " and some rank of the communicator"
            raise PeerTimeoutError(
                f"{what}: {who} did not answer in time "
                "(dead, hung, or not taking part in the same exchange)"
            )
        spin += 1
        if spin > 1000:  # stay responsive for fast exchanges, stop burning a core for slow ones
            time.sleep(1e-4 if spin < 20000 else 1e-3)


def allgather_object(comm, obj: Any, deadline: float, what: str) -> list:
    """Every rank's `obj` (pickled), in rank order, or :class:`PeerTimeoutError` at `deadline`.

    Non-blocking collectives polled until the deadline: a rank that never comes cannot
    hang the others, and one that comes after the others gave up cannot hang either.
    """
    data = np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), np.uint8)
    sizes = np.empty(comm.Get_size(), np.int64)
    wait_requests([comm.Iallgather(np.array([data.size], np.int64), sizes)], [None], deadline, what)
    displs = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    out = np.empty(int(sizes.sum()), np.uint8)
    from mpi4py import MPI

    req = comm.Iallgatherv(data, [out, (sizes.tolist(), displs.tolist()), MPI.BYTE])
    wait_requests([req], [None], deadline, what)
    return [pickle.loads(out[d:d + n].tobytes()) for d, n in zip(displs, sizes)]


def recv_object(comm, source: int, tag: int, deadline: float, what: str):
    """Receive one pickled object from `source`, or raise :class:`PeerTimeoutError`.

    Probes first, so the object may be of any size (a bare ``irecv`` has a fixed
    buffer and truncates large pickles).
    """
    while True:
        msg = comm.improbe(source=source, tag=tag)
        if msg is not None:
            return msg.recv()
        if time.monotonic() > deadline:
            raise PeerTimeoutError(f"{what}: rank(s) [{source}] did not answer in time")
        time.sleep(1e-4)


def wait_stream(stream, deadline: float, what: str, on_timeout=None, event=None) -> None:
    """Wait for the work enqueued so far on a CUDA `stream`, or raise on `deadline`.

    Polls an event instead of synchronizing, so work stuck behind a peer that never
    posts its half becomes a :class:`PeerTimeoutError`. Spins first: sleeping costs
    ~50 us a time, more than a small exchange takes. A caller on a hot path passes its
    own `event` (recorded here) to save creating one per call.
    """
    if event is None:
        event = stream.record()
    else:
        event.record(stream)
    spins = 0
    while not event.done:
        spins += 1
        if spins > 20000:
            time.sleep(1e-4)
        if time.monotonic() > deadline:
            if on_timeout is not None:
                on_timeout()
            raise PeerTimeoutError(f"{what}: GPU work waiting on peers did not complete in time")
