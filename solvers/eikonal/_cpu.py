"""Numba kernel: one Jacobi sweep of the first-order Godunov update over a padded block."""

from __future__ import annotations

import math

import numba
import numpy as np

from insitu.log import watch_jit

watch_jit(__name__)  # a first call that compiles takes seconds: logged, so a slow first execute says why


@numba.njit(inline="always")
def godunov(a, b, c, ha, hb, hc, w):
    """Smallest T with sum over upwind axes of ((T - a_d) / h_d)^2 = w^2 (w = 1/speed).

    a, b, c are the smaller neighbour value along each axis (inf if none).
    """
    # Sort the three (value, spacing) pairs by value.
    if a > b:
        a, b, ha, hb = b, a, hb, ha
    if b > c:
        b, c, hb, hc = c, b, hc, hb
    if a > b:
        a, b, ha, hb = b, a, hb, ha
    if a == math.inf:
        return math.inf
    t = a + ha * w
    if t <= b:
        return t
    # Two axes: (t - a)^2/ha^2 + (t - b)^2/hb^2 = w^2
    pa, pb = 1.0 / (ha * ha), 1.0 / (hb * hb)
    A = pa + pb
    B = a * pa + b * pb
    C = a * a * pa + b * b * pb - w * w
    t = (B + math.sqrt(max(B * B - A * C, 0.0))) / A
    if t <= c:
        return t
    pc = 1.0 / (hc * hc)
    A += pc
    B += c * pc
    C += c * c * pc
    return (B + math.sqrt(max(B * B - A * C, 0.0))) / A


@numba.njit(inline="always")
def _node(T, out, w, frozen, i, j, k, hx, hy, hz):
    """Update node (i, j, k) into `out`; return how much its stored value dropped."""
    nx, ny, nz = T.shape
    t = T[i, j, k]
    if frozen[i, j, k] or i == 0 or j == 0 or k == 0 or i == nx - 1 or j == ny - 1 or k == nz - 1:
        out[i, j, k] = t
        return 0.0
    a = min(T[i - 1, j, k], T[i + 1, j, k])
    b = min(T[i, j - 1, k], T[i, j + 1, k])
    c = min(T[i, j, k - 1], T[i, j, k + 1])
    out[i, j, k] = min(t, godunov(a, b, c, hx, hy, hz, w[i, j, k]))
    new = out[i, j, k]  # the stored value (float32 buffers round): a run ends when none moves
    if new < t:
        return t - new if t != math.inf else math.inf
    return 0.0


@numba.njit(parallel=True, cache=True)
def sweep(T, out, w, frozen, hx, hy, hz):
    """One Jacobi sweep: ``out = min(T, godunov(neighbours of T))`` on the interior.

    T, out, w (1/speed), frozen: padded arrays of one shape; the one-cell border is read
    only (ghosts, or +inf outside the domain) and copied to `out` unchanged, so the two
    buffers can be swapped. Returns the largest change.
    """
    nx, ny, nz = T.shape
    changes = np.zeros(nx, np.float64)
    for i in numba.prange(nx):
        m = 0.0
        for j in range(ny):
            for k in range(nz):
                m = max(m, _node(T, out, w, frozen, i, j, k, hx, hy, hz))
        changes[i] = m
    return changes.max()


@numba.njit(parallel=True, cache=True)
def sweep_tiles(T, out, w, frozen, hx, hy, hz, active, changed, si, sj, sk):
    """:func:`sweep` over the tiles (spans si x sj x sk) marked in `active` only; every
    tile's ``changed`` says whether a value in it dropped. Returns the largest change."""
    nx, ny, nz = T.shape
    gi, gj, gk = active.shape
    changes = np.zeros(gi * gj * gk, np.float64)
    for t in numba.prange(gi * gj * gk):
        a, b, c = t // (gj * gk), (t // gk) % gj, t % gk
        if active[a, b, c] == 0:
            changed[a, b, c] = 0
            continue
        m = 0.0
        for i in range(a * si, min(a * si + si, nx)):
            for j in range(b * sj, min(b * sj + sj, ny)):
                for k in range(c * sk, min(c * sk + sk, nz)):
                    m = max(m, _node(T, out, w, frozen, i, j, k, hx, hy, hz))
        changed[a, b, c] = 1 if m > 0 else 0
        changes[t] = m
    return changes.max() if changes.size else 0.0


@numba.njit(cache=True)
def dilate(changed, active):
    """``active`` = ``changed`` grown by one tile in every direction (26 neighbours)."""
    gi, gj, gk = changed.shape
    for i in range(gi):
        for j in range(gj):
            for k in range(gk):
                v = 0
                for a in range(max(i - 1, 0), min(i + 2, gi)):
                    for b in range(max(j - 1, 0), min(j + 2, gj)):
                        for c in range(max(k - 1, 0), min(k + 2, gk)):
                            v |= changed[a, b, c]
                active[i, j, k] = v


#: Nodes per tile along (i, j, k) on the CPU: a few thousand per task of the thread pool.
SPAN = (8, 8, 64)


class ActiveTiles:
    """The CPU's :class:`solvers.eikonal._gpu.ActiveTiles`: which tiles of one padded
    block a sweep must visit (the same rule, tiles of :data:`SPAN` nodes)."""

    def __init__(self, shape, faces=(), *, span=SPAN) -> None:
        from ._tiles import face_tiles

        self.span = tuple(int(s) for s in span)
        self.shape = tuple(-(-n // s) for n, s in zip(shape, self.span))
        self.active = np.ones(self.shape, np.uint8)
        self.changed = np.zeros(self.shape, np.uint8)
        self.border = np.zeros(self.shape, np.uint8)
        for cut in face_tiles(shape, faces, self.span):
            self.border[cut] = 1

    def refilled(self) -> None:
        """Ghost faces were refilled by a halo exchange: wake the tiles next to them."""
        np.bitwise_or(self.active, self.border, out=self.active)

    def fraction(self) -> float:
        """Share of tiles the next sweep visits."""
        return float(self.active.mean())

    def sweep(self, T, out, w, frozen, hx, hy, hz) -> float:
        """One sweep over the active tiles; then the next sweep's tiles. Returns the largest change."""
        change = sweep_tiles(T, out, w, frozen, hx, hy, hz, self.active, self.changed, *self.span)
        dilate(self.changed, self.active)
        return change
