"""Sort-last image compositing across MPI ranks (direct-send, binary-swap, radix-k).

Every rank renders the whole image of its part of the data; :func:`composite` merges
the ranks' images into one at the root. Two ways to merge, per pixel:

``mode="depth"``
    the fragment with the smallest depth wins (ties: the lower rank), for opaque
    surfaces;
``mode="over"``
    premultiplied "over" in a visibility order (ranks front to back), for
    semi-transparent volumes.

Conventions as in :mod:`render.camera`: images are ``(height, width[, 4])``, colour is
premultiplied RGBA, depth is the float32 distance along the view direction, ``inf``
where nothing was hit.

How: the image is cut into strips of rows, the ranks exchange strips in rounds and
each composites the strip it keeps, then the root gathers the strips.

=============  ========================================================================
method         rounds
=============  ========================================================================
direct-send    one: rank i keeps strip i and receives that strip from every other rank
binary-swap    log2 N pairwise swaps; with N not a power of two, positions 1, 3, ...
               2 (N - 2^k) - 1 of the order first hand their whole image to the
               position in front, and sit out the swaps
radix-k        one round per factor k of N (k <= 4 where N's primes allow): a
               direct-send within each group of k partners
auto           direct-send up to 4 ranks, binary-swap beyond
=============  ========================================================================

"over" is associative but not commutative, so every schedule works on positions in
the visibility order, not ranks: at each round the partners hold partial images of
adjacent intervals of the order and combine them front to back. Depth mode runs the
same schedule in rank order, which is how ties go to the lower rank.

Transports: NumPy images move with buffer-based ``Isend``/``Irecv`` (no pickling).
CuPy images move with NCCL ``send``/``recv`` inside ``groupStart``/``groupEnd`` when
every rank has its own GPU (no host copies); otherwise by MPI, directly where the MPI
is CUDA-aware, else staged through :func:`insitu.arrays.to_host`/``to_device``
(counted).
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Sequence

import numpy as np

from insitu import arrays
from insitu.errors import MismatchError
from insitu.transports.base import PeerInfo, wait_requests, wait_stream

__all__ = ["METHODS", "composite", "depth_composite", "over_composite", "plan_rounds"]

METHODS = ("auto", "direct-send", "binary-swap", "radix-k")
MODES = ("depth", "over")

_TAG = 7400  # this module's MPI tags: _TAG + 2 * phase + (0 colour, 1 depth)
_RADIX = 4  # largest group of radix-k: bigger groups mean more, smaller messages per round
_nccl_comms: dict[tuple, Any] = {}  # (world ranks of the communicator, device) -> NcclCommunicator


# --------------------------------------------------------------------------- per-pixel operators
#
# A fragment is (rgba, depth): arrays of the same rows, depth None in "over" mode. The
# operators combine a front fragment with a back one in place, into either of them,
# so a strip can be reduced without extra buffers whichever piece the rank holds.


def _alpha(rgba):
    return rgba[..., 3:4]


def _over_into_front(front, back) -> None:
    f, b = front[0], back[0]
    f += (1 - _alpha(f)) * b


def _over_into_back(front, back) -> None:
    f, b = front[0], back[0]
    b *= 1 - _alpha(f)
    b += f  # same rounding as _over_into_front: f + (1 - a_f) * b


def _pixel_mask(mask, rgba):
    return mask[..., None] if rgba.ndim == 3 else mask


def _depth_into_front(front, back) -> None:
    xp = arrays.get_array_module(front[0])
    nearer = back[1] < front[1]  # strict: on a tie the front (lower rank) stays
    xp.copyto(front[0], back[0], where=_pixel_mask(nearer, front[0]))
    xp.copyto(front[1], back[1], where=nearer)


def _depth_into_back(front, back) -> None:
    xp = arrays.get_array_module(front[0])
    wins = front[1] <= back[1]
    xp.copyto(back[0], front[0], where=_pixel_mask(wins, back[0]))
    xp.copyto(back[1], front[1], where=wins)


_OPS = {"over": (_over_into_front, _over_into_back), "depth": (_depth_into_front, _depth_into_back)}


# --------------------------------------------------------------------------- local references


def over_composite(images_front_to_back: Sequence[Any]):
    """Premultiplied "over" of images listed front to back.

    Parameters
    ----------
    images_front_to_back : sequence of (height, width, 4) arrays
        Premultiplied RGBA, NumPy or CuPy (all the same), nearest first.

    Returns
    -------
    array
        A new image: ``I0 over I1 over ...``.
    """
    ims = [arrays.asarray(a, name=f"images_front_to_back[{i}]") for i, a in enumerate(images_front_to_back)]
    if not ims:
        raise ValueError("over_composite: no images given")
    _check_same(ims, "over_composite: images")
    if ims[0].ndim != 3 or ims[0].shape[2] != 4:
        raise ValueError(f"over_composite: images must be (height, width, 4) RGBA, got shape {ims[0].shape}")
    acc = (ims[0].copy(),)
    for im in ims[1:]:
        _over_into_front(acc, (im,))
    return acc[0]


def depth_composite(images: Sequence[Any], depths: Sequence[Any]):
    """Per pixel, the colour of the nearest fragment (ties: the earlier image).

    Parameters
    ----------
    images : sequence of (height, width[, channels]) arrays
        Colours, NumPy or CuPy (all the same).
    depths : sequence of (height, width) arrays
        Depth of each image, ``inf`` where nothing was hit.

    Returns
    -------
    (rgba, depth)
        New arrays: the winning colour and its depth.
    """
    ims = [arrays.asarray(a, name=f"images[{i}]") for i, a in enumerate(images)]
    ds = [arrays.asarray(a, name=f"depths[{i}]") for i, a in enumerate(depths)]
    if not ims or len(ims) != len(ds):
        raise ValueError(f"depth_composite: need one depth per image, got {len(ims)} images and {len(ds)} depths")
    _check_same(ims, "depth_composite: images")
    _check_same(ds, "depth_composite: depths")
    if ds[0].shape != ims[0].shape[:2]:
        raise ValueError(f"depth_composite: depth shape {ds[0].shape} does not match image shape {ims[0].shape}")
    acc = (ims[0].copy(), ds[0].copy())
    for im, d in zip(ims[1:], ds[1:]):
        _depth_into_front(acc, (im, d))
    return acc


def _check_same(arrs, what: str) -> None:
    for i, a in enumerate(arrs[1:], 1):
        if a.shape != arrs[0].shape or a.dtype != arrs[0].dtype:
            raise ValueError(f"{what}: [{i}] is {a.shape} {a.dtype}, [0] is {arrs[0].shape} {arrs[0].dtype}")


# --------------------------------------------------------------------------- schedule


@dataclasses.dataclass(frozen=True)
class _Plan:
    """Who talks to whom, in positions of the visibility order."""

    method: str  # what the rounds amount to: "direct-send", "binary-swap", "radix-k", "none"
    order: tuple[int, ...]  # position -> rank
    folds: tuple[tuple[int, int], ...]  # (sender position, receiver position = sender - 1)
    active: tuple[int, ...]  # virtual index -> position, for the ranks left after folding
    radices: tuple[int, ...]  # group size of each round; their product is len(active)

    def rank_of(self, v: int) -> int:
        return self.order[self.active[v]]

    def group(self, v: int, t: int) -> tuple[list[int], int]:
        """Virtual indices of `v`'s group at round `t` (front to back) and `v`'s place in it.

        Mixed-radix digits, least significant first: round t's group shares all digits
        but digit t, and each member holds the composite of `stride` consecutive
        positions, so the group covers one contiguous interval of the order.
        """
        stride = math.prod(self.radices[:t])
        k = self.radices[t]
        d = (v // stride) % k
        return [v + (j - d) * stride for j in range(k)], d

    def strips(self, v: int, h: int) -> list[tuple[list[int], int]]:
        """Per round: the row cuts of `v`'s current strip into pieces, and `v`'s piece."""
        lo, hi, out = 0, h, []
        for t, k in enumerate(self.radices):
            _, d = self.group(v, t)
            cuts = [lo + (hi - lo) * j // k for j in range(k + 1)]
            out.append((cuts, d))
            lo, hi = cuts[d], cuts[d + 1]
        return out

    def final_rows(self, v: int, h: int) -> tuple[int, int]:
        s = self.strips(v, h)
        if not s:
            return 0, h
        cuts, d = s[-1]
        return cuts[d], cuts[d + 1]


def _factors(n: int) -> list[int]:
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out + ([n] if n > 1 else [])


def _radix_k(n: int, target: int = _RADIX) -> list[int]:
    """Group sizes whose product is `n`, each at most `target` where the primes allow."""
    out: list[int] = []
    for p in _factors(n):
        if out and out[-1] * p <= target:
            out[-1] *= p
        else:
            out.append(p)
    return out


def _make_plan(order: Sequence[int], method: str) -> _Plan:
    n, order = len(order), tuple(order)
    if method == "auto":
        method = "direct-send" if n <= 4 else "binary-swap"
    if n == 1:
        return _Plan("none", order, (), (0,), ())
    if method == "direct-send":
        return _Plan(method, order, (), tuple(range(n)), (n,))
    if method == "radix-k":
        return _Plan(method, order, (), tuple(range(n)), tuple(_radix_k(n)))
    # binary-swap: fold the extra ranks into their front neighbours, swap among 2^k.
    p2 = 1 << (n.bit_length() - 1)
    extra = n - p2
    folds = tuple((2 * i + 1, 2 * i) for i in range(extra))
    active = tuple(2 * i for i in range(extra)) + tuple(range(2 * extra, n))
    return _Plan("binary-swap", order, folds, active, (2,) * (p2.bit_length() - 1))


def plan_rounds(nranks: int, method: str = "auto", order: Sequence[int] | None = None) -> dict:
    """Describe the schedule `composite` uses (for logs and tests).

    Returns
    -------
    dict
        ``method``: the schedule ``auto`` resolves to; ``folds``: (sender rank,
        receiver rank) pairs sent before the rounds;
        ``radices``: group size per round; ``active``: ranks taking part in the rounds.
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; known: {', '.join(METHODS)}")
    order = list(range(nranks)) if order is None else list(order)
    plan = _make_plan(order, method)
    return {
        "method": plan.method,
        "folds": [(plan.order[s], plan.order[r]) for s, r in plan.folds],
        "radices": list(plan.radices),
        "active": [plan.rank_of(v) for v in range(len(plan.active))],
    }


