"""Marching-cubes isosurfaces (CPU path: vectorized NumPy over the derived case table).

One vertex per crossed grid edge, shared by the triangles that use it (an indexed
mesh), placed by linear interpolation; normals from the field's gradient at the same
place, pointing towards lower values; winding as scikit-image's default. Several iso
levels in one call, a second field sampled at the vertices, boundary surfaces of
integer labels, and blocks of a decomposed domain whose meshes merge into the
single-block mesh (vertices welded by their global grid edge).

The same code runs on NumPy and on CuPy arrays (then the mesh stays on the device; the
tables go up once). Part of issue 4; still to come: fused CUDA kernels (the CuPy path
is made of generic array operations), and Numba for the CPU path.
"""

from __future__ import annotations

import functools
from typing import Mapping, Sequence

import numpy as np

from insitu import arrays

from ._tables import CORNERS, EDGES, triangle_table

__all__ = ["label_surfaces", "marching_cubes", "marching_cubes_blocks"]

# Per local edge: the axis it runs along and the offset of its lower corner.
_EDGE_AXIS = np.array([int(np.nonzero(CORNERS[b] - CORNERS[a])[0][0]) for a, b in EDGES])
_EDGE_BASE = np.array([np.minimum(CORNERS[a], CORNERS[b]) for a, b in EDGES])


def _check_volume(volume, name: str = "volume"):
    """Validated float64 volume on its own device (NumPy or CuPy)."""
    vol = arrays.asarray(volume, name=name)
    if vol.ndim != 3:
        raise ValueError(f"{name}: expected a 3-D array, got shape {tuple(vol.shape)}")
    if vol.dtype.kind not in "fiu":
        raise TypeError(f"{name}: expected a real numeric dtype, got {vol.dtype}")
    if min(vol.shape) < 2:
        raise ValueError(f"{name}: needs at least 2 samples per axis, got shape {tuple(vol.shape)}")
    xp = arrays.get_array_module(vol)
    vol = vol.astype(xp.float64, copy=False)
    if not arrays.scalar_to_host(xp.isfinite(vol).all()):
        raise ValueError(f"{name}: contains NaN or inf")
    return vol


@functools.cache
def _device_tables(device: int | None):
    """The case and edge tables on `device` (None: host), uploaded once."""
    counts, tris = triangle_table()
    host = (counts, tris, _EDGE_AXIS, _EDGE_BASE, np.eye(3, dtype=np.int64))
    return host if device is None else tuple(arrays.to_device(t) for t in host)


def _extract(vol, level, cubes, offset, dims, values=None):
    """Mesh of the cubes whose lower corner lies in ``cubes`` (per-axis (lo, hi) into vol).

    Returns verts (grid index space, plus `offset`), faces, normals, sampled values and
    one global key per vertex: its grid edge in a grid of `dims` samples. The same code
    runs on NumPy and CuPy arrays: classify (cases), compact (nonzero), generate.
    """
    xp = arrays.get_array_module(vol)
    counts, tris, edge_axis, edge_base, eye = _device_tables(arrays.device_id(vol))
    inside = vol > level
    (a0, a1), (b0, b1), (c0, c1) = cubes
    case = xp.zeros((a1 - a0, b1 - b0, c1 - c0), xp.int64)
    for c, (di, dj, dk) in enumerate(CORNERS):
        case |= inside[a0 + di:a1 + di, b0 + dj:b1 + dj, c0 + dk:c1 + dk].astype(xp.int64) << c
    ci, cj, ck = xp.nonzero(counts[case])
    cc = case[ci, cj, ck]
    # Triangle slots of the active cubes: (cube, t) for t < count.
    cube, t = xp.nonzero(xp.arange(5)[None, :] < counts[cc][:, None])
    local = tris[cc[cube], t]  # (F, 3) cube edge numbers
    corner = xp.stack([ci[cube] + a0, cj[cube] + b0, ck[cube] + c0], axis=1)[:, None, :] + edge_base[local]
    # Vertices: the distinct grid edges the triangles use, keyed globally.
    axis = edge_axis[local].ravel()
    gi = corner.reshape(-1, 3)
    key = ((axis * dims[0] + gi[:, 0] + offset[0]) * dims[1] + gi[:, 1] + offset[1]) * dims[2] + gi[:, 2] + offset[2]
    keys, inverse = xp.unique(key, return_inverse=True)
    inverse = inverse.ravel()
    faces = inverse.reshape(-1, 3)
    one = xp.zeros(len(keys), xp.int64)  # one use of each edge (all uses are the same edge)
    one[inverse] = xp.arange(len(inverse))
    ax = axis[one]
    p = corner.reshape(-1, 3)[one]
    q = p + eye[ax]
    va, vb = vol[p[:, 0], p[:, 1], p[:, 2]], vol[q[:, 0], q[:, 1], q[:, 2]]
    tt = (level - va) / (vb - va)
    verts = p.astype(xp.float64) + eye[ax] * tt[:, None]
    for a in range(3):
        verts[:, a] += offset[a]
    grad = xp.gradient(vol)
    ga = xp.stack([g[p[:, 0], p[:, 1], p[:, 2]] for g in grad], axis=1)
    gb = xp.stack([g[q[:, 0], q[:, 1], q[:, 2]] for g in grad], axis=1)
    g = ga + (gb - ga) * tt[:, None]
    sampled = None
    if values is not None:
        sa, sb = values[p[:, 0], p[:, 1], p[:, 2]], values[q[:, 0], q[:, 1], q[:, 2]]
        sampled = sa + (sb - sa) * tt
    return verts, faces, g, sampled, keys


