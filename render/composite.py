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

Transports: the strips move over :mod:`insitu.transports`, chosen per pair of ranks
as for the halo exchange: ranks sharing a GPU copy straight out of each other's
memory (CUDA IPC), GPUs of one node that reach each other peer-to-peer (p2p), other
GPUs over NCCL, host (NumPy) images over MPI; none of the device paths stages
through the host. Only MPI forced onto device images stages, where the MPI is not
CUDA-aware (counted by :func:`insitu.arrays.count_transfers`).
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from typing import Any, Mapping, Sequence

import numpy as np

from insitu import arrays
from insitu.errors import MismatchError
from insitu.transports import (PeerInfo, allgather_object, check_override, check_pairs, choose_peers, nccl_available,
                               override_signature)

from . import _compositor

__all__ = ["METHODS", "composite", "depth_composite", "over_composite", "plan_rounds"]

METHODS = ("auto", "direct-send", "binary-swap", "radix-k")
MODES = ("depth", "over")

_RADIX = 4  # largest group of radix-k: bigger groups mean more, smaller messages per round


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


def _override_problem(transport) -> str | None:
    try:
        check_override(transport)
    except ValueError as e:
        return str(e)
    if isinstance(transport, Mapping) and not all(isinstance(p, (int, np.integer)) for p in transport):
        return f"transport= maps peer ranks (int) to names, got keys {sorted(map(repr, transport))}"
    return None


def _agree(comm, rgba, depth, mode, method, order, root, transport, nccl, cached: bool, deadline) -> list[dict]:
    """Check with every rank that all call alike; raise the same error on every rank.

    Deadline-bounded throughout: a rank that comes late, after the others gave up,
    times out here too instead of waiting for a collective they left.
    """
    size = comm.size
    try:
        order_l: list[int] | str | None = None if order is None else [int(r) for r in order]
    except (TypeError, ValueError):
        order_l = repr(order)  # reported as a problem; whatever it is may not pickle
    on_device = arrays.is_device_array(rgba)
    problem = (_local_problem(rgba, depth, mode, method, order_l, root, size) or _override_problem(transport)
               or _nccl_problem(nccl, comm))
    mine = {
        "problem": problem,
        "image": _describe(rgba, depth),
        "mode": mode, "method": method, "order": order_l, "root": root, "nccl": _nccl_kind(nccl),
        "transport": override_signature(transport),
        "override": None if problem else transport if transport is None or isinstance(transport, str)
        else {int(p): n for p, n in transport.items()},
        "peer": PeerInfo.here(comm.rank, "cupy" if on_device else "numpy"),
        "nccl_ok": on_device and nccl_available(),
        "cached": cached,
    }
    everyone = allgather_object(comm, mine, deadline, f"composite on rank {comm.rank} (waiting for every rank)")
    for r, theirs in enumerate(everyone):
        if theirs["problem"]:
            raise ValueError(f"composite: rank {r}: {theirs['problem']}")
    for name in ("mode", "method", "root", "order", "nccl", "transport", "image"):
        for r, theirs in enumerate(everyone):
            if theirs[name] != mine[name]:
                show = str if name == "image" else repr
                raise MismatchError(
                    f"composite: rank {r} has {name} {show(theirs[name])}, rank {comm.rank} has "
                    f"{show(mine[name])}; all ranks must pass the same {_WHAT[name]}"
                )
    return everyone


_WHAT = {"image": "image shape and dtype", "mode": "mode", "method": "method", "root": "root",
         "order": "visibility order", "nccl": "kind of nccl= argument", "transport": "transport="}


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


def _pairs(plan: _Plan, root: int) -> set[tuple[int, int]]:
    """Every pair of ranks (low, high) the schedule makes talk."""
    out = {(plan.order[s], plan.order[r]) for s, r in plan.folds}
    for t in range(len(plan.radices)):
        for v in range(len(plan.active)):
            out |= {(plan.rank_of(v), plan.rank_of(m)) for m in plan.group(v, t)[0] if m != v}
    out |= {(plan.rank_of(u), root) for u in range(len(plan.active)) if plan.rank_of(u) != root}
    return {(min(p), max(p)) for p in out}