# --------------------------------------------------------------------------- transports


class _MPIExchange:
    """Buffer-based Isend/Irecv; device buffers staged through the counted gateway
    unless the MPI is CUDA-aware."""

    name = "mpi"

    def __init__(self, comm, deadline: float, on_device: bool, cuda_aware: bool) -> None:
        self.comm, self.deadline = comm, deadline
        self.on_device = on_device
        self.staged = on_device and not cuda_aware
        if on_device:
            self.name = "mpi-staged" if self.staged else "mpi-cuda-aware"

    def exchange(self, sends, recvs, phase: int, what: str) -> None:
        """Send/receive lists of (peer rank, fragment); returns when all are done."""
        if self.on_device:
            import cupy

            # MPI reads device memory outside CUDA's stream order: the strips must be ready.
            cupy.cuda.get_current_stream().synchronize()
        reqs, peers, landing = [], [], []
        for peer, frag in recvs:
            for kind, a in _parts(frag):
                buf = arrays.pinned_empty(a.shape, a.dtype) if self.staged else a
                if self.staged:
                    landing.append((buf, a))
                reqs.append(self.comm.Irecv(buf, source=peer, tag=_TAG + 2 * phase + kind))
                peers.append(peer)
        for peer, frag in sends:
            for kind, a in _parts(frag):
                buf = arrays.to_host(a, out=arrays.pinned_empty(a.shape, a.dtype)) if self.staged else a
                reqs.append(self.comm.Isend(buf, dest=peer, tag=_TAG + 2 * phase + kind))
                peers.append(peer)
        wait_requests(reqs, peers, self.deadline, what)
        for host, dev in landing:
            arrays.to_device(host, out=dev)
        if landing:
            import cupy

            # Copies out of pinned memory are asynchronous: keep the buffers alive until done.
            cupy.cuda.get_current_stream().synchronize()

    def finish(self, what: str) -> None:
        """Everything is complete when exchange returns."""


