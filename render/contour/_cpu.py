"""Numba kernels of the segmented marching cubes (the CUDA path in _gpu.py is the same
algorithm, one GPU thread per segment).

The point box ``lo..hi`` (inclusive) is cut into segments: a run of at most `chunk`
points along axis 0 at one (j, k). A segment owns the crossed edges starting at its
points (one vertex each, numbered by point, then axis) and the cubes whose lower corner
is one of its points. Pass 1 counts vertices and triangles per segment; an exclusive
scan gives every segment its first vertex and face; pass 2 walks each segment again and
writes, finding the vertex numbers of the edges a cube shares with its three
neighbouring segments by counting along them in step.

Inside/outside bits of a plane around (j, k) are kept as a 9-bit mask, bit ``3*dj + dk``
for the point (i, j + dj, k + dk).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from insitu.log import watch_jit

from ._tables import CORNERS

watch_jit(__name__)  # a first call that compiles takes seconds: logged, so a slow first execute says why

_C0, _C1, _C2 = (np.ascontiguousarray(CORNERS[:, a]) for a in range(3))


@numba.njit(inline="always")
def _mask(vol, i, j, k, hi1, hi2, level, reach):
    m = 0
    for dj in range(reach):
        for dk in range(reach):
            if dj + dk < 4 and j + dj <= hi1 and k + dk <= hi2 and vol[i, j + dj, k + dk] > level:
                m |= 1 << (3 * dj + dk)
    return m


@numba.njit(inline="always")
def _cross(P, Pn, dj, dk, xok, j, k, hi1, hi2):
    """Crossed-edge bits (axis 0, 1, 2) at point (i, j + dj, k + dk): P is plane i, Pn i + 1."""
    if j + dj > hi1 or k + dk > hi2:
        return 0
    b = 3 * dj + dk
    s = (P >> b) & 1
    r = 0
    if xok and s != ((Pn >> b) & 1):
        r |= 1
    if j + dj < hi1 and s != ((P >> (b + 3)) & 1):
        r |= 2
    if k + dk < hi2 and s != ((P >> (b + 1)) & 1):
        r |= 4
    return r


@numba.njit(inline="always")
def _popc(b):
    return (b & 1) + ((b >> 1) & 1) + ((b >> 2) & 1)


@numba.njit(inline="always")
def _case(P, Pn, c0, c1, c2):
    c = 0
    for n in range(8):
        m = Pn if c0[n] else P
        if (m >> (3 * c1[n] + c2[n])) & 1:
            c |= 1 << n
    return c


@numba.njit(parallel=True, cache=True)
def count(vol, level, lo, hi, chunk, ntri, nvert_out, ntri_out):
    """Pass 1: vertices and triangles per segment; returns the number of non-finite samples.

    Segments of one (chunk, j) are walked together, plane by plane, so the loads run
    along contiguous k (the GPU walks each segment in its own thread).
    """
    c0, c1, c2 = _C0, _C1, _C2
    m1, m2 = hi[1] - lo[1] + 1, hi[2] - lo[2] + 1
    nch = (hi[0] - lo[0]) // chunk + 1
    bad = 0
    for s in numba.prange(nch * m1):
        c, r1 = s // m1, s % m1
        j = lo[1] + r1
        i0 = lo[0] + c * chunk
        i1 = min(i0 + chunk - 1, hi[0])
        seg0 = s * m2
        P = np.empty(m2, np.int64)
        for r2 in range(m2):
            P[r2] = _mask(vol, i0, j, lo[2] + r2, hi[1], hi[2], level, 2)
            nvert_out[seg0 + r2] = 0
            ntri_out[seg0 + r2] = 0
        for i in range(i0, i1 + 1):
            xok = i < hi[0]
            for r2 in range(m2):
                k = lo[2] + r2
                if not math.isfinite(vol[i, j, k]):
                    bad += 1
                Pn = _mask(vol, i + 1, j, k, hi[1], hi[2], level, 2) if xok else 0
                p = P[r2]
                if not (p == Pn and (p == 0 or p == 0x1B)):  # else nothing crossed here
                    nvert_out[seg0 + r2] += _popc(_cross(p, Pn, 0, 0, xok, j, k, hi[1], hi[2]))
                    if xok and j < hi[1] and k < hi[2]:
                        ntri_out[seg0 + r2] += ntri[_case(p, Pn, c0, c1, c2)]
                P[r2] = Pn
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


@numba.njit(parallel=True, cache=True)
def generate(vol, ext, level, lo, hi, chunk, nvert, ntri_seg, vincl, tincl, ntri, tri, edge, geo, offset,
             vals, has_vals, keys, has_keys, dims, keybase, verts, faces, normals, vout):
    """Pass 2: write vertices, faces, normals (and sampled values, global edge keys).

    `nvert`/`ntri_seg`: pass 1's counts (segments with none are skipped); `vincl`/`tincl`:
    their inclusive scans (a segment's first vertex is ``vincl - nvert``). `ext`: the samples gradients use (lo then hi,
    inclusive); `geo`: spacing then origin.
    """
    c0, c1, c2 = _C0, _C1, _C2
    m1, m2 = hi[1] - lo[1] + 1, hi[2] - lo[2] + 1
    nch = (hi[0] - lo[0]) // chunk + 1
    for s in numba.prange(nch * m1):
        c, r1 = s // m1, s % m1
        seg0 = s * m2
        active = 0
        for r2 in range(m2):
            if nvert[seg0 + r2] or ntri_seg[seg0 + r2]:
                active += 1
        if active == 0:
            continue
        j = lo[1] + r1
        i0 = lo[0] + c * chunk
        i1 = min(i0 + chunk - 1, hi[0])
        cube_row_j = j < hi[1]
        # Per segment k of this (chunk, j): running vertex counts of the four rows
        # (j + dj, k + dk) it takes vertices from, their crossed-edge bits, plane masks,
        # next face.
        cnt = np.zeros((4, m2), np.int64)
        B = np.zeros((4, m2), np.int64)
        P = np.zeros(m2, np.int64)
        Pn = np.zeros(m2, np.int64)
        t = np.zeros(m2, np.int64)
        ga = np.zeros(3)
        gb = np.zeros(3)
        for r2 in range(m2):
            if nvert[seg0 + r2] == 0 and ntri_seg[seg0 + r2] == 0:
                continue
            k = lo[2] + r2
            for r in range(4):
                dj, dk = r >> 1, r & 1
                if j + dj <= hi[1] and k + dk <= hi[2]:
                    x = (c * m1 + r1 + dj) * m2 + r2 + dk
                    cnt[r, r2] = vincl[x] - nvert[x]
            P[r2] = _mask(vol, i0, j, k, hi[1], hi[2], level, 3)
            Pn[r2] = _mask(vol, i0 + 1, j, k, hi[1], hi[2], level, 3) if i0 < hi[0] else 0
            for r in range(4):
                B[r, r2] = _cross(P[r2], Pn[r2], r >> 1, r & 1, i0 < hi[0], j, k, hi[1], hi[2])
            t[r2] = tincl[seg0 + r2] - ntri_seg[seg0 + r2]
        for i in range(i0, i1 + 1):
            for r2 in range(m2):
                if nvert[seg0 + r2] == 0 and ntri_seg[seg0 + r2] == 0:
                    continue
                k = lo[2] + r2
                n = cnt[0, r2]
                for a in range(3):
                    if (B[0, r2] >> a) & 1:
                        _vertex(vol, ext, level, i, j, k, a, n, geo, offset, vals, has_vals, keys, has_keys,
                                dims, keybase, verts, normals, vout, ga, gb)
                        n += 1
                b0, b1, b2, b3 = B[0, r2], B[1, r2], B[2, r2], B[3, r2]
                if i < hi[0]:
                    pn = Pn[r2]
                    Pnn = _mask(vol, i + 2, j, k, hi[1], hi[2], level, 3) if i + 1 < hi[0] else 0
                    for r in range(4):
                        B[r, r2] = _cross(pn, Pnn, r >> 1, r & 1, i + 1 < hi[0], j, k, hi[1], hi[2])
                    if cube_row_j and k < hi[2]:
                        cs = _case(P[r2], pn, c0, c1, c2)
                        tt = t[r2]
                        for e in range(3 * ntri[cs]):
                            le = tri[cs, e]
                            a = edge[le, 3]
                            r = 2 * edge[le, 1] + edge[le, 2]
                            br = b0 if r == 0 else (b1 if r == 1 else (b2 if r == 2 else b3))
                            if edge[le, 0] == 0:
                                v = cnt[r, r2] + _popc(br & ((1 << a) - 1))
                            else:
                                if i == i1:  # the next plane starts the next segment
                                    x = ((c + 1) * m1 + r1 + edge[le, 1]) * m2 + r2 + edge[le, 2]
                                    base = vincl[x] - nvert[x]
                                else:
                                    base = cnt[r, r2] + _popc(br)
                                v = base + _popc(B[r, r2] & ((1 << a) - 1))
                            faces[tt + e // 3, e % 3] = v
                        t[r2] = tt + ntri[cs]
                    P[r2] = pn
                    Pn[r2] = Pnn
                cnt[0, r2] += _popc(b0)
                cnt[1, r2] += _popc(b1)
                cnt[2, r2] += _popc(b2)
                cnt[3, r2] += _popc(b3)