def _pair_names(everyone: list[dict], plan: _Plan, root: int) -> dict[tuple[int, int], str]:
    """The transport of every pair that talks, worked out alike on every rank (from what
    every rank told), so that a choice no pair can use fails on every rank."""
    infos = [e["peer"] for e in everyone]
    pairs = sorted(_pairs(plan, root))
    check_pairs(infos, [e["override"] for e in everyone], pairs, "composite", persistent=True)
    names = {}
    for a, b in pairs:
        names[a, b] = choose_peers(infos[a], [b], infos, everyone[a]["override"], persistent=True)[b]
        problem = _pair_problem(names[a, b], a, b, everyone)
        if problem:
            raise ValueError(f"composite: {problem}")
    return names


def _pair_problem(name: str, a: int, b: int, everyone: list[dict]) -> str | None:
    pa, pb = everyone[a]["peer"], everyone[b]["peer"]
    if name != "mpi" and pa.backend != "cupy":
        return f"transport {name!r} moves device arrays; host (NumPy) images move over 'mpi'"
    if name in ("ipc", "p2p") and pa.host != pb.host:
        return f"transport {name!r} needs ranks {a} and {b} on one node; they run on {pa.host} and {pb.host}"
    if name == "nccl":
        if not (everyone[a]["nccl_ok"] and everyone[b]["nccl_ok"]):
            return f"transport 'nccl' needs NCCL in CuPy on ranks {a} and {b}"
        if (pa.host, pa.device) == (pb.host, pb.device):
            return (f"transport 'nccl' needs one GPU per rank of a pair; ranks {a} and {b} share GPU "
                    f"{pa.device} of {pa.host}")
    return None


# --------------------------------------------------------------------------- the call


def _world_key(comm) -> tuple:
    from mpi4py import MPI

    return tuple(MPI.Group.Translate_ranks(comm.Get_group(), list(range(comm.size)), MPI.COMM_WORLD.Get_group()))