class _NCCLExchange:
    """Grouped NCCL send/recv on the current stream: stream-ordered, no host copies."""

    name = "nccl"

    def __init__(self, nccl_comm, deadline: float) -> None:
        import cupy

        self.c, self.deadline = nccl_comm, deadline
        self.stream = cupy.cuda.get_current_stream()

    def exchange(self, sends, recvs, phase: int, what: str) -> None:
        from cupy.cuda import nccl

        nccl.groupStart()
        try:
            # Between two ranks NCCL matches in issue order: both sides list colour, then depth.
            for peer, frag in sends:
                for _, a in _parts(frag):
                    self.c.send(a.data.ptr, a.nbytes, nccl.NCCL_UINT8, peer, self.stream.ptr)
            for peer, frag in recvs:
                for _, a in _parts(frag):
                    self.c.recv(a.data.ptr, a.nbytes, nccl.NCCL_UINT8, peer, self.stream.ptr)
        finally:
            nccl.groupEnd()

    def finish(self, what: str) -> None:
        # Poll instead of synchronizing, so a peer that died mid-way is an error, not a hang.
        wait_stream(self.stream, self.deadline, what, on_timeout=self._abort)

    def _abort(self) -> None:
        for k in [k for k, v in _nccl_comms.items() if v is self.c]:
            del _nccl_comms[k]
        try:
            self.c.abort()
        except Exception:
            pass