def _finish(parts, spacing, origin, want_values, xp=np):
    """Concatenate per-level/per-block parts, weld by key, scale to world coordinates."""
    empty = (xp.zeros((0, 3), xp.float32), xp.zeros((0, 3), xp.int32), xp.zeros((0, 3), xp.float32))
    if want_values:
        empty += (xp.zeros(0, xp.float32),)
    parts = [x for x in parts if len(x[1])]
    if not parts:
        return empty
    keys = xp.concatenate([x[4] for x in parts])
    _, first, inverse = xp.unique(keys, return_index=True, return_inverse=True)
    inverse = inverse.ravel()
    offs = np.cumsum([0] + [len(x[4]) for x in parts[:-1]])
    faces = xp.concatenate([inverse[x[1] + int(o)] for x, o in zip(parts, offs)])
    verts = xp.concatenate([x[0] for x in parts])[first]
    g = xp.concatenate([x[2] for x in parts])[first]
    for a in range(3):  # per column with Python scalars: no small host->device copies
        verts[:, a] = verts[:, a] * spacing[a] + origin[a]
        g[:, a] = g[:, a] / spacing[a]
    norm = xp.sqrt((g * g).sum(axis=1, keepdims=True))
    normals = -g / xp.where(norm > 0, norm, 1.0)
    out = (verts.astype(xp.float32), faces.astype(xp.int32), normals.astype(xp.float32))
    if want_values:
        out += (xp.concatenate([x[3] for x in parts])[first].astype(xp.float32),)
    return out


def _levels(level, vol) -> list[float]:
    if level is None:
        return [(arrays.scalar_to_host(vol.min()) + arrays.scalar_to_host(vol.max())) / 2]
    levels = [float(v) for v in np.atleast_1d(level)]
    if not all(np.isfinite(levels)):
        raise ValueError(f"level: must be finite, got {level}")
    return levels


def marching_cubes(volume, level: float | Sequence[float] | None = None, *,
                   spacing: Sequence[float] = (1.0, 1.0, 1.0), origin: Sequence[float] = (0.0, 0.0, 0.0),
                   values=None, out: Sequence | None = None):
    """Isosurface(s) of `volume`.

    Parameters
    ----------
    volume : (X, Y, Z) array
        Real, finite samples on a uniform grid.
    level : float or sequence of floats, optional
        Iso value(s); default the middle of the data range. Levels outside the data
        range contribute nothing (all outside: an empty mesh of the right dtypes).
    spacing, origin : (3,) floats
        World geometry of the grid.
    values : (X, Y, Z) array, optional
        A second field, interpolated at the vertices (to colour by).
    out : (verts, faces, normals[, vals]) arrays, optional
        Buffers to write the mesh into (a renderer's vertex and index buffers, say):
        float32 (>= V, 3), int32 (>= F, 3), float32 (>= V, 3)[, float32 (>= V,)]. The
        results are then views of their first V / F rows.

    Returns
    -------
    verts : (V, 3) float32
        World positions, one per crossed grid edge and level.
    faces : (F, 3) int32
        Vertex indices per triangle.
    normals : (V, 3) float32
        Unit normals from the field gradient, pointing towards lower values.
    vals : (V,) float32
        Only when `values` is given: that field at the vertices.
    """
    vol = _check_volume(volume)
    vals = None
    if values is not None:
        vals = _check_volume(values, "values")
        if vals.shape != vol.shape:
            raise ValueError(f"values: shape {vals.shape} differs from volume {vol.shape}")
    lo, hi = arrays.scalar_to_host(vol.min()), arrays.scalar_to_host(vol.max())
    cubes = [(0, n - 1) for n in vol.shape]
    dims = (*vol.shape,)
    parts = []
    for n, lev in enumerate(_levels(level, vol)):
        if lo <= lev <= hi:
            v, f, g, s, k = _extract(vol, lev, cubes, (0, 0, 0), dims, vals)
            parts.append((v, f, g, s, k + n * 3 * int(np.prod(dims))))  # keys distinct per level
    mesh = _finish(parts, tuple(spacing), tuple(origin), values is not None, arrays.get_array_module(vol))
    return mesh if out is None else _write_into(mesh, out)


