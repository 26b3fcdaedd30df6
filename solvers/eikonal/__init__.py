"""Eikonal solver: |grad T| = 1/f on a uniform 3-D grid, block-parallel, halo-synchronized.

Discretization: first-order Godunov upwind, the discrete equations scikit-fmm solves
with ``order=1``: at every non-seed node, over the axes whose smaller neighbour value
``a_d`` lies below T, ``sum_d ((T - a_d) / h_d)^2 = 1 / f^2``; seeds hold T = 0.

Iteration: block Jacobi (the Fast Iterative Method without its active list). Each
sweep updates every node of a block at once from the previous iterate,
``T <- min(T, godunov(neighbours))``; a block does several such sweeps between halo
exchanges; the run stops when a whole step changes no node by more than `tol`
(reduced over all ranks). Why this and not parallel fast sweeping: a Jacobi sweep is
one data-parallel stencil pass, the same kernel on the CPU (Numba) and the GPU (CuPy)
with no hyperplane-by-hyperplane launches and no ordering between blocks, so results
do not depend on the decomposition; the update is monotone, so every schedule
converges to the same unique fixed point (the single-block answer), and the iteration
count grows with the domain's width in cells, which the per-step local sweeps cut.

API
---
- :func:`solve` (one array, in one process),
- :func:`update_block` (what the runtime calls on a cached block),
- :class:`EikonalSolver` (a decomposed domain: ``step()``, ``run(tol, max_iter)``),
- :class:`Collectives` (what a job gives the solver to agree and reduce with deadlines).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterator, Mapping, Protocol, Sequence

import numpy as np

from insitu import arrays
from insitu.domain import Domain
from insitu.halo import HaloExchange
from insitu.profile import StageTimer
from insitu.ranges import TileRanges, tile_ranges

from . import speed as speed_models
from ._gpu import CHUNK as _CHUNK
from ._gpu import TILE as _TILE

_NO_PROFILE = StageTimer()

#: Tile span (along i, j, k) of :meth:`EikonalSolver.display_ranges` on both backends: the
#: GPU sweep's thread blocks (`chunk` planes x tile rows x tile points), which reduce them.
DISPLAY_SPAN = (_CHUNK, _TILE[1], _TILE[0])

__all__ = ["DISPLAY_SPAN", "Collectives", "EikonalSolver", "Iterate", "seeds_from_fractions", "solve", "speed_models",
           "update_block"]


def update_block(T, out, w, frozen, spacing: Sequence[float], *, iterations: int = 1, view=None,
                 clip: float = math.inf, tiles=None, ranges: TileRanges | None = None):
    """Run `iterations` Jacobi sweeps on one padded block, ping-ponging `T` and `out`.

    Parameters
    ----------
    T, out : (X, Y, Z) float64 arrays
        Current iterate (its one-cell border is read only: ghosts, or +inf outside the
        domain) and scratch of the same shape. NumPy or CuPy, all four alike.
    w : (X, Y, Z) float64 array
        Slowness 1 / speed.
    frozen : (X, Y, Z) bool array
        Seeds (never updated).
    spacing : (3,) floats
    iterations : int
    view : (X, Y, Z) float32 array, optional
        Receives ``min(T, clip)`` of the newest iterate (on the GPU written by the last
        sweep itself, without reading T again).
    clip : float
    tiles : ActiveTiles of solvers.eikonal._gpu (CuPy) or ._cpu (NumPy), optional
        Visit only the tiles where something can change (the same result).
    ranges : TileRanges, optional
        Of `view` (needs it), kept equal to ``insitu.ranges.tile_ranges(view, span)``: on
        the GPU written by the sweeps that write the view (the span must be the launch's
        tiles, :data:`DISPLAY_SPAN`), on the CPU recomputed after the view.

    Returns
    -------
    (T, out, change)
        The arrays with the newest iterate first, and the largest change: a float on the
        CPU, a one-element float64 device array on the GPU (no host read here).
    """
    hx, hy, hz = (float(h) for h in spacing)
    if ranges is not None and view is None:
        raise ValueError("eikonal: update_block ranges are those of a view; got ranges without a view")
    if arrays.is_device_array(T):
        import cupy

        from . import _gpu

        if ranges is not None:
            span = DISPLAY_SPAN if tiles is None else (tiles.chunk, tiles.tile[1], tiles.tile[0])
            if tuple(ranges.span) != span:
                raise ValueError(f"eikonal: update_block ranges must have the sweep's span {span}, "
                                 f"got {tuple(ranges.span)}")
        change = cupy.zeros(1, cupy.uint64)
        for it in range(iterations):
            # With idle tiles skipped, every sweep writes the view of the tiles it visits: a
            # tile woken by a refilled ghost face in the first sweep may sleep in the last.
            last = it == iterations - 1 or tiles is not None
            _gpu.sweep(T, out, w, frozen, hx, hy, hz, change, view if last else None, clip, tiles=tiles,
                       ranges=None if ranges is None else ranges.values)
            T, out = out, T
        return T, out, change.view(cupy.float64)
    from . import _cpu

    change = 0.0
    for _ in range(iterations):
        if tiles is not None:
            c = tiles.sweep(T, out, w, frozen, hx, hy, hz)
        else:
            c = _cpu.sweep(T, out, w, frozen, hx, hy, hz)
        change = max(change, float(c))
        T, out = out, T
    if view is not None:
        np.minimum(T, clip, out=view, casting="same_kind")
        if ranges is not None:  # one read of the view, 4 bytes a node
            tile_ranges(view, ranges.span, out=ranges.values)
    return T, out, change


class Collectives(Protocol):
    """The job-wide operations :class:`EikonalSolver` needs besides its halo exchange.

    Give one whose calls keep a deadline and tell every rank about a failure on any
    (the adaptor's ``Context`` is one); the default, over the solver's
    `comm`, uses mpi4py's blocking ``allreduce`` and raises a set-up failure on its own
    rank only (the others then stop in the first halo exchange, after its `timeout`).
    """

    def allreduce(self, value: float, op: str) -> float:
        """``op`` (``"max"``) of `value` over all ranks; collective."""

    def agree(self, error: BaseException | None, what: str) -> None:
        """Raise on every rank if `error` is not ``None`` on any; collective."""


class _CommCollectives:
    """The default :class:`Collectives` over an mpi4py communicator (or one process)."""

    def __init__(self, comm) -> None:
        self.comm = comm

    def allreduce(self, value: float, op: str) -> float:
        if self.comm is None:
            return value
        from mpi4py import MPI

        return self.comm.allreduce(value, op={"max": MPI.MAX, "min": MPI.MIN, "sum": MPI.SUM}[op])

    def agree(self, error: BaseException | None, what: str) -> None:
        if error is not None:
            raise error


@dataclasses.dataclass
class Iterate:
    """State after one step of :meth:`EikonalSolver.run`."""

    iteration: int
    change: float
    blocks: dict[int, Any]  # gid -> padded T of this rank's blocks (views: do not modify)


class EikonalSolver:
    """Distributed eikonal solve over an :class:`insitu.domain.Domain` (ghost width 1).

    Parameters
    ----------
    domain : Domain
        Decomposition; its spacing is the grid spacing. Ghost width must be >= 1.
    speed : array, callable, HDF5 reader or mapping
        Global (X, Y, Z) array of speeds (> 0, finite); or ``f(x, y, z)`` of world
        coordinates (see :mod:`solvers.eikonal.speed`); or :func:`speed.from_hdf5`; or
        ``{block id: array}`` for this rank's blocks, each of the block's (unpadded)
        shape, used where it lives when that is `xp`'s device (no copy through the host).
        Each rank evaluates only its own blocks.
    seeds : bool array or sequence of (i, j, k)
        Where T = 0: a global boolean mask, or global grid indices.
    comm : mpi4py communicator, optional
    xp : module, optional
        ``numpy`` (default) or ``cupy``: where the blocks live.
    local_iters : int
        Jacobi sweeps per block between halo exchanges.
    slowness : {"float64", "float32"}
        How the slowness 1/speed is kept. A sweep is bound by memory traffic; float32
        moves 21 bytes per node instead of 25 (the travel times stay float64), at a
        relative error of the slowness of about 6e-8.
    precision : {"float64", "float32"}
        How the travel times are kept (the update itself is computed in float64 and
        rounded once per node and sweep). float32 halves the memory of the travel times
        and the halo bytes; travel times carry a relative rounding error of about 6e-8
        per sweep, far below the scheme's first-order discretization error, and a run
        still ends when no node changes. Not faster on an H200 (the widening and
        rounding cost more than the bytes saved: docs/BENCHMARKS.md).
    skip_idle : bool
        Sweep only the tiles where something changed nearby in the previous sweep (or a
        halo exchange refilled a ghost face next to them), as the fast iterative method
        keeps an active list; the result is the full sweep's, bit for bit.
    timeout : float
        Seconds a halo exchange waits for the peers before
        :class:`~insitu.errors.PeerTimeoutError`.
    collectives : Collectives, optional
        The per-step reduction of the change and the agreement on a failed set-up
        (before the first halo exchange, so no rank waits for one that gave up).
        Default: over `comm`, see :class:`Collectives`.
    """

    def __init__(self, domain: Domain, speed, seeds, comm=None, *, xp=np, local_iters: int = 4,
                 timeout: float = 60.0, slowness: str = "float64", precision: str = "float64",
                 skip_idle: bool = True, collectives: Collectives | None = None) -> None:
        if slowness not in ("float64", "float32"):
            raise ValueError(f"eikonal: slowness must be 'float64' or 'float32', got {slowness!r}")
        if precision not in ("float64", "float32"):
            raise ValueError(f"eikonal: precision must be 'float64' or 'float32', got {precision!r}")
        if domain.ghost < 1:
            raise ValueError(f"eikonal: the domain needs a ghost width >= 1, got {domain.ghost}")
        if local_iters < 1:
            raise ValueError(f"eikonal: local_iters must be >= 1, got {local_iters}")
        self.domain, self.comm, self.xp, self.local_iters = domain, comm, xp, int(local_iters)
        self.slowness, self.precision = slowness, precision
        self.rank = 0 if comm is None else comm.Get_rank()
        self.spacing = domain.spacing
        self._coll = collectives if collectives is not None else _CommCollectives(comm)
        self.iteration = 0
        # gid -> block array: arrival times, the sweep's output, weights, frozen mask
        self._T: dict[int, Any] = {}
        self._out: dict[int, Any] = {}
        self._w: dict[int, Any] = {}
        self._frozen: dict[int, Any] = {}
        self._views: dict[int, Any] = {}
        self._ranges: dict[int, TileRanges] = {}  # gid -> tile ranges of the view
        self._clip = math.inf
        self._displayed = False  # display_copy was called: views and their ranges exist
        self._tiles: dict[int, Any] = {}  # gid -> ActiveTiles of the block's backend (skip_idle)
        error = None
        try:
            self._set_up(speed, seeds, skip_idle)
        except Exception as e:  # agreed below: raised on every rank
            error = e
        self._coll.agree(error, "eikonal: set-up")
        self._halo = HaloExchange(domain, comm, timeout=timeout)
        # Set up the exchange now, for both buffers of the ping-pong, so that ranks that
        # disagree fail here and the iteration loop makes no set-up transfers.
        self._halo.exchange(self._T)
        self._halo.exchange(self._out)

    def _set_up(self, speed, seeds, skip_idle: bool) -> None:
        """This rank's padded blocks: slowness, seeds, travel times (no communication)."""
        domain, xp, slowness, precision = self.domain, self.xp, self.slowness, self.precision
        seed_idx = _seed_indices(seeds, domain.dims)
        g = domain.ghost
        for gid in domain.blocks_of(self.rank):
            b = domain.block(gid)
            # A speed model on the GPU is evaluated there: a 1344^3 block set up on the
            # host would take minutes and tens of GB of host memory.
            sp, on_device = _setup_speed(xp, speed, domain, gid)
            ns = xp if on_device else np
            w = ns.full(b.padded_shape, np.inf, dtype=slowness)
            w[b.interior] = 1.0 / sp
            del sp
            T = ns.full(b.padded_shape, np.inf, dtype=precision)
            frozen = ns.zeros(b.padded_shape, np.bool_)
            for idx in seed_idx:
                if all(l <= i < h for i, l, h in zip(idx, b.lo, b.hi)):
                    loc = tuple(i - l + g for i, l in zip(idx, b.lo))
                    frozen[loc] = True
                    T[loc] = 0.0
            if xp is not np and not on_device:
                T, w, frozen = (arrays.to_device(a) for a in (T, w, frozen))
            self._T[gid], self._w[gid], self._frozen[gid] = T, w, frozen
            self._out[gid] = T.copy()
            if skip_idle:
                from . import _cpu, _gpu

                faces = [(a, d[a]) for d in domain.neighbors(gid) for a in range(3)
                         if d[a] != 0 and sum(x != 0 for x in d) == 1]
                tiles = _cpu.ActiveTiles if isinstance(T, np.ndarray) else _gpu.ActiveTiles
                self._tiles[gid] = tiles(b.padded_shape, faces)

    def step(self, profile: StageTimer | None = None) -> float:
        """One iteration: halo exchange, then `local_iters` sweeps per block.

        Returns the largest change of any node on any rank. On the GPU that takes one
        scalar read per rank (counted as such by :mod:`insitu.arrays`). `profile` times
        the stages ``halo`` and ``eikonal`` (the sweeps and the global change).
        """
        prof = profile or _NO_PROFILE
        with prof.stage("halo"):
            self.refresh_ghosts()
        with prof.stage("eikonal"):
            return self._sweep()

    def refresh_ghosts(self) -> None:
        """Fill the ghost layers of :attr:`blocks` with the neighbours' current values.

        A halo exchange (collective). Every :meth:`step` begins with one; call it after
        the last step to read padded blocks whose ghosts hold the newest iterate.
        """
        self._halo.exchange(self._T)
        for tiles in self._tiles.values():
            tiles.refilled()

    def _sweep(self) -> float:
        change = 0.0
        dev = []
        for gid in self._T:
            # Seeds and ghosts are the same in both buffers after the first sweep.
            T, out, c = update_block(self._T[gid], self._out[gid], self._w[gid], self._frozen[gid],
                                     self.spacing, iterations=self.local_iters, view=self._views.get(gid),
                                     clip=self._clip, tiles=self._tiles.get(gid), ranges=self._ranges.get(gid))
            self._T[gid], self._out[gid] = T, out
            dev.append(c)
        if dev and self.xp is not np:
            change = arrays.scalar_to_host(self.xp.max(self.xp.concatenate(dev)))
        elif dev:
            change = max(dev)
        change = self._coll.allreduce(change, "max")
        self.iteration += 1
        return change

    def run(self, tol: float = 0.0, max_iter: int | None = None, *,
            on_limit: str = "raise") -> Iterator[Iterate]:
        """Iterate until a step changes nothing by more than `tol`; yield after each step.

        Parameters
        ----------
        tol : float
        max_iter : int, optional
            Most steps since the solver was made (default: 10 times the sum of the dims).
        on_limit : {"raise", "stop"}
            After `max_iter` steps without convergence: raise, or end with the iterate
            reached (an approximation from above: travel times only decrease).

        Raises
        ------
        RuntimeError
            `max_iter` steps passed without convergence and `on_limit` is ``"raise"``.
        """
        if on_limit not in ("raise", "stop"):
            raise ValueError(f"eikonal: on_limit must be 'raise' or 'stop', got {on_limit!r}")
        limit = max_iter if max_iter is not None else 10 * sum(self.domain.dims)
        while True:
            change = self.step()
            yield Iterate(self.iteration, change, self._T)
            if change <= tol:
                return
            if self.iteration >= limit:
                if on_limit == "stop":
                    return
                raise RuntimeError(f"eikonal: no convergence after {self.iteration} iterations "
                                   f"(last change {change:.3e} > tol {tol:.3e})")

    def solve(self, tol: float = 0.0, max_iter: int | None = None, *, on_limit: str = "raise") -> int:
        """Run to convergence (as :meth:`run`); return the number of iterations."""
        for _ in self.run(tol, max_iter, on_limit=on_limit):
            pass
        return self.iteration

    @property
    def blocks(self) -> dict[int, Any]:
        """This rank's padded travel-time blocks."""
        return self._T

    def display_copy(self, clip: float = math.inf) -> dict[int, Any]:
        """float32 copies ``min(T, clip)`` of this rank's padded blocks, kept current by
        every later :meth:`step`.

        For handing the field to visualization: on the GPU the last sweep of each step
        writes them while it stores T, so they cost 4 bytes per node of that sweep instead
        of a separate pass reading T (12 bytes per node). A finite `clip` turns unreached
        (+inf) nodes into values that contouring accepts. Their per-tile (min, max), kept
        current the same way: :meth:`display_ranges`.

        Returns
        -------
        dict
            Block id -> float32 array of the padded block's shape (same backend); do not
            modify them.
        """
        clip = float(clip)
        if math.isnan(clip):
            raise ValueError("eikonal: display_copy clip must be a number, got nan")
        self._clip = clip
        self._displayed = True
        for gid, T in self._T.items():
            ns = arrays.get_array_module(T)
            if gid not in self._views:
                self._views[gid] = ns.empty(T.shape, ns.float32)
            self._views[gid][...] = ns.minimum(T, clip)  # once; later steps write it in the sweep
            old = self._ranges.get(gid)
            self._ranges[gid] = tile_ranges(self._views[gid], DISPLAY_SPAN, out=None if old is None else old.values)
        return dict(self._views)

    def display_ranges(self) -> dict[int, TileRanges]:
        """Tile ranges of the :meth:`display_copy` arrays, kept current by every later :meth:`step`.

        Tiles of :data:`DISPLAY_SPAN` samples. On the GPU the sweeps that write the display
        copy reduce them in the same pass (no read of their own; a skipped idle tile keeps
        its range as it keeps its values); on the CPU they are recomputed from the copies
        after each step.

        Returns
        -------
        dict
            Block id -> :class:`insitu.ranges.TileRanges` of the display copy (values on its
            backend, updated in place; do not modify them).

        Raises
        ------
        RuntimeError
            :meth:`display_copy` was not called yet.
        """
        if not self._displayed:
            raise RuntimeError("eikonal: display_ranges needs the display copies; call display_copy(clip) first")
        return dict(self._ranges)

    def gather(self, root: int = 0):
        """The global travel time at `root` (NumPy; ``None`` elsewhere). Copies to the host."""
        mine = {g: arrays.to_host(a[self.domain.block(g).interior]) for g, a in self._T.items()}
        parts = [mine] if self.comm is None else self.comm.gather(mine, root=root)
        if parts is None:
            return None
        out = np.empty(self.domain.dims)
        for p in parts:
            for g, a in p.items():
                b = self.domain.block(g)
                out[tuple(slice(l, h) for l, h in zip(b.lo, b.hi))] = a
        return out

    def close(self) -> None:
        """Release the halo exchange's resources."""
        self._halo.close()

    def __enter__(self) -> "EikonalSolver":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def solve(speed, seeds, spacing: Sequence[float] = (1.0, 1.0, 1.0), *, tol: float = 0.0,
          max_iter: int | None = None, local_iters: int = 8, skip_idle: bool = True):
    """Travel times from `seeds` through `speed` on one array.

    Parameters
    ----------
    speed : (X, Y, Z) array
        Speeds, finite and > 0. NumPy or CuPy: the result lives on the same device.
    seeds : bool array of the same shape, or sequence of (i, j, k)
        Nodes where T = 0.
    spacing : (3,) floats
    tol : float
        Stop when an iteration changes no node by more than this.
    skip_idle : bool
        As :class:`EikonalSolver`'s (the same answer either way).

    Returns
    -------
    T : (X, Y, Z) float64 array
    """
    sp = arrays.asarray(speed, name="speed")
    if sp.ndim != 3:
        raise ValueError(f"speed: expected a 3-D array, got shape {tuple(sp.shape)}")
    xp = arrays.get_array_module(sp)
    dom = Domain.create(sp.shape, blocks=(1, 1, 1), ghost=1, spacing=spacing)
    if arrays.is_device_array(seeds):
        seeds = arrays.to_host(seeds)
    if isinstance(seeds, np.ndarray) and seeds.dtype == np.bool_ and seeds.shape != sp.shape:
        raise ValueError(f"seeds: mask has shape {seeds.shape}, speed has shape {tuple(sp.shape)}")
    s = EikonalSolver(dom, sp if xp is np else _DeviceSpeed(sp), seeds, xp=xp, local_iters=local_iters,
                      skip_idle=skip_idle)
    s.solve(tol, max_iter)
    T = s.blocks[0][1:-1, 1:-1, 1:-1]
    s.close()
    return T.copy()


class _DeviceSpeed:
    """A device speed array given to :func:`solve`: validated and used on the device."""

    def __init__(self, a) -> None:
        self.a = a


def _block_speed(speed, domain: Domain, gid: int) -> np.ndarray:
    """Block `gid`'s speeds on the host, validated."""
    b = domain.block(gid)
    box = tuple(slice(l, h) for l, h in zip(b.lo, b.hi))
    if isinstance(speed, _DeviceSpeed):
        sp = arrays.to_host(speed.a[box])  # set-up only, counted
    elif callable(speed) and hasattr(speed, "shape"):  # an HDF5 reader
        if tuple(speed.shape) != domain.dims:
            raise ValueError(f"speed: HDF5 dataset has shape {tuple(speed.shape)}, the grid is {domain.dims}")
        sp = speed(b.lo, b.hi)
    elif callable(speed):
        x, y, z = domain.coordinates(gid, ghost=False)
        sp = np.broadcast_to(np.asarray(speed(x[:, None, None], y[None, :, None], z[None, None, :]),
                                        dtype=np.float64), b.shape)
    else:
        sp = arrays.asarray(speed, name="speed")
        if tuple(sp.shape) != domain.dims:
            raise ValueError(f"speed: array has shape {tuple(sp.shape)}, the grid is {domain.dims}")
        sp = arrays.to_host(sp[box])
    return _checked_speed(np, np.asarray(sp, dtype=np.float64), gid)


def _checked_speed(xp, sp, gid: int):
    """`sp` (float64, of `xp`), once it is known finite and > 0 (on the device: one scalar read)."""
    read = arrays.scalar_to_host  # host values uncounted, device ones counted as scalar reads
    ok = xp.isfinite(sp) & (sp > 0)
    if not read(ok.all()):
        bad = sp[~ok]
        what = "NaN" if read(xp.isnan(bad).any()) else "inf" if read(xp.isinf(bad).any()) else "values <= 0"
        raise ValueError(f"speed: must be finite and > 0 everywhere; found {what} in block {gid}")
    return sp


def _mapped_speed(xp, speeds: Mapping, domain: Domain, gid: int):
    """(block `gid`'s speeds from a mapping of this rank's blocks, whether they are on
    the device): a device array stays where it is when `xp` is not NumPy."""
    shape = domain.block(gid).shape
    if gid not in speeds:
        raise ValueError(f"speed: no array for block {gid}; the mapping has blocks {sorted(speeds)}")
    sp = arrays.asarray(speeds[gid], name=f"speed[{gid}]")
    if tuple(sp.shape) != shape:
        raise ValueError(f"speed: the array of block {gid} has shape {tuple(sp.shape)}, the block is {shape}")
    if xp is not np and arrays.is_device_array(sp):
        return _checked_speed(xp, sp.astype(np.float64, copy=False), gid), True
    return _checked_speed(np, np.asarray(arrays.to_host(sp), np.float64), gid), False


def _is_model(speed) -> bool:
    """A speed model ``(x, y, z) -> speed`` (not an array, an HDF5 reader or a device array)."""
    return callable(speed) and not hasattr(speed, "shape") and not isinstance(speed, _DeviceSpeed)


def _setup_speed(xp, speed, domain: Domain, gid: int):
    """(block `gid`'s speeds, whether they are on the device): a model is evaluated with
    `xp`'s arrays when `xp` is not NumPy, falling back to the host for a model that only
    takes NumPy arrays (TypeError)."""
    if isinstance(speed, Mapping):
        return _mapped_speed(xp, speed, domain, gid)
    if xp is not np and _is_model(speed):
        try:
            return _block_speed_on(xp, speed, domain, gid), True
        except TypeError:
            pass
    return _block_speed(speed, domain, gid), False


def _block_speed_on(xp, model, domain: Domain, gid: int):
    """Block `gid`'s speeds from `model` evaluated with `xp` (CuPy) arrays, validated
    there (one scalar read)."""
    b = domain.block(gid)
    up = np.asarray if xp is np else arrays.to_device  # set-up transfers are counted
    x, y, z = (up(c) for c in domain.coordinates(gid, ghost=False))
    sp = model(x[:, None, None], y[None, :, None], z[None, None, :])
    if arrays.backend_of(sp) != arrays.backend_of(x):  # a model that made a host array
        sp = up(np.asarray(sp))
    return _checked_speed(xp, xp.broadcast_to(sp.astype(np.float64, copy=False), b.shape), gid)


def _seed_indices(seeds, dims) -> list[tuple[int, int, int]]:
    if isinstance(seeds, np.ndarray) and seeds.dtype == np.bool_:
        if seeds.shape != tuple(dims):
            raise ValueError(f"seeds: mask has shape {seeds.shape}, the grid is {tuple(dims)}")
        idx = [(int(i), int(j), int(k)) for i, j, k in np.argwhere(seeds)]
    else:
        try:
            given = [tuple(int(v) for v in p) for p in seeds]
        except TypeError:
            raise TypeError("seeds: expected a boolean mask or a sequence of (i, j, k), "
                            f"got {type(seeds).__name__}") from None
        idx = []
        for p in given:
            if len(p) != 3:
                raise ValueError(f"seeds: index {p} does not have 3 entries")
            if not all(0 <= i < n for i, n in zip(p, dims)):
                raise ValueError(f"seeds: index {p} is outside the grid {tuple(dims)}")
            idx.append((p[0], p[1], p[2]))
    if not idx:
        raise ValueError("seeds: none given; at least one node must have T = 0")
    return idx


def seeds_from_fractions(points: Sequence[Sequence[float]], dims) -> list[tuple[int, int, int]]:
    """Grid nodes nearest to points given as fractions of the domain (0..1 per axis)."""
    out = []
    for p in points:
        if len(p) != 3 or not all(0.0 <= v <= 1.0 for v in p):
            raise ValueError(f"seed {tuple(p)}: expected three fractions in [0, 1]")
        i, j, k = (int(round(v * (n - 1))) for v, n in zip(p, dims))
        out.append((i, j, k))
    return out
