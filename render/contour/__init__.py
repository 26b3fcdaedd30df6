"""Marching-cubes isosurfaces (CPU path: vectorized NumPy over the derived case table).

One vertex per crossed grid edge, shared by the triangles that use it (an indexed
mesh), placed by linear interpolation; normals from the field's gradient at the same
place. Work in progress towards issue 4: multiple levels, label surfaces, block merging
and the CuPy kernels are not here yet.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from insitu import arrays

from ._tables import CORNERS, EDGES, triangle_table

__all__ = ["marching_cubes"]

# Per local edge: the axis it runs along and the offset of its lower corner.
_EDGE_AXIS = np.array([int(np.nonzero(CORNERS[b] - CORNERS[a])[0][0]) for a, b in EDGES])
_EDGE_BASE = np.array([np.minimum(CORNERS[a], CORNERS[b]) for a, b in EDGES])


def marching_cubes(volume, level: float | None = None, *, spacing: Sequence[float] = (1.0, 1.0, 1.0),
                   origin: Sequence[float] = (0.0, 0.0, 0.0)):
    """Isosurface of `volume` at `level`.

    Parameters
    ----------
    volume : (X, Y, Z) array
        Real, finite samples on a uniform grid (NumPy).
    level : float, optional
        Iso value; default the middle of the data range. Outside the range: an empty mesh.
    spacing, origin : (3,) floats
        World geometry of the grid.

    Returns
    -------
    verts : (V, 3) float32
        World positions, one per crossed grid edge.
    faces : (F, 3) int32
        Vertex indices per triangle.
    normals : (V, 3) float32
        Unit normals from the field gradient, pointing towards lower values.
    """
    vol = arrays.asarray(volume, name="volume")
    if vol.ndim != 3:
        raise ValueError(f"volume: expected a 3-D array, got shape {tuple(vol.shape)}")
    if vol.dtype.kind not in "fiu":
        raise TypeError(f"volume: expected a real numeric dtype, got {vol.dtype}")
    if min(vol.shape) < 2:
        raise ValueError(f"volume: needs at least 2 samples per axis, got shape {tuple(vol.shape)}")
    vol = arrays.to_host(vol).astype(np.float64, copy=False)
    if not np.isfinite(vol).all():
        raise ValueError("volume: contains NaN or inf")
    lo, hi = float(vol.min()), float(vol.max())
    level = (lo + hi) / 2 if level is None else float(level)
    empty = (np.zeros((0, 3), np.float32), np.zeros((0, 3), np.int32), np.zeros((0, 3), np.float32))
    if not lo <= level <= hi:
        return empty
    inside = vol > level
    counts, tris = triangle_table()

    # One vertex per crossed edge, numbered axis by axis in C order.
    ids, pos, grad_at = [], [], []
    grad = np.gradient(vol)
    nv = 0
    for ax in range(3):
        a = [slice(None)] * 3
        b = [slice(None)] * 3
        a[ax], b[ax] = slice(None, -1), slice(1, None)
        crossed = inside[tuple(a)] != inside[tuple(b)]
        idx = np.full(crossed.shape, -1, np.int64)
        n = int(crossed.sum())
        idx[crossed] = np.arange(nv, nv + n)
        nv += n
        ids.append(idx)
        i, j, k = np.nonzero(crossed)
        step = np.zeros(3, np.int64)
        step[ax] = 1
        va = vol[i, j, k]
        vb = vol[i + step[0], j + step[1], k + step[2]]
        t = (level - va) / (vb - va)
        p = np.stack([i, j, k], axis=1).astype(np.float64)
        p[:, ax] += t
        pos.append(p)
        ga = np.stack([g[i, j, k] for g in grad], axis=1)
        gb = np.stack([g[i + step[0], j + step[1], k + step[2]] for g in grad], axis=1)
        grad_at.append(ga + (gb - ga) * t[:, None])
    verts = np.concatenate(pos) * np.asarray(spacing) + np.asarray(origin)

    # Cases of all cubes, then their triangles through the table.
    X, Y, Z = vol.shape
    case = np.zeros((X - 1, Y - 1, Z - 1), np.int64)
    for c, (di, dj, dk) in enumerate(CORNERS):
        case |= inside[di:X - 1 + di, dj:Y - 1 + dj, dk:Z - 1 + dk].astype(np.int64) << c
    ntri = counts[case]
    ci, cj, ck = np.nonzero(ntri)
    cc = case[ci, cj, ck]
    n = counts[cc]
    rep = np.repeat(np.arange(len(cc)), n)
    t = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
    local = tris[cc[rep], t]  # (F, 3) local edge numbers
    faces = np.empty(local.shape, np.int64)
    base = np.stack([ci[rep], cj[rep], ck[rep]], axis=1)
    for ax in range(3):
        m = _EDGE_AXIS[local] == ax
        where = base[:, None, :] + _EDGE_BASE[local]
        faces[m] = ids[ax][where[..., 0][m], where[..., 1][m], where[..., 2][m]]

    g = np.concatenate(grad_at) / np.asarray(spacing)
    norm = np.linalg.norm(g, axis=1, keepdims=True)
    normals = -g / np.where(norm > 0, norm, 1.0)
    return verts.astype(np.float32), faces.astype(np.int32), normals.astype(np.float32)