def _parts(frag):
    return [(kind, a) for kind, a in enumerate(frag) if a is not None and a.size]


def _world_key(comm) -> tuple:
    from mpi4py import MPI

    return tuple(MPI.Group.Translate_ranks(comm.Get_group(), list(range(comm.size)), MPI.COMM_WORLD.Get_group()))


def _build_nccl(comm):
    """One NCCL communicator over all ranks of `comm` (NCCL rank = MPI rank), cached.

    Called on every rank after the ranks agreed to use NCCL, so the broadcast of the
    unique id cannot wait for an absent rank.
    """
    import cupy
    from cupy.cuda import nccl

    key = (_world_key(comm), cupy.cuda.Device().id)
    if key not in _nccl_comms:
        uid = nccl.get_unique_id() if comm.rank == 0 else None  # bytes or a tuple by CuPy version
        uid = comm.bcast(uid, root=0)
        _nccl_comms[key] = nccl.NcclCommunicator(comm.size, uid, comm.rank)
    return _nccl_comms[key]


# --------------------------------------------------------------------------- agreement


def _describe(rgba, depth) -> str:
    d = "" if depth is None else f" + depth {tuple(depth.shape)} {depth.dtype}"
    return f"{tuple(rgba.shape)} {rgba.dtype}{d} ({arrays.backend_of(rgba)})"


