"""Numba kernels of the cell contour (the CUDA kernels in _contour_gpu.py are the same
algorithm and give the same numbering).

Cells are taken in chunks of `chunk` consecutive cells; a cell's ids follow those of the
cell before it, as many as its type has (cell_mesh checks the offsets agree), so only a
chunk's first offset is read (and polygons' sizes). Pass 1 (:func:`count`) reads every
cell's corner values once, writes its case per level (``code``) and adds up the crossed
edges and faces of each chunk; an exclusive scan of those totals (level-major, then chunk)
gives every chunk its first vertex slot and face. Pass 2 (:func:`emit`) walks the chunks
again, reading only the cells whose case crosses the level: per crossed edge its key
``lo * n_points + hi`` (its two point ids, lo < hi), per face its slots and cell. The
slots are then welded (:func:`weld`): sorted by key within each level, equal keys become
one vertex, numbered in key order; :func:`vertices` interpolates each vertex once,
always from the lower point id (so the result does not depend on which cell found it).
"""

from __future__ import annotations

import numba
import numpy as np

from insitu.log import watch_jit

watch_jit(__name__)

NAN_BIT = 1 << 16  # in count()'s flags beside the bits 1 << type of the types seen


@numba.njit(parallel=True, cache=True)
def count(conn, offsets, types, values, levels, base, nvert, nface, sizes, chunk, code, tot_v, tot_f, flags):
    """Pass 1: ``code[l, c]`` the case of cell c at level l (bit i: corner i >= level),
    ``tot_v[l, k]``, ``tot_f[l, k]`` the crossed edges and faces of chunk k, ``flags[k]`` the
    bits ``1 << type`` of the types met and NAN_BIT where a corner value is NaN."""
    ncells = types.shape[0]
    nlev = levels.shape[0]
    nchunks = tot_v.shape[1]
    for k in numba.prange(nchunks):
        seen = np.zeros(16, np.uint8)
        nan = False
        # levels outside: a level's loop over the chunk's cells stays simple (a second
        # level reads the chunk's values again, from cache)
        for lv in range(nlev):
            lev = levels[lv]
            tv = 0
            tf = 0
            o = offsets[k * chunk]  # the cells follow each other, sized by their types
            for c in range(k * chunk, min((k + 1) * chunk, ncells)):
                t = types[c] & 15
                seen[t] = 1
                b = base[t]
                n = sizes[t]
                if n == 0:  # a polygon
                    n = offsets[c + 1] - offsets[c]
                p = o
                o += n
                if b < 0:
                    code[lv, c] = 0
                    continue
                m = 0
                if n == 4:  # tets (and quads) unrolled: the four loads issue together
                    x0, x1, x2, x3 = values[conn[p]], values[conn[p + 1]], values[conn[p + 2]], values[conn[p + 3]]
                    m = (np.int64(x0 >= lev) | np.int64(x1 >= lev) << 1 | np.int64(x2 >= lev) << 2
                         | np.int64(x3 >= lev) << 3)
                    nan |= (x0 != x0) | (x1 != x1) | (x2 != x2) | (x3 != x3)
                else:
                    for i in range(n):
                        x = values[conn[p + i]]
                        m |= np.int64(x >= lev) << i
                        nan |= x != x
                code[lv, c] = m
                tv += nvert[b + m]
                tf += nface[b + m]
            tot_v[lv, k] = tv
            tot_f[lv, k] = tf
        fl = NAN_BIT if nan else 0
        for i in range(16):
            if seen[i]:
                fl |= 1 << i
        flags[k] = fl


