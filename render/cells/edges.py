"""The edges of a mesh's outer surface, as line segments: what a mesh plot (Ascent's ``type:
mesh``) draws.

An edge is drawn where it is an edge of a cell (VTK's edge tables; the consecutive points of
a 2-D cell) and of the outer surface (:func:`render.cells.surface.outer_surface`), so the
diagonals the surface's triangulation adds to quads are not drawn. A uniform grid's are the
grid lines on the six faces of its box (:func:`grid_edges`).
"""

from __future__ import annotations

import functools

import numpy as np

from insitu import arrays

from ._mesh import HEXAHEDRON, POLYGON, PYRAMID, QUAD, TETRA, TRIANGLE, WEDGE, CellMesh

__all__ = ["cell_edges", "grid_edges"]

#: Edges of the 3-D cells as pairs of local corner indices (VTK's node order).
_EDGES = {
    TETRA: ((0, 1), (1, 2), (2, 0), (0, 3), (1, 3), (2, 3)),
    HEXAHEDRON: ((0, 1), (1, 2), (2, 3), (3, 0), (4, 5), (5, 6), (6, 7), (7, 4), (0, 4), (1, 5), (2, 6), (3, 7)),
    WEDGE: ((0, 1), (1, 2), (2, 0), (3, 4), (4, 5), (5, 3), (0, 3), (1, 4), (2, 5)),
    PYRAMID: ((0, 1), (1, 2), (2, 3), (3, 0), (0, 4), (1, 4), (2, 4), (3, 4)),
    TRIANGLE: ((0, 1), (1, 2), (2, 0)),
    QUAD: ((0, 1), (1, 2), (2, 3), (3, 0)),
}


def grid_edges(shape) -> tuple[np.ndarray, np.ndarray]:
    """The grid lines on the faces of the box of a grid's nodes (made once per shape: read-only).

    Parameters
    ----------
    shape : (ni, nj, nk)
        Nodes per axis (1 for a flat axis).

    Returns
    -------
    nodes : (v, 3) int64
        Grid index ``(i, j, k)`` of each vertex the segments use.
    segments : (s, 2) int32
        Pairs of indices into `nodes`, one per cell edge on the box's faces, each once.
    """
    dims = tuple(int(n) for n in shape)
    if len(dims) != 3 or min(dims) < 1:
        raise ValueError(f"shape: expected three node counts >= 1, got {tuple(shape)}")
    return _grid_edges(dims)


@functools.lru_cache(maxsize=32)
def _grid_edges(dims: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    ids = np.arange(np.prod(dims)).reshape(dims)
    pairs = []
    for ax in range(3):  # the two faces normal to axis ax (one where the axis is flat)
        for face in {0, dims[ax] - 1}:
            sheet = np.take(ids, face, axis=ax)  # (nu, nw) node ids
            pairs += [np.stack([sheet[:-1, :].ravel(), sheet[1:, :].ravel()], 1),
                      np.stack([sheet[:, :-1].ravel(), sheet[:, 1:].ravel()], 1)]
    seg = np.unique(np.sort(np.concatenate(pairs), axis=1), axis=0)
    used, inverse = np.unique(seg, return_inverse=True)
    nodes = np.stack(np.unravel_index(used, dims), 1).astype(np.int64)
    segs = inverse.reshape(-1, 2).astype(np.int32)
    nodes.flags.writeable = segs.flags.writeable = False  # cached and shared
    return nodes, segs


def _keys(xp, a, b, n: int):
    lo, hi = xp.minimum(a, b).astype(xp.int64), xp.maximum(a, b).astype(xp.int64)
    return lo * n + hi


def cell_edges(mesh: CellMesh, *, hidden=None):
    """The edges of `mesh`'s outer surface, without the triangulation's diagonals.

    Parameters
    ----------
    mesh : CellMesh
    hidden : (ncells,) bool array, optional
        Ghost cells, left out (as :func:`render.cells.surface.outer_surface`).

    Returns
    -------
    (s, 2) int64
        Point ids of each edge, each edge once, on the mesh's backend.
    """
    from .surface import outer_surface

    xp, n = mesh.xp, mesh.n_points
    surf = outer_surface(mesh, hidden=hidden)
    if surf.faces.shape[0] == 0:
        return xp.zeros((0, 2), xp.int64)
    f = surf.faces.astype(xp.int64)
    on_surface = xp.unique(xp.concatenate([_keys(xp, f[:, a], f[:, (a + 1) % 3], n) for a in range(3)]))
    cells = xp.unique(surf.cells)
    types, starts, conn = mesh.types[cells], mesh.offsets[cells], mesh.connectivity
    of_cells = []
    for code, table in _EDGES.items():
        s = starts[types == code]
        of_cells += [_keys(xp, conn[s + a], conn[s + b], n) for a, b in table]
    poly = types == POLYGON
    if bool(poly.any()):  # polygons: each point to the next, the last to the first
        s = starts[poly]
        size = mesh.offsets[cells[poly] + 1] - s
        total = arrays.scalar_to_host(size.sum())
        end = xp.cumsum(size)
        cell = xp.searchsorted(end, xp.arange(total), side="right")
        local = xp.arange(total) - (end - size)[cell]
        of_cells.append(_keys(xp, conn[s[cell] + local], conn[s[cell] + (local + 1) % size[cell]], n))
    edges = on_surface[xp.isin(on_surface, xp.concatenate(of_cells))] if of_cells else on_surface[:0]
    return xp.stack([edges // n, edges % n], axis=1)
