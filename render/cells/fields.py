"""Field operations on a :class:`CellMesh`: recentring, vector magnitude and component, gradient.

Everything is written once against the array module of the mesh (NumPy or CuPy) and is
vectorized over cells: cells are taken a type at a time, and per-point sums are scattered
with ``bincount`` (which both backends have, with weights). On NumPy input the same
arithmetic runs as Numba loops, a cell at a time (no (cells, points per cell) temporaries);
``_vectorized=True`` runs the CuPy form on NumPy (tests). The results follow VTK's filters
on an unstructured grid:

- :func:`cell_to_point` is vtkCellDataToPointData (each point: the mean of the cells
  using it; points used by no cell get 0);
- :func:`point_to_cell` is vtkPointDataToCellData (each cell: the mean of its points);
- :func:`gradient` is vtkGradientFilter on point data: at each point, the mean over the
  cells using it of the derivative of the cell's interpolant evaluated at that point
  (isoparametric shape functions of VTK's linear cells; in the cell's plane for
  triangles and quads).
"""

from __future__ import annotations

import functools
from typing import Any, Sequence

import numba
import numpy as np

from insitu import arrays
from insitu.log import watch_jit

from ._mesh import CELL_DIM, CELL_POINTS, HEXAHEDRON, PYRAMID, QUAD, TETRA, TRIANGLE, WEDGE, CellMesh

__all__ = ["cell_to_point", "component", "gradient", "magnitude", "point_to_cell"]

watch_jit(__name__)

#: Cell types the shape functions below cover (VTK's linear cells with a fixed size).
SHAPED = (TRIANGLE, QUAD, TETRA, HEXAHEDRON, WEDGE, PYRAMID)

#: Parametric coordinates of each cell type's points, in VTK's node order (vtkCell::GetParametricCoords).
PCOORDS: dict[int, np.ndarray] = {
    TRIANGLE: np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0]], float),
    QUAD: np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]], float),
    TETRA: np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]], float),
    HEXAHEDRON: np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0],
                          [0, 0, 1], [1, 0, 1], [1, 1, 1], [0, 1, 1]], float),
    WEDGE: np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 0, 1], [0, 1, 1]], float),
    PYRAMID: np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 0, 1]], float),
}


def shape_functions(t: int, r, s, u) -> tuple[list, list[list]]:
    """VTK's interpolation functions of cell type `t` and their parametric derivatives.

    Parameters
    ----------
    t : int
        Cell type code (one of :data:`SHAPED`).
    r, s, u : arrays (any one shape) or floats
        Parametric coordinates.

    Returns
    -------
    N : list of k arrays
        The weight of each of the cell's k points.
    dN : list of 3 lists of k arrays
        ``dN[a][i]``: derivative of ``N[i]`` along parametric axis ``a``.
    """
    z = r * 0.0  # zeros of the inputs' shape and backend
    if t == TRIANGLE:
        return [1 - r - s, r, s], [[z - 1, z + 1, z], [z - 1, z, z + 1], [z, z, z]]
    if t == QUAD:
        rm, sm = 1 - r, 1 - s
        return ([rm * sm, r * sm, r * s, rm * s],
                [[-sm, sm, s, -s], [-rm, -r, r, rm], [z, z, z, z]])
    if t == TETRA:
        return [1 - r - s - u, r, s, u], [[z - 1, z + 1, z, z], [z - 1, z, z + 1, z], [z - 1, z, z, z + 1]]
    if t == HEXAHEDRON:
        rm, sm, um = 1 - r, 1 - s, 1 - u
        return ([rm * sm * um, r * sm * um, r * s * um, rm * s * um, rm * sm * u, r * sm * u, r * s * u, rm * s * u],
                [[-sm * um, sm * um, s * um, -s * um, -sm * u, sm * u, s * u, -s * u],
                 [-rm * um, -r * um, r * um, rm * um, -rm * u, -r * u, r * u, rm * u],
                 [-rm * sm, -r * sm, -r * s, -rm * s, rm * sm, r * sm, r * s, rm * s]])
    if t == WEDGE:
        w, um = 1 - r - s, 1 - u
        return ([w * um, r * um, s * um, w * u, r * u, s * u],
                [[-um, um, z, -u, u, z], [-um, z, um, -u, z, u], [-w, -r, -s, w, r, s]])
    if t == PYRAMID:
        rm, sm, um = 1 - r, 1 - s, 1 - u
        return ([rm * sm * um, r * sm * um, r * s * um, rm * s * um, u + z],
                [[-sm * um, sm * um, s * um, -s * um, z], [-rm * um, -r * um, r * um, rm * um, z],
                 [-rm * sm, -r * sm, -r * s, -rm * s, z + 1]])
    raise ValueError(f"no shape functions for cell type {t}")


