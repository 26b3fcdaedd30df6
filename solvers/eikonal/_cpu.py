"""Numba kernel: one Jacobi sweep of the first-order Godunov update over a padded block."""

from __future__ import annotations

import math

import numba
import numpy as np


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
                t = T[i, j, k]
                if frozen[i, j, k] or i == 0 or j == 0 or k == 0 or i == nx - 1 or j == ny - 1 or k == nz - 1:
                    out[i, j, k] = t
                    continue
                a = min(T[i - 1, j, k], T[i + 1, j, k])
                b = min(T[i, j - 1, k], T[i, j + 1, k])
                c = min(T[i, j, k - 1], T[i, j, k + 1])
                new = min(t, godunov(a, b, c, hx, hy, hz, w[i, j, k]))
                out[i, j, k] = new
                new = out[i, j, k]  # the stored value (float32 buffers round): a run ends when none moves
                if new < t:
                    d = t - new if t != math.inf else math.inf
                    if d > m:
                        m = d
        changes[i] = m
    return changes.max()