def _local_problem(rgba, depth, mode, method, order, root, size) -> str | None:
    """What is wrong with this rank's arguments alone (reported to every rank)."""
    if mode not in MODES:
        return f"unknown mode {mode!r}; known: {', '.join(MODES)}"
    if method not in METHODS:
        return f"unknown method {method!r}; known: {', '.join(METHODS)}"
    if not isinstance(root, (int, np.integer)) or not 0 <= root < size:
        return f"root {root!r} is not a rank of the communicator (0..{size - 1})"
    if rgba.ndim not in (2, 3) or rgba.dtype.kind != "f":
        return f"rgba must be a (height, width[, channels]) float array, got {rgba.shape} {rgba.dtype}"
    if mode == "over" and (rgba.ndim != 3 or rgba.shape[2] != 4):
        return f"mode='over' needs (height, width, 4) premultiplied RGBA, got shape {rgba.shape}"
    if mode == "depth" and depth is None:
        return "mode='depth' needs depth= (the distance of each pixel, inf where nothing was hit)"
    if mode == "over" and depth is not None:
        return "mode='over' composes by `order`, not depth: pass depth=None (or use mode='depth')"
    if depth is not None:
        if depth.shape != rgba.shape[:2] or depth.dtype.kind != "f":
            return f"depth must be a float array of shape {rgba.shape[:2]}, got {depth.shape} {depth.dtype}"
        if arrays.backend_of(depth) != arrays.backend_of(rgba):
            return "rgba and depth must both be host (NumPy) or both device (CuPy) arrays"
        if arrays.device_id(depth) != arrays.device_id(rgba):
            return f"rgba is on device {arrays.device_id(rgba)}, depth on device {arrays.device_id(depth)}"
    if order is not None and (not isinstance(order, list) or sorted(order) != list(range(size))):
        return f"order must be a permutation of the ranks 0..{size - 1}, got {order}"
    return None


def _nccl_kind(nccl) -> str:
    if nccl is None:
        return "auto"
    if nccl is True or nccl is False:
        return "on" if nccl else "off"
    return "given"


def _agree(comm, rgba, depth, mode, method, order, root, nccl, deadline) -> list[dict]:
    """Check with every rank that all call alike; raise the same error on every rank."""
    size = comm.size
    try:
        order_l = None if order is None else [int(r) for r in order]
    except (TypeError, ValueError):
        order_l = repr(order)  # reported as a problem; whatever it is may not pickle
    on_device = arrays.is_device_array(rgba)
    mine = {
        "problem": _local_problem(rgba, depth, mode, method, order_l, root, size) or _nccl_problem(nccl, comm),
        "image": _describe(rgba, depth),
        "mode": mode, "method": method, "order": order_l, "root": root, "nccl": _nccl_kind(nccl),
        "peer": PeerInfo.here(comm.rank, "cupy" if on_device else "numpy"),
        "nccl_ok": on_device and _nccl_usable(),
        "cuda_aware": on_device and _cuda_aware(),
    }
    # An absent rank times out here instead of hanging the allgather.
    wait_requests([comm.Ibarrier()], [None], deadline, f"composite on rank {comm.rank} (waiting for every rank)")
    everyone = comm.allgather(mine)
    for r, theirs in enumerate(everyone):
        if theirs["problem"]:
            raise ValueError(f"composite: rank {r}: {theirs['problem']}")
    for name in ("mode", "method", "root", "order", "nccl", "image"):
        for r, theirs in enumerate(everyone):
            if theirs[name] != mine[name]:
                show = str if name == "image" else repr
                raise MismatchError(
                    f"composite: rank {r} has {name} {show(theirs[name])}, rank {comm.rank} has "
                    f"{show(mine[name])}; all ranks must pass the same {_WHAT[name]}"
                )
    return everyone


_WHAT = {"image": "image shape and dtype", "mode": "mode", "method": "method", "root": "root",
         "order": "visibility order", "nccl": "kind of nccl= argument"}


def _nccl_usable() -> bool:
    from insitu.transports.nccl import nccl_available

    return nccl_available()


def _cuda_aware() -> bool:
    from insitu.transports.mpi import mpi_cuda_aware

    return mpi_cuda_aware()