def _vertex_derivatives(t: int) -> np.ndarray:
    """(ke, 3, k) parametric derivatives of the shape functions at each point of a cell of
    type `t` (ke = 1 for the simplices, whose derivatives are constant)."""
    pc = PCOORDS[t][:1] if t in (TRIANGLE, TETRA) else PCOORDS[t].copy()
    if t == PYRAMID:
        # At the apex the Jacobian is singular (the base's derivatives vanish); VTK takes the
        # limit towards it, which along the axis r = s = 1/2 is the same at any height.
        pc[4] = (0.5, 0.5, 0.0)
    return np.array([np.array(shape_functions(t, *p)[1], float) for p in pc])


def _f64(a) -> np.ndarray:
    """`a` as contiguous float64 (a view where it is): one compiled CPU loop for every input."""
    return np.ascontiguousarray(a, dtype=np.float64)


def _i64(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64)


_tables: dict[tuple[int, int | None], Any] = {}


def _on(xp, host: np.ndarray, key: tuple):
    """`host` on the backend `xp` (uploaded once per device, through the counted gateway)."""
    if xp is np:
        return host
    dev = xp.cuda.Device().id
    k = key + (dev,)
    if k not in _tables:
        _tables[k] = arrays.to_device(host)
    return _tables[k]


# --------------------------------------------------------------------------- helpers


def type_groups(mesh: CellMesh) -> list[tuple[int, Any]]:
    """The cell types present and the ids of their cells: ``[(type, ids or None)]``.

    ``None`` stands for "every cell" (a single-type mesh: no index array made).
    """
    if mesh.n_cells == 0:
        return []
    xp = mesh.xp
    counts = arrays.scalars_to_host(xp.bincount(mesh.types.astype(xp.int32), minlength=16)[:16])
    present = [t for t, c in enumerate(counts) if c]
    if len(present) == 1:
        return [(present[0], None)]
    return [(t, xp.nonzero(mesh.types == t)[0]) for t in present]


def cell_points(mesh: CellMesh, t: int, ids) -> Any:
    """(nc, k) point ids of the cells `ids` (None: all cells), all of fixed-size type `t`."""
    k = CELL_POINTS[t]
    assert k is not None
    if ids is None:
        return mesh.connectivity.reshape(-1, k)
    xp = mesh.xp
    return mesh.connectivity[mesh.offsets[ids][:, None] + xp.arange(k, dtype=xp.int64)]


def cell_of_entry(mesh: CellMesh):
    """(m,) the cell of each connectivity entry."""
    xp = mesh.xp
    mark = xp.zeros(mesh.connectivity.shape[0], xp.int64)
    if mesh.n_cells > 1:
        mark[mesh.offsets[1:-1]] = 1  # cells are never empty, so the offsets are distinct
    return xp.cumsum(mark)


