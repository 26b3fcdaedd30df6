"""The shuffle manager: moves blocks between the workers of a job over the transports.

Each rank of a job has one worker; its blocks are :class:`~insitu.pool.GPUBlocks` on
that worker. A shuffle is collective over the job's communicator: every rank says which
of its arrays go to which rank, the ranks tell each other what is coming (shapes and
dtypes only), then the bytes move once, peer to peer, over the transport chosen for
each pair (:func:`insitu.transports.choose`: NCCL between GPUs, CUDA IPC on one GPU,
MPI otherwise, device data staged through counted pinned buffers only where the MPI
is not CUDA-aware). Arrays that stay on their rank are handed over by reference.

Three shuffles are built on that one move, as in the paper:

``move(blocks, plan)``
    Blocks go to the ranks a plan names (rebalancing, gathering for compositing).
``gpu_shuffle(blocks, "key")``
    Each block yields ``(key, array)`` pairs; every key goes to one rank (a stable
    hash of the key, or a partitioner) and the arrays of a key are grouped there, as
    ``groupByKey`` does, but the data never leaves the GPUs.
``gpu_shuffle(blocks, "halo", domain=...)``
    ``extract_halo`` on every block, slabs to the ranks owning their neighbours,
    ``append_halo`` there: the ghost layers of a decomposed domain are filled.
"""

from __future__ import annotations

import time
import zlib
from typing import Any, Callable, Hashable, Mapping, Sequence

import numpy as np

from insitu import arrays
from insitu.errors import MismatchError
from insitu.transports import PeerInfo, TransportContext, alloc_area, choose, get_transport, wait_requests
from insitu.transports.base import recv_object

from .api import GPUBlocks

__all__ = ["GPUShuffleManager", "stable_partition"]

_TAG_META = 7320
_ALIGN = 256  # every array starts on a boundary any dtype (and a coalesced kernel) is happy with


def stable_partition(key: Hashable, nranks: int) -> int:
    """The rank that gets `key` by default: CRC-32 of ``repr(key)`` modulo `nranks`.

    Python's ``hash`` of strings differs from process to process, so every rank
    would route a key differently; ``repr`` of ints, strings and tuples of them is the
    same everywhere.
    """
    return zlib.crc32(repr(key).encode()) % nranks