def _choose_transport(comm, everyone, nccl, deadline):
    """Same choice on every rank: it depends only on what every rank told."""
    on_device = everyone[0]["peer"].backend == "cupy"
    if comm.size == 1:
        xch = _MPIExchange(comm, deadline, False, cuda_aware=False)
        xch.name = "local"  # nothing moves
        return xch
    if not on_device:
        return _MPIExchange(comm, deadline, False, cuda_aware=False)
    if nccl is not None and not isinstance(nccl, bool):
        return _NCCLExchange(nccl, deadline)
    gpus = [(e["peer"].host, e["peer"].device) for e in everyone]
    # NCCL refuses two ranks on one GPU.
    possible = all(e["nccl_ok"] for e in everyone) and len(set(gpus)) == len(gpus)
    if nccl is True and not possible:
        raise ValueError(
            "composite: nccl=True needs NCCL in CuPy on every rank and one GPU per rank; "
            f"ranks' GPUs (host, PCI bus): {gpus}"
        )
    if possible and nccl is not False:
        return _NCCLExchange(_build_nccl(comm), deadline)
    return _MPIExchange(comm, deadline, True, cuda_aware=all(e["cuda_aware"] for e in everyone))


def _nccl_problem(c, comm) -> str | None:
    """What is wrong with a NCCL communicator given as nccl= (None for the other kinds)."""
    if c is None or isinstance(c, bool):
        return None
    if not (hasattr(c, "send") and hasattr(c, "recv")):
        return f"nccl= must be a NCCL communicator with send/recv, got {type(c).__name__}"
    # A communicator over other ranks would send to the wrong peers: check where we can.
    for attr, want in (("rank_id", comm.rank), ("size", comm.size)):
        got = getattr(c, attr, None)
        if callable(got) and got() != want:
            return f"the NCCL communicator's {attr}() is {got()}, the MPI communicator's is {want}; " \
                   "NCCL ranks must be the ranks of comm"
    return None


# --------------------------------------------------------------------------- the reduction


def _rows(frag, lo: int, hi: int):
    return tuple(None if a is None else a[lo:hi] for a in frag)


def _empty_rows(frag, n: int):
    xp = arrays.get_array_module(frag[0])
    return tuple(None if a is None else xp.empty((n, *a.shape[1:]), a.dtype) for a in frag)


def _merge(pieces, d: int, ops) -> None:
    """Reduce `pieces` (front to back) into ``pieces[d]``, the strip this rank keeps."""
    into_front, into_back = ops
    if d > 0:
        front = pieces[0]  # a receive buffer: free to overwrite
        for p in pieces[1:d]:
            into_front(front, p)
        into_back(front, pieces[d])
    for p in pieces[d + 1:]:
        into_front(pieces[d], p)


def _fold(plan, pos, work, xch, ops, h, what) -> None:
    for s, r in plan.folds:
        if pos == s:
            xch.exchange([(plan.order[r], work)], [], 0, what)
        elif pos == r:
            back = _empty_rows(work, h)
            xch.exchange([], [(plan.order[s], back)], 0, what)
            ops[0](work, back)


def _rounds(plan, v, work, xch, ops, h, what) -> None:
    for t, (cuts, d) in enumerate(plan.strips(v, h)):
        members, _ = plan.group(v, t)
        ranks = [plan.rank_of(m) for m in members]
        lo, hi = cuts[d], cuts[d + 1]
        sends = [(ranks[j], _rows(work, cuts[j], cuts[j + 1])) for j in range(len(ranks))
                 if j != d and cuts[j + 1] > cuts[j]]
        pieces = [_rows(work, lo, hi) if j == d else _empty_rows(work, hi - lo) for j in range(len(ranks))]
        recvs = [(ranks[j], pieces[j]) for j in range(len(ranks)) if j != d and hi > lo]
        xch.exchange(sends, recvs, 1 + t, what)
        if hi > lo:
            _merge(pieces, d, ops)


def _gather(plan, rank, root, v, work, xch, h, what) -> None:
    phase = 1 + len(plan.radices)
    if rank == root:
        recvs = []
        for u in range(len(plan.active)):
            lo, hi = plan.final_rows(u, h)
            if plan.rank_of(u) != root and hi > lo:
                recvs.append((plan.rank_of(u), _rows(work, lo, hi)))
        xch.exchange([], recvs, phase, what)
    elif v is not None:
        lo, hi = plan.final_rows(v, h)
        if hi > lo:
            xch.exchange([(root, _rows(work, lo, hi))], [], phase, what)