def _check_values(mesh: CellMesh, values, n: int, what: str, name: str):
    v = arrays.asarray(values, name=name)
    if arrays.get_array_module(v) is not mesh.xp:
        raise ValueError(f"{name}: on {arrays.backend_of(v)}, the mesh is on {arrays.backend_of(mesh.points)}")
    if v.ndim not in (1, 2) or v.shape[0] != n:
        raise ValueError(f"{name}: expected ({n},) or ({n}, k) values (one per {what}), got shape {tuple(v.shape)}")
    if v.dtype.kind not in "fiub":
        raise TypeError(f"{name}: expected real numbers, got dtype {v.dtype}")
    return v


def _float_dtype(*dts) -> np.dtype:
    """float32 where every input fits it (float32/float16/small ints), else float64."""
    return np.result_type(np.float32, *[d if d.kind == "f" else np.float64 if d.itemsize > 2 else np.float32
                                        for d in dts])


def _scatter_mean(xp, ids, weights, n: int, counts=None):
    """Sums of the rows of `weights` (len(ids), c) per id in ``range(n)``, over their counts."""
    if counts is None:
        counts = xp.bincount(ids, minlength=n)
    sums = xp.stack([xp.bincount(ids, weights=weights[:, j], minlength=n) for j in range(weights.shape[1])], axis=1)
    return sums / xp.maximum(counts, 1)[:, None]


# --------------------------------------------------------------------------- public


def cell_to_point(mesh: CellMesh, values, *, _vectorized: bool = False) -> Any:
    """Element values to points: each point the mean of the cells that use it.

    Parameters
    ----------
    mesh : CellMesh
    values : (n_cells,) or (n_cells, k) array
        On the mesh's backend.

    Returns
    -------
    (n_points,) or (n_points, k) array
        Floating (float32 for float32 input, else float64); 0 at points no cell uses,
        as vtkCellDataToPointData.
    """
    v = _check_values(mesh, values, mesh.n_cells, "cell", "values")
    xp = mesh.xp
    dt = _float_dtype(v.dtype)
    v2 = v.reshape(v.shape[0], v.shape[1] if v.ndim == 2 else 1)
    if xp is np and not _vectorized:
        out = np.zeros((mesh.n_points, v2.shape[1]), np.float64)
        _cell_to_point_cpu(mesh.connectivity, mesh.offsets, v2, out)
    else:
        cid = cell_of_entry(mesh)
        out = _scatter_mean(xp, mesh.connectivity, v2[cid].astype(xp.float64), mesh.n_points)
    return out.astype(dt, copy=False).reshape((mesh.n_points,) + v.shape[1:])


def point_to_cell(mesh: CellMesh, values, *, _vectorized: bool = False) -> Any:
    """Point values to elements: each cell the mean of its points (vtkPointDataToCellData).

    Parameters
    ----------
    mesh : CellMesh
    values : (n_points,) or (n_points, k) array

    Returns
    -------
    (n_cells,) or (n_cells, k) array
        Floating (float32 for float32 input, else float64).
    """
    v = _check_values(mesh, values, mesh.n_points, "point", "values")
    xp = mesh.xp
    dt = _float_dtype(v.dtype)
    v2 = v.reshape(v.shape[0], v.shape[1] if v.ndim == 2 else 1)
    if xp is np and not _vectorized:
        out = np.empty((mesh.n_cells, v2.shape[1]), np.float64)
        _point_to_cell_cpu(mesh.connectivity, mesh.offsets, v2, out)
        return out.astype(dt, copy=False).reshape((mesh.n_cells,) + v.shape[1:])
    groups = type_groups(mesh)  # (mesh.single_type() would copy a type to the host)
    k = CELL_POINTS[groups[0][0]] if len(groups) == 1 else None
    if k is not None:
        out = v2[mesh.connectivity.reshape(-1, k)].astype(xp.float64).sum(axis=1) / k
    else:
        cid = cell_of_entry(mesh)
        out = _scatter_mean(xp, cid, v2[mesh.connectivity].astype(xp.float64), mesh.n_cells)
    return out.astype(dt, copy=False).reshape((mesh.n_cells,) + v.shape[1:])


