"""Clip a mesh of cells by a point scalar: keep where it is below (or above) a value.

Cells wholly kept pass through unchanged (same type, same point ids renumbered); cells the
value cuts are split into tetrahedra (triangles in 2-D, see :mod:`.measure`) and each
simplex is clipped by the marching-tetrahedra cases: one kept point gives a tetrahedron,
two or three a wedge as three tetrahedra. Every wedge is cut along diagonals that start at
its kept point of smallest id, a rule that reads only the shared face's global ids, so the
neighbours of a face cut it alike and the clipped mesh has no cracks. A new point sits on
every cut edge (linear interpolation of the scalar), one per edge however many cells share
it (keyed by the edge's two point ids).

On CuPy arrays all of it is whole-array work on the device, and the only reads back to
the host are the sizes of the output: one read of a few counts before the cut cells are
split, and one more when any cell is cut (:func:`clip` says which). On NumPy arrays the
same steps run per cell in Numba kernels (one thread), to the same output in the same
order (``use_numba = False`` runs the whole-array path on NumPy, as the tests do).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Mapping

import numpy as np

from insitu import arrays

from ._mesh import CELL_DIM, TETRA, TRIANGLE, CellMesh
from .measure import compact, host_tables, padded_ids, split_cells

__all__ = ["Clipped", "clip", "clip_box", "clip_field", "clip_plane", "clip_sphere", "isovolume"]


@dataclasses.dataclass(frozen=True)
class Clipped:
    """A filtered mesh and what it carries over.

    Attributes
    ----------
    mesh : CellMesh
    point_fields : dict of name -> (n_points, ...) array
        The input's point fields at the output's points (interpolated at new points).
    cell_fields : dict of name -> (n_cells, ...) array
        The input's cell fields, copied from each output cell's parent.
    cells : (n_cells,) int64
        The input cell each output cell comes from.
    """

    mesh: CellMesh
    point_fields: dict[str, Any]
    cell_fields: dict[str, Any]
    cells: Any


# ---------------------------------------------------------------------- checks (threshold's too)

def check_mesh(mesh) -> CellMesh:
    if not isinstance(mesh, CellMesh):
        raise TypeError(f"mesh: expected a CellMesh (render.cells.cell_mesh), got {type(mesh).__name__}")
    return mesh


def check_values(values, n: int, name: str, mesh: CellMesh, what: str = "n_points"):
    """`values` as a (n,) numeric array on the mesh's backend."""
    v = arrays.asarray(values, name=name)
    if arrays.is_device_array(v) != arrays.is_device_array(mesh.points):
        raise ValueError(f"{name}: on {arrays.backend_of(v)}, the mesh on {arrays.backend_of(mesh.points)}")
    if v.ndim != 1 or v.shape[0] != n:
        raise ValueError(f"{name}: expected shape ({n},) ({what}), got {tuple(v.shape)}")
    if v.dtype.kind not in "biuf":
        raise ValueError(f"{name}: expected a numeric array, got {v.dtype}")
    return v


def check_number(x, name: str) -> float:
    try:
        f = float(x)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a number, got {x!r}") from None
    if not math.isfinite(f):
        raise ValueError(f"{name}: expected a finite number, got {x!r}")
    return f


def check_fields(fields: Mapping[str, Any] | None, n: int, name: str, mesh: CellMesh) -> dict[str, Any]:
    out = {}
    for k, f in (fields or {}).items():
        a = arrays.asarray(f, name=f"{name}[{k!r}]")
        if arrays.is_device_array(a) != arrays.is_device_array(mesh.points):
            raise ValueError(f"{name}[{k!r}]: on {arrays.backend_of(a)}, the mesh on "
                             f"{arrays.backend_of(mesh.points)}")
        if a.ndim < 1 or a.shape[0] != n:
            raise ValueError(f"{name}[{k!r}]: expected {n} rows, got shape {tuple(a.shape)}")
        out[k] = a
    return out


def nan_flag(v):
    xp = arrays.get_array_module(v)
    return xp.isnan(v).any() if v.dtype.kind == "f" else xp.zeros((), bool)


# ---------------------------------------------------------------------- tables

_NET = {4: [(0, 1), (2, 3), (0, 2), (1, 3), (1, 2)], 3: [(0, 1), (1, 2), (0, 1)]}
#: Edges of a simplex in its sorted order (kept points first), as columns after its points.
_PAIRS = {3: [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)], 2: [(0, 1), (0, 2), (1, 2)]}
# Output simplices by the number of kept points, as columns of [points in sorted order,
# cut points on _PAIRS]; v0 < v1 < v2 among the kept, so each wedge is cut from v0.
_T: dict[int, dict[int, list[tuple[int, ...]]]] = {3: {1: [(0, 4, 5, 6)],
          2: [(0, 1, 7, 8), (0, 5, 7, 8), (0, 5, 8, 6)],
          3: [(0, 6, 8, 9), (0, 1, 2, 9), (0, 1, 9, 8)],
          4: [(0, 1, 2, 3)]},
      2: {1: [(0, 3, 4)], 2: [(0, 1, 5), (0, 5, 4)], 3: [(0, 1, 2)]}}
OUT_W = 3  # output simplices per input simplex, at most


