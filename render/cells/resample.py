"""A field of a :class:`CellMesh` sampled on a uniform grid (vtkResampleToImage / vtkProbeFilter).

Volume rendering of an unstructured mesh is done this way: resample the field onto a
uniform grid, then ray cast that grid like any uniform volume (``render.volume``, with the
origin and spacing :func:`sample_grid` gives: ``vol[i, j, k]`` sits at ``origin + (i, j, k)
* spacing`` there as here); grid points outside every cell are NaN, which the ray caster
treats as transparent. The grid's resolution is the user's choice (cells smaller than the
spacing are sampled, not integrated).

Each 3-D cell is tested against the grid points inside its bounding box: on NumPy a
Numba loop over cells (Newton starting from the previous point's solution), on CuPy
vectorized over (cell, grid point) pairs, a type at a time, in chunks. Tetrahedra by
their barycentric coordinates, hexahedra, wedges and pyramids by inverting their
isoparametric map with Newton's method (as VTK's EvaluatePosition does), so the values
are those of the cell's own interpolant (trilinear in a hexahedron, not that of a split
into tetrahedra). A grid point on a face shared by two cells takes either cell's value
(the same for a point field). Unlike VTK, a point must be inside a cell up to round-off
(VTK accepts 1e-3 outside in parametric units and extrapolates there).
"""

from __future__ import annotations

from typing import Any, Sequence

import numba
import numpy as np

from insitu import arrays
from insitu.log import watch_jit

from ._mesh import CELL_DIM, CELL_POINTS, TETRA, CellMesh, check_hidden
from .fields import _f64, _i64, cell_points, shape_functions, type_groups

__all__ = ["resample", "sample_grid"]

#: How far outside [0, 1] a parametric coordinate may be and still count as inside (round-off).
INSIDE_TOL = 1e-9
#: Newton steps from the cell's centre (vectorized path; the CPU loop stops when converged).
NEWTON_STEPS = 10
#: A Newton step this small (in parametric units) has converged.
NEWTON_TOL = 1e-12
#: (cell, grid point) pairs processed at once on the GPU (about 1 kB of temporaries each).
PAIRS_PER_CHUNK = 1 << 20

watch_jit(__name__)

_CENTRES = {10: (0.25, 0.25, 0.25), 12: (0.5, 0.5, 0.5), 13: (1 / 3, 1 / 3, 0.5), 14: (0.5, 0.5, 0.25)}


def sample_grid(mesh: CellMesh, dims: Sequence[int], bounds: Sequence[float] | None = None):
    """Origin and spacing of the uniform grid :func:`resample` samples.

    Parameters
    ----------
    mesh : CellMesh
    dims : (3,) ints
        Grid points along x, y, z (at least 1 each).
    bounds : (xmin, xmax, ymin, ymax, zmin, zmax), optional
        The grid's extent (its first and last points); default: the mesh points' bounds.

    Returns
    -------
    origin, spacing : tuples of 3 floats
        Point ``(i, j, k)`` is at ``origin + (i, j, k) * spacing`` (spacing 0 along an axis
        of one point).
    """
    d = tuple(int(n) for n in dims)
    if len(d) != 3 or min(d) < 1:
        raise ValueError(f"dims: expected 3 positive grid sizes, got {tuple(dims)}")
    if bounds is None:
        if mesh.n_points == 0:
            raise ValueError("bounds: needed for a mesh without points")
        lo, hi = mesh.points.min(axis=0), mesh.points.max(axis=0)
        b = [float(v) for pair in zip(arrays.scalars_to_host(lo), arrays.scalars_to_host(hi)) for v in pair]
    else:
        b = [float(v) for v in bounds]
        if len(b) != 6 or not all(np.isfinite(b)) or any(b[2 * a + 1] < b[2 * a] for a in range(3)):
            raise ValueError(f"bounds: expected finite (xmin, xmax, ymin, ymax, zmin, zmax) with min <= max, "
                             f"got {tuple(bounds)}")
    origin = (b[0], b[2], b[4])
    spacing = tuple((b[2 * a + 1] - b[2 * a]) / (d[a] - 1) if d[a] > 1 else 0.0 for a in range(3))
    return origin, spacing