def _components(components, name: str):
    """(n, k) from an (n, k) array or a sequence of k (n,) arrays."""
    if isinstance(components, (tuple, list)):
        if not components:
            raise ValueError(f"{name}: expected at least one component")
        cs = [arrays.asarray(c, name=f"{name}[{i}]") for i, c in enumerate(components)]
        if any(c.ndim != 1 or c.shape != cs[0].shape for c in cs):
            raise ValueError(f"{name}: components must be 1-D of one length, got shapes "
                             f"{[tuple(c.shape) for c in cs]}")
        return cs
    a = arrays.asarray(components, name=name)
    if a.ndim != 2:
        raise ValueError(f"{name}: expected an (n, k) array or a sequence of (n,) arrays, got shape {tuple(a.shape)}")
    return [a[:, j] for j in range(a.shape[1])]


def magnitude(components: Any | Sequence[Any]) -> Any:
    """Euclidean norm of vectors.

    Parameters
    ----------
    components : (n, k) array, or a sequence of k (n,) arrays (Blueprint's ``u/v/w``)

    Returns
    -------
    (n,) array
        Floating, on the components' backend.
    """
    cs = _components(components, "components")
    for i, c in enumerate(cs):
        if c.dtype.kind not in "fiub":
            raise TypeError(f"components[{i}]: expected real numbers, got dtype {c.dtype}")
    xp = arrays.get_array_module(cs[0])
    dt = _float_dtype(*[c.dtype for c in cs])
    acc = xp.zeros(cs[0].shape[0], dt)
    for c in cs:
        c = c.astype(dt, copy=False)
        acc += c * c
    return xp.sqrt(acc)


def component(vectors: Any | Sequence[Any], i: int) -> Any:
    """Component `i` of vectors (a view where the input allows it).

    Parameters
    ----------
    vectors : (n, k) array, or a sequence of k (n,) arrays
    i : int
        0 <= i < k (negative counts from the end).
    """
    cs = _components(vectors, "vectors")
    if not -len(cs) <= int(i) < len(cs):
        raise ValueError(f"i: component {i} out of range for {len(cs)}-component vectors")
    return cs[int(i)]


def gradient(mesh: CellMesh, values, *, _vectorized: bool = False) -> Any:
    """Gradient of a point field, as vtkGradientFilter computes it on an unstructured grid.

    At each point: the mean, over the cells using it, of the derivative of the cell's
    interpolant at that point (from the shape functions of VTK's linear cells; for
    triangles and quads the gradient in the cell's plane). Exact for a linear field.

    Parameters
    ----------
    mesh : CellMesh
        Triangles, quads, tetrahedra, hexahedra, wedges, pyramids (mixed or not).
    values : (n_points,) or (n_points, k) array

    Returns
    -------
    (n_points, 3) or (n_points, k, 3) array
        ``[..., j]`` is the derivative along axis j; 0 at points no cell uses. float32 when
        points and values fit it, else float64.

    Raises
    ------
    ValueError
        Cells of another type (vertices, lines, polygons).
    """
    v = _check_values(mesh, values, mesh.n_points, "point", "values")
    xp = mesh.xp
    dt = _float_dtype(v.dtype, mesh.points.dtype)
    v2 = v.reshape(v.shape[0], v.shape[1] if v.ndim == 2 else 1)
    m = v2.shape[1]
    groups = type_groups(mesh)
    bad = sorted(t for t, _ in groups if t not in SHAPED)
    if bad:
        raise ValueError(f"mesh: gradient needs triangles, quads, tetrahedra, hexahedra, wedges or pyramids; "
                         f"it has cells of type {bad}")
    if xp is np and not _vectorized:
        sums = np.zeros((mesh.n_points, m, 3), np.float64)
        counts = np.zeros(mesh.n_points, np.int64)
        dn, ke, dim = _gradient_tables()
        # float64 in, so that one compiled loop serves every dtype
        _gradient_cpu(_f64(mesh.points), _i64(mesh.connectivity),
                      mesh.offsets, mesh.types, _f64(v2), dn, ke, dim, sums, counts)
        out = (sums / np.maximum(counts, 1)[:, None, None]).astype(dt, copy=False)
        return out[:, 0, :] if v.ndim == 1 else out
    ids_all, g_all = [], []
    for t, ids in groups:
        conn = cell_points(mesh, t, ids)
        ids_t, g = _cell_gradients(xp, t, conn, mesh.points.astype(dt, copy=False), v2.astype(dt, copy=False))
        ids_all.append(ids_t)
        g_all.append(g.reshape(g.shape[0], 3 * m))
    if not groups:
        out = xp.zeros((mesh.n_points, m, 3), dt)
    else:
        ids = ids_all[0] if len(ids_all) == 1 else xp.concatenate(ids_all)
        gs = g_all[0] if len(g_all) == 1 else xp.concatenate(g_all)
        out = _scatter_mean(xp, ids, gs, mesh.n_points).astype(dt, copy=False).reshape(-1, 3, m).transpose(0, 2, 1)
    return out[:, 0, :] if v.ndim == 1 else out