def _write_into(mesh, out):
    names = ("verts", "faces", "normals", "vals")
    if len(out) != len(mesh):
        raise ValueError(f"out: expected {len(mesh)} buffers ({', '.join(names[:len(mesh)])}), got {len(out)}")
    res = []
    for name, m, buf in zip(names, mesh, out):
        b = arrays.asarray(buf, name=f"out {name}")
        if b.dtype != m.dtype or b.shape[1:] != m.shape[1:] or b.shape[0] < m.shape[0]:
            raise ValueError(f"out {name}: need {m.dtype} of shape ({m.shape[0]}+{', ' if m.ndim > 1 else ''}"
                             f"{', '.join(map(str, m.shape[1:]))}), got {b.dtype} {tuple(b.shape)}")
        if arrays.is_device_array(b) == arrays.is_device_array(m):
            b[:len(m)] = m
        elif arrays.is_device_array(b):
            arrays.to_device(m, out=b[:len(m)])
        else:
            arrays.to_host(m, out=b[:len(m)])
        res.append(b[:len(m)])
    return tuple(res)


def marching_cubes_blocks(domain, blocks: Mapping[int, object], level: float | Sequence[float], *,
                          values: Mapping[int, object] | None = None):
    """Isosurface of a decomposed field, one mesh merged from its blocks.

    Each block contributes the cubes whose lower corner is one of its own samples, so
    no cube is done twice; shared vertices are welded by their global grid edge, so the
    merged mesh equals the single-block mesh. Needs ghost width >= 1 (positions and
    faces) and >= 2 for normals equal to the single-block ones (gradients at the block
    edge). Non-periodic domains only.

    Parameters
    ----------
    domain : insitu.domain.Domain
    blocks : mapping gid -> padded array
        With ghost layers filled (after a halo exchange). Any subset of the blocks (one
        rank's): the mesh is then that part of the surface.
    level : float or sequence of floats
    values : mapping gid -> padded array, optional

    Returns
    -------
    As :func:`marching_cubes`, in world coordinates of the domain.
    """
    if any(domain.periodic):
        raise ValueError("marching_cubes_blocks: periodic domains are not supported")
    if domain.ghost < 1:
        raise ValueError(f"marching_cubes_blocks: needs ghost width >= 1, the domain has {domain.ghost}")
    dims, g = domain.dims, domain.ghost
    parts = []
    levels = [float(v) for v in np.atleast_1d(level)]
    for gid, arr in blocks.items():
        b = domain.block(gid)
        vol = _check_volume(arr, f"block {gid}")
        if vol.shape != b.padded_shape:
            raise ValueError(f"block {gid}: shape {vol.shape}, expected {b.padded_shape}")
        # Keep only samples inside the domain, so gradients at the domain edge are one-sided
        # exactly as in a single-block run.
        keep = tuple(slice(g if lo == 0 else 0, n + 2 * g - (g if hi == d else 0))
                     for lo, hi, d, n in zip(b.lo, b.hi, dims, b.shape))
        vol = vol[keep]
        start = [b.lo[a] - (0 if b.lo[a] == 0 else g) for a in range(3)]  # global index of vol[0,0,0]
        cubes = [(b.lo[a] - start[a], min(b.hi[a], dims[a] - 1) - start[a]) for a in range(3)]
        vals = None
        if values is not None:
            vals = _check_volume(values[gid], f"values of block {gid}")[keep]
        for n, lev in enumerate(levels):
            v, f, gr, s, k = _extract(vol, lev, cubes, start, dims, vals)
            parts.append((v, f, gr, s, k + n * 3 * int(np.prod(dims))))
    xp = arrays.get_array_module(next(iter(blocks.values()))) if blocks else np
    return _finish(parts, domain.spacing, domain.origin, values is not None, xp)


def label_surfaces(labels, ids: Sequence[int] | None = None, *, spacing: Sequence[float] = (1.0, 1.0, 1.0),
                   origin: Sequence[float] = (0.0, 0.0, 0.0)):
    """Boundary surfaces of integer labels (a segmentation), one closed mesh per label.

    Parameters
    ----------
    labels : (X, Y, Z) integer array
    ids : sequence of int, optional
        Labels to extract; default every label except 0 (background).

    Returns
    -------
    verts, faces, normals
        As :func:`marching_cubes`, all labels in one mesh, and
    face_label : (F,) int
        The label each triangle bounds.
    """
    lab = arrays.to_host(arrays.asarray(labels, name="labels"))
    if lab.ndim != 3 or lab.dtype.kind not in "iu":
        raise TypeError(f"labels: expected a 3-D integer array, got {lab.dtype} of shape {lab.shape}")
    ids = sorted(set(np.unique(lab).tolist()) - {0}) if ids is None else [int(i) for i in ids]
    verts, faces, normals, flab, nv = [], [], [], [], 0
    for i in ids:
        # Pad so labels touching the grid's edge still give closed surfaces.
        ind = np.pad((lab == i).astype(np.float64), 1)
        v, f, n = marching_cubes(ind, 0.5, spacing=spacing, origin=np.asarray(origin) - np.asarray(spacing))
        verts.append(v)
        faces.append(f + nv)
        normals.append(n)
        flab.append(np.full(len(f), i))
        nv += len(v)
    if not ids:
        return (np.zeros((0, 3), np.float32), np.zeros((0, 3), np.int32), np.zeros((0, 3), np.float32),
                np.zeros(0, np.int64))
    return (np.concatenate(verts), np.concatenate(faces).astype(np.int32), np.concatenate(normals),
            np.concatenate(flab))
