"""The exchange machinery of :func:`render.composite.composite`, kept per configuration.

One flat byte area per configuration (:func:`insitu.transports.alloc_area`): this
rank's working image, then a receive buffer per piece the schedule brings in. Rows are
laid out colour then depth (:class:`Layout`), so a band of rows is one segment: every
message of a phase is one segment per peer, which is what :mod:`insitu.transports`
moves. The transports of each phase are opened once per configuration and reused by
every later call with the same configuration.
"""

from __future__ import annotations

import atexit
import collections
import dataclasses
import math

import numpy as np

from insitu import arrays
from insitu.transports import TransportContext, alloc_area, open_transports, wait_requests

CACHE_SIZE = 4  # configurations kept per process (each holds two to three images of memory)


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where a fragment's rows live in a flat byte area.

    Each row holds its colour, then its depth (aligned), so any band of rows is one
    contiguous segment: one message per peer and phase, whichever transport moves it.
    """

    cshape: tuple[int, ...]  # one row of colour: (width,) or (width, channels)
    cdtype: np.dtype
    ddtype: np.dtype | None
    doff: int  # byte offset of the depth in a row
    rowbytes: int

    @classmethod
    def of(cls, rgba, depth) -> "Layout":
        cshape, cd = tuple(rgba.shape[1:]), np.dtype(rgba.dtype)
        cbytes = math.prod(cshape) * cd.itemsize
        if depth is None:
            return cls(cshape, cd, None, cbytes, cbytes)
        dd = np.dtype(depth.dtype)
        doff = -(-cbytes // dd.itemsize) * dd.itemsize
        align = max(cd.itemsize, dd.itemsize)
        return cls(cshape, cd, dd, doff, -(-(doff + cshape[0] * dd.itemsize) // align) * align)

    def frag(self, area, row: int, n: int):
        """(colour, depth) views of rows ``row .. row + n`` (depth ``None`` without depth)."""
        isz = self.cdtype.itemsize
        cstrides = (self.rowbytes, *((self.cshape[1] * isz, isz) if len(self.cshape) == 2 else (isz,)))
        c = _view(area, row * self.rowbytes, (n, *self.cshape), self.cdtype, cstrides)
        if self.ddtype is None:
            return c, None
        return c, _view(area, row * self.rowbytes + self.doff, (n, self.cshape[0]), self.ddtype,
                        (self.rowbytes, self.ddtype.itemsize))

    def segment(self, area, row: int, n: int):
        """The bytes of rows ``row .. row + n``, as a transport moves them."""
        return area[row * self.rowbytes:(row + n) * self.rowbytes]


def _view(area, offset: int, shape, dtype, strides):
    if isinstance(area, np.ndarray):
        return np.ndarray(shape, dtype, buffer=area, offset=offset, strides=strides)
    import cupy

    return cupy.ndarray(shape, dtype, memptr=area.data + offset, strides=strides)


@dataclasses.dataclass
class _Phase:
    """One step of this rank's schedule, in rows of the area (rows 0..h: the working image)."""

    sends: dict[int, tuple[int, int]]  # peer -> (first row, rows)
    recvs: dict[int, tuple[int, int]]
    pieces: list[tuple[int, int]] = dataclasses.field(default_factory=list)  # merged front to back into ...
    keep: int = 0  # ... pieces[keep]
    into_work: bool = False  # receives land in rows of the working image that earlier phases sent


def schedule(plan, rank: int, root: int, h: int) -> tuple[list[_Phase], int]:
    """This rank's phases (fold, rounds, gather; those it takes part in) and the rows
    its area needs (the working image, then one receive buffer per piece)."""
    pos = plan.order.index(rank)
    v = plan.active.index(pos) if pos in plan.active else None
    phases, rows = [], h
    for s, r in plan.folds:
        if pos == s:
            phases.append(_Phase({plan.order[r]: (0, h)}, {}))
        elif pos == r:
            phases.append(_Phase({}, {plan.order[s]: (rows, h)}, [(0, h), (rows, h)], 0))
            rows += h
    if v is not None:
        for t, (cuts, d) in enumerate(plan.strips(v, h)):
            members, _ = plan.group(v, t)
            ranks = [plan.rank_of(m) for m in members]
            lo, n = cuts[d], cuts[d + 1] - cuts[d]
            sends = {ranks[j]: (cuts[j], cuts[j + 1] - cuts[j]) for j in range(len(ranks))
                     if j != d and cuts[j + 1] > cuts[j]}
            pieces = []
            for j in range(len(ranks)):
                pieces.append((lo, n) if j == d else (rows, n))
                rows += 0 if j == d else n
            recvs = {ranks[j]: pieces[j] for j in range(len(ranks)) if j != d and n}
            phases.append(_Phase(sends, recvs, pieces if n else [], d))
    if rank == root:
        recvs = {}
        for u in range(len(plan.active)):
            lo, hi = plan.final_rows(u, h)
            if plan.rank_of(u) != root and hi > lo:
                recvs[plan.rank_of(u)] = (lo, hi - lo)
        phases.append(_Phase({}, recvs, into_work=True))
    elif v is not None:
        lo, hi = plan.final_rows(v, h)
        if hi > lo:
            phases.append(_Phase({root: (lo, hi - lo)}, {}))
    return [p for p in phases if p.sends or p.recvs], rows


