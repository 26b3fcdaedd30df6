"""Meshes of cells: points and linear cells of VTK's types, in CSR form, on one backend."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from insitu import arrays

# VTK's linear cell type codes (vtkCellType.h); Blueprint's shape names map onto them and
# its node orders are VTK's (conduit/blueprint/mesh/utils: the shapes are VTK's).
VERTEX, LINE, TRIANGLE, POLYGON, QUAD, TETRA, HEXAHEDRON, WEDGE, PYRAMID = 1, 3, 5, 7, 9, 10, 12, 13, 14

#: Blueprint shape name -> VTK type code.
SHAPE_TYPES: dict[str, int] = {"point": VERTEX, "line": LINE, "tri": TRIANGLE, "quad": QUAD, "polygonal": POLYGON,
                               "tet": TETRA, "hex": HEXAHEDRON, "wedge": WEDGE, "pyramid": PYRAMID}
#: VTK type code -> points per cell (polygons: sized per cell).
CELL_POINTS: dict[int, int | None] = {VERTEX: 1, LINE: 2, TRIANGLE: 3, POLYGON: None, QUAD: 4, TETRA: 4,
                                      HEXAHEDRON: 8, WEDGE: 6, PYRAMID: 5}
#: VTK's parametric coordinates of each cell's corners (its positive orientation).
REFERENCE_CORNERS: dict[int, list[tuple[float, float, float]]] = {
    TETRA: [(0, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 1)],
    HEXAHEDRON: [(0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 1, 0), (0, 0, 1), (1, 0, 1), (1, 1, 1), (0, 1, 1)],
    WEDGE: [(0, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 1), (1, 0, 1), (0, 1, 1)],
    PYRAMID: [(0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 1, 0), (0.5, 0.5, 1)],
    TRIANGLE: [(0, 0, 0), (1, 0, 0), (0, 1, 0)],
    QUAD: [(0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 1, 0)],
}
#: VTK type code -> topological dimension.
CELL_DIM: dict[int, int] = {VERTEX: 0, LINE: 1, TRIANGLE: 2, POLYGON: 2, QUAD: 2, TETRA: 3, HEXAHEDRON: 3,
                            WEDGE: 3, PYRAMID: 3}


@dataclasses.dataclass(frozen=True)
class CellMesh:
    """Points and cells, all arrays on one backend (NumPy or CuPy), never copied here.

    Attributes
    ----------
    points : (n, 3) float32 or float64
        Point coordinates (2-D meshes have z = 0).
    connectivity : (m,) int32 or int64
        Point ids of every cell, cell after cell, in VTK's node order.
    offsets : (ncells + 1,) int64
        Cell ``c`` uses ``connectivity[offsets[c]:offsets[c + 1]]``.
    types : (ncells,) uint8
        VTK cell type codes (:data:`TETRA`, :data:`HEXAHEDRON`, ...).
    """

    points: Any
    connectivity: Any
    offsets: Any
    types: Any

    @property
    def n_points(self) -> int:
        return int(self.points.shape[0])

    @property
    def n_cells(self) -> int:
        return int(self.types.shape[0])

    @property
    def xp(self):
        return arrays.get_array_module(self.points)

    def single_type(self) -> int | None:
        """The one cell type all cells share, or None for a mixed mesh (or no cells)."""
        if self.n_cells == 0:
            return None
        t = arrays.to_host(self.types[:1])[0] if arrays.is_device_array(self.types) else self.types[0]
        same = self.types == t
        return int(t) if bool(same.all()) else None


def cell_mesh(points, connectivity, types, offsets=None) -> CellMesh:
    """Check and assemble a :class:`CellMesh`.

    Parameters
    ----------
    points : (n, 2) or (n, 3) array
        Point coordinates; 2-D points get z = 0 (a new array).
    connectivity : (m,) integer array
    types : int or (ncells,) integer array
        One VTK type code for every cell, or one per cell.
    offsets : (ncells + 1,) integer array, optional
        Needed when cells differ in size; derived for fixed-size types.

    Raises
    ------
    ValueError
        Naming the array at fault (shape, an unknown type, ids out of range, sizes that do
        not match the types).
    """
    pts = arrays.asarray(points, name="points")
    xp = arrays.get_array_module(pts)
    if pts.ndim != 2 or pts.shape[1] not in (2, 3):
        raise ValueError(f"points: expected an (n, 2) or (n, 3) array, got shape {tuple(pts.shape)}")
    if pts.dtype.kind != "f":
        raise ValueError(f"points: expected floating coordinates, got {pts.dtype}")
    if pts.shape[1] == 2:
        pts = xp.concatenate([pts, xp.zeros((pts.shape[0], 1), pts.dtype)], axis=1)
    conn = arrays.asarray(connectivity, name="connectivity")
    if conn.ndim != 1 or conn.dtype.kind not in "iu":
        raise ValueError(f"connectivity: expected a 1-D integer array, got {conn.ndim}-D {conn.dtype}")
    if conn.dtype.itemsize < 4 or conn.dtype == np.uint64:
        conn = conn.astype(xp.int64)
    if np.isscalar(types) or getattr(types, "ndim", 1) == 0:
        t = int(types)
        if t not in CELL_POINTS:
            raise ValueError(f"types: unknown cell type {t}; known: {sorted(CELL_POINTS)}")
        k = CELL_POINTS[t]
        if offsets is None:
            if k is None:
                raise ValueError("offsets: needed for polygons (cells of varying size)")
            if conn.shape[0] % k:
                raise ValueError(f"connectivity: {conn.shape[0]} ids is not a whole number of {k}-point cells")
            offsets = xp.arange(0, conn.shape[0] + 1, k, dtype=xp.int64)
        typ = xp.full(int(offsets.shape[0]) - 1, t, dtype=xp.uint8)
    else:
        typ = arrays.asarray(types, name="types")
        if typ.ndim != 1:
            raise ValueError(f"types: expected a 1-D array, got {typ.ndim}-D")
        if typ.dtype.kind not in "iu":
            raise ValueError(f"types: expected integer VTK type codes, got {typ.dtype}")
        # One table lookup on the array's own device: codes outside 0..15 or naming no cell
        # type have no size, and polygons (size 0 too) need offsets.
        code = typ.astype(xp.int64)
        known = (code >= 0) & (code < _FIXED.shape[0])
        fixed, is_cell = _tables(typ)
        size = fixed[xp.where(known, code, 0)]
        cellish = known & is_cell[xp.where(known, code, 0)]
        if typ.shape[0] and not bool(cellish.all()):
            c = int(xp.argmin(cellish))
            raise ValueError(f"types: cell {c} has unknown cell type {int(typ[c])}; known: {sorted(CELL_POINTS)}")
        typ = typ.astype(xp.uint8, copy=False)
        if offsets is None:
            if typ.shape[0] and not bool((size > 0).all()):
                raise ValueError("offsets: needed for polygons (cells of varying size)")
            offsets = xp.concatenate([xp.zeros(1, xp.int64), xp.cumsum(size, dtype=xp.int64)])
    off = arrays.asarray(offsets, name="offsets").astype(xp.int64, copy=False)
    if off.ndim != 1 or off.shape[0] != typ.shape[0] + 1:
        raise ValueError(f"offsets: expected {typ.shape[0] + 1} entries (cells + 1), got shape {tuple(off.shape)}")
    if int(off[0]) != 0 or int(off[-1]) != conn.shape[0] or (off.shape[0] > 1 and bool((off[1:] < off[:-1]).any())):
        raise ValueError(f"offsets: expected 0 .. {conn.shape[0]} non-decreasing")
    need = _tables(typ)[0][typ.astype(xp.int64)]
    sizes = off[1:] - off[:-1]
    wrong = (need > 0) & (sizes != need) | (need == 0) & (sizes < 3)
    if typ.shape[0] and bool(wrong.any()):
        c = int(xp.argmax(wrong))
        raise ValueError(f"offsets: cell {c} (type {int(typ[c])}) has {int(sizes[c])} points")
    if conn.shape[0] and (int(conn.min()) < 0 or int(conn.max()) >= pts.shape[0]):
        raise ValueError(f"connectivity: ids must lie in [0, {pts.shape[0]}), got {int(conn.min())} .. "
                         f"{int(conn.max())}")
    return CellMesh(pts, conn, off, typ)


#: Points per cell by type code, 0 for polygons and codes that are not cells.
_FIXED = np.array([CELL_POINTS.get(t) or 0 for t in range(16)], dtype=np.int64)
#: Whether a type code names a cell type.
_IS_CELL = np.array([t in CELL_POINTS for t in range(16)])
_TABLES_ON: dict[int, tuple] = {}  # device -> (_FIXED, _IS_CELL) there, uploaded once


def _tables(like) -> tuple:
    """(_FIXED, _IS_CELL) on `like`'s backend (on a device: uploaded once per device)."""
    if not arrays.is_device_array(like):
        return _FIXED, _IS_CELL
    dev = int(arrays.device_id(like) or 0)
    if dev not in _TABLES_ON:
        _TABLES_ON[dev] = (arrays.to_device(_FIXED, device=dev), arrays.to_device(_IS_CELL, device=dev))
    return _TABLES_ON[dev]