def composite(rgba, depth=None, *, comm, order: Sequence[int] | None = None, root: int = 0,
              method: str = "auto", mode: str = "depth", transport: str | Mapping[int, str] | None = None,
              nccl: Any = None, timeout: float = 60.0, info: dict | None = None):
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
    transport : str or dict, optional
        How images move between two ranks, as for the halo exchange
        (:mod:`insitu.transports`): ``None`` chooses per pair (same GPU: ``"ipc"``;
        GPUs of one node that reach each other: ``"p2p"``; other GPUs: ``"nccl"``;
        host images: ``"mpi"``); a name forces it for every pair; ``{peer_rank: name}``
        for some peers (both ends of a pair must name the same).
    nccl : NCCL communicator, optional
        CuPy images only: a ``cupy.cuda.nccl.NcclCommunicator`` over the ranks of
        `comm` (NCCL rank = MPI rank) for the ``"nccl"`` transport to use instead of
        its own; without `transport`, every pair uses it. ``True``/``False`` are
        deprecated: they mean ``transport="nccl"``/``"mpi"``.
    timeout : float
        Seconds to wait for the other ranks before :class:`PeerTimeoutError`.
    info : dict, optional
        Filled with the ``method``, ``radices``, ``folds``, ``transport`` (the
        transports this rank used, ``"+"``-joined; ``"local"`` on one rank) and
        ``transports`` (``{peer: name}``) used.

    Returns
    -------
    At `root`: ``(rgba, depth)`` for ``mode="depth"``, ``rgba`` for ``mode="over"``,
    new arrays of the input's kind. Elsewhere ``None``.

    Raises
    ------
    ValueError
        On every rank, naming the rank at fault: shapes or dtypes differ across ranks
        (:class:`insitu.MismatchError`), `order` is not a permutation of the ranks,
        depth missing for ``mode="depth"``, a transport the pair cannot use.
    PeerTimeoutError
        A rank did not take part within `timeout` (:class:`insitu.PeerTimeoutError`).

    Notes
    -----
    Each configuration (communicator, image shape and dtypes, mode, method, order,
    root, transports) keeps its exchange area and open transports between calls, so
    repeated calls (one per frame) set nothing up again.
    """
    deadline = time.monotonic() + float(timeout)
    rgba = arrays.asarray(rgba, name="composite: rgba")
    depth = None if depth is None else arrays.asarray(depth, name="composite: depth")
    if isinstance(nccl, bool):
        warnings.warn("composite: nccl=True/False is deprecated; pass transport='nccl' (for True) or "
                      "transport='mpi' (for False)", DeprecationWarning, stacklevel=2)
    if nccl is not None and transport is None and arrays.is_device_array(rgba):  # host images: always MPI
        transport = "mpi" if nccl is False else "nccl"
    if not arrays.is_device_array(rgba):
        return _composite(rgba, depth, comm, order, root, method, mode, transport, nccl, timeout, deadline, info)
    import cupy

    # The exchange area, the stream and NCCL belong to the image's device.
    with cupy.cuda.Device(arrays.device_id(rgba)):
        return _composite(rgba, depth, comm, order, root, method, mode, transport, nccl, timeout, deadline, info)


def _composite(rgba, depth, comm, order, root, method, mode, transport, nccl, timeout, deadline, info):
    rank, size = comm.rank, comm.size
    given = None if nccl is None or isinstance(nccl, bool) else nccl
    key = _config_key(comm, rgba, depth, order, root, method, mode, transport, given, timeout) if size > 1 else None
    cache = _compositor.cache
    everyone = _agree(comm, rgba, depth, mode, method, order, root, transport, nccl, key in cache, deadline)
    plan = _make_plan(range(size) if order is None or mode == "depth" else [int(r) for r in order], method)
    if info is not None:
        info.update(method=plan.method, radices=list(plan.radices), transport="local", transports={},
                    folds=[(plan.order[s], plan.order[r]) for s, r in plan.folds])
    if size == 1:
        xp = arrays.get_array_module(rgba)
        out = (xp.array(rgba, order="C", copy=True), None if depth is None else xp.array(depth, order="C", copy=True))
        return out if mode == "depth" else out[0]
    comp = cache.get(key) if all(e["cached"] for e in everyone) else None
    if comp is None:
        # Built together: every rank either reuses its configuration or builds anew. The pairs'
        # transports are chosen (and checked) only then: a kept configuration was built from
        # the same agreement, and choosing them costs O(pairs) per call (seconds at 1,000 ranks).
        names = _pair_names(everyone, plan, root)
        _compositor.drop(key)
        mine = {b if a == rank else a: n for (a, b), n in names.items() if rank in (a, b)}
        comp = _compositor.Compositor(comm, plan, root, _compositor.Layout.of(rgba, depth), rgba.shape[0],
                                      arrays.backend_of(rgba), mine, [e["peer"] for e in everyone], timeout, given,
                                      deadline)
        cache[key] = comp
        while len(cache) > _compositor.CACHE_SIZE:
            _compositor.drop(next(iter(cache)))
    cache.move_to_end(key)
    if info is not None:
        info.update(transport=comp.label, transports=dict(comp.names))
    try:
        comp.run(rgba, depth, _OPS[mode], deadline)
    except BaseException:
        _compositor.drop(key, failed=True)  # its transports may wait for what a peer never sends
        raise
    if rank != root:
        return None
    out = tuple(None if a is None else a.copy() for a in comp.work)  # the area is reused by the next call
    return out if mode == "depth" else out[0]


def _config_key(comm, rgba, depth, order, root, method, mode, transport, given, timeout) -> tuple:
    """What a kept configuration must match; arguments the agreement will refuse give
    some key too (a repr), so that they reach the agreement."""
    try:
        order_k: tuple[int, ...] | str | None = None if order is None or mode == "depth" else tuple(
            int(r) for r in order)
    except (TypeError, ValueError):
        order_k = repr(order)
    transport_k = transport if transport is None or isinstance(transport, str) else repr(transport)
    return (_world_key(comm), arrays.backend_of(rgba), arrays.device_id(rgba), tuple(rgba.shape), str(rgba.dtype),
            None if depth is None else str(depth.dtype), mode, method, order_k, repr(root), transport_k,
            None if given is None else id(given), float(timeout))