class Compositor:
    """What one configuration of :func:`render.composite.composite` keeps between calls.

    A private communicator, one exchange area (:func:`insitu.transports.alloc_area`:
    this rank's working image, then its receive buffers) and, per phase of the
    schedule, the transports to that phase's peers, opened once: CUDA IPC handles, p2p
    mappings and NCCL communicators are set up on the first call of a configuration.
    """

    def __init__(self, comm, plan, root: int, layout: Layout, h: int, backend: str,
                 names: dict[int, str], infos, timeout: float, nccl_comm, deadline: float) -> None:
        rank = comm.rank
        dup, req = comm.Idup()  # private traffic; Idup so that a missing rank times out
        wait_requests([req], [None], deadline, f"composite on rank {rank} (duplicating the communicator)")
        self.ctx = TransportContext(dup, rank, infos, float(timeout), purpose="compositing", nccl=nccl_comm)
        self.layout = layout
        phases, rows = schedule(plan, rank, root, h)
        self.area = alloc_area(max(1, rows * layout.rowbytes), np.uint8, backend)
        self.work = layout.frag(self.area, 0, h)
        self.phases = []
        try:
            for ph in phases:
                ts = open_transports(self.ctx, {p: names[p] for p in (*ph.sends, *ph.recvs)},
                                     {p: layout.segment(self.area, *rn) for p, rn in ph.sends.items()},
                                     {p: layout.segment(self.area, *rn) for p, rn in ph.recvs.items()}, self.area)
                pieces = [layout.frag(self.area, *rn) for rn in ph.pieces]
                self.phases.append((ph, ts, pieces))
        except BaseException:
            self.abort()
            raise
        self.names = {p: names[p] for ph in phases for p in (*ph.sends, *ph.recvs)}
        self.label = "+".join(sorted({t.label for _, ts, _ in self.phases for t in ts})) or "local"

    def run(self, rgba, depth, ops, deadline: float) -> None:
        """Composite `rgba` (and `depth`) with the peers; the result's rows of this rank
        end up in :attr:`work` (all rows at the root)."""
        everything = [t for _, ts, _ in self.phases for t in ts]
        for t in everything:
            t.prepare(deadline)  # the peers are done reading our area from the last call
        xp = arrays.get_array_module(rgba)
        xp.copyto(self.work[0], rgba)
        if depth is not None:
            xp.copyto(self.work[1], depth)
        done: list = []
        for ph, ts, pieces in self.phases:
            if ph.into_work:
                for t in done:
                    t.prepare(deadline)  # rows sent in earlier phases were read: they may be overwritten
            for t in ts:
                t.start()
            for t in ts:
                t.wait(deadline)
            if pieces:
                merge(pieces, ph.keep, ops)
            for t in ts:
                t.release()
            done += ts

    def abort(self) -> None:
        """Drop the transports of a failed call (a peer may hold what they would wait for)."""
        for _, ts, _ in self.phases:
            for t in ts:
                t.abort()
        self.phases = []

    def close(self) -> None:
        """Close the transports (after the peers read what they still may) and the communicator."""
        for _, ts, _ in self.phases:
            for t in ts:
                t.close()
        self.phases = []
        self.ctx.comm.Free()


#: Configurations of this process, least recently used first.
cache: collections.OrderedDict[tuple, Compositor] = collections.OrderedDict()


@atexit.register
def close_all() -> None:
    """Close every kept configuration, in the same order on every rank (the ranks agreed on
    each). Runs at exit before MPI and CUDA are torn down: left to the interpreter's
    teardown, peers' mapped areas and private communicators were freed in any order,
    corrupting the heap of ranks sharing a GPU."""
    while cache:
        drop(next(iter(cache)))


def drop(key, *, failed: bool = False) -> None:
    """Forget the configuration `key`: close it, or (`failed`) abandon it without waiting."""
    c = cache.pop(key, None)
    if c is None:
        return
    if failed:
        c.abort()
        return
    try:
        c.close()
    except Exception:  # a stale configuration whose peers are gone: nothing left to save
        c.abort()


def merge(pieces, d: int, ops) -> None:
    """Reduce `pieces` (front to back) into ``pieces[d]``, the strip this rank keeps."""
    into_front, into_back = ops
    if d > 0:
        front = pieces[0]  # a receive buffer: free to overwrite
        for p in pieces[1:d]:
            into_front(front, p)
        into_back(front, pieces[d])
    for p in pieces[d + 1:]:
        into_front(pieces[d], p)