def grid_cells(x, y, z=None) -> CellMesh:
    """The hexahedra (quads in 2-D) of a structured grid.

    Parameters
    ----------
    x, y, z : arrays of one shape (ni, nj[, nk]), or 1-D axes
        Point coordinates indexed ``[i, j, k]`` (curvilinear), or the axes of a
        rectilinear grid. Points are numbered as Blueprint stores them (``i`` fastest).
    """
    xp = arrays.get_array_module(x)
    axes = [arrays.asarray(a) for a in ((x, y) if z is None else (x, y, z))]
    if all(a.ndim == 1 for a in axes):
        axes = list(xp.meshgrid(*axes, indexing="ij"))
    shape = axes[0].shape
    if any(a.shape != shape for a in axes) or len(shape) != len(axes):
        raise ValueError(f"grid_cells: coordinates of shapes {[tuple(a.shape) for a in axes]} do not make a grid")
    dt = np.result_type(*[a.dtype for a in axes], np.float32)
    pts = xp.stack([a.astype(dt).ravel(order="F") for a in axes]
                   + ([xp.zeros(int(np.prod(shape)), dt)] if len(axes) == 2 else []), axis=1)
    ids = xp.arange(int(np.prod(shape)), dtype=xp.int64).reshape(shape, order="F")
    if len(shape) == 2:
        a = ids[:-1, :-1], ids[1:, :-1], ids[1:, 1:], ids[:-1, 1:]
        t = QUAD
    else:
        s0, s1 = (slice(None, -1), slice(1, None))
        a = tuple(ids[i, j, k] for (i, j, k) in ((s0, s0, s0), (s1, s0, s0), (s1, s1, s0), (s0, s1, s0),
                                                 (s0, s0, s1), (s1, s0, s1), (s1, s1, s1), (s0, s1, s1)))
        t = HEXAHEDRON
    # cells numbered i fastest, as Blueprint numbers elements
    conn = xp.stack([c.ravel(order="F") for c in a], axis=1).ravel()
    return cell_mesh(pts, conn, t)


def check_hidden(mesh: CellMesh, hidden):
    """The cells to keep, ``~hidden`` (None without `hidden`), after checking `hidden` is an
    ``(n_cells,)`` bool array on the mesh's backend."""
    if hidden is None:
        return None
    h = arrays.asarray(hidden, name="hidden")
    if arrays.get_array_module(h) is not mesh.xp:
        raise ValueError(f"hidden: on {arrays.backend_of(h)}, the mesh is on {arrays.backend_of(mesh.points)}")
    if h.ndim != 1 or h.shape[0] != mesh.n_cells or h.dtype != bool:
        raise ValueError(f"hidden: expected a ({mesh.n_cells},) bool array, got {h.dtype} of shape "
                         f"{tuple(h.shape)}")
    return ~h