def composite(rgba, depth=None, *, comm, order: Sequence[int] | None = None, root: int = 0,
              method: str = "auto", mode: str = "depth", nccl: Any = None, timeout: float = 60.0,
              info: dict | None = None):
    """Composite every rank's image into one at `root` (sort-last).

    Parameters
    ----------
    rgba : (height, width[, channels]) float array
        This rank's premultiplied colour, NumPy or CuPy; the same shape and dtype on
        every rank. Not modified.
    depth : (height, width) float array, optional
        Distance per pixel, ``inf`` where nothing was hit; required for ``mode="depth"``.
    comm : mpi4py communicator
        Every rank of it must call, with the same arguments apart from the images.
    order : sequence of int, optional
        ``mode="over"``: the ranks front to back (default: rank order), the same on
        every rank. Ignored by ``mode="depth"`` (apart from being checked).
    root : int
        Rank that receives the result.
    method : {"auto", "direct-send", "binary-swap", "radix-k"}
    mode : {"depth", "over"}
    nccl : None, bool or NCCL communicator, optional
        CuPy images only. ``None``: NCCL when every rank has its own GPU, else MPI;
        ``True``: NCCL or an error; ``False``: MPI; a ``cupy.cuda.nccl.NcclCommunicator``
        over the ranks of `comm` (NCCL rank = MPI rank): use it.
    timeout : float
        Seconds to wait for the other ranks before :class:`PeerTimeoutError`.
    info : dict, optional
        Filled with the ``method``, ``radices``, ``folds`` and ``transport`` used.

    Returns
    -------
    At `root`: ``(rgba, depth)`` for ``mode="depth"``, ``rgba`` for ``mode="over"``,
    new arrays of the input's kind. Elsewhere ``None``.

    Raises
    ------
    ValueError
        On every rank, naming the rank at fault: shapes or dtypes differ across ranks
        (:class:`insitu.MismatchError`), `order` is not a permutation of the ranks,
        depth missing for ``mode="depth"``.
    PeerTimeoutError
        A rank did not take part within `timeout` (:class:`insitu.PeerTimeoutError`).
    """
    deadline = time.monotonic() + float(timeout)
    rgba = arrays.asarray(rgba, name="composite: rgba")
    depth = None if depth is None else arrays.asarray(depth, name="composite: depth")
    if not arrays.is_device_array(rgba):
        return _composite(rgba, depth, comm, order, root, method, mode, nccl, deadline, info)
    import cupy

    # NCCL, the stream and the work buffers belong to the image's device.
    with cupy.cuda.Device(arrays.device_id(rgba)):
        return _composite(rgba, depth, comm, order, root, method, mode, nccl, deadline, info)


def _composite(rgba, depth, comm, order, root, method, mode, nccl, deadline, info):
    everyone = _agree(comm, rgba, depth, mode, method, order, root, nccl, deadline)
    rank, size = comm.rank, comm.size
    plan = _make_plan(range(size) if order is None or mode == "depth" else [int(r) for r in order], method)
    xch = _choose_transport(comm, everyone, nccl, deadline)
    if info is not None:
        info.update(method=plan.method, radices=list(plan.radices), transport=xch.name,
                    folds=[(plan.order[s], plan.order[r]) for s, r in plan.folds])
    xp = arrays.get_array_module(rgba)
    # Compositing happens in place: work on copies, C-contiguous so row strips are buffers.
    work = (xp.array(rgba, order="C", copy=True), None if depth is None else xp.array(depth, order="C", copy=True))
    h = rgba.shape[0]
    ops = _OPS[mode]
    pos = plan.order.index(rank)
    v = plan.active.index(pos) if pos in plan.active else None
    what = f"composite on rank {rank}"
    _fold(plan, pos, work, xch, ops, h, what)
    if v is not None:
        _rounds(plan, v, work, xch, ops, h, what)
    _gather(plan, rank, root, v, work, xch, h, what)
    xch.finish(what)
    if rank != root:
        return None
    return work if mode == "depth" else work[0]