def resample(mesh: CellMesh, values, dims: Sequence[int], bounds: Sequence[float] | None = None, *,
             association: str = "vertex", hidden=None, _vectorized: bool = False) -> Any:
    """Sample a point or cell field of a mesh at the points of a uniform grid.

    Parameters
    ----------
    mesh : CellMesh
        Its 3-D cells (tetrahedra, hexahedra, wedges, pyramids) are sampled, others
        ignored (a mesh of cells but no 3-D ones is an error; one of no cells gives NaN).
    values : (n,) or (n, k) array
        One value per point (``association="vertex"``) or per cell (``"element"``).
    dims : (nx, ny, nz) ints
    bounds : (xmin, xmax, ymin, ymax, zmin, zmax), optional
        See :func:`sample_grid` (default: the mesh's bounds).
    association : {"vertex", "element"}
    hidden : (n_cells,) bool array, optional
        Cells not sampled (ghost cells of a decomposed mesh).

    Returns
    -------
    (nx, ny, nz) or (nx, ny, nz, k) array
        On the mesh's backend, indexed ``[i, j, k]`` with x along the first axis; NaN at
        grid points in no cell. float32 for float32 (or smaller) values, else float64.
    """
    if association not in ("vertex", "element"):
        raise ValueError(f"association: expected 'vertex' or 'element', got {association!r}")
    xp = mesh.xp
    n = mesh.n_points if association == "vertex" else mesh.n_cells
    v = arrays.asarray(values, name="values")
    if arrays.get_array_module(v) is not xp:
        raise ValueError(f"values: on {arrays.backend_of(v)}, the mesh is on {arrays.backend_of(mesh.points)}")
    if v.ndim not in (1, 2) or v.shape[0] != n:
        what = "point" if association == "vertex" else "cell"
        raise ValueError(f"values: expected ({n},) or ({n}, k) values (one per {what}), got shape {tuple(v.shape)}")
    if v.dtype.kind not in "fiub":
        raise TypeError(f"values: expected real numbers, got dtype {v.dtype}")
    keep = check_hidden(mesh, hidden)
    present = [t for t, _ in type_groups(mesh)]
    if present and not any(CELL_DIM.get(t) == 3 for t in present):
        raise ValueError(f"mesh: resample samples 3-D cells (tetrahedra, hexahedra, wedges, pyramids); this mesh "
                         f"has cells of type {present} only")
    origin, spacing = sample_grid(mesh, dims, bounds)
    d = tuple(int(k) for k in dims)
    v2 = v.reshape(n, v.shape[1] if v.ndim == 2 else 1)
    odt = xp.float32 if v.dtype.kind == "f" and v.dtype.itemsize <= 4 or v.dtype.itemsize <= 2 else xp.float64
    out = xp.full((d[0] * d[1] * d[2], v2.shape[1]), xp.nan, odt)
    if xp is np and not _vectorized:
        # float64 in and out, so that one compiled loop serves every dtype (a compile is seconds)
        o, h = np.asarray(origin, np.float64), np.asarray(spacing, np.float64)
        out64 = np.full(out.shape, np.nan)
        _resample_cpu(_f64(mesh.points), _i64(mesh.connectivity),
                      mesh.offsets, mesh.types, _f64(v2), association == "element",
                      np.asarray(d, np.int64), o, h, out64, np.ones(0, bool) if keep is None else keep)
        return out64.astype(odt, copy=False).reshape(d + ((v2.shape[1],) if v.ndim == 2 else ()))
    groups = [(t, ids) for t, ids in type_groups(mesh) if CELL_DIM.get(t) == 3]
    if keep is not None:
        groups = [(t, xp.nonzero((mesh.types == t) & keep)[0]) for t, _ in groups]
    for t, ids in groups:
        conn = cell_points(mesh, t, ids)
        cells = xp.arange(conn.shape[0], dtype=xp.int64) if ids is None else ids
        _sample_type(mesh, t, conn, cells, v2, association, d, origin, spacing, out)
    return out.reshape(d + ((v2.shape[1],) if v.ndim == 2 else ()))


