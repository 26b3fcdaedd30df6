"""Numba kernels of the segmented marching cubes (the CUDA path in _gpu.py is the same
algorithm, one GPU thread per segment).

The point box ``lo..hi`` (inclusive) is cut into segments: a run of at most `chunk`
points along axis 0 at one (j, k). A segment owns the crossed edges starting at its
points (one vertex each, numbered by point, then axis) and the cubes whose lower corner
is one of its points. Pass 1 counts vertices and triangles per segment; an exclusive
scan gives every segment its first vertex and face; pass 2 walks the segments again and
writes, finding the vertex numbers of the edges a cube shares with its three
neighbouring segments by counting along them in step.

On the CPU a task takes the segments of one chunk and `_ROWS` rows j. It compares the
samples it reads with the level once, into a slab of inside bits (one byte a sample),
and works on rows of those bytes along contiguous k: loops over whole rows that the
compiler vectorises, and per-cube work only where a cube or edge is crossed.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from insitu.log import watch_jit

from ._tables import CORNERS

watch_jit(__name__)  # a first call that compiles takes seconds: logged, so a slow first execute says why

# _corners packs a cube's inside bits as (i, j, k) offsets 000, 100, 110, 010 (bits 0-3),
# then the same at k + 1 (bits 4-7): the corner numbering of the case tables.
if not (CORNERS == [(0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 1, 0), (0, 0, 1), (1, 0, 1), (1, 1, 1), (0, 1, 1)]).all():
    raise RuntimeError("render.contour._cpu: the case tables number the cube corners differently than its kernels")

_ROWS = 8  # rows j a task walks: the bits of the row after them are found once per task, not once per row


@numba.njit(inline="always")
def _bits(vol, i, j, k0, n, level, out, check):
    """``out[:n]``: whether the samples (i, j, k0 .. k0 + n - 1) lie above `level`.

    Returns how many of them are not finite when `check` (else 0).
    """
    row = vol[i, j, k0:k0 + n]  # indices from 0 up: no wraparound test to keep the loop from vectorizing
    for r in range(n):
        out[r] = row[r] > level
    bad = 0
    if check:
        for r in range(n):
            x = row[r]
            bad += (x - x) != 0  # inf - inf and NaN - NaN are NaN; a branch-free isfinite
    return bad


@numba.njit(inline="always")
def _slab(vol, i0, j0, k0, planes, rows, n, level, owned_planes, owned_rows):
    """Inside bits of the samples (i0 + p, j0 + r, k0 + q), ``p < planes, r < rows, q < n``,
    with a zero past the last q; and how many of the first `owned_planes` x `owned_rows`
    are not finite."""
    S = np.zeros((planes, rows, n + 1), np.uint8)
    bad = 0
    for p in range(planes):
        for r in range(rows):
            bad += _bits(vol, i0 + p, j0 + r, k0, n, level, S[p, r], p < owned_planes and r < owned_rows)
    return S, bad


@numba.njit(inline="always")
def _popc(b):
    return (b & 1) + ((b >> 1) & 1) + ((b >> 2) & 1)


@numba.njit(inline="always")
def _corners(p0, n0, n1, p1, out, n):
    """``out[:n]``: the 4-bit codes of n cube faces k = const from the inside bits of rows
    (i, j), (i + 1, j), (i + 1, j + 1), (i, j + 1); returns whether they differ."""
    for r in range(n):
        out[r] = p0[r] | (n0[r] << np.uint8(1)) | (n1[r] << np.uint8(2)) | (p1[r] << np.uint8(3))
    acc = np.uint8(0)
    for r in range(n):
        acc |= out[r] ^ out[0]
    return acc != 0


@numba.njit(parallel=True, cache=True)
def count(vol, level, lo, hi, chunk, ntri, nvert_out, ntri_out):
    """Pass 1: vertices and triangles per segment; returns the number of non-finite samples.

    A task takes the segments of one chunk and `_ROWS` rows j: it finds the inside
    bits of the samples they read once, then walks each row plane by plane along
    contiguous k (the GPU walks each segment in its own thread).
    """
    m1, m2 = hi[1] - lo[1] + 1, hi[2] - lo[2] + 1
    nch = (hi[0] - lo[0]) // chunk + 1
    ngr = (m1 + _ROWS - 1) // _ROWS
    bad = 0
    for s in numba.prange(nch * ngr):
        c, g = s // ngr, s % ngr
        i0 = lo[0] + c * chunk
        i1 = min(i0 + chunk - 1, hi[0])
        j0 = lo[1] + g * _ROWS
        nj = min(_ROWS, m1 - g * _ROWS)
        S, nbad = _slab(vol, i0, j0, lo[2], min(i1 + 1, hi[0]) - i0 + 1, min(j0 + nj, hi[1]) - j0 + 1, m2,
                        level, i1 - i0 + 1, nj)
        q = np.zeros(m2 + 1, np.uint8)
        nv = np.empty(m2, np.int32)
        nt = np.empty(m2, np.int32)
        for rr in range(nj):
            yok = j0 + rr < hi[1]
            nv[:] = 0
            nt[:] = 0
            for p in range(i1 - i0 + 1):
                xok = i0 + p < hi[0]
                p0 = S[p, rr]
                if xok and yok:
                    n0, p1 = S[p + 1, rr], S[p, rr + 1]
                    if _corners(p0, n0, S[p + 1, rr + 1], p1, q, m2) or 0 < q[0] < 15:
                        for r in range(m2 - 1):
                            nv[r] += (p0[r] ^ p0[r + 1]) + (p0[r] ^ n0[r]) + (p0[r] ^ p1[r])
                        nv[m2 - 1] += (p0[m2 - 1] ^ n0[m2 - 1]) + (p0[m2 - 1] ^ p1[m2 - 1])
                        for r in range(m2 - 1):
                            nt[r] += ntri[q[r] | (q[r + 1] << 4)]
                    continue
                for r in range(m2 - 1):
                    nv[r] += p0[r] ^ p0[r + 1]
                if xok:
                    n0 = S[p + 1, rr]
                    for r in range(m2):
                        nv[r] += p0[r] ^ n0[r]
                if yok:
                    p1 = S[p, rr + 1]
                    for r in range(m2):
                        nv[r] += p0[r] ^ p1[r]
            seg0 = (c * m1 + j0 + rr - lo[1]) * m2
            for r in range(m2):
                nvert_out[seg0 + r] = nv[r]
                ntri_out[seg0 + r] = nt[r]
        bad += nbad
    return bad


@numba.njit(inline="always")
def _grad(vol, i, j, k, ext, out):
    """np.gradient (unit spacing) of the samples ``ext[:3]..ext[3:]`` (inclusive) of
    `vol` at one of them: central inside, one-sided at the ends."""
    p = (i, j, k)
    for a in range(3):
        di, dj, dk = (1, 0, 0) if a == 0 else ((0, 1, 0) if a == 1 else (0, 0, 1))
        if ext[a] == ext[3 + a]:
            out[a] = 0.0
        elif p[a] == ext[a]:
            out[a] = float(vol[i + di, j + dj, k + dk]) - float(vol[i, j, k])
        elif p[a] == ext[3 + a]:
            out[a] = float(vol[i, j, k]) - float(vol[i - di, j - dj, k - dk])
        else:
            out[a] = (float(vol[i + di, j + dj, k + dk]) - float(vol[i - di, j - dj, k - dk])) / 2.0


@numba.njit(inline="always")
def _vertex(vol, ext, level, i, j, k, a, n, geo, offset, vals, has_vals, keys, has_keys, dims, keybase,
            verts, normals, vout, ga, gb):
    """Write the vertex of edge (i, j, k) + axis a as number n."""
    di, dj, dk = (1, 0, 0) if a == 0 else ((0, 1, 0) if a == 1 else (0, 0, 1))
    va = float(vol[i, j, k])
    vb = float(vol[i + di, j + dj, k + dk])
    t = (level - va) / (vb - va)
    p = (i, j, k)
    _grad(vol, i, j, k, ext, ga)
    _grad(vol, i + di, j + dj, k + dk, ext, gb)
    nn = 0.0
    for d in range(3):
        x = float(p[d] + offset[d]) + (t if d == a else 0.0)
        verts[n, d] = x * geo[d] + geo[3 + d]
        g = (ga[d] + (gb[d] - ga[d]) * t) / geo[d]
        ga[d] = g
        nn += g * g
    nn = math.sqrt(nn)
    for d in range(3):
        normals[n, d] = -ga[d] / nn if nn > 0 else 0.0
    if has_vals:
        sa = float(vals[i, j, k])
        vout[n] = sa + (float(vals[i + di, j + dj, k + dk]) - sa) * t
    if has_keys:
        keys[n] = keybase + ((a * dims[0] + i + offset[0]) * dims[1] + j + offset[1]) * dims[2] + k + offset[2]


@numba.njit(inline="always")
def _crossings(b, bx, by, out, n, nz, xok, yok):
    """Crossed-edge bits (axis 0, 1, 2) of n points of a row: `b` their inside bits, `bx`
    the next plane's (read when `xok`), `by` the next row's (when `yok`); axis 2 for the
    first `nz` points only."""
    mx = np.uint8(1 if xok else 0)
    my = np.uint8(2 if yok else 0)
    bz = b[1:]  # loops index from 0 with the loop variable alone, so they vectorize
    for r in range(min(n, nz)):
        v = b[r]
        out[r] = ((v ^ bx[r]) & mx) | (((v ^ by[r]) << np.uint8(1)) & my) | ((v ^ bz[r]) << np.uint8(2))
    for r in range(min(n, nz), n):
        v = b[r]
        out[r] = ((v ^ bx[r]) & mx) | (((v ^ by[r]) << np.uint8(1)) & my)


@numba.njit(parallel=True, cache=True)
def generate(vol, ext, level, lo, hi, chunk, nvert, ntri_seg, vincl, tincl, ntri, tri, edge, geo, offset,
             vals, has_vals, keys, has_keys, dims, keybase, verts, faces, normals, vout):
    """Pass 2: write vertices, faces, normals (and sampled values, global edge keys).

    `nvert`/`ntri_seg`: pass 1's counts; `vincl`/`tincl`: their inclusive scans (a
    segment's first vertex is ``vincl - nvert``). `ext`: the samples gradients use (lo
    then hi, inclusive); `geo`: spacing then origin.

    A task takes pass 1's chunk and rows, over the k range of its segments that have
    anything to write: the inside bits of the samples read, then per row, plane by
    plane, the crossed-edge bits and first vertex numbers of rows j and j + 1 at planes
    i and i + 1, so every vertex number a cube needs is a lookup.
    """
    m1, m2 = hi[1] - lo[1] + 1, hi[2] - lo[2] + 1
    nch = (hi[0] - lo[0]) // chunk + 1
    ngr = (m1 + _ROWS - 1) // _ROWS
    for s in numba.prange(nch * ngr):
        c, g = s // ngr, s % ngr
        j0 = lo[1] + g * _ROWS
        nj = min(_ROWS, m1 - g * _ROWS)
        seg0 = (c * m1 + g * _ROWS) * m2
        ka, kb = m2, -1  # the k range of the segments with anything to write
        for x in range(seg0, seg0 + nj * m2):
            if nvert[x] or ntri_seg[x]:
                ka = min(ka, (x - seg0) % m2)
                kb = max(kb, (x - seg0) % m2)
        if kb < 0:
            continue
        i0 = lo[0] + c * chunk
        i1 = min(i0 + chunk - 1, hi[0])
        k0 = lo[2] + ka
        nw = kb - ka + 1  # segments written
        nx = min(kb + 1, m2 - 1) - ka + 1  # points whose edges they use
        nz = hi[2] - k0  # points with an axis-2 edge
        S, _ = _slab(vol, i0, j0, k0, min(i1 + 2, hi[0]) - i0 + 1, min(j0 + nj + 1, hi[1]) - j0 + 1,
                     min(kb + 2, m2 - 1) - ka + 1, level, 0, 0)
        # Per point of rows j, j + 1 at planes i, i + 1 (by parity): crossed-edge bits and
        # first vertex number, flat: (plane * 2 + row) * (nx + 1) + point.
        L = nx + 1
        X = np.zeros(4 * L, np.uint8)
        V = np.zeros(4 * L, np.int64)
        at = np.empty((2, 12), np.int64)  # per parity of i, per cube edge: its place at w = 0
        below = np.empty(12, np.uint8)  # per cube edge: the bits of the edges numbered before it at its point
        for le in range(12):
            below[le] = (1 << edge[le, 3]) - 1
            for par in range(2):
                pl = par if edge[le, 0] == 0 else 1 - par
                at[par, le] = (pl * 2 + edge[le, 1]) * L + edge[le, 2]
        T = np.empty(nw, np.int64)
        q = np.zeros(L, np.uint8)
        ga = np.zeros(3)
        gb = np.zeros(3)
        for rr in range(nj):
            j = j0 + rr
            srow = seg0 + rr * m2 + ka
            if not (nvert[srow:srow + nw].any() or ntri_seg[srow:srow + nw].any()):
                continue
            yok = j < hi[1]
            rows = 2 if yok else 1
            for r in range(rows):
                _crossings(S[0, rr + r], S[min(1, S.shape[0] - 1), rr + r], S[0, min(rr + r + 1, S.shape[1] - 1)],
                           X[r * L:(r + 1) * L], nx, nz, i0 < hi[0], j + r < hi[1])
                first, cnt, v = vincl[srow + r * m2:], nvert[srow + r * m2:], V[r * L:(r + 1) * L]
                for w in range(nx):
                    v[w] = first[w] - cnt[w]
            for w in range(nw):
                T[w] = tincl[srow + w] - ntri_seg[srow + w]
            for i in range(i0, i1 + 1):
                p = i - i0
                ps, ns = p & 1, 1 - (p & 1)
                xok = i < hi[0]
                if xok:  # the next plane's crossings and first vertex numbers
                    for r in range(rows):
                        xn, vn = X[(ns * 2 + r) * L:(ns * 2 + r + 1) * L], V[(ns * 2 + r) * L:(ns * 2 + r + 1) * L]
                        _crossings(S[p + 1, rr + r], S[min(p + 2, S.shape[0] - 1), rr + r],
                                   S[p + 1, min(rr + r + 1, S.shape[1] - 1)], xn, nx, nz, i + 1 < hi[0],
                                   j + r < hi[1])
                        if i < i1:
                            xp, vp = X[(ps * 2 + r) * L:(ps * 2 + r + 1) * L], V[(ps * 2 + r) * L:(ps * 2 + r + 1) * L]
                            for w in range(nx):
                                x = xp[w]
                                vn[w] = vp[w] + ((x & 1) + ((x >> 1) & 1) + (x >> 2))
                        else:  # the next plane starts the next chunk's segments
                            first, cnt = vincl[srow + r * m2 + m1 * m2:], nvert[srow + r * m2 + m1 * m2:]
                            for w in range(nx):
                                vn[w] = first[w] - cnt[w]
                x0, v0 = X[ps * 2 * L:], V[ps * 2 * L:]
                for w in range(nw):
                    xb = x0[w]
                    if xb:
                        n = v0[w]
                        for a in range(3):
                            if (xb >> a) & 1:
                                _vertex(vol, ext, level, i, j, k0 + w, a, n, geo, offset, vals, has_vals, keys,
                                        has_keys, dims, keybase, verts, normals, vout, ga, gb)
                                n += 1
                if not (xok and yok):
                    continue
                p0, n0, n1, p1 = S[p, rr], S[p + 1, rr], S[p + 1, rr + 1], S[p, rr + 1]
                if not _corners(p0, n0, n1, p1, q, nx) and not 0 < q[0] < 15:
                    continue
                ed = at[ps]
                for w in range(min(nw, nz)):
                    cs = q[w] | (q[w + 1] << 4)
                    nt = ntri[cs]
                    if nt == 0:
                        continue
                    tt = T[w]
                    for t in range(nt):
                        for c3 in range(3):
                            le = tri[cs, 3 * t + c3]
                            x = ed[le] + w
                            faces[tt + t, c3] = V[x] + _popc(X[x] & below[le])
                    T[w] = tt + nt