def jacobian_solve(xp, a0, a1, a2, d0, d1, d2):
    """Solve ``J g = d`` with J's rows a0, a1, a2 ((..., 3) each), d's rows (..., m) each.

    With ``a2 = a0 x a1`` and ``d2 = 0`` this is the in-plane (least-norm) solution for 2-D
    cells. Singular Jacobians give 0 (VTK gives zero derivatives there too).
    """
    c12, c20, c01 = xp.cross(a1, a2), xp.cross(a2, a0), xp.cross(a0, a1)
    det = (a0 * c12).sum(axis=-1)
    inv = xp.where(det == 0, 0.0, 1.0 / xp.where(det == 0, 1.0, det)).astype(det.dtype)
    # g[..., x, j] = sum_a d_a[..., j] * c_a[..., x] / det
    g = (c12[..., :, None] * d0[..., None, :] + c20[..., :, None] * d1[..., None, :]
         + c01[..., :, None] * d2[..., None, :])
    return g * inv[..., None, None]


def _cell_gradients(xp, t: int, conn, points, values):
    """Per-(cell, point) gradients: point ids (nc * k,) and gradients (nc * k, 3, m)."""
    nc, k = conn.shape
    m = values.shape[1]
    dn_host = _vertex_derivatives(t)
    ke = dn_host.shape[0]
    dn = _on(xp, dn_host.reshape(ke * 3, k).astype(points.dtype), ("dN", t, str(points.dtype)))
    x = points[conn]  # (nc, k, 3)
    f = values[conn]  # (nc, k, m)
    # one matrix product for all evaluation points: (nc, 3|m, k) @ (k, ke * 3)
    jx = xp.matmul(x.transpose(0, 2, 1), dn.T).reshape(nc, 3, ke, 3).transpose(0, 2, 3, 1)  # (nc, ke, a, x)
    jf = xp.matmul(f.transpose(0, 2, 1), dn.T).reshape(nc, m, ke, 3).transpose(0, 2, 3, 1)  # (nc, ke, a, j)
    a0, a1, a2 = jx[:, :, 0], jx[:, :, 1], jx[:, :, 2]
    d0, d1, d2 = jf[:, :, 0], jf[:, :, 1], jf[:, :, 2]
    if CELL_DIM[t] == 2:
        a2, d2 = xp.cross(a0, a1), xp.zeros_like(d0)
    g = jacobian_solve(xp, a0, a1, a2, d0, d1, d2)  # (nc, ke, 3, m)
    if ke == 1:
        g = xp.broadcast_to(g, (nc, k, 3, m))
    return conn.reshape(-1), g.reshape(nc * k, 3, m)