@functools.cache
def _host_clip_tables() -> dict[Any, Any]:
    t: dict[Any, Any] = {"dims": np.array([CELL_DIM.get(c, -1) for c in range(16)], np.int64)}
    for d in (3, 2):
        tpl = np.zeros((d + 3, OUT_W, d + 1), np.int64)
        ok = np.zeros((d + 3, OUT_W), bool)
        for nk, simp in _T[d].items():
            tpl[nk, :len(simp)] = simp
            ok[nk, :len(simp)] = True
        t[d] = (tpl, ok, host_tables()[d][2])
    return t


_clip_tables_on: dict[int | None, dict[Any, Any]] = {}


def _clip_tables(device: int | None) -> dict[Any, Any]:
    if device not in _clip_tables_on:
        h = _host_clip_tables()
        _clip_tables_on[device] = h if device is None else {
            k: (arrays.to_device(v) if k == "dims" else tuple(arrays.to_device(a) for a in v)) for k, v in h.items()}
    return _clip_tables_on[device]


# ---------------------------------------------------------------------- clip

def clip(mesh: CellMesh, scalar, value: float = 0.0, *, keep: str = "below",
         point_fields: Mapping[str, Any] | None = None, cell_fields: Mapping[str, Any] | None = None) -> Clipped:
    """The part of `mesh` where `scalar` is at most (``keep="below"``) or at least
    (``"above"``) `value`.

    Parameters
    ----------
    mesh : CellMesh
        Cells of types tri, quad, tet, hex, wedge, pyramid are clipped; cells of other
        types pass only when wholly kept (a cut line or polygon is an error).
    scalar : (n_points,) array
        Numeric, no NaN, on the mesh's backend.
    value : float
    keep : {"below", "above"}
    point_fields, cell_fields : dict of name -> array, optional
        Carried over: point fields interpolated linearly along cut edges (integer ones as
        float64), cell fields copied from the parent cell.

    Returns
    -------
    Clipped
        Wholly kept cells first (input order), then the tetrahedra, then the triangles of
        the cut cells. Points: the kept input points (input order), then one new point per
        cut edge. Tetrahedra have positive volume; triangles the orientation of their cell.

    Raises
    ------
    ValueError
        Wrong lengths or backends, NaN in `scalar`, an unknown `keep`, a cut cell of a type
        that is not split.

    Notes
    -----
    On CuPy arrays nothing is copied between host and device but counts read with
    :func:`insitu.arrays.scalars_to_host`: one read of 11 values, and when any cell is cut
    a second of 1 value plus 1 per dimension cut (3-D, 2-D): 13 for a tetrahedral mesh.
    """
    check_mesh(mesh)
    if keep not in ("below", "above"):
        raise ValueError(f"keep: expected 'below' or 'above', got {keep!r}")
    s = check_values(scalar, mesh.n_points, "scalar", mesh)
    value = check_number(value, "value")
    pf = check_fields(point_fields, mesh.n_points, "point_fields", mesh)
    cf = check_fields(cell_fields, mesh.n_cells, "cell_fields", mesh)
    inside = s <= value if keep == "below" else s >= value
    return _clip(mesh, s, value, inside, pf, cf)


