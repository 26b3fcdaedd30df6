"""Domain decomposition of a global uniform grid into a 3-D grid of blocks.

Axes are array axes (axis 0, 1, 2 of a C-ordered array of shape ``dims``); the
Conduit Blueprint's i, j, k are axes 2, 1, 0. Blocks partition the grid's samples:
block ``b`` owns the global index range ``lo[b] <= idx < hi[b]`` and carries a ghost
layer of width ``ghost`` on every side, so a block array has shape
``hi - lo + 2 * ghost``. Block ids (gids) run in C order over the block grid.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

import numpy as np

from .arrays import get_array_module

__all__ = ["BlockInfo", "Domain", "DIRECTIONS", "dims_create"]

_T = TypeVar("_T")


def _three(values: Iterable[_T]) -> tuple[_T, _T, _T]:
    """`values`, which are one per axis, as a 3-tuple."""
    a, b, c = values
    return a, b, c


#: The 26 neighbour directions, in a fixed order shared by every rank.
DIRECTIONS: tuple[tuple[int, int, int], ...] = tuple(
    _three(d) for d in itertools.product((-1, 0, 1), repeat=3) if d != (0, 0, 0)
)


def _balanced(n: int, k: int, most: int | None = None) -> list[int] | None:
    """Non-increasing k factors of n, each <= most, with the smallest max - min."""
    most = n if most is None else most
    if k == 1:
        return [n] if n <= most else None
    best = None
    # The largest factor is at least the k-th root of n.
    for f in range(min(n, most), 0, -1):
        if f ** k < n:
            break
        if n % f:
            continue
        rest = _balanced(n // f, k - 1, f)
        if rest is not None and (best is None or f - rest[-1] < best[0] - best[-1]):
            best = [f, *rest]
    return best


def dims_create(nnodes: int, ndims: int = 3, dims: Sequence[int] | None = None) -> tuple[int, ...]:
    """Balanced factorization of `nnodes` into `ndims` factors, like ``MPI_Dims_create``.

    Parameters
    ----------
    nnodes : int
        Number of blocks (>= 1).
    ndims : int
        Number of factors.
    dims : sequence of int, optional
        Fixed factors; zeros are free and get filled in (MPI semantics).

    Returns
    -------
    tuple of int
        Factors whose product is `nnodes`; free factors in non-increasing order.
    """
    if nnodes < 1:
        raise ValueError(f"dims_create: nnodes must be >= 1, got {nnodes}")
    dims = list(dims) if dims is not None else [0] * ndims
    if len(dims) != ndims:
        raise ValueError(f"dims_create: dims has {len(dims)} entries, ndims is {ndims}")
    fixed = int(np.prod([d for d in dims if d > 0])) if any(d > 0 for d in dims) else 1
    if any(d < 0 for d in dims) or nnodes % fixed:
        raise ValueError(f"dims_create: fixed dims {dims} do not divide {nnodes}")
    free = [i for i, d in enumerate(dims) if d == 0]
    rest = nnodes // fixed
    if not free:
        if rest != 1:
            raise ValueError(f"dims_create: dims {dims} multiply to {fixed}, not {nnodes}")
        return tuple(dims)
    facs = _balanced(rest, len(free))
    assert facs is not None  # any n has k factors <= n (ones pad)
    for i, f in zip(free, facs):
        dims[i] = f
    return tuple(dims)


@dataclasses.dataclass(frozen=True)
class BlockInfo:
    """Where a block lies: global interior index range ``[lo, hi)`` and its owner."""

    gid: int
    coords: tuple[int, int, int]
    lo: tuple[int, int, int]
    hi: tuple[int, int, int]
    ghost: int
    owner: int

    @property
    def shape(self) -> tuple[int, int, int]:
        """Interior shape (without ghosts)."""
        return _three(h - l for l, h in zip(self.lo, self.hi))

    @property
    def padded_shape(self) -> tuple[int, int, int]:
        """Array shape including the ghost layer."""
        return _three(n + 2 * self.ghost for n in self.shape)

    @property
    def interior(self) -> tuple[slice, slice, slice]:
        """Slices of the interior within a padded block array."""
        g = self.ghost
        return _three(slice(g, g + n) for n in self.shape)


@dataclasses.dataclass(frozen=True)
class Domain:
    """A global uniform grid split into blocks.

    Build with :meth:`Domain.create`; the fields here are the resolved description.

    Attributes
    ----------
    dims : (3,) tuple of int
        Global number of samples per array axis.
    origin, spacing : (3,) tuple of float
        World position of sample (0, 0, 0) and distance between samples.
    offsets : tuple of three tuples
        Split points per axis: block ``c`` along axis ``a`` covers
        ``offsets[a][c] <= i < offsets[a][c + 1]``.
    ghost : int
        Ghost width (>= 0).
    periodic : (3,) tuple of bool
        Per-axis periodicity.
    owners : tuple of int
        Owning rank of each block, by gid.
    """

    dims: tuple[int, int, int]
    origin: tuple[float, float, float]
    spacing: tuple[float, float, float]
    offsets: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]
    ghost: int
    periodic: tuple[bool, bool, bool]
    owners: tuple[int, ...]

    # ------------------------------------------------------------------ creation
    @classmethod
    def create(
        cls,
        dims: Sequence[int],
        *,
        nblocks: int | None = None,
        blocks: Sequence[int] | None = None,
        offsets: Sequence[Sequence[int]] | None = None,
        ghost: int = 1,
        periodic: bool | Sequence[bool] = False,
        origin: Sequence[float] = (0.0, 0.0, 0.0),
        spacing: Sequence[float] = (1.0, 1.0, 1.0),
        nranks: int = 1,
        owners: Sequence[int] | None = None,
    ) -> "Domain":
        """Decompose a grid of `dims` samples.

        Parameters
        ----------
        dims : (3,) ints
            Global samples per axis.
        nblocks : int, optional
            Total number of blocks, factored like ``MPI_Dims_create`` with the largest
            factor on the longest axis. Default: `nranks`.
        blocks : (3,) ints, optional
            Blocks per axis ``(px, py, pz)``; zeros are filled in from `nblocks`.
        offsets : three sequences of ints, optional
            Explicit (possibly uneven) split points per axis, each starting at 0 and
            ending at ``dims[a]``. Overrides `blocks` and `nblocks`.
        ghost : int
            Ghost width.
        periodic : bool or (3,) bools
            Periodic axes.
        origin, spacing : (3,) floats
            Geometry of the grid.
        nranks : int
            Number of ranks the blocks are distributed over (contiguous runs of gids).
        owners : sequence of int, optional
            Owning rank of each gid; overrides the default distribution.
        """
        dims = _triple(dims, "dims", int)
        if any(n < 1 for n in dims):
            raise ValueError(f"dims must be positive, got {dims}")
        if not isinstance(ghost, (int, np.integer)) or ghost < 0:
            raise ValueError(f"ghost must be an integer >= 0, got {ghost!r}")
        per = (bool(periodic),) * 3 if isinstance(periodic, (bool, np.bool_)) else _triple(periodic, "periodic", bool)
        if offsets is not None:
            if len(offsets) != 3:
                raise ValueError(f"offsets needs one sequence per axis (3), got {len(offsets)}")
            offs = _three(tuple(int(v) for v in o) for o in offsets)
            for a, o in enumerate(offs):
                if len(o) < 2 or o[0] != 0 or o[-1] != dims[a] or any(b <= c for c, b in zip(o, o[1:])):
                    raise ValueError(
                        f"offsets[{a}] must increase strictly from 0 to dims[{a}]={dims[a]}, got {list(o)}"
                    )
        else:
            if nblocks is None:
                nblocks = int(np.prod([b for b in blocks if b])) if blocks is not None and all(blocks) else nranks
            if blocks is None:
                # Balanced factors, largest on the longest axis (MPI_Dims_create ignores extents).
                facs = dims_create(nblocks, 3)
                order = sorted(range(3), key=lambda a: -dims[a])
                bl = [0, 0, 0]
                for a, f in zip(order, facs):
                    bl[a] = f
            else:
                bl = list(dims_create(nblocks, 3, _triple(blocks, "blocks", int)))
            for a in range(3):
                if bl[a] > dims[a]:
                    raise ValueError(f"cannot split axis {a} of {dims[a]} samples into {bl[a]} blocks")
            offs = _three(tuple(i * dims[a] // bl[a] for i in range(bl[a] + 1)) for a in range(3))
        nb = int(np.prod([len(o) - 1 for o in offs]))
        if owners is None:
            if nranks < 1:
                raise ValueError(f"nranks must be >= 1, got {nranks}")
            owners = tuple(g * nranks // nb for g in range(nb))
        else:
            owners = tuple(int(r) for r in owners)
            if len(owners) != nb:
                raise ValueError(f"owners has {len(owners)} entries for {nb} blocks")
        return cls(
            dims=dims,
            origin=_triple(origin, "origin", float),
            spacing=_triple(spacing, "spacing", float),
            offsets=offs,
            ghost=int(ghost),
            periodic=per,
            owners=owners,
        )

    # ------------------------------------------------------------------ queries
    @property
    def blocks(self) -> tuple[int, int, int]:
        """Number of blocks per axis ``(px, py, pz)``."""
        return _three(len(o) - 1 for o in self.offsets)

    @property
    def nblocks(self) -> int:
        return len(self.owners)

    def coords(self, gid: int) -> tuple[int, int, int]:
        """Block-grid coordinates of `gid`."""
        self._check_gid(gid)
        return _three(int(c) for c in np.unravel_index(gid, self.blocks))

    def gid(self, coords: Sequence[int]) -> int:
        """Block id at block-grid `coords`."""
        return int(np.ravel_multi_index(tuple(coords), self.blocks))

    @functools.cached_property
    def _infos(self) -> tuple[BlockInfo, ...]:
        out = []
        for g in range(self.nblocks):
            c = _three(int(v) for v in np.unravel_index(g, self.blocks))
            lo = _three(self.offsets[a][c[a]] for a in range(3))
            hi = _three(self.offsets[a][c[a] + 1] for a in range(3))
            out.append(BlockInfo(g, c, lo, hi, self.ghost, self.owners[g]))
        return tuple(out)

    def block(self, gid: int) -> BlockInfo:
        """Extent and owner of block `gid`."""
        self._check_gid(gid)
        return self._infos[gid]

    def __iter__(self) -> Iterator[BlockInfo]:
        return iter(self._infos)

    def blocks_of(self, rank: int) -> list[int]:
        """Gids owned by `rank`, ascending."""
        return [g for g, r in enumerate(self.owners) if r == rank]

    def neighbor(self, gid: int, direction: Sequence[int]) -> int | None:
        """Gid of the neighbour of `gid` in `direction` (each of -1, 0, 1), or None."""
        c = list(self.coords(gid))
        for a in range(3):
            c[a] += direction[a]
            if not 0 <= c[a] < self.blocks[a]:
                if not self.periodic[a]:
                    return None
                c[a] %= self.blocks[a]
        return self.gid(c)

    def neighbors(self, gid: int) -> dict[tuple[int, int, int], int]:
        """The (up to 26) neighbours of `gid`: ``{direction: gid}``.

        Outside a non-periodic axis there is none. With periodic axes one block can
        be the neighbour in several directions (or its own neighbour).
        """
        out = {}
        for d in DIRECTIONS:
            n = self.neighbor(gid, d)
            if n is not None:
                out[d] = n
        return out

    def locate(self, index: Sequence[int]) -> int:
        """Gid of the block owning global sample `index`."""
        c = []
        for a in range(3):
            i = int(index[a])
            if not 0 <= i < self.dims[a]:
                raise IndexError(f"index {tuple(index)} is outside the domain {self.dims}")
            c.append(int(np.searchsorted(self.offsets[a], i, side="right")) - 1)
        return self.gid(c)

    def global_to_local(self, gid: int, index: Sequence[int]) -> tuple[int, int, int]:
        """Index within block `gid`'s padded array of global sample `index`."""
        b = self.block(gid)
        return _three(int(index[a]) - b.lo[a] + self.ghost for a in range(3))

    def local_to_global(self, gid: int, index: Sequence[int]) -> tuple[int, int, int]:
        """Global sample of padded-array `index` in block `gid` (wrapped on periodic axes)."""
        b = self.block(gid)
        out = []
        for a in range(3):
            i = int(index[a]) + b.lo[a] - self.ghost
            if self.periodic[a]:
                i %= self.dims[a]
            out.append(i)
        return _three(out)

    def coordinates(self, gid: int, *, ghost: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """World coordinates of block `gid`'s samples along each axis (1-D arrays)."""
        b = self.block(gid)
        g = self.ghost if ghost else 0
        return _three(
            self.origin[a] + self.spacing[a] * np.arange(b.lo[a] - g, b.hi[a] + g, dtype=np.float64)
            for a in range(3)
        )

    # ------------------------------------------------------------------ data
    def empty_block(self, gid: int, dtype=np.float32, xp=np):
        """Uninitialised padded array for block `gid` (NumPy, or CuPy with ``xp=cupy``)."""
        return xp.empty(self.block(gid).padded_shape, dtype=dtype)

    def extract(self, global_array, gid: int, *, ghost: bool = True):
        """Block `gid` of a global array, copied, with its ghost layer filled from it.

        Ghost samples outside a non-periodic domain are zero. Works on NumPy and CuPy
        arrays alike (slice copies only). Used to scatter a global field, and as the
        reference in tests.
        """
        if tuple(global_array.shape) != self.dims:
            raise ValueError(f"global array has shape {tuple(global_array.shape)}, domain dims are {self.dims}")
        xp = get_array_module(global_array)
        b = self.block(gid)
        if not ghost:
            return global_array[tuple(slice(l, h) for l, h in zip(b.lo, b.hi))].copy()
        g = self.ghost
        out = xp.zeros(b.padded_shape, dtype=global_array.dtype)
        per_axis = []
        for a in range(3):
            n, first, end = self.dims[a], b.lo[a] - g, b.hi[a] + g
            runs, i = [], first  # (local start, global start, length) of [lo-g, hi+g)
            while i < end:
                if self.periodic[a]:
                    j = i % n
                    length = min(end - i, n - j)
                elif i < 0:
                    i = min(0, end)
                    continue
                elif i >= n:
                    break
                else:
                    j, length = i, min(end, n) - i
                runs.append((i - first, j, length))
                i += length
            per_axis.append(runs)
        for r in itertools.product(*per_axis):
            dst = tuple(slice(l, l + n) for l, _, n in r)
            src = tuple(slice(s, s + n) for _, s, n in r)
            out[dst] = global_array[src]
        return out

    def assemble(self, blocks: dict):
        """Global array from the interiors of blocks ``{gid: padded array}``."""
        first = next(iter(blocks.values()))
        out = get_array_module(first).empty(self.dims, dtype=first.dtype)
        for g, arr in blocks.items():
            b = self.block(g)
            out[tuple(slice(l, h) for l, h in zip(b.lo, b.hi))] = arr[b.interior]
        return out

    def _check_gid(self, gid: int) -> None:
        if not 0 <= gid < self.nblocks:
            raise IndexError(f"block id {gid} out of range [0, {self.nblocks})")

    def signature(self) -> tuple:
        """Hashable description all ranks of a job must agree on."""
        return (self.dims, self.offsets, self.ghost, self.periodic, self.owners)


def _triple(v: Iterable[Any], name: str, typ: Callable[[Any], _T]) -> tuple[_T, _T, _T]:
    t = tuple(v)
    if len(t) != 3:
        raise ValueError(f"{name} must have 3 entries (one per axis), got {len(t)}: {t}")
    return _three(typ(x) for x in t)