def _round_up(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


class GPUShuffleManager:
    """Moves blocks between the workers of a job; one per rank, collective calls.

    Parameters
    ----------
    worker : Worker
        This rank's worker (in-process or a daemon client): where the blocks live.
    comm : mpi4py communicator, optional
        The job's ranks; ``None``: one process (every move stays local).
    transport : str, optional
        Force one transport for every pair (``"mpi"``, ``"ipc"``, ``"nccl"``); all ranks
        must agree. Default: chosen per pair.
    timeout : float
        Seconds to wait for peers in one shuffle before
        :class:`~insitu.errors.PeerTimeoutError`.
    """

    def __init__(self, worker, comm=None, *, transport: str | None = None, timeout: float = 60.0) -> None:
        self.worker = worker
        self.timeout = float(timeout)
        if transport is not None:
            if transport == "inproc":
                raise ValueError("GPUShuffleManager: transport 'inproc' serves only the same rank; "
                                 "choose 'mpi', 'ipc' or 'nccl'")
            get_transport(transport)  # an unknown name raises with the known ones
        self.transport = transport
        if comm is None:
            self.comm, self.rank, self.size = None, 0, 1
        else:
            self.rank, self.size = comm.Get_rank(), comm.Get_size()
            dup, req = comm.Idup()  # private traffic; Idup so a missing rank times out
            wait_requests([req], [None], time.monotonic() + self.timeout,
                          f"shuffle manager set-up on rank {self.rank} (duplicating the communicator)")
            self.comm = dup
        self._gpu_info = PeerInfo.here(self.rank, "cupy") if arrays.cuda_available() else None
        #: Bytes this rank sent to / received from other ranks, and shuffles run.
        self.stats = {"shuffles": 0, "bytes_sent": 0, "bytes_received": 0}

    # -- the one move ------------------------------------------------------------------------

    def exchange(self, outgoing: Sequence[tuple[int, Hashable, Any]]) -> list[tuple[int, Hashable, Any]]:
        """Send arrays to ranks; collective (every rank calls it, maybe with nothing).

        Parameters
        ----------
        outgoing : sequence of (rank, tag, array)
            Where each array goes and a picklable tag that travels with it. Arrays are
            NumPy or CuPy (all of one kind across the job).

        Returns
        -------
        list of (source rank, tag, array)
            What this rank received, ordered by source rank, then by the sender's order.
            Arrays sent to this rank itself are the same objects; received ones are
            views into one receive buffer on this rank's device (or host).
        """
        me = self.rank
        items = []
        for i, (dest, tag, a) in enumerate(outgoing):
            if not (isinstance(dest, (int, np.integer)) and 0 <= dest < self.size):
                raise ValueError(f"shuffle: item {i} (tag {tag!r}) goes to rank {dest!r}; "
                                 f"the job has ranks 0..{self.size - 1}")
            items.append((int(dest), tag, arrays.asarray(a, name=f"shuffle item {tag!r}")))
        mine = [(me, tag, a) for dest, tag, a in items if dest == me]
        remote = [(dest, tag, a) for dest, tag, a in items if dest != me]
        self.stats["shuffles"] += 1
        if self.size == 1:
            return mine
        backend = {arrays.backend_of(a) for _, _, a in remote}
        if len(backend) > 1:
            raise MismatchError(f"shuffle on rank {me}: outgoing arrays mix host and device memory")
        deadline = time.monotonic() + self.timeout
        metas = self._swap_metadata(remote, backend.pop() if backend else None, deadline)
        job = {m["backend"] for m in metas.values() if m["backend"] is not None}
        if len(job) > 1:
            who = {r: m["backend"] for r, m in sorted(metas.items()) if m["backend"]}
            raise MismatchError(f"shuffle: ranks send arrays of different kinds {who}; "
                                "all must be NumPy or all CuPy")
        if not job:
            return mine
        received = self._move(remote, metas, job.pop(), deadline)
        out = mine + received
        out.sort(key=lambda t: t[0])  # stable: keeps each sender's order
        return out

    def _swap_metadata(self, remote, backend, deadline) -> dict[int, dict]:
        """Tell every peer what comes to it (tags, shapes, dtypes) and learn the same."""
        me, comm = self.rank, self.comm
        per_peer: dict[int, list] = {p: [] for p in range(self.size) if p != me}
        for dest, tag, a in remote:
            per_peer[dest].append((tag, tuple(a.shape), a.dtype.str))
        reqs = [comm.isend({"backend": backend, "gpu": self._gpu_info, "items": per_peer[p]}, dest=p, tag=_TAG_META)
                for p in sorted(per_peer)]
        metas = {me: {"backend": backend, "gpu": self._gpu_info, "items": []}}
        for p in sorted(per_peer):
            metas[p] = recv_object(comm, p, _TAG_META, deadline, f"shuffle on rank {me}")
        wait_requests(reqs, sorted(per_peer), deadline, f"shuffle on rank {me}")
        return metas

    def _move(self, remote, metas, backend: str, deadline) -> list:
        me = self.rank
        sends: dict[int, list] = {}
        for dest, tag, a in remote:
            sends.setdefault(dest, []).append((tag, a))
        recvs = {p: m["items"] for p, m in metas.items() if p != me and m["items"]}
        # One flat byte area: send segments, then receive segments, peers in order.
        off, send_seg, recv_seg, place = 0, {}, {}, []
        for p in sorted(sends):
            start = off
            for _, a in sends[p]:
                place.append((off, a))
                off += _round_up(a.nbytes)
            send_seg[p] = (start, off)
        unpack = []
        for p in sorted(recvs):
            start = off
            for tag, shape, dtype in recvs[p]:
                dt = np.dtype(dtype)
                unpack.append((p, tag, off, shape, dt))
                off += _round_up(int(np.prod(shape, dtype=np.int64)) * dt.itemsize)
            recv_seg[p] = (start, off)
        area = alloc_area(off, np.uint8, backend)
        for o, a in place:
            area[o:o + a.nbytes].view(a.dtype).reshape(a.shape)[...] = a
        infos = self._infos(metas, backend)
        ctx = TransportContext(self.comm, me, infos, self.timeout)
        by_name: dict[str, tuple[dict, dict]] = {}
        for p in sorted(set(send_seg) | set(recv_seg)):
            name = self.transport or choose(infos[me], infos[p], infos)
            s, r = by_name.setdefault(name, ({}, {}))
            if p in send_seg:
                s[p] = area[send_seg[p][0]:send_seg[p][1]]
            if p in recv_seg:
                r[p] = area[recv_seg[p][0]:recv_seg[p][1]]
        transports = [get_transport(n)(ctx, s, r, area) for n, (s, r) in sorted(by_name.items())]
        try:
            for t in transports:
                t.prepare(deadline)
                t.start()
            for t in transports:
                t.wait(deadline)
            for t in transports:
                t.release()
        except BaseException:
            for t in transports:
                t.abort()
            raise
        finally:
            for t in transports:
                t.close()
        self.stats["bytes_sent"] += sum(a.nbytes for _, a in place)
        out = []
        for p, tag, o, shape, dt in unpack:
            n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
            out.append((p, tag, area[o:o + n].view(dt).reshape(shape)))
            self.stats["bytes_received"] += n
        return out

    def _infos(self, metas, backend: str) -> list[PeerInfo]:
        if backend == "numpy":
            return [PeerInfo(r, "", 0, "numpy", None) for r in range(self.size)]
        missing = [r for r in range(self.size) if metas[r]["gpu"] is None]
        if missing:
            raise MismatchError(f"shuffle: device arrays are moving, but rank(s) {missing} have no usable GPU")
        return [metas[r]["gpu"] for r in range(self.size)]

    # -- shuffles over blocks --------------------------------------------------------------

    def move(self, blocks: GPUBlocks, plan: Mapping[Hashable, int] | Callable[[Hashable], int]) -> GPUBlocks:
        """Send blocks to the ranks `plan` names (collective); returns this rank's blocks
        afterwards, cached on its worker.

        Parameters
        ----------
        blocks : GPUBlocks
            This rank's blocks; pending operations are carried out first (one round trip).
        plan : mapping key -> rank, or callable
            Destination of each block; blocks it does not name stay.

        Block keys must be unique across the job. Blocks that left are dropped from this
        worker's cache; blocks that stay keep their handles.
        """
        dest = plan if callable(plan) else (lambda k: plan.get(k, self.rank))
        blocks = self._cached(blocks)
        values = self._values(blocks)
        moved = [k for k in values if dest(k) != self.rank]
        got = self.exchange([(dest(k), k, values[k]) for k in moved])
        keys = [k for _, k, _ in got] + [k for k in values if k not in moved]
        dup = sorted({repr(k) for k in keys if keys.count(k) > 1})
        if dup:
            raise ValueError(f"shuffle move on rank {self.rank}: block key(s) {', '.join(dup)} arrived "
                             "more than once; block keys must be unique across the job")
        sources = {k: src for k, src in blocks._sources.items() if k not in moved}
        if got:
            arrived = GPUBlocks.from_arrays(self.worker, {k: v for _, k, v in got}).send_gpu().cache_gpu()
            sources.update(arrived._sources)
        if moved:
            GPUBlocks(self.worker, {k: blocks._sources[k] for k in moved}).drop_gpu()
        return GPUBlocks(self.worker, sources)

    def gpu_shuffle(self, blocks: GPUBlocks, how: str, *, domain=None,
                    partitioner: Callable[[Hashable, int], int] | None = None) -> GPUBlocks:
        """The paper's shuffle of GPU blocks (collective).

        Parameters
        ----------
        blocks : GPUBlocks
            This rank's blocks. Pending operations are carried out first.
        how : {"key", "halo"}
            ``"key"``: each block's value is a mapping ``{key: array}`` or a sequence of
            ``(key, array)`` pairs; the result holds, on the rank ``partitioner(key,
            nranks)`` picks (default :func:`stable_partition`), one block per key whose
            value is the list of that key's arrays (in source-rank order). ``"halo"``:
            blocks keyed by gid of `domain`, with ghosts; the result is the same blocks
            with their ghost layers filled from their neighbours on every rank (the fill
            is pending: it runs with the next action).
        domain : Domain
            For ``"halo"``.
        partitioner : callable, optional
            For ``"key"``: ``partitioner(key, nranks) -> rank``.
        """
        if how == "key":
            return self._by_key(blocks, partitioner or stable_partition)
        if how == "halo":
            if domain is None:
                raise ValueError("gpu_shuffle(blocks, 'halo') needs domain=: the decomposition the blocks belong to")
            return self._halo(blocks, domain)
        raise ValueError(f"gpu_shuffle: unknown shuffle {how!r}; expected 'key' or 'halo'")

    def _by_key(self, blocks: GPUBlocks, partitioner) -> GPUBlocks:
        out = []
        for bkey, value in self._values(blocks).items():
            pairs = value.items() if isinstance(value, Mapping) else value
            try:
                for key, a in pairs:
                    r = partitioner(key, self.size)
                    out.append((r, key, a))
            except (TypeError, ValueError):
                raise TypeError(f"gpu_shuffle(..., 'key'): block {bkey!r} must yield a mapping "
                                f"{{key: array}} or (key, array) pairs, got {type(value).__name__}") from None
        groups: dict = {}
        for _, key, a in self.exchange(out):
            groups.setdefault(key, []).append(a)
        return GPUBlocks.from_arrays(self.worker, groups).send_gpu()

    def _halo(self, blocks: GPUBlocks, domain) -> GPUBlocks:
        own = set(domain.blocks_of(self.rank))
        keys = set(blocks.keys())
        if keys - own:
            raise ValueError(f"gpu_shuffle(..., 'halo') on rank {self.rank}: block(s) {sorted(keys - own)} "
                             f"are not owned by this rank in the domain (owned: {sorted(own)})")
        blocks = self._cached(blocks)  # extract and append must see the same values
        slabs = blocks.extract_halo(domain).recv_gpu(host=False)
        owner = domain.owners
        out = [(owner[target], (target, d), slab)
               for per_block in slabs.values() for (target, d), slab in per_block.items()]
        inbox = {(target, d): slab for _, (target, d), slab in self.exchange(out)}
        return blocks.append_halo(domain, {"received": inbox})

    def _values(self, blocks: GPUBlocks) -> dict:
        if blocks.worker is not self.worker:
            raise ValueError("shuffle: these blocks live on another worker than this manager's")
        return blocks.recv_gpu(host=False)

    @staticmethod
    def _cached(blocks: GPUBlocks) -> GPUBlocks:
        if blocks._steps or any(kind != "handle" for kind, _ in blocks._sources.values()):
            return blocks.cache_gpu()
        return blocks

    def close(self) -> None:
        """Free the private communicator."""
        if self.comm is not None:
            self.comm.Free()
            self.comm = None

    def __enter__(self) -> "GPUShuffleManager":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
