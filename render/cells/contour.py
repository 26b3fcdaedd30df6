"""Isosurfaces and plane slices of meshes of cells, on NumPy (Numba) or CuPy (CUDA).

Tets, hexahedra, wedges and pyramids give triangles; triangles and quads give line
segments (a mesh of 2-D cells is contoured into lines). Each cell is cut by a case table
of its shape (see _contour_tables: marching tetrahedra for tets, tables derived from the
faces for the others), so the surface is a union of per-cell pieces that agree on shared
faces. One vertex per crossed mesh edge and level, shared by every face that uses it
(vertices numbered by their edge's point ids, faces by cell), identical on both backends.

Both backends run the same two passes over the cells (count per cell and scan, emit)
and weld the vertices by sorting the crossed edges' keys. On the GPU two small reads
reach the host, counted as scalar reads by :mod:`insitu.arrays`: after the count the
flags and each level's totals (1 + 2 x levels values), after the weld each level's
vertex count and the colour's NaN flag (levels + 1 values); nothing else leaves the
device. The GPU passes find a cell's ids from the sizes of the cells before it (its
type's size, as :func:`cell_mesh` checks), not from its offset.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np

from insitu import arrays

from . import _contour_cpu as _cpu
from ._contour_tables import DIM, SHAPES, TABLES
from ._mesh import CELL_POINTS, CellMesh

__all__ = ["Contour", "contour", "slice_plane", "three_slice"]

_CHUNK = 8192  # cells per task of the CPU passes
_INT32_MAX = 2**31 - 1
_NAMES = {1: "vertex", 3: "line", 5: "tri", 7: "polygonal", 9: "quad", 10: "tet", 12: "hex", 13: "wedge",
          14: "pyramid"}
_SUPPORTED = sum(1 << t for t in SHAPES)
#: Points per cell by type code (0: polygons, sized by their offsets).
_SIZES = np.array([CELL_POINTS.get(t) or 0 for t in range(16)], np.int64)
_DIM3 = sum(1 << t for t in SHAPES if DIM[t] == 3)
_DIM2 = sum(1 << t for t in SHAPES if DIM[t] == 2)


@dataclasses.dataclass(frozen=True)
class Contour:
    """An indexed surface (or, from 2-D cells, a set of line segments).

    Attributes
    ----------
    vertices : (k, 3) array, the mesh points' dtype
        One per crossed mesh edge and level.
    faces : (m, 3) or (m, 2) int32
        Triangles (3-D cells; right-hand normals towards higher values) or segments
        (2-D cells; higher values on their left seen from +z), as vertex indices.
    values : (k,) float array or None
        The `color` field interpolated at the vertices.
    cells : (m,) int64
        The cell each face came from.
    """

    vertices: Any
    faces: Any
    values: Any
    cells: Any


def _point_field(x, mesh: CellMesh, name: str):
    a = arrays.asarray(x, name=name)
    if arrays.is_device_array(a) != arrays.is_device_array(mesh.points):
        raise ValueError(f"{name}: on {arrays.backend_of(a)}, the mesh on {arrays.backend_of(mesh.points)}")
    if a.shape != (mesh.n_points,):
        raise ValueError(f"{name}: expected one value per point, shape ({mesh.n_points},), got {tuple(a.shape)}")
    if a.dtype.kind not in "fiu":
        raise ValueError(f"{name}: expected a real (float or integer) array, got {a.dtype}")
    if a.dtype not in (np.float32, np.float64):  # the kernels read float32 and float64 as they are
        a = a.astype(np.float32 if a.dtype == np.float16 else np.float64)
    return a


def _levels(levels) -> np.ndarray:
    try:
        lv = np.atleast_1d(np.asarray(levels, dtype=np.float64))
    except (TypeError, ValueError):
        raise ValueError(f"levels: expected a float or a sequence of floats, got {levels!r}") from None
    if lv.ndim != 1 or lv.size == 0 or not np.isfinite(lv).all():
        raise ValueError(f"levels: expected finite floats, got {levels!r}")
    return lv


def _mesh_arrays(mesh: CellMesh):
    if not isinstance(mesh, CellMesh):
        raise TypeError(f"mesh: expected a CellMesh, got {type(mesh).__name__}")
    pts = mesh.points
    if pts.dtype == np.float16:
        pts = pts.astype(np.float32)
    conn = mesh.connectivity
    if conn.dtype not in (np.int32, np.int64):  # uint32 ids: read as int64
        conn = conn.astype(np.int64)
    return pts, conn, mesh.offsets, mesh.types


def _check_flags(flags: int) -> int:
    """Raise for what pass 1 met; returns the dimension of the faces (2 or 3)."""
    if flags & _cpu.NAN_BIT:
        raise ValueError("values: NaN at a point of a cell to contour")
    seen = flags & ~_cpu.NAN_BIT
    bad = seen & ~_SUPPORTED
    if bad:
        names = [f"{_NAMES.get(t, t)} ({t})" for t in range(16) if bad >> t & 1]
        raise ValueError(f"mesh: cannot contour cells of type {', '.join(names)}; supported: tet, hex, wedge, "
                         "pyramid (triangles) and tri, quad (segments)")
    if seen & _DIM2 and seen & _DIM3:
        raise ValueError("mesh: mixes 2-D cells (tri, quad) and 3-D cells; contour them apart")
    return 2 if seen & _DIM2 else 3


def contour(mesh: CellMesh, values, levels: float | Sequence[float], *, color=None) -> Contour:
    """Isosurfaces (3-D cells) or isolines (2-D cells) of a point field.

    Parameters
    ----------
    mesh : CellMesh
        Tets, hexahedra, wedges and pyramids (mixed freely), or triangles and quads.
    values : (n_points,) array
        The field, on the mesh's backend; float32 and float64 are read as they are. A NaN
        at a point of a cell raises ValueError.
    levels : float or sequence of floats
        Iso values; faces come level after level.
    color : (n_points,) array, optional
        A field to interpolate at the vertices.

    Returns
    -------
    Contour
        On the mesh's backend. Empty arrays of the right dtypes where nothing is crossed.

    Raises
    ------
    ValueError
        Naming `values`, `color`, `levels` or `mesh` (polygons, lines and vertices are not
        contoured; a mesh mixing 2-D and 3-D cells).

    Notes
    -----
    A corner counts as above a level when its value is ``>= level`` (VTK's test), so a
    level met exactly at points gives zero-area faces there, not holes. Triangles face
    towards higher values in cells of VTK's positive orientation; an inverted cell's
    triangles face the other way. Vertices are numbered by their edge (lower point id,
    then the other, level after level) and faces by cell, on both backends alike.
    """
    pts, conn, offsets, types = _mesh_arrays(mesh)
    vals = _point_field(values, mesh, "values")
    col = None if color is None else _point_field(color, mesh, "color")
    lv = _levels(levels)
    if arrays.is_device_array(pts):
        from . import _contour_gpu

        return Contour(*_contour_gpu.contour(pts, conn, offsets, types, vals, lv, col, _check_flags))
    return Contour(*_contour_host(pts, conn, offsets, types, vals, lv, col))


def _contour_host(pts, conn, offsets, types, vals, lv, col):
    ncells, npts = int(types.shape[0]), int(pts.shape[0])
    nlev = lv.shape[0]
    nchunks = -(-ncells // _CHUNK)
    code = np.empty((nlev, ncells), np.uint8)
    tot_v = np.empty((nlev, nchunks), np.int64)
    tot_f = np.empty((nlev, nchunks), np.int64)
    flags = np.zeros(max(nchunks, 1), np.int64)
    t = TABLES
    _cpu.count(conn, offsets, types, vals, lv, t["base"], t["nvert"], t["nface"], _SIZES, _CHUNK, code, tot_v, tot_f,
               flags)
    dim = _check_flags(int(np.bitwise_or.reduce(flags)))
    vinc, finc = np.cumsum(tot_v.ravel()), np.cumsum(tot_f.ravel())
    nslots, nf = (int(vinc[-1]), int(finc[-1])) if nchunks else (0, 0)
    if max(nslots, nf) > _INT32_MAX:
        raise ValueError(f"mesh: the contour has {nslots} edge crossings and {nf} faces, more than int32 indices hold")
    keys = np.empty(nslots, np.int64)
    faces = np.empty((nf, dim), np.int32)
    cells = np.empty(nf, np.int64)
    _cpu.emit(conn, offsets, types, code, t["base"], t["nvert"], t["nface"], _SIZES, t["slots"], t["faces"], _CHUNK,
              (vinc - tot_v.ravel()).reshape(nlev, nchunks), (finc - tot_f.ravel()).reshape(nlev, nchunks),
              npts, keys, faces, cells)
    vends = [int(x) for x in vinc[nchunks - 1::nchunks]] if nchunks else [0] * nlev
    remap, ukeys, ends = _cpu.weld(keys, vends, npts)
    _cpu.remap_faces(faces, remap)
    verts = np.empty((ukeys.shape[0], 3), pts.dtype)
    cout = np.empty(ukeys.shape[0], col.dtype) if col is not None else None
    start, bad = 0, 0
    for n, end in enumerate(ends):
        bad += _cpu.vertices(ukeys[start:end], lv[n], pts, vals, npts, col if col is not None else vals,
                             col is not None, verts[start:end], cout[start:end] if cout is not None else verts[:0, 0])
        start = end
    if bad:
        raise ValueError("color: NaN at an end of a crossed edge")
    return verts, faces, cout, cells


def _plane_distance(pts, origin, normal):
    """Signed distance (float64) of the points to a plane, on their backend."""
    xp = arrays.get_array_module(pts)
    n = np.asarray(normal, np.float64)
    if n.shape != (3,) or not np.isfinite(n).all() or not np.linalg.norm(n) > 0:
        raise ValueError(f"normal: expected 3 finite numbers, not all 0, got {normal!r}")
    n = n / np.linalg.norm(n)
    if arrays.is_device_array(origin):
        o = arrays.asarray(origin, name="origin").astype(xp.float64)
        shift = o[0] * n[0] + o[1] * n[1] + o[2] * n[2]
    else:
        o = np.asarray(origin, np.float64)
        if o.shape != (3,) or not np.isfinite(o).all():
            raise ValueError(f"origin: expected 3 finite numbers, got {origin!r}")
        shift = float(o @ n)
    p = pts.astype(xp.float64, copy=False)
    return p[:, 0] * n[0] + p[:, 1] * n[1] + p[:, 2] * n[2] - shift


def slice_plane(mesh: CellMesh, origin, normal, *, color=None) -> Contour:
    """The cut of a mesh by a plane: the contour at 0 of the signed distance to it.

    Parameters
    ----------
    mesh : CellMesh
    origin : (3,) floats
        A point of the plane (a (3,) array on the mesh's backend is used there).
    normal : (3,) floats
        The plane's normal; faces' normals point the same way.
    color : (n_points,) array, optional

    Returns
    -------
    Contour
        As :func:`contour` (3-D cells give triangles, 2-D cells segments).
    """
    if not isinstance(mesh, CellMesh):
        raise TypeError(f"mesh: expected a CellMesh, got {type(mesh).__name__}")
    return contour(mesh, _plane_distance(mesh.points, origin, normal), 0.0, color=color)


def three_slice(mesh: CellMesh, center=None, *, color=None) -> Contour:
    """Cuts by the planes x, y and z through `center`, in one :class:`Contour`.

    Parameters
    ----------
    mesh : CellMesh
    center : (3,) floats, optional
        Default: the centre of the points' bounding box (found on the mesh's backend).
    color : (n_points,) array, optional

    Returns
    -------
    Contour
        The x cut's faces, then the y and z cuts' (vertices are not shared between cuts).
    """
    if not isinstance(mesh, CellMesh):
        raise TypeError(f"mesh: expected a CellMesh, got {type(mesh).__name__}")
    pts = mesh.points
    xp = arrays.get_array_module(pts)
    if center is None:
        if mesh.n_points == 0:
            raise ValueError("mesh: has no points to take the centre of")
        c = (pts.min(axis=0).astype(xp.float64) + pts.max(axis=0).astype(xp.float64)) / 2
    else:
        c = center if arrays.is_device_array(center) else np.asarray(center, np.float64)
        if tuple(c.shape) != (3,):
            raise ValueError(f"center: expected 3 numbers, got {center!r}")
    parts = [slice_plane(mesh, c, np.eye(3)[a], color=color) for a in range(3)]
    return merge(parts)


def merge(parts: Sequence[Contour]) -> Contour:
    """One :class:`Contour` from several (faces renumbered, nothing welded)."""
    xp = arrays.get_array_module(parts[0].vertices)
    base = np.cumsum([0] + [int(p.vertices.shape[0]) for p in parts[:-1]])
    return Contour(xp.concatenate([p.vertices for p in parts]),
                   xp.concatenate([p.faces + np.int32(b) for p, b in zip(parts, base)]),
                   None if parts[0].values is None else xp.concatenate([p.values for p in parts]),
                   xp.concatenate([p.cells for p in parts]))
