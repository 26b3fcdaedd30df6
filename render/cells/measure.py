"""Cells split into simplices, and the measures (volumes, areas) that follow.

Every 3-D cell splits into tetrahedra and every 2-D cell into triangles by *pulling from
its smallest point id*: the cone from that vertex over the faces that do not hold it, each
quadrilateral face cut along the diagonal from its own smallest id. A quad face is thus
cut the same way by both cells that share it (the rule reads only the face's global ids),
so a mesh split this way has no cracks; hexahedra give 6 tetrahedra, wedges 3, pyramids
2, quads 2 triangles. The tables below are built once on the host and uploaded once per
device; the split itself is a few gathers over all cells (NumPy or CuPy alike).
"""

from __future__ import annotations

import functools
import itertools

import numpy as np

from insitu import arrays

from ._mesh import HEXAHEDRON, PYRAMID, QUAD, REFERENCE_CORNERS, TETRA, TRIANGLE, WEDGE, CellMesh

__all__ = ["area", "cell_measures", "split_cells", "simplices", "volume"]

#: Faces of the 3-D cells in VTK's node order; each listed around its boundary.
_FACES: dict[int, list[tuple[int, ...]]] = {
    TETRA: [(0, 1, 2), (0, 1, 3), (1, 2, 3), (0, 2, 3)],
    HEXAHEDRON: [(0, 1, 2, 3), (4, 5, 6, 7), (0, 1, 5, 4), (1, 2, 6, 5), (2, 3, 7, 6), (3, 0, 4, 7)],
    WEDGE: [(0, 1, 2), (3, 4, 5), (0, 1, 4, 3), (1, 2, 5, 4), (2, 0, 3, 5)],
    PYRAMID: [(0, 1, 2, 3), (0, 1, 4), (1, 2, 4), (2, 3, 4), (3, 0, 4)],
}
#: A reference cell of each type (VTK's positive orientation), to orient the table's simplices.
_REF = REFERENCE_CORNERS
MAXPTS, MAXQ = 8, 6  # points of the largest cell, quad faces of the cell with most
#: Simplices per cell of each type code (0: not split), by dimension.
NSIMPLEX = {3: {TETRA: 1, PYRAMID: 2, WEDGE: 3, HEXAHEDRON: 6}, 2: {TRIANGLE: 1, QUAD: 2}}
WIDTH = {3: 6, 2: 2}


def _quads(t: int) -> list[tuple[int, ...]]:
    if t == QUAD:
        return [(0, 1, 2, 3)]
    return [f for f in _FACES.get(t, []) if len(f) == 4]


def _split_quad(q, bit: int) -> list[tuple[int, ...]]:
    # bit 0: diagonal q0-q2, bit 1: q1-q3 (the one through the face's smallest id)
    return [(q[0], q[1], q[2]), (q[0], q[2], q[3])] if bit == 0 else [(q[1], q[2], q[3]), (q[1], q[3], q[0])]


def _orient(simp: tuple[int, ...], ref: np.ndarray) -> tuple[int, ...]:
    p = ref[list(simp)]
    if len(simp) == 4:
        s = np.linalg.det(p[1:] - p[0])
    else:
        s = np.cross(p[1] - p[0], p[2] - p[0])[2]
    return simp if s > 0 else (simp[0], simp[2], simp[1], *simp[3:])