def _clip(mesh: CellMesh, s, value: float, inside, pf: dict, cf: dict) -> Clipped:
    xp = mesh.xp
    n = mesh.n_points
    conn, off = mesh.connectivity, mesh.offsets
    if mesh.n_cells == 0:
        if bool(arrays.scalar_to_host(nan_flag(s))):
            raise ValueError("scalar: contains NaN")
        return _assemble(mesh, xp.zeros(0, xp.int64), [], xp.zeros((0, 3), mesh.points.dtype),
                         xp.zeros(0, xp.int64), xp.zeros(0, xp.float64), xp.zeros(0, xp.int64),
                         xp.zeros(0, xp.int64), xp.zeros(1, xp.int64), xp.zeros(0, xp.uint8), pf, cf)
    tab = _clip_tables(arrays.device_id(s))
    numba_path = xp is np and use_numba
    if numba_path:  # one pass over the cells (Numba) instead of a dozen whole-array ones
        h = _host_clip_tables()
        nc = mesh.n_cells
        renum = np.empty(n, np.int32 if n < 2**31 else np.int64)  # less memory to touch
        wout = np.empty(conn.shape[0], np.int64), np.empty(nc + 1, np.int64), np.empty(nc, np.uint8), np.empty(
            nc, np.int64)
        cells3, cells2, used, counts = _cpu().classify(conn, off, inside, mesh.types, h["dims"], h[3][2], h[2][2],
                                                       renum, *wout)
        cut_d = {3: cells3, 2: cells2}  # indices here, masks below
        counts[0] = nan_flag(s)
    else:
        types = mesh.types.astype(xp.int64)
        cs = xp.concatenate([xp.zeros(1, xp.int64), xp.cumsum(inside[conn], dtype=xp.int64)])
        cnt = cs[off[1:]] - cs[off[:-1]]
        size = off[1:] - off[:-1]
        whole = cnt == size
        cut = (cnt > 0) & ~whole
        ref = xp.zeros(n, bool)
        ref[conn] = True
        used = inside & ref  # every kept point of a cell is in the output
        dims = tab["dims"][types]
        cut_d = {d: cut & (dims == d) & (tab[d][2][types] > 0) for d in (3, 2)}
        counts = xp.stack([nan_flag(s).astype(xp.int64), whole.sum(), (size * whole).sum(), used.sum(),
                           size.min(), size.max(), (cut & ~cut_d[3] & ~cut_d[2]).sum(),
                           *[v for d in (3, 2) for v in (cut_d[d].sum(), (tab[d][2][types] * cut_d[d]).max())]])
    nnan, n_whole, whole_len, n_used, smin, smax, nbad, nc3, w3, nc2, w2 = arrays.scalars_to_host(counts)
    if nnan:
        raise ValueError("scalar: contains NaN")
    if nbad:
        raise ValueError(f"mesh: {nbad} cells that clip cannot split are cut (lines, polygons); it splits "
                         "tri, quad, tet, hex, wedge and pyramid")
    if numba_path:
        return _clip_cpu(mesh, s, value, inside, used, renum, wout, n_whole, whole_len, n_used, cut_d,
                         {3: w3, 2: w2}, pf, cf)
    # wholly kept cells
    widx = compact(whole, n_whole)
    renum = xp.cumsum(used, dtype=xp.int64) - 1
    if smin == smax:
        wconn = conn.reshape(-1, smin)[widx].reshape(-1)
        woff = xp.arange(0, whole_len + 1, smin, dtype=xp.int64)
    else:
        woff = xp.concatenate([xp.zeros(1, xp.int64), xp.cumsum(size[widx])])
        mark = xp.zeros(whole_len, xp.int64)
        mark[woff[1:-1]] = 1
        cell_of = xp.cumsum(mark)
        wconn = conn[off[widx][cell_of] + xp.arange(whole_len, dtype=xp.int64) - woff[cell_of]]
    wconn = renum[wconn]
    # cut cells: their simplices, sorted kept first and by id, and the keys of their cut edges
    parts = []
    for d, nc, w in ((3, nc3, w3), (2, nc2, w2)):
        if nc == 0:
            continue
        cidx = compact(cut_d[d], nc)
        simp, valid = split_cells(padded_ids(mesh, cidx), mesh.types[cidx], d)
        simp, valid = simp[:, :w].reshape(-1, d + 1), valid[:, :w].reshape(-1)
        key = _sort_rows(simp + xp.where(inside[simp], 0, n))
        kept = key < n
        ids = xp.where(kept, key, key - n)
        nk = kept.sum(axis=1) * valid
        ekeys = []
        for i, j in _PAIRS[d]:
            a, b = ids[:, i], ids[:, j]
            ekeys.append(xp.where(kept[:, i] & ~kept[:, j] & valid, xp.minimum(a, b) * n + xp.maximum(a, b),
                                  _SENTINEL))
        parts.append((d, simp, cidx[xp.arange(simp.shape[0], dtype=xp.int64) // w], ids, nk, xp.stack(ekeys, 1)))
    if not parts:
        return _assemble(mesh, widx, [], xp.zeros((0, 3), mesh.points.dtype), xp.zeros(0, xp.int64),
                         xp.zeros(0, xp.float64), compact(used, n_used), wconn, woff, mesh.types[widx], pf, cf)
    # one point per cut edge: sort the keys, number the distinct ones
    keys = xp.concatenate([p[5].reshape(-1) for p in parts])
    order = xp.argsort(keys)
    sk = keys[order]
    first = (sk != _SENTINEL) & xp.concatenate([xp.ones(1, bool), sk[1:] != sk[:-1]])
    uid = xp.empty(keys.shape[0], xp.int64)
    uid[order] = xp.cumsum(first, dtype=xp.int64) - 1
    outs = []
    at = 0
    for d, simp, parent, ids, nk, ek in parts:
        tpl, ok, _ = tab[d]
        m, ne = ek.shape
        slot = (n_used + uid[at:at + m * ne]).reshape(m, ne)
        at += m * ne
        cols = xp.concatenate([renum[ids], slot], axis=1)
        out = cols[xp.arange(m, dtype=xp.int64)[:, None], tpl[nk].reshape(m, -1)]
        outs.append((d, simp, parent, out.reshape(-1, d + 1), ok[nk].reshape(-1)))
    n_new, *n_out = arrays.scalars_to_host(xp.stack([first.sum()] + [o[4].sum() for o in outs]))
    ukeys = sk[compact(first, n_new)]
    lo, hi = ukeys // n, ukeys % n
    t = (value - s[lo].astype(xp.float64)) / (s[hi].astype(xp.float64) - s[lo].astype(xp.float64))
    used_idx = compact(used, n_used)
    p = mesh.points
    newp = (p[lo] + t[:, None] * (p[hi] - p[lo])).astype(p.dtype)
    allp = xp.concatenate([p[used_idx], newp])
    simps = []
    for (d, simp, parent, out, ok), k in zip(outs, n_out):
        oidx = compact(ok, k)
        o = out[oidx]
        src = oidx // OUT_W
        o = _orient(allp, o, p, simp[src])
        simps.append((d, o, parent[src]))
    return _assemble(mesh, widx, simps, newp, lo, t, used_idx, wconn, woff, mesh.types[widx], pf, cf, hi=hi,
                     allp=allp)


_SENTINEL = np.iinfo(np.int64).max
#: Host arrays through the Numba kernels (False: the whole-array path the device runs, for tests).
use_numba = True


def _clip_cpu(mesh, s, value, inside, used, renum, wout, n_whole, whole_len, n_used, cut_d, widths, pf,
              cf) -> Clipped:
    """The host path: the device path's steps per cell in Numba, to the same output in the
    same order, written straight into the output arrays (`wout`: the whole cells, written
    by classify at the front of buffers of the input's size)."""
    k = _cpu()
    n = mesh.n_points
    shift = max(n - 1, 1).bit_length()  # edge keys lo << shift | hi
    used_idx = np.flatnonzero(used) if pf else None  # only the point fields need them
    parts = []
    for d in (3, 2):
        cells = cut_d[d]
        if len(cells):
            quads, table, _ = host_tables()[d]
            mmax = len(cells) * widths[d]
            it = np.int32 if max(n, mesh.n_cells, 4 * mmax) < 2**31 else np.int64
            bufs = (np.empty((mmax, d + 1), it), np.empty((mmax if d == 2 else 0, d + 1), it), np.empty(mmax, np.int8),
                    np.empty(mmax + 1, it), np.empty(mmax, it))
            parts.append((d, *k.split_clip(mesh.connectivity, mesh.offsets, mesh.types, cells, inside, n, shift,
                                           table, quads, widths[d], tuple(_PAIRS[d]), tuple(range(d + 1)), *bufs)))
    p = mesh.points
    keys = np.concatenate([q[4] for q in parts]) if parts else np.zeros(0, np.int64)
    lo, hi, uid = k.number_edges(keys, n, shift, np.zeros(n + 1, np.int32 if len(keys) < 2**31 else np.int64))
    allp, t = np.empty((n_used + len(lo), 3), p.dtype), np.empty(len(lo), np.float64)
    k.new_points(p, used, lo, hi, s, value, allp, t)
    nout = {q[0]: int(_host_clip_tables()[q[0]][1].sum(axis=1)[q[3]].sum()) for q in parts}  # by kept count
    n3, n2 = nout.get(3, 0), nout.get(2, 0)
    nc = n_whole + n3 + n2
    nconn = whole_len + 4 * n3 + 3 * n2
    wconn, woff, wtypes, wcells = wout
    conn = wconn[:nconn] if nconn <= len(wconn) else np.concatenate([wconn[:whole_len],
                                                                     np.empty(nconn - whole_len, np.int64)])
    if nc <= len(wtypes):
        off, types, cells = woff[:nc + 1], wtypes[:nc], wcells[:nc]
    else:
        off, types, cells = (np.concatenate([a[:m], np.empty(nc - n_whole, a.dtype)])
                             for a, m in ((woff, n_whole + 1), (wtypes, n_whole), (wcells, n_whole)))
    at = 0
    for d, ids, orig, nk, dkeys, kst, parent in parts:
        tpl, ok, _ = _host_clip_tables()[d]
        duid = uid[at:at + len(dkeys)]
        at += len(dkeys)
        if d == 3:
            k.emit_tets(ids, nk, kst, duid, _edge_pos(3), renum, n_used, tpl, ok, allp, parent, n_whole, whole_len,
                        conn, off, types, cells)
        else:  # after the tetrahedra
            o, src = k.emit(ids, nk, kst, duid, _edge_pos(2), renum, n_used, tpl, ok)
            c0, e0 = n_whole + n3, whole_len + 4 * n3
            conn[e0:] = _orient(allp, o, p, orig[src]).reshape(-1)
            off[c0 + 1:] = e0 + 3 * np.arange(1, n2 + 1)
            types[c0:] = TRIANGLE
            cells[c0:] = parent[src]
    if 2 * nconn < len(wconn):  # most of the buffers unused: hand back arrays of their own
        conn, off, types, cells = conn.copy(), off.copy(), types.copy(), cells.copy()
    return _carry(CellMesh(allp, conn, off, types), cells, used_idx, lo, hi, t, pf, cf)


@functools.cache
def _edge_pos(d: int) -> np.ndarray:
    """``pos[nk, e]``: the place of edge ``e`` (of _PAIRS) among the cut edges of a simplex
    with ``nk`` kept points (they come first), -1 where not cut."""
    pos = np.full((d + 2, len(_PAIRS[d])), -1, np.int64)
    for nk in range(d + 2):
        cut = [e for e, (i, j) in enumerate(_PAIRS[d]) if i < nk <= j]
        pos[nk, cut] = np.arange(len(cut))
    return pos


def _carry(out: CellMesh, cells, used_idx, lo, hi, t, pf, cf) -> Clipped:
    """The clipped mesh with the fields carried over: point fields at the kept points then
    interpolated on the cut edges, cell fields from each cell's parent."""
    xp = out.xp
    pout = {}
    for k, f in pf.items():
        g = f if f.dtype.kind == "f" else f.astype(xp.float64)
        tt = t.reshape((-1,) + (1,) * (g.ndim - 1))
        pout[k] = xp.concatenate([g[used_idx], (g[lo] + tt * (g[hi] - g[lo])).astype(g.dtype)])
    return Clipped(out, pout, {k: f[cells] for k, f in cf.items()}, cells)


@functools.cache
def _cpu():
    """The Numba kernels of the host path (built on first use, compiled once per type
    signature, cached on disk): one pass where NumPy makes a dozen over every cell."""
    import types

    import numba

    @numba.njit(cache=True, nogil=True)
    def plane(pts, o, nrm):
        """``(x - o) . nrm`` in float64, summed as :func:`clip_plane`'s ``sum`` (from 0)."""
        out = np.empty(pts.shape[0], np.float64)
        o0, o1, o2, n0, n1, n2 = o[0], o[1], o[2], nrm[0], nrm[1], nrm[2]
        for p in range(pts.shape[0]):
            out[p] = ((0.0 + (np.float64(pts[p, 0]) - o0) * n0) + (np.float64(pts[p, 1]) - o1) * n1) \
                + (np.float64(pts[p, 2]) - o2) * n2
        return out

    @numba.njit(cache=True, nogil=True)
    def classify(conn, off, inside, ctypes, dims, ns3, ns2, renum, oconn, ooff, otypes, ocells):
        """One pass over the cells: those wholly kept written out at once (renumbered, at
        the front of buffers of the input's size, which the cut cells' simplices usually
        fit after), the cut ones by dimension (their indices), the points used (`renum`:
        their new numbers) and the counts of the device path's first read. Hexahedra and
        tetrahedra read their points in loops of a fixed count: a loop bounded by the
        offsets is vectorized by LLVM into code several times slower for 4 or 8 points."""
        nc, npts = off.shape[0] - 1, inside.shape[0]
        nin = 0
        for p in range(npts):  # among the kept points; corrected below if some are in no cell
            renum[p] = nin
            nin += inside[p]
        cells3 = np.empty(nc, np.int64)  # only the first n3 pages are touched
        cells2 = np.empty(nc, np.int64)
        ref = np.zeros(npts, np.bool_)
        n3 = w3 = n2 = w2 = nbad = 0
        smin, smax = np.iinfo(np.int64).max, 0
        ooff[0] = 0
        i = at = 0
        b = off[0]
        for c in range(nc):
            a = b
            b = off[c + 1]
            size = b - a
            k = 0
            if size == 8:
                for j in range(8):
                    k += inside[conn[a + j]]
            elif size == 4:
                for j in range(4):
                    k += inside[conn[a + j]]
            else:
                for j in range(a, b):
                    if inside[conn[j]]:
                        k += 1
            smin = min(smin, size)
            smax = max(smax, size)
            if k == size:
                if size == 8:
                    for j in range(8):
                        q = conn[a + j]
                        oconn[at + j] = renum[q]
                        ref[q] = True
                elif size == 4:
                    for j in range(4):
                        q = conn[a + j]
                        oconn[at + j] = renum[q]
                        ref[q] = True
                else:
                    for j in range(size):
                        q = conn[a + j]
                        oconn[at + j] = renum[q]
                        ref[q] = True
                at += size
                otypes[i] = ctypes[c]
                ocells[i] = c
                i += 1
                ooff[i] = at
                continue
            if k == 0:
                continue
            for j in range(a, b):  # only kept points need to be known as used
                q = conn[j]
                if inside[q]:
                    ref[q] = True
            t = ctypes[c]
            if dims[t] == 3 and ns3[t] > 0:
                cells3[n3] = c
                n3 += 1
                w3 = max(w3, ns3[t])
            elif dims[t] == 2 and ns2[t] > 0:
                cells2[n2] = c
                n2 += 1
                w2 = max(w2, ns2[t])
            else:
                nbad += 1
        used = np.empty(npts, np.bool_)
        nu = 0
        for p in range(npts):
            u = inside[p] and ref[p]
            used[p] = u
            nu += u
        if nu < nin:  # kept points in no cell: numbered without them
            new = np.empty(nin, np.int64)
            k = 0
            for p in range(npts):
                if inside[p]:
                    new[renum[p]] = k
                    renum[p] = k
                    k += used[p]
            for j in range(at):
                oconn[j] = new[oconn[j]]
        counts = np.array([0, i, at, nu, smin, smax, nbad, n3, w3, n2, w2], np.int64)
        return cells3[:n3].copy(), cells2[:n2].copy(), used, counts

    @numba.njit(cache=True, nogil=True)
    def emit_tets(ids, nk, kst, uid, pos, renum, n_used, tpl, ok, pts, parent, i, at, oconn, ooff, otypes, cells):
        """:func:`emit` for tetrahedra, written into the output arrays from cell `i` (conn
        entry `at`) on, turned to positive volume (the sign of ``cross(e0, e1) . e2`` in
        float64 in NumPy's order of operations: the device path's choice, to the bit)."""
        q = np.empty(4, np.int64)
        for r in range(ids.shape[0]):
            for si in range(tpl.shape[1]):
                if not ok[nk[r], si]:
                    continue
                for j in range(4):
                    col = tpl[nk[r], si, j]
                    q[j] = renum[ids[r, col]] if col < 4 else n_used + uid[kst[r] + pos[nk[r], col - 4]]
                a, b, c, d = q[0], q[1], q[2], q[3]
                ax, ay, az = np.float64(pts[a, 0]), np.float64(pts[a, 1]), np.float64(pts[a, 2])
                e00, e01, e02 = np.float64(pts[b, 0]) - ax, np.float64(pts[b, 1]) - ay, np.float64(pts[b, 2]) - az
                e10, e11, e12 = np.float64(pts[c, 0]) - ax, np.float64(pts[c, 1]) - ay, np.float64(pts[c, 2]) - az
                e20, e21, e22 = np.float64(pts[d, 0]) - ax, np.float64(pts[d, 1]) - ay, np.float64(pts[d, 2]) - az
                c0 = e01 * e12 - e02 * e11
                c1 = e02 * e10 - e00 * e12
                c2 = e00 * e11 - e01 * e10
                flip = c0 * e20 + c1 * e21 + c2 * e22 < 0
                oconn[at] = a
                oconn[at + 1] = c if flip else b
                oconn[at + 2] = b if flip else c
                oconn[at + 3] = d
                at += 4
                otypes[i] = 10
                cells[i] = parent[r]
                i += 1
                ooff[i] = at

    @numba.njit(cache=True, nogil=True)
    def split_clip(conn, off, ctypes, cells, inside, n, shift, table, quads, w, pairs, corners, ids_out, orig, nk,
                   kst, parent):
        """Per cut cell: its simplices (split as measure.split_cells), each with its points
        sorted kept first and by id (`ids_out`; as split: `orig`, when it has rows), its kept
        count `nk`, its cell `parent` and the keys of its cut edges (``lo << shift | hi``:
        ordered as the device path's ``lo * n + hi``), those of simplex ``r`` at
        ``keys[kst[r]:kst[r + 1]]`` in the order of `pairs`. The outputs come in with
        ``len(cells) * w`` rows (int32 where it holds every index: less memory to touch).
        `pairs` and `corners` (``range(d + 1)``) are tuples: their lengths are known when
        compiled, so the loops over them have fixed counts (see classify)."""
        nd, ne = len(corners), len(pairs)
        mmax = cells.shape[0] * w
        with_orig = orig.shape[0] > 0  # the triangles' orientation needs them, not the tetrahedra's
        keys = np.empty(4 * mmax, np.int64)  # at most 4 cut edges a simplex, kept in order
        kst[0] = 0
        kn = 0
        ids = np.empty(8, np.int64)
        key = np.empty(nd, np.int64)
        m = 0
        for ci in range(cells.shape[0]):
            c = cells[ci]
            a, b = off[c], off[c + 1]
            t = np.int64(ctypes[c])
            for j in range(8):
                ids[j] = conn[min(a + j, b - 1)]
            v = 0
            for j in range(1, 8):
                if ids[j] < ids[v]:
                    v = j
            bits = 0
            for f in range(quads.shape[1]):
                am = 0
                for j in range(1, 4):
                    if ids[quads[t, f, j]] < ids[quads[t, f, am]]:
                        am = j
                bits |= (am & 1) << f
            code = v * 64 + bits
            for si in range(w):
                if table[t, code, si, 0] < 0:
                    continue
                for j in range(nd):
                    g = ids[table[t, code, si, j]]
                    if with_orig:
                        orig[m, j] = g
                    key[j] = g if inside[g] else g + n
                for i in range(1, nd):  # insertion sort of 3 or 4
                    x = key[i]
                    j = i - 1
                    while j >= 0 and key[j] > x:
                        key[j + 1] = key[j]
                        j -= 1
                    key[j + 1] = x
                cnt = 0
                for j in range(nd):
                    kept = key[j] < n
                    ids_out[m, j] = key[j] if kept else key[j] - n
                    cnt += kept
                if cnt == 0:  # gives nothing: not kept (the output's order is unchanged)
                    continue
                nk[m] = cnt
                for e in range(ne):
                    i, j = pairs[e]
                    if key[i] < n and key[j] >= n:
                        x, y = key[i], key[j] - n  # int64 whatever ids_out holds
                        keys[kn] = (min(x, y) << shift) | max(x, y)
                        kn += 1
                parent[m] = c
                m += 1
                kst[m] = kn
        return ids_out[:m], orig[:m if with_orig else 0], nk[:m], keys[:kn], kst[:m + 1], parent[:m]

    @numba.njit(cache=True, nogil=True)
    def emit(ids, nk, kst, uid, pos, renum, n_used, tpl, ok):
        """The clipped simplices of every simplex by its case, and the row each comes from
        (cut edge ``e`` of simplex ``r`` is ``uid[kst[r] + pos[nk[r], e]]``)."""
        nd = ids.shape[1]
        total = 0
        for r in range(ids.shape[0]):
            for si in range(tpl.shape[1]):
                total += ok[nk[r], si]
        out = np.empty((total, nd), np.int64)
        src = np.empty(total, np.int64)
        o = 0
        for r in range(ids.shape[0]):
            for si in range(tpl.shape[1]):
                if ok[nk[r], si]:
                    for j in range(nd):
                        col = tpl[nk[r], si, j]
                        out[o, j] = renum[ids[r, col]] if col < nd else n_used + uid[kst[r] + pos[nk[r], col - nd]]
                    src[o] = r
                    o += 1
        return out, src

    @numba.njit(cache=True, nogil=True)
    def number_edges(keys, n, shift, start):
        """The distinct keys (``lo << shift | hi``) in order, as (lo, hi), and the rank of
        each key among them: a counting sort by lo into `start` ((n + 1,) zeros, int32 when
        the keys are fewer than 2**31), then each bucket (a few keys) sorted by insertion
        with the keys' places, ranked in one sweep. Only two passes over the points."""
        mask = (np.int64(1) << shift) - 1
        nk = keys.shape[0]
        for i in range(nk):
            start[(keys[i] >> shift) + 1] += 1
        for p in range(n):
            start[p + 1] += start[p]
        sk = np.empty(nk, np.int64)
        at = np.empty(nk, start.dtype)
        for i in range(nk):  # start[lo] moves to the end of bucket lo
            lo = keys[i] >> shift
            j = start[lo]
            sk[j] = keys[i]
            at[j] = i
            start[lo] = j + 1
        uid = np.empty(nk, np.int64)
        ukey = np.empty(nk, np.int64)
        u = -1
        a = 0
        while a < nk:
            lo = sk[a] >> shift
            b = start[lo]
            for i in range(a + 1, b):
                x, y = sk[i], at[i]
                j = i - 1
                while j >= a and sk[j] > x:
                    sk[j + 1] = sk[j]
                    at[j + 1] = at[j]
                    j -= 1
                sk[j + 1] = x
                at[j + 1] = y
            for i in range(a, b):
                if i == a or sk[i] != sk[i - 1]:
                    u += 1
                    ukey[u] = sk[i]
                uid[at[i]] = u
            a = b
        ukey = ukey[:u + 1]
        return ukey >> shift, ukey & mask, uid

    @numba.njit(cache=True, nogil=True)
    def new_points(p, used, lo, hi, s, value, out, t):
        """The used points, then one on each cut edge (the device path's arithmetic), into
        `out`; `t`: where on the edge."""
        nu = 0
        for q in range(used.shape[0]):
            if used[q]:
                out[nu, 0] = p[q, 0]
                out[nu, 1] = p[q, 1]
                out[nu, 2] = p[q, 2]
                nu += 1
        for i in range(lo.shape[0]):
            a, b = lo[i], hi[i]
            sa = np.float64(s[a])
            t[i] = (value - sa) / (np.float64(s[b]) - sa)
            for k in range(3):
                out[nu + i, k] = p[a, k] + t[i] * (p[b, k] - p[a, k])

    return types.SimpleNamespace(plane=plane, classify=classify,
                                 split_clip=split_clip, number_edges=number_edges, new_points=new_points,
                                 emit=emit, emit_tets=emit_tets)


def _sort_rows(k):
    """Rows of a (m, 3 or 4) array sorted, by a sorting network (whole-column min/max)."""
    xp = arrays.get_array_module(k)
    c = [k[:, i] for i in range(k.shape[1])]
    for i, j in _NET[k.shape[1]]:
        c[i], c[j] = xp.minimum(c[i], c[j]), xp.maximum(c[i], c[j])
    return xp.stack(c, axis=1)


def _orient(allp, o, p, parent_simp):
    """Tetrahedra turned to positive volume; triangles to their parent triangle's side."""
    xp = arrays.get_array_module(o)
    q = allp[o].astype(xp.float64)
    e = q[:, 1:] - q[:, :1]
    if o.shape[1] == 4:
        flip = (xp.cross(e[:, 0], e[:, 1]) * e[:, 2]).sum(axis=1) < 0
    else:
        r = p[parent_simp].astype(xp.float64)
        f = r[:, 1:] - r[:, :1]
        flip = (xp.cross(e[:, 0], e[:, 1]) * xp.cross(f[:, 0], f[:, 1])).sum(axis=1) < 0
    return xp.where(flip[:, None], o[:, [0, 2, 1, *range(3, o.shape[1])]], o)


def _assemble(mesh, widx, simps, newp, lo, t, used_idx, wconn, woff, wtypes, pf, cf, hi=None, allp=None):
    xp = mesh.xp
    if allp is None:
        allp = xp.concatenate([mesh.points[used_idx], newp])
    conn = [wconn] + [o.reshape(-1) for _, o, _ in simps]
    offs = [woff]
    end = woff[-1:]
    for d, o, _ in simps:
        offs.append(end + (d + 1) * xp.arange(1, o.shape[0] + 1, dtype=xp.int64))
        end = offs[-1][-1:] if o.shape[0] else end
    types = [wtypes.astype(xp.uint8)] + [xp.full(o.shape[0], TETRA if d == 3 else TRIANGLE, xp.uint8)
                                         for d, o, _ in simps]
    cells = xp.concatenate([widx] + [par for _, _, par in simps])
    out = CellMesh(allp, xp.concatenate(conn).astype(xp.int64, copy=False), xp.concatenate(offs),
                   xp.concatenate(types))
    if hi is None:
        lo = hi = xp.zeros(0, xp.int64)
    return _carry(out, cells, used_idx, lo, hi, t, pf, cf)


# ---------------------------------------------------------------------- implicit functions

def _vec3(x, name: str) -> np.ndarray:
    a = np.asarray(x, np.float64).reshape(-1)
    if a.shape[0] == 2:
        a = np.append(a, 0.0)
    if a.shape != (3,) or not np.isfinite(a).all():
        raise ValueError(f"{name}: expected 2 or 3 finite numbers, got {x!r}")
    return a


def _coords(mesh: CellMesh):
    return mesh.points.astype(mesh.xp.float64)


def clip_field(mesh: CellMesh, values, value: float, *, keep: str = "below", **kw) -> Clipped:
    """:func:`clip` by a point field (the same, named as Ascent's clip-by-field)."""
    return clip(mesh, values, value, keep=keep, **kw)


def clip_plane(mesh: CellMesh, origin, normal, **kw) -> Clipped:
    """Clip by the plane through `origin` with `normal`: by default keeps the side the normal
    points away from (``(x - origin) . normal <= 0``; ``keep="above"`` for the other side).
    Other keywords as :func:`clip`."""
    check_mesh(mesh)
    o, nrm = _vec3(origin, "origin"), _vec3(normal, "normal")
    if not nrm.any():
        raise ValueError("normal: must not be zero")
    if mesh.xp is np and use_numba:  # one pass, no temporaries: the same operations in the same order
        s = _cpu().plane(mesh.points, o, nrm)
    else:
        x = _coords(mesh)
        s = sum((x[:, i] - o[i]) * nrm[i] for i in range(3))  # Python numbers: no upload
    return clip(mesh, s, 0.0, **kw)


def clip_sphere(mesh: CellMesh, center, radius: float, *, inside: bool = True, **kw) -> Clipped:
    """Keep the inside (or outside) of a sphere; the scalar is ``|x - center|^2 - radius^2``
    (VTK's vtkSphere), cut along edges by linear interpolation."""
    check_mesh(mesh)
    c = _vec3(center, "center")
    r = check_number(radius, "radius")
    if r <= 0:
        raise ValueError(f"radius: expected > 0, got {radius!r}")
    x = _coords(mesh)
    s = sum((x[:, i] - c[i]) ** 2 for i in range(3)) - r * r
    return clip(mesh, s, 0.0, keep="below" if inside else "above", **kw)


def clip_box(mesh: CellMesh, lo, hi, *, inside: bool = True, point_fields=None, cell_fields=None) -> Clipped:
    """Keep the inside of the box ``lo <= x <= hi`` (clipped by its six planes in turn, exact
    for any cells), or its outside (``inside=False``: clipped by the signed distance to the
    box, as VTK's vtkBox, so cells across the box's edges and corners are cut where that
    distance interpolates to zero)."""
    check_mesh(mesh)
    lo3, hi3 = _vec3(lo, "lo"), _vec3(hi, "hi")
    if (lo3 > hi3).any():
        raise ValueError(f"lo, hi: expected lo <= hi, got {lo!r}, {hi!r}")
    x = _coords(mesh)
    xp = mesh.xp
    if not inside:
        out = xp.stack([xp.maximum(lo3[i] - x[:, i], x[:, i] - hi3[i]) for i in range(3)], axis=1)
        dist = xp.where((out > 0).any(axis=1), xp.sqrt((xp.maximum(out, 0) ** 2).sum(axis=1)), out.max(axis=1))
        return clip(mesh, dist, 0.0, keep="above", point_fields=point_fields, cell_fields=cell_fields)
    res = Clipped(mesh, check_fields(point_fields, mesh.n_points, "point_fields", mesh),
                  check_fields(cell_fields, mesh.n_cells, "cell_fields", mesh), xp.arange(mesh.n_cells))
    for axis in range(3):
        for bound, keep in ((lo3[axis], "above"), (hi3[axis], "below")):
            r = clip(res.mesh, res.mesh.points[:, axis], float(bound), keep=keep, point_fields=res.point_fields,
                     cell_fields=res.cell_fields)
            res = Clipped(r.mesh, r.point_fields, r.cell_fields, res.cells[r.cells])
    return res


def isovolume(mesh: CellMesh, values, lo: float, hi: float, *, point_fields=None, cell_fields=None) -> Clipped:
    """The part of `mesh` where ``lo <= values <= hi`` (two clips)."""
    check_mesh(mesh)
    lo, hi = check_number(lo, "lo"), check_number(hi, "hi")
    if lo > hi:
        raise ValueError(f"lo, hi: expected lo <= hi, got {lo}, {hi}")
    v = check_values(values, mesh.n_points, "values", mesh)
    pf = dict(check_fields(point_fields, mesh.n_points, "point_fields", mesh))
    key = "\0isovolume"  # a name no caller's field has
    pf[key] = v
    a = clip(mesh, v, lo, keep="above", point_fields=pf, cell_fields=cell_fields)
    b = clip(a.mesh, a.point_fields[key], hi, keep="below", point_fields=a.point_fields, cell_fields=a.cell_fields)
    b.point_fields.pop(key)
    return Clipped(b.mesh, b.point_fields, b.cell_fields, a.cells[b.cells])
