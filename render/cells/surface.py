"""The outer surface of a :class:`CellMesh`: what a pseudocolor plot of the mesh itself draws.

The faces of 3-D cells that no other cell shares (the mesh's boundary, as VTK's
vtkDataSetSurfaceFilter / vtkGeometryFilter find it), as triangles oriented outward, plus
the 2-D cells themselves (triangles, quads and polygons, as triangles in their own
winding). Vertices and lines are not part of a surface and are left out.

Faces are matched by sorting a key of their sorted point ids (one ``argsort`` on either
backend); a face met once is on the boundary. Each boundary face keeps the winding of
VTK's face order of its cell, flipped where it points into the cell (inverted cells),
so the surface is outward whatever the input's orientation.

Ghost cells (``hidden``) are dropped before the boundary is found: each block of a
decomposed mesh then shows its outer boundary, the faces it shares with the next block
included. Blocks drawn together meet without cracks (a face between two blocks is drawn
by both, which is harmless for opaque rendering).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from insitu import arrays

from ._mesh import CELL_DIM, HEXAHEDRON, POLYGON, PYRAMID, QUAD, TETRA, WEDGE, CellMesh
from .fields import cell_points

__all__ = ["Surface", "outer_surface"]

# VTK's faces of each 3-D cell (vtkCell::GetFace), outward for cells of VTK's orientation
TRI_FACES: dict[int, list[list[int]]] = {
    TETRA: [[0, 1, 3], [1, 2, 3], [2, 0, 3], [0, 2, 1]],
    WEDGE: [[0, 2, 1], [3, 4, 5]],
    PYRAMID: [[0, 1, 4], [1, 2, 4], [2, 3, 4], [3, 0, 4]],
}
QUAD_FACES: dict[int, list[list[int]]] = {
    HEXAHEDRON: [[0, 4, 7, 3], [1, 2, 6, 5], [0, 1, 5, 4], [3, 7, 6, 2], [0, 3, 2, 1], [4, 5, 6, 7]],
    WEDGE: [[0, 1, 4, 3], [1, 2, 5, 4], [2, 0, 3, 5]],
    PYRAMID: [[0, 3, 2, 1]],
}

_PACK_BITS = 21  # three point ids packed in one int64 key while they are below 2**21


@dataclasses.dataclass(frozen=True)
class Surface:
    """Triangles of a mesh's surface, on the mesh's backend.

    Attributes
    ----------
    faces : (m, 3) int32 (int64 past 2**31 points)
        Point ids into the mesh's points; counter-clockwise seen from outside.
    cells : (m,) int64
        The cell each triangle comes from (to colour by an element field).
    """

    faces: Any
    cells: Any

    @property
    def n_faces(self) -> int:
        return int(self.faces.shape[0])


def _groups(mesh: CellMesh, keep) -> list[tuple[int, Any]]:
    """``[(type, cell ids)]`` of the kept cells, a type at a time."""
    xp = mesh.xp
    counts = arrays.scalars_to_host(xp.bincount(mesh.types.astype(xp.int32), minlength=16)[:16])
    out = []
    for t, c in enumerate(counts):
        if not c or CELL_DIM.get(t, 0) < 2:
            continue
        sel = mesh.types == t
        if keep is not None:
            sel &= keep
        out.append((t, xp.nonzero(sel)[0]))
    return out


def _split_quads(xp, q):
    """Two triangles per quad (m, 4) -> (2m, 3), cut along the diagonal through the quad's
    smallest point id (so the cut does not depend on where the quad's cycle starts)."""
    first = xp.argmin(q, axis=1) % 2 == 0  # smallest id at 0 or 2: diagonal 0-2, else 1-3
    a = xp.where(first[:, None], q[:, [0, 1, 2]], q[:, [1, 2, 3]])
    b = xp.where(first[:, None], q[:, [0, 2, 3]], q[:, [1, 3, 0]])
    return xp.stack([a, b], axis=1).reshape(-1, 3)


def _polygon_fans(mesh: CellMesh, ids):
    """Fan triangles ``(p0, pi, pi+1)`` of the polygons `ids` and their cells."""
    xp = mesh.xp
    start, end = mesh.offsets[ids], mesh.offsets[ids + 1]
    ntri = end - start - 2
    first = xp.concatenate([xp.zeros(1, xp.int64), xp.cumsum(ntri)])
    total = int(first[-1])
    tri = xp.arange(total, dtype=xp.int64)
    poly = xp.searchsorted(first[1:], tri, side="right")  # which polygon each triangle is of
    j = start[poly] + 1 + tri - first[poly]
    c = mesh.connectivity
    return xp.stack([c[start[poly]], c[j], c[j + 1]], axis=1), ids[poly]


def _face_keys(xp, faces, n_points: int):
    """Sort order of the faces by their sorted point ids (triangles: padded with -1).

    Returns the order and the sorted-id rows it sorts.
    """
    s = xp.sort(faces, axis=1)
    if s.shape[1] == 4:  # (a, b, c) the smallest three, d the largest (-1 for triangles)
        key3, d = s[:, 1:], s[:, 0]
        is_tri = d < 0
        key3 = xp.where(is_tri[:, None], key3, s[:, :3])
        d = xp.where(is_tri, -1, s[:, 3])
        s = xp.concatenate([key3, d[:, None]], axis=1)
        order = xp.argsort(d, kind="stable") if bool((d >= 0).any()) and bool(is_tri.any()) else None
    else:
        key3, order = s, None
    if n_points < 2**_PACK_BITS:
        packed = (key3[:, 0] << (2 * _PACK_BITS)) | (key3[:, 1] << _PACK_BITS) | key3[:, 2]
        if order is None:
            order = xp.argsort(packed, kind="stable")
        else:
            order = order[xp.argsort(packed[order], kind="stable")]
    else:
        order = xp.lexsort(xp.stack([s[:, j] for j in range(s.shape[1] - 1, -1, -1)]))
    return order, s


def _boundary(xp, faces, n_points: int):
    """Mask of the faces (rows of point ids) met exactly once."""
    n = faces.shape[0]
    if n == 0:
        return xp.zeros(0, bool)
    order, s = _face_keys(xp, faces, n_points)
    ss = s[order]
    same = (ss[1:] == ss[:-1]).all(axis=1)
    shared = xp.zeros(n, bool)
    shared[1:] |= same
    shared[:-1] |= same
    once = xp.empty(n, bool)
    once[order] = ~shared
    return once


def outer_surface(mesh: CellMesh, *, hidden=None) -> Surface:
    """The outer surface of a mesh as outward triangles (2-D cells: all of them).

    Parameters
    ----------
    mesh : CellMesh
    hidden : (n_cells,) bool array, optional
        Cells to leave out before the boundary is found (ghost cells of a decomposed mesh).

    Returns
    -------
    Surface
        ``faces`` and the ``cells`` they come from, on the mesh's backend; boundary faces
        in the order of their cells (a type at a time), quads cut into two triangles.
    """
    xp = mesh.xp
    keep = None
    if hidden is not None:
        h = arrays.asarray(hidden, name="hidden")
        if arrays.get_array_module(h) is not xp:
            raise ValueError(f"hidden: on {arrays.backend_of(h)}, the mesh is on {arrays.backend_of(mesh.points)}")
        if h.ndim != 1 or h.shape[0] != mesh.n_cells or h.dtype != bool:
            raise ValueError(f"hidden: expected a ({mesh.n_cells},) bool array, got {h.dtype} of shape "
                             f"{tuple(h.shape)}")
        keep = ~h
    faces3, cells3, faces2, cells2 = [], [], [], []
    for t, ids in _groups(mesh, keep):
        if ids.shape[0] == 0:
            continue
        if t == POLYGON:
            f, c = _polygon_fans(mesh, ids)
            faces2.append(f)
            cells2.append(c)
            continue
        conn = cell_points(mesh, t, ids)
        if CELL_DIM[t] == 2:
            faces2.append(_split_quads(xp, conn) if t == QUAD else conn)
            cells2.append(xp.repeat(ids, 2) if t == QUAD else ids)
            continue
        for table, k in ((TRI_FACES, 3), (QUAD_FACES, 4)):
            if t in table:
                local = xp.asarray(np.array(table[t], np.int64)) if xp is np else _local(xp, t, k)
                f = conn[:, local]  # (nc, nf, k)
                pad = xp.full(f.shape[:2] + (4 - k,), -1, f.dtype)
                faces3.append(xp.concatenate([f, pad], axis=2).reshape(-1, 4))
                cells3.append(xp.repeat(ids, f.shape[1]))
    out_f, out_c = [], []
    if faces3:
        f4 = xp.concatenate(faces3)
        c4 = xp.concatenate(cells3)
        once = _boundary(xp, f4, mesh.n_points)
        f4, c4 = f4[once], c4[once]
        f4 = _outward(mesh, f4, c4)
        tri = f4[:, 3] < 0
        out_f += [f4[tri, :3], _split_quads(xp, f4[~tri])]
        out_c += [c4[tri], xp.repeat(c4[~tri], 2)]
    out_f += faces2
    out_c += cells2
    idt = xp.int32 if mesh.n_points < 2**31 else xp.int64
    if not out_f:
        return Surface(xp.zeros((0, 3), idt), xp.zeros(0, xp.int64))
    return Surface(xp.concatenate(out_f).astype(idt), xp.concatenate(out_c).astype(xp.int64))


_local_tables: dict[tuple, Any] = {}


def _local(xp, t: int, k: int):
    """The face table of type `t` on the current device (uploaded once, counted)."""
    key = (t, k, xp.cuda.Device().id)
    if key not in _local_tables:
        _local_tables[key] = arrays.to_device(np.array((TRI_FACES if k == 3 else QUAD_FACES)[t], np.int64))
    return _local_tables[key]


def _outward(mesh: CellMesh, f4, cells):
    """Boundary faces (rows of 3 ids and -1, or 4 ids) reversed where they face into their cell."""
    xp = mesh.xp
    if f4.shape[0] == 0:
        return f4
    p = mesh.points
    tri = f4[:, 3] < 0
    d = xp.where(tri, f4[:, 0], f4[:, 3])  # a triangle's 4th corner: its first again
    a, b, c, e = p[f4[:, 0]], p[f4[:, 1]], p[f4[:, 2]], p[d]
    normal = xp.cross(c - a, e - b)  # for a triangle (a, b, c, a): (c - a) x (a - b) = (b - a) x (c - a)
    centre = _cell_centres(mesh, cells)
    inward = ((normal * ((a + b + c + e) / 4 - centre)).sum(axis=1)) < 0
    flipped = xp.where(tri[:, None], f4[:, [0, 2, 1, 3]], f4[:, [0, 3, 2, 1]])
    return xp.where(inward[:, None], flipped, f4)


def _cell_centres(mesh: CellMesh, cells):
    """Mean of the points of each of `cells` (CSR sums over each cell's points)."""
    xp = mesh.xp
    start = mesh.offsets[cells]
    size = mesh.offsets[cells + 1] - start
    acc = xp.zeros((cells.shape[0], 3), mesh.points.dtype)
    for j in range(8):  # the 3-D linear cells have at most 8 points
        use = j < size
        idx = mesh.connectivity[xp.where(use, start + j, start)]
        acc += xp.where(use[:, None], mesh.points[idx], 0)
    return acc / size[:, None]