@functools.cache
def host_tables() -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per dimension: (quad faces (16, MAXQ, 4), simplices (16, MAXPTS * 64, width, dim + 1),
    simplex counts (16,)), all int64, -1 where nothing is.

    ``simplices[type, v * 64 + bits]`` are the local vertices of the cell's simplices when
    its smallest id sits at local point ``v`` and quad face ``f`` is cut along q1-q3 where
    bit ``f`` is set (q0-q2 otherwise).
    """
    out = {}
    for dim in (3, 2):
        quads = np.zeros((16, MAXQ, 4), np.int64)
        simp = np.full((16, MAXPTS * 64, WIDTH[dim], dim + 1), -1, np.int64)
        count = np.zeros(16, np.int64)
        for t, n in NSIMPLEX[dim].items():
            count[t] = n
            qs = _quads(t)
            if qs:
                quads[t, :len(qs)] = qs
            ref = np.asarray(_REF[t], np.float64)
            npts = len(_REF[t])
            for v, bits in itertools.product(range(npts), range(64)):
                diag = {q: (bits >> f) & 1 for f, q in enumerate(qs)}
                if t in (TETRA, TRIANGLE):
                    got = [tuple(range(npts))]
                elif t == QUAD:
                    got = _split_quad(qs[0], diag[qs[0]])
                else:  # the cone from v over the faces without it
                    got = []
                    for face in _FACES[t]:
                        if v in face:
                            continue
                        tris = _split_quad(face, diag[face]) if len(face) == 4 else [face]
                        got += [(*tri, v) for tri in tris]
                assert len(got) == n
                simp[t, v * 64 + bits, :n] = [_orient(s, ref) for s in got]
        out[dim] = (quads, simp, count)
    return out


_tables_on: dict[int | None, dict] = {}


def tables(device: int | None) -> dict[int, tuple]:
    """:func:`host_tables` on `device` (None: host), uploaded once per device."""
    if device not in _tables_on:
        host = host_tables()
        _tables_on[device] = host if device is None else {
            d: tuple(arrays.to_device(a) for a in t) for d, t in host.items()}
    return _tables_on[device]


def padded_ids(mesh: CellMesh, cells=None):
    """(n, 8) point ids of `cells` (default all), each row padded by repeating its last id."""
    xp = mesh.xp
    start, end = mesh.offsets[:-1], mesh.offsets[1:]
    if cells is not None:
        start, end = start[cells], end[cells]
    at = xp.minimum(start[:, None] + xp.arange(MAXPTS, dtype=xp.int64), end[:, None] - 1)
    return mesh.connectivity[at].astype(xp.int64, copy=False)


def split_cells(ids, types, dim: int):
    """The simplices of cells given by padded ids.

    Parameters
    ----------
    ids : (n, 8) int64
        Global point ids of each cell (see :func:`padded_ids`).
    types : (n,) VTK type codes
    dim : 3 or 2
        Split the cells of this dimension; rows of other types give no simplex.

    Returns
    -------
    simp : (n, width, dim + 1) int64
        Global point ids of the simplices (width 6 in 3-D, 2 in 2-D); meaningless where not `valid`.
    valid : (n, width) bool
    """
    xp = arrays.get_array_module(ids)
    quads, table, _ = tables(arrays.device_id(ids))[dim]
    t = types.astype(xp.int64)
    rows = xp.arange(ids.shape[0], dtype=xp.int64)[:, None]
    v = xp.argmin(ids, axis=1)
    qids = ids[rows[:, :, None], quads[t]]  # (n, MAXQ, 4)
    bits = ((xp.argmin(qids, axis=2) & 1) << xp.arange(MAXQ, dtype=xp.int64)).sum(axis=1)
    loc = table[t, v * 64 + bits]  # (n, width, dim + 1)
    valid = loc[:, :, 0] >= 0
    simp = ids[rows, xp.maximum(loc, 0).reshape(ids.shape[0], loc.shape[1] * loc.shape[2])].reshape(loc.shape)
    return simp, valid


def simplex_measures(points, simp):
    """Unsigned volumes (4 ids per row) or areas (3 ids per row) of simplices, in float64."""
    xp = arrays.get_array_module(points)
    p = points[simp].astype(xp.float64)
    e = p[..., 1:, :] - p[..., :1, :]
    if simp.shape[-1] == 4:
        c = xp.cross(e[..., 0, :], e[..., 1, :])
        return xp.abs((c * e[..., 2, :]).sum(axis=-1)) / 6.0
    c = xp.cross(e[..., 0, :], e[..., 1, :])
    return xp.sqrt((c * c).sum(axis=-1)) / 2.0


def cell_measures(mesh: CellMesh):
    """Measure of every cell: volume of 3-D cells, area of 2-D cells, 0 for the others.

    Tetrahedra and triangles exactly; other cells as the sum over their split (module
    docstring), exact for cells with planar faces.

    Returns
    -------
    (n_cells,) float64 array on the mesh's backend.
    """
    xp = mesh.xp
    ids = padded_ids(mesh)
    out = xp.zeros(mesh.n_cells, xp.float64)
    for dim in (3, 2):
        simp, valid = split_cells(ids, mesh.types, dim)
        out += xp.where(valid, simplex_measures(mesh.points, simp), 0.0).sum(axis=1)
    return out


def volume(mesh: CellMesh) -> float:
    """Total volume of the mesh's 3-D cells (see :func:`cell_measures`)."""
    xp = mesh.xp
    ids = padded_ids(mesh)
    simp, valid = split_cells(ids, mesh.types, 3)
    return float(arrays.scalar_to_host(xp.where(valid, simplex_measures(mesh.points, simp), 0.0).sum()))


def area(mesh: CellMesh) -> float:
    """Total area of the mesh's 2-D cells (see :func:`cell_measures`)."""
    xp = mesh.xp
    ids = padded_ids(mesh)
    simp, valid = split_cells(ids, mesh.types, 2)
    return float(arrays.scalar_to_host(xp.where(valid, simplex_measures(mesh.points, simp), 0.0).sum()))


def simplices(mesh: CellMesh, dim: int = 3):
    """The tetrahedra (``dim=3``) or triangles (``dim=2``) of the mesh's cells of that dimension.

    Returns
    -------
    simp : (k, dim + 1) int64
        Point ids, oriented as their cell (VTK's positive orientation for well-formed cells).
    parent : (k,) int64
        The cell each simplex comes from; simplices in cell order.
    """
    if dim not in (2, 3):
        raise ValueError(f"dim: expected 2 or 3, got {dim!r}")
    simp, valid = split_cells(padded_ids(mesh), mesh.types, dim)
    flat = valid.ravel()
    k = int(arrays.scalar_to_host(flat.sum()))
    idx = compact(flat, k)
    return simp.reshape(-1, dim + 1)[idx], idx // WIDTH[dim]


def compact(mask, count: int):
    """Indices where `mask` is true, given their `count` (no device synchronization on CuPy)."""
    xp = arrays.get_array_module(mask)
    if xp is np:
        return np.flatnonzero(mask)
    pos = xp.cumsum(mask, dtype=xp.int64) - 1
    dest = xp.where(mask, pos, count)
    out = xp.empty(count + 1, xp.int64)
    out[dest] = xp.arange(mask.shape[0], dtype=xp.int64)  # the rest all land on the spare last slot
    return out[:count]