def _boxes(xp, x, d, origin, spacing):
    """First grid index and number of grid points along each axis in each cell's box."""
    lo, hi = x.min(axis=1), x.max(axis=1)  # (nc, 3)
    eps = 1e-9
    first, size = [], []
    for q in range(3):  # an axis at a time: the grid's numbers stay Python scalars (no uploads)
        o, h = origin[q], spacing[q]
        if h > 0:
            i0 = xp.maximum(xp.ceil((lo[:, q] - o) / h - eps), 0)
            i1 = xp.minimum(xp.floor((hi[:, q] - o) / h + eps), d[q] - 1)
        else:  # one grid point along the axis: in the box if the box spans it
            i0 = xp.where((lo[:, q] <= o + eps) & (hi[:, q] >= o - eps), 0.0, 1.0)
            i1 = xp.zeros_like(i0)
        first.append(i0)
        size.append(xp.maximum(i1 - i0 + 1, 0))
    return xp.stack(first, axis=1).astype(xp.int64), xp.stack(size, axis=1).astype(xp.int64)


def _sample_type(mesh: CellMesh, t: int, conn, cells, v2, association, d, origin, spacing, out) -> None:
    xp = mesh.xp
    k = CELL_POINTS[t]
    assert k is not None
    nc = conn.shape[0]
    if nc == 0:
        return
    pts = mesh.points
    # chunks of cells sized by the average pairs per cell (boxes alike in one mesh)
    x_all = pts[conn[: min(nc, 4096)]].astype(xp.float64)
    _, size = _boxes(xp, x_all, d, origin, spacing)
    per_cell = max(1.0, float(arrays.scalar_to_host(size.prod(axis=1).sum())) / x_all.shape[0])
    step = max(1, int(PAIRS_PER_CHUNK / per_cell))
    for c0 in range(0, nc, step):
        cc = conn[c0:c0 + step]
        x = pts[cc].astype(xp.float64)  # (m, k, 3)
        i0, size = _boxes(xp, x, d, origin, spacing)
        count = size.prod(axis=1)
        first = xp.cumsum(count)
        total = int(arrays.scalar_to_host(first[-1]))
        if total == 0:
            continue
        pair = xp.arange(total, dtype=xp.int64)
        cell = xp.searchsorted(first, pair, side="right")  # local cell of each pair
        local = pair - (first[cell] - count[cell])
        sx, sy = size[cell, 0], size[cell, 1]
        gi = i0[cell, 0] + local % sx
        gj = i0[cell, 1] + (local // sx) % sy
        gk = i0[cell, 2] + local // (sx * sy)
        p = xp.stack([origin[0] + gi * spacing[0], origin[1] + gj * spacing[1], origin[2] + gk * spacing[2]], axis=1)
        xc = x[cell]  # (P, k, 3)
        r, s, u = _parametric(xp, t, xc, p)
        inside = _inside(xp, t, r, s, u)
        if not arrays.scalar_to_host(inside.any()):
            continue
        r, s, u = r[inside], s[inside], u[inside]
        if t != TETRA:  # Newton may stall on a non-root (near a pyramid's apex): check it landed
            w, _ = shape_functions(t, r, s, u)
            xin = xc[inside]
            miss = sum(w[a][:, None] * xin[:, a] for a in range(k)) - p[inside]
            size = (xin.max(axis=1) - xin.min(axis=1)).max(axis=1)
            hit = (xp.abs(miss).max(axis=1) <= 1e-9 * size)
            inside = xp.nonzero(inside)[0][hit]
            r, s, u = r[hit], s[hit], u[hit]
        cell, gi, gj, gk = cell[inside], gi[inside], gj[inside], gk[inside]
        if association == "vertex":
            w, _ = shape_functions(t, r, s, u)
            ids = cc[cell]
            val = sum(w[a][:, None] * v2[ids[:, a]].astype(xp.float64) for a in range(k))
        else:
            val = v2[cells[c0:c0 + step][cell]]
        out[(gi * d[1] + gj) * d[2] + gk] = val.astype(out.dtype, copy=False)


def _parametric(xp, t: int, xc, p):
    """Parametric coordinates of points `p` (P, 3) in the cells of corners `xc` (P, k, 3)."""
    if t == TETRA:
        x0 = xc[:, 0]
        a0, a1, a2 = xc[:, 1] - x0, xc[:, 2] - x0, xc[:, 3] - x0
        y = p - x0
        return _dual_solve(xp, a0, a1, a2, y)
    k = xc.shape[1]
    c = _CENTRES[t]
    r = xp.full(p.shape[0], c[0])
    s = xp.full(p.shape[0], c[1])
    u = xp.full(p.shape[0], c[2])
    for _ in range(NEWTON_STEPS):
        n, dn = shape_functions(t, r, s, u)
        res = sum(n[i][:, None] * xc[:, i] for i in range(k)) - p
        a = [sum(dn[q][i][:, None] * xc[:, i] for i in range(k)) for q in range(3)]
        dr, ds, du = _dual_solve(xp, a[0], a[1], a[2], res)
        # a far-off point can throw Newton out of the cell's range; keep it finite (it is outside)
        r, s, u = xp.clip(r - dr, -2, 3), xp.clip(s - ds, -2, 3), xp.clip(u - du, -2, 3)
    return r, s, u


def _dual_solve(xp, a0, a1, a2, y):
    """``(p0, p1, p2)`` with ``p0 a0 + p1 a1 + p2 a2 = y`` (NaN where the a's are degenerate)."""
    # the dual basis: c_i . a_j = det * (i == j)
    c0, c1, c2 = xp.cross(a1, a2), xp.cross(a2, a0), xp.cross(a0, a1)
    det = (a0 * c0).sum(axis=1)
    det = xp.where(det == 0, xp.nan, det)
    return (c0 * y).sum(axis=1) / det, (c1 * y).sum(axis=1) / det, (c2 * y).sum(axis=1) / det


def _inside(xp, t: int, r, s, u):
    lo, hi = -INSIDE_TOL, 1 + INSIDE_TOL
    ok = (r >= lo) & (s >= lo) & (u >= lo)
    if t == TETRA:
        return ok & (r + s + u <= hi)
    if t == 13:  # wedge: a triangle in (r, s) times [0, 1]
        return ok & (r + s <= hi) & (u <= hi)
    return ok & (r <= hi) & (s <= hi) & (u <= hi)


# --------------------------------------------------------------------------- CPU (Numba)
# The same sampling as above, a cell at a time: the grid points of its box, Newton from the
# last point's parametric coordinates (neighbouring points are close), no temporaries.


@numba.njit(cache=True, inline="always")
def _shape_nb(t, r, s, u, n, dn):
    """VTK's shape functions of type `t` at (r, s, u) into n (k,) and dn (3, k); see
    fields.shape_functions (the same formulas, written for Numba)."""
    rm, sm, um = 1.0 - r, 1.0 - s, 1.0 - u
    if t == 12:
        n[0], n[1], n[2], n[3] = rm * sm * um, r * sm * um, r * s * um, rm * s * um
        n[4], n[5], n[6], n[7] = rm * sm * u, r * sm * u, r * s * u, rm * s * u
        dn[0, 0], dn[0, 1], dn[0, 2], dn[0, 3] = -sm * um, sm * um, s * um, -s * um
        dn[0, 4], dn[0, 5], dn[0, 6], dn[0, 7] = -sm * u, sm * u, s * u, -s * u
        dn[1, 0], dn[1, 1], dn[1, 2], dn[1, 3] = -rm * um, -r * um, r * um, rm * um
        dn[1, 4], dn[1, 5], dn[1, 6], dn[1, 7] = -rm * u, -r * u, r * u, rm * u
        dn[2, 0], dn[2, 1], dn[2, 2], dn[2, 3] = -rm * sm, -r * sm, -r * s, -rm * s
        dn[2, 4], dn[2, 5], dn[2, 6], dn[2, 7] = rm * sm, r * sm, r * s, rm * s
    elif t == 13:
        w = 1.0 - r - s
        n[0], n[1], n[2], n[3], n[4], n[5] = w * um, r * um, s * um, w * u, r * u, s * u
        dn[0, 0], dn[0, 1], dn[0, 2], dn[0, 3], dn[0, 4], dn[0, 5] = -um, um, 0.0, -u, u, 0.0
        dn[1, 0], dn[1, 1], dn[1, 2], dn[1, 3], dn[1, 4], dn[1, 5] = -um, 0.0, um, -u, 0.0, u
        dn[2, 0], dn[2, 1], dn[2, 2], dn[2, 3], dn[2, 4], dn[2, 5] = -w, -r, -s, w, r, s
    else:  # 14, pyramid
        n[0], n[1], n[2], n[3], n[4] = rm * sm * um, r * sm * um, r * s * um, rm * s * um, u
        dn[0, 0], dn[0, 1], dn[0, 2], dn[0, 3], dn[0, 4] = -sm * um, sm * um, s * um, -s * um, 0.0
        dn[1, 0], dn[1, 1], dn[1, 2], dn[1, 3], dn[1, 4] = -rm * um, -r * um, r * um, rm * um, 0.0
        dn[2, 0], dn[2, 1], dn[2, 2], dn[2, 3], dn[2, 4] = -rm * sm, -r * sm, -r * s, -rm * s, 1.0


@numba.njit(cache=True, inline="always")
def _dual_nb(a, y, pc):
    """pc with sum_q pc[q] a[q] = y (a: 3 x 3 rows); False where a is singular."""
    c00 = a[1, 1] * a[2, 2] - a[1, 2] * a[2, 1]
    c01 = a[1, 2] * a[2, 0] - a[1, 0] * a[2, 2]
    c02 = a[1, 0] * a[2, 1] - a[1, 1] * a[2, 0]
    det = a[0, 0] * c00 + a[0, 1] * c01 + a[0, 2] * c02
    if det == 0.0:
        return False
    c10 = a[2, 1] * a[0, 2] - a[2, 2] * a[0, 1]
    c11 = a[2, 2] * a[0, 0] - a[2, 0] * a[0, 2]
    c12 = a[2, 0] * a[0, 1] - a[2, 1] * a[0, 0]
    c20 = a[0, 1] * a[1, 2] - a[0, 2] * a[1, 1]
    c21 = a[0, 2] * a[1, 0] - a[0, 0] * a[1, 2]
    c22 = a[0, 0] * a[1, 1] - a[0, 1] * a[1, 0]
    pc[0] = (c00 * y[0] + c01 * y[1] + c02 * y[2]) / det
    pc[1] = (c10 * y[0] + c11 * y[1] + c12 * y[2]) / det
    pc[2] = (c20 * y[0] + c21 * y[1] + c22 * y[2]) / det
    return True


@numba.njit(cache=True, inline="always")
def _inside_nb(t, r, s, u, tol):
    lo, hi = -tol, 1.0 + tol
    if r < lo or s < lo or u < lo:
        return False
    if t == 10:
        return r + s + u <= hi
    if t == 13:
        return r + s <= hi and u <= hi
    return r <= hi and s <= hi and u <= hi


@numba.njit(cache=True)
def _newton_nb(t, k, x, px, py, pz, r, s, u, n, dn, a3, y, pc):
    """Parametric coordinates of (px, py, pz) in the cell of corners x, from (r, s, u), into
    pc; False unless Newton converges."""
    for it in range(20):
        _shape_nb(t, r, s, u, n, dn)
        y[0], y[1], y[2] = -px, -py, -pz
        a3[:, :] = 0.0
        for i in range(k):
            for q in range(3):
                y[q] += n[i] * x[i, q]
                a3[0, q] += dn[0, i] * x[i, q]
                a3[1, q] += dn[1, i] * x[i, q]
                a3[2, q] += dn[2, i] * x[i, q]
        if not _dual_nb(a3, y, pc):
            return False
        r, s, u = r - pc[0], s - pc[1], u - pc[2]
        if abs(pc[0]) + abs(pc[1]) + abs(pc[2]) < NEWTON_TOL:
            pc[0], pc[1], pc[2] = r, s, u
            return True
        if it > 3 and (r < -2.0 or r > 3.0 or s < -2.0 or s > 3.0 or u < -2.0 or u > 3.0):
            return False  # thrown far out: the point is outside
    return False


@numba.njit(cache=True, error_model="numpy")
def _resample_cpu(points, conn, offsets, types, values, by_cell, d, o, h, out, keep):
    ncells = types.shape[0]
    m = values.shape[1]
    eps = 1e-9
    use_keep = keep.shape[0] > 0
    for c in range(ncells):
        t = types[c]
        if t != 10 and t != 12 and t != 13 and t != 14 or use_keep and not keep[c]:
            continue
        start = offsets[c]
        k = offsets[c + 1] - start
        x = np.empty((k, 3))
        for i in range(k):
            for q in range(3):
                x[i, q] = points[conn[start + i], q]
        lo = np.empty(3, np.int64)
        hi = np.empty(3, np.int64)
        empty = False
        for q in range(3):
            a, b = x[0, q], x[0, q]
            for i in range(1, k):
                a = min(a, x[i, q])
                b = max(b, x[i, q])
            if h[q] > 0:
                lo[q] = max(0, int(np.ceil((a - o[q]) / h[q] - eps)))
                hi[q] = min(d[q] - 1, int(np.floor((b - o[q]) / h[q] + eps)))
            else:
                lo[q] = 0 if (a <= o[q] + eps and b >= o[q] - eps) else 1
                hi[q] = 0
            if hi[q] < lo[q]:
                empty = True
        if empty:
            continue
        n = np.empty(k)
        dn = np.empty((3, k))
        a3 = np.empty((3, 3))
        y = np.empty(3)
        pc = np.empty(3)
        rc, sc, uc = 0.5, 0.5, 0.5
        if t == 13:
            rc, sc = 1.0 / 3.0, 1.0 / 3.0
        elif t == 14:
            uc = 0.25
        r0, s0, u0, warm = rc, sc, uc, False
        if t == 10:
            for q in range(3):
                for p in range(3):
                    a3[p, q] = x[p + 1, q] - x[0, q]
        for gk in range(lo[2], hi[2] + 1):
            for gj in range(lo[1], hi[1] + 1):
                for gi in range(lo[0], hi[0] + 1):
                    px, py, pz = o[0] + gi * h[0], o[1] + gj * h[1], o[2] + gk * h[2]
                    if t == 10:
                        y[0], y[1], y[2] = px - x[0, 0], py - x[0, 1], pz - x[0, 2]
                        if not _dual_nb(a3, y, pc):
                            continue
                        r, s, u = pc[0], pc[1], pc[2]
                        n[0], n[1], n[2], n[3] = 1.0 - r - s - u, r, s, u
                    else:
                        ok = False
                        for attempt in range(2):  # from the last inside point, then from the centre
                            if attempt == 0 and not warm:
                                continue
                            r, s, u = (r0, s0, u0) if attempt == 0 else (rc, sc, uc)
                            ok = _newton_nb(t, k, x, px, py, pz, r, s, u, n, dn, a3, y, pc)
                            if ok:
                                break
                        warm = False
                        if not ok:
                            continue
                        r, s, u = pc[0], pc[1], pc[2]
                        _shape_nb(t, r, s, u, n, dn)
                    if not _inside_nb(t, r, s, u, INSIDE_TOL):
                        continue
                    r0, s0, u0, warm = r, s, u, True  # the next point starts from an inside one
                    row = (gi * d[1] + gj) * d[2] + gk
                    if by_cell:
                        for j in range(m):
                            out[row, j] = values[c, j]
                    else:
                        for j in range(m):
                            acc = 0.0
                            for i in range(k):
                                acc += n[i] * values[conn[start + i], j]
                            out[row, j] = acc
