"""Numba kernels of the segmented marching cubes (the CUDA path in _gpu.py is the same
algorithm, one GPU thread per segment).

The point box ``lo..hi`` (inclusive) is cut into segments: a run of at most `chunk`
points along axis 0 at one (j, k). A segment owns the crossed edges starting at its
points (one vertex each, numbered by point, then axis) and the cubes whose lower corner
is one of its points. Pass 1 counts vertices and triangles per segment; an exclusive
scan gives every segment its first vertex and face; pass 2 walks the segments again and
writes, finding the vertex numbers of the edges a cube shares with its three
neighbouring segments by counting along them in step.

On the CPU a task takes the segments of one chunk and `_ROWS` rows j (a run of segment
numbers). It compares the samples it reads with the level once, into a slab of inside
bits (one byte a sample, rows along contiguous k), and walks it plane by plane: loops
over whole planes of bytes that the compiler vectorises, and per-cube work only where
a 64-bit word of edge bits or cases says something is crossed.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from insitu.log import watch_jit

from ._tables import CORNERS

watch_jit(__name__)  # a first call that compiles takes seconds: logged, so a slow first execute says why

# The kernels pack a cube's inside bits as (i, j, k) offsets 000, 100, 110, 010 (bits 0-3),
# then the same at k + 1 (bits 4-7): the corner numbering of the case tables.
if not (CORNERS == [(0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 1, 0), (0, 0, 1), (1, 0, 1), (1, 1, 1), (0, 1, 1)]).all():
    raise RuntimeError("render.contour._cpu: the case tables number the cube corners differently than its kernels")

_ROWS = 16  # rows j a task walks: the bits of the row after them are found once per task, not once per row


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
def _popc(b):
    return (b & 1) + ((b >> 1) & 1) + ((b >> 2) & 1)


def tasks(lo, hi, chunk: int) -> int:
    """How many tasks the kernels cut the point box ``lo..hi`` into (a chunk by `_ROWS` rows)."""
    return ((hi[0] - lo[0]) // chunk + 1) * -(-(hi[1] - lo[1] + 1) // _ROWS)


@numba.njit(inline="always")
def _first(loc, off, x, m1, m2, ngr):
    """First vertex (or triangle) of segment x: its task's offset plus its place in the task."""
    return off[(x // (m1 * m2)) * ngr + ((x // m2) % m1) // _ROWS] + loc[x]


@numba.njit(inline="always")
def _cases(b0, b1, b1y, b0y, n, q, C):
    """Case codes of the first n cubes between planes b0 and b1 (rows of inside bits; b0y,
    b1y: the next row) into C: corners 0-3 from the low-k face `q`, 4-7 from its k + 1."""
    for x in range(n):
        q[x] = b0[x] | (b1[x] << np.uint8(1)) | (b1y[x] << np.uint8(2)) | (b0y[x] << np.uint8(3))
    qz = q[1:]
    for x in range(n):
        C[x] = q[x] | (qz[x] << np.uint8(4))


@numba.njit(inline="always")
def _plane_bits(vol, i, j0, k0, rows, n, level, out, width, check, owned_rows):
    """Inside bits of rows j0 .. j0 + rows - 1 of plane i (n samples from k0) into `out`,
    a row every `width` bytes; the bytes past n repeat the last bit, so they add no
    axis-2 crossing. Returns how many samples of the first `owned_rows` rows are not
    finite when `check` (else 0)."""
    bad = 0
    for r in range(rows):
        o = out[r * width:(r + 1) * width]
        bad += _bits(vol, i, j0 + r, k0, n, level, o, check and r < owned_rows)
        last = o[n - 1]
        for q in range(n, width):
            o[q] = last
    return bad


@numba.njit(parallel=True, cache=True)
def count(vol, level, lo, hi, chunk, ntri, vloc, tloc, vtask, ttask):
    """Pass 1: returns the number of non-finite samples.

    A task takes the segments of one chunk and `_ROWS` rows j (a run of segment
    numbers): it finds the inside bits of the samples they read once, then walks them
    plane by plane, all rows at once in loops over flat byte planes, looking up the
    triangles of cubes where a 64-bit word of cases says something is crossed (the GPU
    walks each segment in its own thread). Per segment its first vertex and triangle
    counted from its task's (`vloc`, `tloc`), per task its vertices and triangles
    (`vtask`, `ttask`): a scan of the tasks then numbers everything.
    """
    m1, m2 = hi[1] - lo[1] + 1, hi[2] - lo[2] + 1
    nch = (hi[0] - lo[0]) // chunk + 1
    ngr = (m1 + _ROWS - 1) // _ROWS
    W = (m2 + 8) // 8 * 8  # bytes a row: whole words, one past the points
    bad = 0
    for s in numba.prange(nch * ngr):
        c, g = s // ngr, s % ngr
        i0 = lo[0] + c * chunk
        i1 = min(i0 + chunk - 1, hi[0])
        j0 = lo[1] + g * _ROWS
        nj = min(_ROWS, m1 - g * _ROWS)
        PL = (nj + 1) * W  # a plane of bits: rows j0 .. j0 + nj
        nplanes = min(i1 + 1, hi[0]) - i0 + 1
        S = np.zeros((nplanes + 1) * PL + W, np.uint8)  # then an all-outside plane and row: read, never used
        nbad = 0
        for p in range(nplanes):
            nbad += _plane_bits(vol, i0 + p, j0, lo[2], min(j0 + nj, hi[1]) - j0 + 1, m2, level, S[p * PL:], W,
                                p <= i1 - i0, nj)
        NL = nj * W
        ncr = min(nj, hi[1] - j0)  # rows with cubes and axis-1 edges
        nv = np.zeros(NL, np.int32)
        nt = np.zeros(NL, np.int32)
        q = np.zeros(NL + 1, np.uint8)
        C64 = np.zeros(NL // 8, np.uint64)
        C = C64.view(np.uint8)
        for p in range(i1 - i0 + 1):
            xok = i0 + p < hi[0]
            mx = np.uint8(1 if xok else 0)
            b, bx, by, bz = S[p * PL:], S[(p + 1) * PL:], S[p * PL + W:], S[p * PL + 1:]
            for x in range(ncr * W):
                v = b[x]
                nv[x] += ((v ^ bx[x]) & mx) + (v ^ by[x]) + (v ^ bz[x])
            for x in range(ncr * W, NL):
                v = b[x]
                nv[x] += ((v ^ bx[x]) & mx) + (v ^ bz[x])
            if not xok or ncr == 0:
                continue
            n = ncr * W
            _cases(b, bx, S[(p + 1) * PL + W:], by, n, q, C)
            for wd in range(n // 8):
                word = C64[wd]
                if word == 0 or word == 0xFFFFFFFFFFFFFFFF:
                    continue
                for x in range(wd * 8, wd * 8 + 8):
                    if x % W < m2 - 1:  # a cube: k < hi[2]
                        nt[x] += ntri[C[x]]
        vrun, trun = 0, 0
        for rr in range(nj):
            seg0 = (c * m1 + j0 + rr - lo[1]) * m2
            for r in range(m2):
                vloc[seg0 + r] = vrun
                tloc[seg0 + r] = trun
                vrun += nv[rr * W + r]
                trun += nt[rr * W + r]
        vtask[s] = vrun
        ttask[s] = trun
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
    ib, jb, kb = i + di, j + dj, k + dk
    if ext[0] < i and ib < ext[3] and ext[1] < j and jb < ext[4] and ext[2] < k and kb < ext[5]:
        # Both ends inside: central differences, as _grad takes them, without its tests
        ga[0] = (float(vol[i + 1, j, k]) - float(vol[i - 1, j, k])) / 2.0
        ga[1] = (float(vol[i, j + 1, k]) - float(vol[i, j - 1, k])) / 2.0
        ga[2] = (float(vol[i, j, k + 1]) - float(vol[i, j, k - 1])) / 2.0
        gb[0] = (float(vol[ib + 1, jb, kb]) - float(vol[ib - 1, jb, kb])) / 2.0
        gb[1] = (float(vol[ib, jb + 1, kb]) - float(vol[ib, jb - 1, kb])) / 2.0
        gb[2] = (float(vol[ib, jb, kb + 1]) - float(vol[ib, jb, kb - 1])) / 2.0
    else:
        _grad(vol, i, j, k, ext, ga)
        _grad(vol, ib, jb, kb, ext, gb)
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
def generate(vol, ext, level, lo, hi, chunk, vloc, tloc, vtask, ttask, voff, toff, ntri, tri, edge, geo, offset,
             vals, has_vals, keys, has_keys, dims, keybase, verts, faces, normals, vout):
    """Pass 2: write vertices, faces, normals (and sampled values, global edge keys).

    `vloc`, `tloc`, `vtask`, `ttask`: pass 1's output; `voff`/`toff`: the first vertex
    and triangle of each task (the exclusive scan of `vtask`/`ttask`, over all levels).
    `ext`: the samples gradients use (lo then hi, inclusive); `geo`: spacing then origin.

    A task takes pass 1's chunk and rows, over the k range of its segments that have
    anything to write. Plane by plane it finds, for all its rows at once, the crossed
    edges and first vertex number of each point and the case of each cube (loops over
    whole planes of bytes), then writes the vertices of crossed edges and the triangles
    of crossed cubes, found eight at a time.
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
        send = seg0 + nj * m2
        for x in range(seg0, send):
            vn, tn = (vloc[x + 1], tloc[x + 1]) if x + 1 < send else (vtask[s], ttask[s])
            if vn != vloc[x] or tn != tloc[x]:
                ka = min(ka, (x - seg0) % m2)
                kb = max(kb, (x - seg0) % m2)
        if kb < 0:
            continue
        i0 = lo[0] + c * chunk
        i1 = min(i0 + chunk - 1, hi[0])
        k0 = lo[2] + ka
        nw = kb - ka + 1  # segments written
        nx = min(kb + 1, m2 - 1) - ka + 1  # points whose edges they use
        nb = min(kb + 2, m2 - 1) - ka + 1  # points whose bits those need
        nz = hi[2] - k0  # points with an axis-2 edge
        ny = min(nj + 1, hi[1] - j0 + 1)  # rows j0 .. j0 + nj that exist
        ncube_rows = min(nj, hi[1] - j0)  # rows with cubes
        W = (nb + 8) // 8 * 8  # bytes a row: whole words, one past the points
        PL = (nj + 2) * W  # a plane of bits: rows j0 .. j0 + nj + 1
        XL = (nj + 1) * W  # a plane of edges and numbers: rows j0 .. j0 + nj
        nplanes = min(i1 + 2, hi[0]) - i0 + 1
        S = np.zeros((nplanes + 1) * PL, np.uint8)  # an all-outside plane last: read, never used
        for p in range(nplanes):
            _plane_bits(vol, i0 + p, j0, k0, min(nj + 2, ny + 1, hi[1] - j0 + 1), nb, level, S[p * PL:], W,
                        False, 0)
        X64 = np.zeros(2 * XL // 8, np.uint64)  # crossed-edge bits, planes i and i + 1 by parity
        X = X64.view(np.uint8)
        V = np.zeros(2 * XL, np.int64)  # first vertex number at each point
        C64 = np.zeros(XL // 8, np.uint64)  # cube cases
        C = C64.view(np.uint8)
        q = np.zeros(XL + 1, np.uint8)
        T = np.zeros(nj * W, np.int64)  # next triangle of each segment
        at = np.empty((2, 12), np.int64)  # per parity of i, per cube edge: its place in X, V at (j0, k0)
        below = np.empty(12, np.uint8)  # per cube edge: the bits of the edges numbered before it at its point
        for le in range(12):
            below[le] = (1 << edge[le, 3]) - 1
            for par in range(2):
                pl = par if edge[le, 0] == 0 else 1 - par
                at[par, le] = pl * XL + edge[le, 1] * W + edge[le, 2]
        for rr in range(ny):
            for w in range(nx):
                x = seg0 + rr * m2 + ka + w
                V[rr * W + w] = _first(vloc, voff, x, m1, m2, ngr)
        for rr in range(nj):
            for w in range(nw):
                x = seg0 + rr * m2 + ka + w
                T[rr * W + w] = toff[s] + tloc[x]
        _plane_edges(S, 0, PL, W, XL, X[:XL], i0 < hi[0], j0, nj, hi[1])
        ga = np.zeros(3)
        gb = np.zeros(3)
        for i in range(i0, i1 + 1):
            p = i - i0
            ps = p & 1
            xc, vc = X[ps * XL:(ps + 1) * XL], V[ps * XL:(ps + 1) * XL]
            if i < hi[0]:  # the next plane's crossings and first vertex numbers
                xn, vn = X[(1 - ps) * XL:(2 - ps) * XL], V[(1 - ps) * XL:(2 - ps) * XL]
                _plane_edges(S, p + 1, PL, W, XL, xn, i + 1 < hi[0], j0, nj, hi[1])
                if i < i1:
                    for x in range(XL):
                        b = xc[x]
                        vn[x] = vc[x] + ((b & 1) + ((b >> 1) & 1) + (b >> 2))
                else:  # the next plane starts the next chunk's segments
                    for rr in range(ny):
                        for w in range(nx):
                            x = seg0 + m1 * m2 + rr * m2 + ka + w
                            vn[rr * W + w] = _first(vloc, voff, x, m1, m2, ngr)
            xw = X64[ps * XL // 8:(ps + 1) * XL // 8]
            for rr in range(nj):
                for wd in range(rr * W // 8, (rr * W + nw + 7) // 8):
                    if xw[wd] == 0:
                        continue
                    for x in range(wd * 8, wd * 8 + 8):
                        xb = xc[x]
                        w = x - rr * W
                        if xb == 0 or w >= nw:
                            continue
                        n = vc[x]
                        for a in range(3):
                            if (xb >> a) & 1:
                                _vertex(vol, ext, level, i, j0 + rr, k0 + w, a, n, geo, offset, vals, has_vals,
                                        keys, has_keys, dims, keybase, verts, normals, vout, ga, gb)
                                n += 1
            if i == hi[0] or ncube_rows <= 0:
                continue
            n = ncube_rows * W
            _cases(S[p * PL:], S[(p + 1) * PL:], S[(p + 1) * PL + W:], S[p * PL + W:], n, q, C)
            ed = at[ps]
            last = min(nw, nz)
            for rr in range(ncube_rows):
                for wd in range(rr * W // 8, (rr * W + last + 7) // 8):
                    word = C64[wd]
                    if word == 0 or word == 0xFFFFFFFFFFFFFFFF:
                        continue
                    for x in range(wd * 8, wd * 8 + 8):
                        cs = C[x]
                        nt = ntri[cs]
                        if nt == 0 or x - rr * W >= last:
                            continue
                        tt = T[x]
                        for t in range(nt):
                            for c3 in range(3):
                                le = tri[cs, 3 * t + c3]
                                y = ed[le] + x
                                faces[tt + t, c3] = V[y] + _popc(X[y] & below[le])
                        T[x] = tt + nt


@numba.njit(inline="always")
def _plane_edges(S, p, PL, W, XL, out, xok, j0, nj, hi1):
    """Crossed-edge bits (axis 0, 1, 2) of rows j0 .. j0 + nj of bit plane p into `out`;
    axis 0 only when `xok`, axis 1 only below row hi1."""
    b, bx, by, bz = S[p * PL:], S[(p + 1) * PL:], S[p * PL + W:], S[p * PL + 1:]
    mx = np.uint8(1 if xok else 0)
    for x in range(XL):
        v = b[x]
        out[x] = ((v ^ bx[x]) & mx) | ((v ^ by[x]) << np.uint8(1)) | ((v ^ bz[x]) << np.uint8(2))
    for rr in range(max(hi1 - j0, 0), nj + 1):  # the last row and any past it: no axis-1 edge
        for w in range(W):
            out[rr * W + w] &= np.uint8(5)
