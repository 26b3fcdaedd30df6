"""Threshold a mesh of cells: keep whole cells whose values lie in a range (VTK's vtkThreshold)."""

from __future__ import annotations

import math

import functools
from typing import Any, Mapping

import numpy as np

from insitu import arrays

from ._mesh import CellMesh
from .clip import Clipped, check_fields, check_mesh, check_number, check_values, nan_flag
from .measure import compact

__all__ = ["threshold"]

#: Host arrays through the Numba kernels (False: the whole-array path the device runs, for tests).
use_numba = True


def threshold(mesh: CellMesh, values, lo: float, hi: float, *, association: str = "vertex",
              all_points: bool = True, point_fields: Mapping[str, Any] | None = None,
              cell_fields: Mapping[str, Any] | None = None) -> Clipped:
    """The cells of `mesh` whose values lie in ``[lo, hi]``, whole.

    Parameters
    ----------
    mesh : CellMesh
        Cells of any type.
    values : (n_points,) or (n_cells,) array
        Numeric, no NaN, on the mesh's backend; per point for ``association="vertex"``,
        per cell for ``"element"``.
    lo, hi : float
        The range, bounds included (-inf or inf: open at that end).
    association : {"vertex", "element"}
    all_points : bool
        Vertex values: keep a cell when all its points are in range (True, vtkThreshold's
        AllScalars), or when any is (False).
    point_fields, cell_fields : dict of name -> array, optional
        Carried over to the kept points and cells.

    Returns
    -------
    Clipped
        The kept cells in input order, with the points they use (renumbered, input order).

    Raises
    ------
    ValueError
        Wrong lengths or backends, NaN in `values`, ``lo > hi``, an unknown `association`.

    Notes
    -----
    On CuPy arrays nothing is copied between host and device but 4 counts, read in one
    :func:`insitu.arrays.scalars_to_host`. On NumPy arrays two Numba passes (one thread)
    give the same output.
    """
    check_mesh(mesh)
    if association not in ("vertex", "element"):
        raise ValueError(f"association: expected 'vertex' or 'element', got {association!r}")
    n = mesh.n_points if association == "vertex" else mesh.n_cells
    v = check_values(values, n, "values", mesh, "n_points" if association == "vertex" else "n_cells")
    # open ends (-inf / inf: no bound) are fine; NaN is not
    lo, hi = (float(x) if isinstance(x, (int, float)) and math.isinf(x) else check_number(x, name)
              for x, name in ((lo, "lo"), (hi, "hi")))
    if lo > hi:
        raise ValueError(f"lo, hi: expected lo <= hi, got {lo}, {hi}")
    pf = check_fields(point_fields, mesh.n_points, "point_fields", mesh)
    cf = check_fields(cell_fields, mesh.n_cells, "cell_fields", mesh)
    xp = mesh.xp
    conn, off = mesh.connectivity, mesh.offsets
    inr = (v >= lo) & (v <= hi)
    if xp is np and use_numba:
        if nan_flag(v):
            raise ValueError("values: contains NaN")
        cidx, pidx, oconn, noff = _cpu()(conn, off, inr, association == "element", all_points, mesh.n_points)
        out = CellMesh(mesh.points[pidx], oconn, noff, mesh.types[cidx])
        return Clipped(out, {k: f[pidx] for k, f in pf.items()}, {k: f[cidx] for k, f in cf.items()}, cidx)
    size = off[1:] - off[:-1]
    if association == "element":
        keep = inr
    else:
        cs = xp.concatenate([xp.zeros(1, xp.int64), xp.cumsum(inr[conn], dtype=xp.int64)])
        cnt = cs[off[1:]] - cs[off[:-1]]
        keep = cnt == size if all_points else cnt > 0
    # the points kept cells use: every slot of a kept cell marks its point (dropped slots
    # all mark a spare last entry)
    mark = xp.zeros(int(conn.shape[0]) + 1, xp.int64)
    if mesh.n_cells:
        mark[off[1:-1]] = 1  # cells have at least one point
    slot_cell = xp.cumsum(mark[:-1])
    used = xp.zeros(mesh.n_points + 1, bool)
    used[xp.where(keep[slot_cell], conn, mesh.n_points)] = True
    used = used[:-1]
    nnan, nkeep, nconn, nused = arrays.scalars_to_host(xp.stack(
        [nan_flag(v).astype(xp.int64), keep.sum(), (size * keep).sum(), used.sum()]))
    if nnan:
        raise ValueError("values: contains NaN")
    cidx = compact(keep, nkeep)
    sidx = compact(keep[slot_cell], nconn)
    pidx = compact(used, nused)
    renum = xp.cumsum(used, dtype=xp.int64) - 1
    noff = xp.concatenate([xp.zeros(1, xp.int64), xp.cumsum(size[cidx])])
    out = CellMesh(mesh.points[pidx], renum[conn[sidx]], noff, mesh.types[cidx])
    return Clipped(out, {k: f[pidx] for k, f in pf.items()}, {k: f[cidx] for k, f in cf.items()}, cidx)


@functools.cache
def _cpu():
    """The host path in two Numba passes (built on first use, cached on disk)."""
    import numba

    @numba.njit(cache=True, nogil=True)
    def run(conn, off, inr, element, all_points, npts):
        nc = off.shape[0] - 1
        keep = np.empty(nc, np.bool_)
        used = np.zeros(npts, np.bool_)
        nkeep = nconn = 0
        for c in range(nc):
            a, b = off[c], off[c + 1]
            if element:
                k = inr[c]
            else:
                m = 0
                for j in range(a, b):
                    m += inr[conn[j]]
                k = m == b - a if all_points else m > 0
            keep[c] = k
            if k:
                nkeep += 1
                nconn += b - a
                for j in range(a, b):
                    used[conn[j]] = True
        renum = np.empty(npts, np.int64)
        nused = 0
        for p in range(npts):
            renum[p] = nused
            nused += used[p]
        pidx = np.empty(nused, np.int64)
        for p in range(npts):
            if used[p]:
                pidx[renum[p]] = p
        cidx = np.empty(nkeep, np.int64)
        oconn = np.empty(nconn, np.int64)
        noff = np.empty(nkeep + 1, np.int64)
        noff[0] = 0
        i = at = 0
        for c in range(nc):
            if keep[c]:
                cidx[i] = c
                for j in range(off[c], off[c + 1]):
                    oconn[at] = renum[conn[j]]
                    at += 1
                i += 1
                noff[i] = at
        return cidx, pidx, oconn, noff

    return run