@numba.njit(cache=True)
def _point_to_cell_cpu(conn, offsets, values, out):
    """out[c] = mean of values over cell c's points (CSR), in float64: one pass, no temporaries."""
    m = values.shape[1]
    for c in range(offsets.shape[0] - 1):
        a, b = offsets[c], offsets[c + 1]
        for j in range(m):
            acc = 0.0
            for i in range(a, b):
                acc += values[conn[i], j]
            out[c, j] = acc / (b - a)


@numba.njit(cache=True)
def _cell_to_point_cpu(conn, offsets, values, out):
    """out[p] = mean of values over the cells using p (out zeroed by the caller)."""
    m = values.shape[1]
    count = np.zeros(out.shape[0], np.int64)
    for c in range(offsets.shape[0] - 1):
        for i in range(offsets[c], offsets[c + 1]):
            p = conn[i]
            count[p] += 1
            for j in range(m):
                out[p, j] += values[c, j]
    for p in range(out.shape[0]):
        if count[p] > 1:
            for j in range(m):
                out[p, j] /= count[p]


@functools.cache
def _gradient_tables():
    """Derivative tables by type code for the CPU loop: (16, 8, 3, 8), evaluation points
    per type (16,) and topological dimensions (16,)."""
    dn = np.zeros((16, 8, 3, 8))
    ke = np.zeros(16, np.int64)
    dim = np.zeros(16, np.int64)
    for t in SHAPED:
        d = _vertex_derivatives(t)
        dn[t, :d.shape[0], :, :d.shape[2]] = d
        ke[t] = d.shape[0]
        dim[t] = CELL_DIM[t]
    return dn, ke, dim


@numba.njit(cache=True)
def _gradient_cpu(points, conn, offsets, types, values, dn, ke, dim, sums, counts):
    """The vectorized gradient's arithmetic a cell at a time, summed into sums (n, m, 3)."""
    m = values.shape[1]
    a = np.empty((3, 3))
    d = np.empty((3, m))
    g = np.empty((3, m))
    cr = np.empty((3, 3))
    for c in range(types.shape[0]):
        t = types[c]
        st = offsets[c]
        k = offsets[c + 1] - st
        for e in range(ke[t]):
            a[:, :] = 0.0
            d[:, :] = 0.0
            for i in range(k):
                p = conn[st + i]
                for q in range(3):
                    w = dn[t, e, q, i]
                    for x in range(3):
                        a[q, x] += w * points[p, x]
                    for j in range(m):
                        d[q, j] += w * values[p, j]
            if dim[t] == 2:  # the in-plane solution: a third row normal to the cell, no change along it
                a[2, 0] = a[0, 1] * a[1, 2] - a[0, 2] * a[1, 1]
                a[2, 1] = a[0, 2] * a[1, 0] - a[0, 0] * a[1, 2]
                a[2, 2] = a[0, 0] * a[1, 1] - a[0, 1] * a[1, 0]
                d[2, :] = 0.0
            for q in range(3):  # cr[q] = a[q + 1] x a[q + 2]
                u, v = (q + 1) % 3, (q + 2) % 3
                cr[q, 0] = a[u, 1] * a[v, 2] - a[u, 2] * a[v, 1]
                cr[q, 1] = a[u, 2] * a[v, 0] - a[u, 0] * a[v, 2]
                cr[q, 2] = a[u, 0] * a[v, 1] - a[u, 1] * a[v, 0]
            det = a[0, 0] * cr[0, 0] + a[0, 1] * cr[0, 1] + a[0, 2] * cr[0, 2]
            inv = 0.0 if det == 0.0 else 1.0 / det
            for x in range(3):
                for j in range(m):
                    g[x, j] = (cr[0, x] * d[0, j] + cr[1, x] * d[1, j] + cr[2, x] * d[2, j]) * inv
            lo, hi = (0, k) if ke[t] == 1 else (e, e + 1)  # a simplex's one gradient goes to all its points
            for i in range(lo, hi):
                p = conn[st + i]
                counts[p] += 1
                for j in range(m):
                    for x in range(3):
                        sums[p, j, x] += g[x, j]
