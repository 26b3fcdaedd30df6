"""The outer surface of a :class:`CellMesh`: what a pseudocolor plot of the mesh itself draws.

The faces of 3-D cells that no other cell shares (the mesh's boundary, as VTK's
vtkDataSetSurfaceFilter / vtkGeometryFilter find it), as triangles oriented outward, plus
the 2-D cells themselves (triangles, quads and polygons, as triangles in their own
winding). Vertices and lines are not part of a surface and are left out.

Faces are matched by sorting a key of their sorted point ids (CuPy; NumPy with
``_vectorized=True``) or, on the CPU, in lists by their smallest point id (a Numba loop,
as vtkGeometryFilter does; the same triangles in the same order). Equal faces cancel in
pairs, in cell order: a face of one cell is on the boundary, and so is the last of a
face shared by three cells (non-manifold: as vtkGeometryFilter; vtkDataSetSurfaceFilter
drops it). Each boundary face keeps the winding of
VTK's face order of its cell, flipped where it points into the cell (inverted cells),
so the surface is outward whatever the input's orientation.

Ghost cells (``hidden``) are dropped before the boundary is found: each block of a
decomposed mesh then shows its outer boundary, the faces it shares with the next block
included. Blocks drawn together meet without cracks (a face between two blocks is drawn
by both, which is harmless for opaque rendering).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numba
import numpy as np

from insitu import arrays
from insitu.log import watch_jit

from ._mesh import CELL_DIM, HEXAHEDRON, POLYGON, PYRAMID, QUAD, TETRA, WEDGE, CellMesh, check_hidden
from .fields import _f64, _i64, cell_points

__all__ = ["Surface", "face_normals", "grid_boundary", "outer_surface", "vertex_normals"]

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

watch_jit(__name__)

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
    first = (xp.argmin(q, axis=1) % 2 == 0)[:, None]  # smallest id at 0 or 2: diagonal 0-2, else 1-3
    q0, q1, q2, q3 = q[:, 0:1], q[:, 1:2], q[:, 2:3], q[:, 3:4]  # (columns, not index lists: no uploads)
    a = xp.where(first, xp.concatenate([q0, q1, q2], axis=1), xp.concatenate([q1, q2, q3], axis=1))
    b = xp.where(first, xp.concatenate([q0, q2, q3], axis=1), xp.concatenate([q1, q3, q0], axis=1))
    return xp.stack([a, b], axis=1).reshape(-1, 3)


def _polygon_fans(mesh: CellMesh, ids):
    """Fan triangles ``(p0, pi, pi+1)`` of the polygons `ids` and their cells."""
    xp = mesh.xp
    start, end = mesh.offsets[ids], mesh.offsets[ids + 1]
    ntri = end - start - 2
    first = xp.concatenate([xp.zeros(1, xp.int64), xp.cumsum(ntri)])
    total = int(arrays.scalar_to_host(first[-1]))
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
        # quads: by their largest id first, so that the stable sort by the other three
        # below leaves faces equal in all four next to each other
        order = _argsort(xp, d) if arrays.scalar_to_host((d >= 0).any()) else None
    else:
        key3, order = s, None
    if n_points < 2**_PACK_BITS:
        packed = (key3[:, 0] << (2 * _PACK_BITS)) | (key3[:, 1] << _PACK_BITS) | key3[:, 2]
        order = _argsort(xp, packed) if order is None else order[_argsort(xp, packed[order])]
    else:
        order = xp.lexsort(xp.stack([s[:, j] for j in range(s.shape[1] - 1, -1, -1)]))
    return order, s


def _argsort(xp, a):
    """A stable argsort (CuPy's always is, and takes no `kind`)."""
    return np.argsort(a, kind="stable") if xp is np else a.argsort()


def _boundary(xp, faces, n_points: int):
    """Mask of the faces (rows of point ids) left when equal faces cancel in pairs."""
    n = faces.shape[0]
    if n == 0:
        return xp.zeros(0, bool)
    order, s = _face_keys(xp, faces, n_points)
    ss = s[order]
    start = xp.ones(n, bool)  # first of a run of equal faces (runs keep the faces' order)
    start[1:] = (ss[1:] != ss[:-1]).any(axis=1)
    run = xp.cumsum(start) - 1
    first = xp.nonzero(start)[0]
    size = xp.bincount(run)[run]
    # faces cancel in pairs in their order (as the CPU loop and vtkGeometryFilter pair them):
    # a run of odd length leaves its last face
    drawn = (size % 2 == 1) & (xp.arange(n) - first[run] == size - 1)
    once = xp.empty(n, bool)
    once[order] = drawn
    return once


def outer_surface(mesh: CellMesh, *, hidden=None, _vectorized: bool = False) -> Surface:
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
    keep = check_hidden(mesh, hidden)
    faces3, cells3, faces2, cells2 = [], [], [], []
    groups = _groups(mesh, keep)
    cpu = xp is np and not _vectorized
    for t, ids in groups:
        if ids.shape[0] == 0 or cpu and CELL_DIM[t] == 3:
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
    present = [t for t, ids in groups if CELL_DIM[t] == 3 and ids.shape[0]]
    if cpu and present:
        f, c = _boundary_cpu(_f64(mesh.points), _i64(mesh.connectivity), mesh.offsets, mesh.types,
                             np.ones(0, bool) if keep is None else keep, np.array(present, np.int64), *_cpu_tables())
        out_f.append(f)
        out_c.append(c)
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
    p = mesh.points.astype(xp.float64, copy=False)  # float64 on both paths: the same signs as the CPU loop
    tri = f4[:, 3] < 0
    d = xp.where(tri, f4[:, 0], f4[:, 3])  # a triangle's 4th corner: its first again
    a, b, c, e = p[f4[:, 0]], p[f4[:, 1]], p[f4[:, 2]], p[d]
    normal = xp.cross(c - a, e - b)  # for a triangle (a, b, c, a): (c - a) x (a - b) = (b - a) x (c - a)
    centre = _cell_centres(mesh, cells)
    inward = ((normal * ((a + b + c + e) / 4 - centre)).sum(axis=1)) < 0
    c0, c1, c2, c3 = f4[:, 0:1], f4[:, 1:2], f4[:, 2:3], f4[:, 3:4]
    flipped = xp.where(tri[:, None], xp.concatenate([c0, c2, c1, c3], axis=1),
                       xp.concatenate([c0, c3, c2, c1], axis=1))
    return xp.where(inward[:, None], flipped, f4)


def _cell_centres(mesh: CellMesh, cells):
    """Mean of the points of each of `cells` (CSR sums over each cell's points)."""
    xp = mesh.xp
    start = mesh.offsets[cells]
    size = mesh.offsets[cells + 1] - start
    acc = xp.zeros((cells.shape[0], 3), xp.float64)
    for j in range(8):  # the 3-D linear cells have at most 8 points
        use = j < size
        idx = mesh.connectivity[xp.where(use, start + j, start)]
        acc += xp.where(use[:, None], mesh.points[idx].astype(xp.float64), 0.0)
    return acc / size[:, None]


# --------------------------------------------------------------------------- CPU (Numba)
# The same surface, faces matched in lists by their smallest point id (as VTK does)
# instead of by a sort, and emitted in the vectorized path's order: all boundary
# triangles (type after type, cell after cell), then all boundary quads cut in two.


@functools.cache
def _cpu_tables():
    """Face tables by type code: triangles (16, 4, 3), quads (16, 6, 4), and their counts."""
    tri, quad = np.zeros((16, 4, 3), np.int64), np.zeros((16, 6, 4), np.int64)
    ntri, nquad = np.zeros(16, np.int64), np.zeros(16, np.int64)
    for t, fs in TRI_FACES.items():
        tri[t, :len(fs)] = fs
        ntri[t] = len(fs)
    for t, fs in QUAD_FACES.items():
        quad[t, :len(fs)] = fs
        nquad[t] = len(fs)
    return tri, quad, ntri, nquad


@numba.njit(cache=True, inline="always")
def _face_ids(conn, offsets, tri, quad, ntri, types, code, key):
    """The point ids of face `code` (cell * 16 + face; faces >= 8 are quads) into key[:4],
    sorted (a triangle's 4th: -1, first); returns the number of ids."""
    c, f = code // 16, code % 16
    st = offsets[c]
    t = types[c]
    if f < 8:
        for j in range(3):
            key[j] = conn[st + tri[t, f, j]]
        key[3] = -1
        m = 3
    else:
        for j in range(4):
            key[j] = conn[st + quad[t, f - 8, j]]
        m = 4
    # a sorting network of 4 (min/max, no branches to mispredict)
    a, b, c, d = key[0], key[1], key[2], key[3]
    a, b = min(a, b), max(a, b)
    c, d = min(c, d), max(c, d)
    a, c = min(a, c), max(a, c)
    b, d = min(b, d), max(b, d)
    b, c = min(b, c), max(b, c)
    key[0], key[1], key[2], key[3] = a, b, c, d
    return m


@numba.njit(cache=True)
def _boundary_cpu(points, conn, offsets, types, keep, present, tri, quad, ntri, nquad):
    ncells = types.shape[0]
    npts = points.shape[0]
    use_keep = keep.shape[0] > 0
    key = np.empty(4, np.int64)
    # faces in lists by their smallest id; a face meeting its twin there takes it out (as
    # vtkGeometryFilter does): cells come in mesh order, so a face's twin comes soon and
    # the live faces stay few (cache-resident), their slots reused through a free list
    nf = 0
    for c in range(ncells):
        if not use_keep or keep[c]:
            nf += ntri[types[c]] + nquad[types[c]]
    head = np.full(npts, -1, np.int64)
    pnext = np.empty(nf, np.int64)  # (pages only touched as far as the live set reaches)
    pcode = np.empty(nf, np.int64)
    prest = np.empty((nf, 3), np.int64)
    free, used = -1, 0
    shared = np.zeros(ncells * 16, np.bool_)
    for c in range(ncells):
        t = types[c]
        if use_keep and not keep[c]:
            continue
        for g in range(ntri[t] + nquad[t]):
            code = c * 16 + (g if g < ntri[t] else 8 + g - ntri[t])
            _face_ids(conn, offsets, tri, quad, ntri, types, code, key)
            if g < ntri[t]:
                a, r0, r1, r2 = key[1], -1, key[2], key[3]
            else:
                a, r0, r1, r2 = key[0], key[1], key[2], key[3]
            prev, e = -1, head[a]
            while e >= 0:
                if prest[e, 0] == r0 and prest[e, 1] == r1 and prest[e, 2] == r2:
                    break
                prev, e = e, pnext[e]
            if e >= 0:  # its twin: both interior, the twin's slot freed
                shared[pcode[e]] = True
                shared[code] = True
                if prev < 0:
                    head[a] = pnext[e]
                else:
                    pnext[prev] = pnext[e]
                pnext[e] = free
                free = e
                continue
            if free >= 0:
                e, free = free, pnext[free]
            else:
                e, used = used, used + 1
            pcode[e] = code
            prest[e, 0], prest[e, 1], prest[e, 2] = r0, r1, r2
            pnext[e] = head[a]
            head[a] = e
    # emit: triangles, then quads (two triangles each)
    n = 0
    for c in range(ncells):
        t = types[c]
        if use_keep and not keep[c]:
            continue
        for f in range(ntri[t]):
            n += not shared[c * 16 + f]
        for f in range(nquad[t]):
            n += 2 * (not shared[c * 16 + 8 + f])
    faces = np.empty((n, 3), np.int64)
    cells = np.empty(n, np.int64)
    q = np.empty(4, np.int64)
    w = 0
    for kind in range(2):
        for t in present:
            for c in range(ncells):
                if types[c] != t or (use_keep and not keep[c]):
                    continue
                st = offsets[c]
                k = offsets[c + 1] - st
                cx, cy, cz = np.nan, 0.0, 0.0
                for f in range(ntri[t] if kind == 0 else nquad[t]):
                    if shared[c * 16 + f + 8 * kind]:
                        continue
                    if cx != cx:  # the cell's centre, once it has a boundary face
                        cx = 0.0
                        for j in range(k):
                            cx += points[conn[st + j], 0]
                            cy += points[conn[st + j], 1]
                            cz += points[conn[st + j], 2]
                        cx, cy, cz = cx / k, cy / k, cz / k
                    if kind == 0:
                        q[0], q[1], q[2] = conn[st + tri[t, f, 0]], conn[st + tri[t, f, 1]], conn[st + tri[t, f, 2]]
                        q[3] = q[0]
                    else:
                        for j in range(4):
                            q[j] = conn[st + quad[t, f, j]]
                    if _inward(points, q, cx, cy, cz):
                        if kind == 0:
                            q[1], q[2] = q[2], q[1]
                        else:
                            q[1], q[3] = q[3], q[1]
                    if kind == 0:
                        faces[w, 0], faces[w, 1], faces[w, 2] = q[0], q[1], q[2]
                        cells[w] = c
                        w += 1
                        continue
                    m = 0
                    for j in range(1, 4):
                        if q[j] < q[m]:
                            m = j
                    if m % 2 == 0:
                        faces[w, 0], faces[w, 1], faces[w, 2] = q[0], q[1], q[2]
                        faces[w + 1, 0], faces[w + 1, 1], faces[w + 1, 2] = q[0], q[2], q[3]
                    else:
                        faces[w, 0], faces[w, 1], faces[w, 2] = q[1], q[2], q[3]
                        faces[w + 1, 0], faces[w + 1, 1], faces[w + 1, 2] = q[1], q[3], q[0]
                    cells[w] = c
                    cells[w + 1] = c
                    w += 2
    return faces, cells


@numba.njit(cache=True, inline="always")
def _inward(points, q, cx, cy, cz):
    """Whether face q (a triangle: q[3] == q[0]) faces towards the centre (cx, cy, cz); the
    vectorized path's arithmetic (see _outward)."""
    ax, ay, az = points[q[0], 0], points[q[0], 1], points[q[0], 2]
    bx, by, bz = points[q[1], 0], points[q[1], 1], points[q[1], 2]
    gx, gy, gz = points[q[2], 0], points[q[2], 1], points[q[2], 2]
    ex, ey, ez = points[q[3], 0], points[q[3], 1], points[q[3], 2]
    ux, uy, uz = gx - ax, gy - ay, gz - az
    vx, vy, vz = ex - bx, ey - by, ez - bz
    nx, ny, nz = uy * vz - uz * vy, uz * vx - ux * vz, ux * vy - uy * vx
    fx, fy, fz = (ax + bx + gx + ex) / 4 - cx, (ay + by + gy + ey) / 4 - cy, (az + bz + gz + ez) / 4 - cz
    return nx * fx + ny * fy + nz * fz < 0


def vertex_normals(verts, faces):
    """Unit normals at the vertices of a triangle mesh: the area-weighted mean of the normals
    of the triangles around each (counter-clockwise triangles give outward normals).

    Parameters
    ----------
    verts : (n, 3) float array
    faces : (m, 3) integer array

    Returns
    -------
    (n, 3) float32 array on the inputs' backend; vertices on no triangle get (0, 0, 1).
    """
    xp = arrays.get_array_module(verts)
    v = verts.astype(xp.float64, copy=False)
    f = faces.astype(xp.int64, copy=False)
    a, b, c = v[f[:, 0]], v[f[:, 1]], v[f[:, 2]]
    fn = xp.cross(b - a, c - a)  # length: twice the area, so the sum is area-weighted
    acc = xp.zeros_like(v)
    for k in range(3):
        for ax in range(3):
            xp.add.at(acc[:, ax], f[:, k], fn[:, ax])
    return _unit(xp, acc).astype(xp.float32)


def _unit(xp, n):
    """Rows of `n` scaled to unit length; zero rows become (0, 0, 1) (scalars only: no upload)."""
    norm = xp.sqrt((n * n).sum(axis=1))
    out = n / xp.where(norm > 0, norm, 1.0)[:, None]
    out[:, 2] = xp.where(norm > 0, out[:, 2], 1.0)
    return out


def face_normals(corners):
    """Flat normals of triangles given as their corners, three rows each ((3m, 3), as
    ``points[faces.ravel()]``): each triangle's unit normal on its three rows (float32)."""
    xp = arrays.get_array_module(corners)
    t = corners.astype(xp.float64, copy=False).reshape(-1, 3, 3)
    n = _unit(xp, xp.cross(t[:, 1] - t[:, 0], t[:, 2] - t[:, 0]))
    return xp.repeat(n, 3, axis=0).astype(xp.float32)


def grid_boundary(shape, *, xp=np):
    """The six faces of the box of a grid's nodes, as triangles over the nodes.

    Parameters
    ----------
    shape : (ni, nj, nk)
        Nodes per axis (at least 2 each).
    xp : module
        NumPy or CuPy: where the arrays are made.

    Returns
    -------
    nodes : (v, 3) int64
        Grid index ``(i, j, k)`` of each vertex (each face has its own vertices, so that
        flat normals stay flat at the box's edges).
    faces : (m, 3) int32
        Triangles over those vertices, counter-clockwise seen from outside the box.
    normals : (v, 3) float32
        The outward axis direction of each vertex's face.
    """
    ni, nj, nk = (int(n) for n in shape)
    if min(ni, nj, nk) < 2:
        raise ValueError(f"shape: a box needs at least 2 nodes per axis, got {tuple(shape)}")
    nodes, faces, normals, start = [], [], [], 0
    for ax in range(3):
        u, w = [a for a in range(3) if a != ax]  # (u, w, ax) is right-handed for ax = 0, 2, reversed for ax = 1
        nu, nw = (ni, nj, nk)[u], (ni, nj, nk)[w]
        iu, iw = xp.meshgrid(xp.arange(nu), xp.arange(nw), indexing="ij")
        ids = xp.arange(nu * nw).reshape(nu, nw)
        q0, q1, q2, q3 = ids[:-1, :-1], ids[1:, :-1], ids[1:, 1:], ids[:-1, 1:]
        tri = xp.stack([xp.stack([q0, q1, q2], -1).reshape(-1, 3), xp.stack([q0, q2, q3], -1).reshape(-1, 3)])
        tri = tri.reshape(-1, 3)
        right_handed = ax != 1
        for side, at in ((1, (ni, nj, nk)[ax] - 1), (-1, 0)):
            g = xp.empty((nu * nw, 3), xp.int64)
            g[:, u], g[:, w], g[:, ax] = iu.ravel(), iw.ravel(), at
            outward = (side > 0) == right_handed  # u x w along +ax iff right-handed
            faces.append((tri if outward else tri[:, ::-1]) + start)
            n = xp.zeros((nu * nw, 3), xp.float32)
            n[:, ax] = side
            nodes.append(g)
            normals.append(n)
            start += nu * nw
    return xp.concatenate(nodes), xp.concatenate(faces).astype(xp.int32), xp.concatenate(normals)