@numba.njit(parallel=True, cache=True)
def emit(conn, offsets, types, code, base, nvert, nface, sizes, slots, ftab, chunk, voff, foff, npoints, keys,
         faces, cells):
    """Pass 2: per crossed edge of each crossed cell its key (slots numbered from
    ``voff[l, k]`` in chunk k), per face its slot numbers and its cell (from ``foff[l, k]``)."""
    ncells = types.shape[0]
    nlev = code.shape[0]
    nchunks = voff.shape[1]
    ncol = faces.shape[1]
    for k in numba.prange(nchunks):
        for lv in range(nlev):
            vs = voff[lv, k]
            fs = foff[lv, k]
            if k + 1 < nchunks:
                nxt = voff[lv, k + 1]
            elif lv + 1 < nlev:
                nxt = voff[lv + 1, 0]
            else:
                nxt = keys.shape[0]
            if nxt == vs:
                continue  # nothing crossed in this chunk at this level
            o = offsets[k * chunk]
            for c in range(k * chunk, min((k + 1) * chunk, ncells)):
                t = types[c] & 15
                o0 = o
                o += sizes[t]  # the cells follow each other, sized by their types (no polygons reach here)
                b = base[t]
                if b < 0:
                    continue
                cs = b + code[lv, c]
                nv = nvert[cs]
                if nv == 0:
                    continue
                for s in range(nv):
                    p = np.int64(conn[o0 + slots[cs, s, 0]])
                    q = np.int64(conn[o0 + slots[cs, s, 1]])
                    keys[vs + s] = min(p, q) * npoints + max(p, q)
                for f in range(nface[cs]):
                    for j in range(ncol):
                        faces[fs + f, j] = vs + ftab[cs, f, j]
                    cells[fs + f] = c
                vs += nv
                fs += nface[cs]


@numba.njit(cache=True)
def _weld_level(keys, npoints, remap, ukeys):
    """Number the distinct keys of one level in increasing order: ``remap[i]`` the number
    of slot i, ``ukeys[:n]`` the keys; returns n. A counting sort by the edge's lower
    point, then each point's few slots sorted by the other end."""
    m = keys.shape[0]
    start = np.zeros(npoints + 1, np.int64)
    for i in range(m):
        start[keys[i] // npoints + 1] += 1
    for a in range(npoints):
        start[a + 1] += start[a]
    pos = start[:-1].copy()
    order = np.empty(m, np.int64)
    for i in range(m):
        a = keys[i] // npoints
        order[pos[a]] = i
        pos[a] += 1
    n = 0
    for a in range(npoints):
        s, e = start[a], start[a + 1]
        for i in range(s + 1, e):  # insertion sort: a point has a few dozen slots at most
            x = order[i]
            kx = keys[x]
            j = i - 1
            while j >= s and keys[order[j]] > kx:
                order[j + 1] = order[j]
                j -= 1
            order[j + 1] = x
        for i in range(s, e):
            kx = keys[order[i]]
            if i == s or kx != keys[order[i - 1]]:
                ukeys[n] = kx
                n += 1
            remap[order[i]] = n - 1
    return n


def weld(keys, vends, npoints):
    """Per level (slots ``vends[l-1]:vends[l]``), merge the slots of equal keys.

    Returns (remap (slots,) int64: slot -> vertex, unique keys (vertices,) int64 in
    increasing order per level, the levels' vertex ends)."""
    remap = np.empty(keys.shape[0], np.int64)
    ukeys = np.empty(keys.shape[0], np.int64)
    ends = []
    start = total = 0
    for end in vends:
        n = _weld_level(keys[start:end], npoints, remap[start:end], ukeys[total:])
        remap[start:end] += total
        total += n
        ends.append(total)
        start = end
    return remap, ukeys[:total], ends


@numba.njit(parallel=True, cache=True)
def remap_faces(faces, remap):
    for f in numba.prange(faces.shape[0]):
        for j in range(faces.shape[1]):
            faces[f, j] = remap[faces[f, j]]


@numba.njit(parallel=True, cache=True)
def vertices(ukeys, level, points, values, npoints, color, has_color, out, cout):
    """The vertices of one level, each interpolated on its edge from the lower point id;
    returns how many of them read a NaN colour."""
    bad = 0
    for i in numba.prange(ukeys.shape[0]):
        a = ukeys[i] // npoints
        b = ukeys[i] - a * npoints
        va = np.float64(values[a])
        t = (level - va) / (np.float64(values[b]) - va)
        for d in range(3):
            pa = np.float64(points[a, d])
            out[i, d] = pa + t * (np.float64(points[b, d]) - pa)
        if has_color:
            ca = np.float64(color[a])
            cb = np.float64(color[b])
            cout[i] = ca + t * (cb - ca)
            if ca != ca or cb != cb:
                bad += 1
    return bad
