"""Numba kernels of the marching cubes (the CUDA path in _gpu.py is the same algorithm
and numbering, a GPU warp per tile).

The point box ``lo..hi`` (inclusive) is cut into chunks of at most `chunk` planes along
axis 0, and each row j of a chunk into tiles of TILE points along k (_tables.TILE). A
point owns the crossed edges starting at it (one vertex each) and the cube whose lower
corner it is. Pass 1 counts per tile its vertices, triangles and its lead column's
vertices; an exclusive scan over the tiles gives each its first vertex and face; pass 2
walks the planes again and writes, numbering as _tables.TILE says: from per-tile
counters, in the order it meets the crossed edges and cubes.

On the CPU a task takes one chunk and `_ROWS` rows j. It compares the samples it reads
with the level once, into a slab of inside bits (one byte a sample, rows along
contiguous k), and walks it plane by plane: loops over whole planes of bytes that the
compiler vectorises, and per-cube work only where a 64-bit word of edge bits or cases
says something is crossed.
"""

from __future__ import annotations

import math
import threading

import numba
import numpy as np
from llvmlite import ir
from numba.extending import intrinsic

from insitu.log import watch_jit

from ._tables import CORNERS, TILE

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


@intrinsic
def _cttz(typingctx, x):
    """Trailing zero bits of a non-zero integer (one instruction)."""
    def codegen(context, builder, sig, args):
        return builder.cttz(args[0], ir.Constant(ir.IntType(1), 1))
    return x(x), codegen


_LOW7 = np.uint64(0x7F7F7F7F7F7F7F7F)
_HIGH = np.uint64(0x8080808080808080)


@numba.njit(inline="always")
def _crossed(word):
    """High bit of each byte of `word` that is neither 0 nor 0xFF (a crossed cube)."""
    d = (word ^ (word >> np.uint64(1))) & _LOW7  # a byte's neighbouring bits differ
    return ((d + _LOW7) | d) & _HIGH


@numba.njit(inline="always")
def _below(n):
    """Bytes 0 .. n - 1 of a word set (none for n <= 0, all for n >= 8)."""
    if n >= 8:
        return np.uint64(0xFFFFFFFFFFFFFFFF)
    return (np.uint64(1) << np.uint64(8 * n)) - np.uint64(1) if n > 0 else np.uint64(0)


@numba.njit(inline="always")
def _u(i):
    """An index known to be >= 0, as unsigned: Numba then skips the negative-index wraparound."""
    return np.uint64(i)


@numba.njit(inline="always")
def _popc(b):
    return (b & 1) + ((b >> 1) & 1) + ((b >> 2) & 1)


class ScratchPool:
    """Host scratch arrays kept between calls, by shape and dtype.

    A fresh large ``np.empty`` is mapped anew by the allocator and its pages are
    faulted in (and zeroed by the kernel) at the first write, every call. Arrays of up
    to `max_bytes` in all are kept; several threads may take and give concurrently.
    """

    def __init__(self, max_bytes: int = 32 << 20):
        self._free: list[np.ndarray] = []
        self._lock = threading.Lock()
        self._max = max_bytes

    def take(self, shape: tuple, dtype) -> np.ndarray:
        """An array of `shape` and `dtype`, contents undefined."""
        with self._lock:
            for n, a in enumerate(self._free):
                if a.shape == shape and a.dtype == dtype:
                    return self._free.pop(n)
        return np.empty(shape, dtype)

    def give(self, a: np.ndarray) -> None:
        """Keep `a` for a later take (the caller no longer uses it); the oldest go first."""
        with self._lock:
            self._free.append(a)
            while sum(b.nbytes for b in self._free) > self._max:
                self._free.pop(0)


scratch = ScratchPool()


def mesh_arrays(specs) -> list[np.ndarray]:
    """New arrays of (dtype, shape) `specs`, views of one allocation.

    The mesh's arrays are new each call; apart, the allocator maps each anew and its
    pages fault in at the first write (1490 faults at 128^3, a tenth of the time), as
    their frees together pass its trim threshold (twice the largest). One block is
    kept by the allocator between calls of a size, and one of 4 MB or more is given
    transparent huge pages by NumPy where the kernel allows.
    """
    sizes = [int(np.prod(shape)) * np.dtype(dt).itemsize for dt, shape in specs]
    starts = np.cumsum([0] + [-(-n // 64) * 64 for n in sizes])  # each on a cache line
    block = np.empty(int(starts[-1]), np.uint8)
    return [block[a:a + n].view(dt).reshape(shape) for (dt, shape), a, n in zip(specs, starts, sizes)]


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
def count(vol, level, lo, hi, chunk, ntri, vt, tt, lt):
    """Pass 1: returns the number of non-finite samples.

    A task takes one chunk and `_ROWS` rows j: it finds the inside bits
    of the samples they read once, then walks them plane by plane, all rows at once in
    loops over flat byte planes, looking up the triangles of cubes where a 64-bit word of
    cases says something is crossed. Per tile (see _tables.TILE) its vertices `vt`,
    triangles `tt` and the vertices of its lead column `lt`: a scan of the tiles then
    numbers everything.
    """
    m1, m2 = hi[1] - lo[1] + 1, hi[2] - lo[2] + 1
    nch = (hi[0] - lo[0]) // chunk + 1
    ngr = (m1 + _ROWS - 1) // _ROWS
    ntk = (m2 + TILE - 1) // TILE
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
            for rr in range(ncr):
                for wd in range(rr * W // 8, (rr * W + m2 + 6) // 8):
                    word = C64[wd]
                    if word == 0 or word == 0xFFFFFFFFFFFFFFFF:
                        continue
                    word &= _below(rr * W + m2 - 1 - wd * 8)  # cubes: k < hi[2] (case 0 has no triangle)
                    for b in range(8):
                        nt[_u(wd * 8 + b)] += ntri[_u((word >> np.uint64(8 * b)) & np.uint64(0xFF))]
        for rr in range(nj):
            t0 = (c * m1 + j0 + rr - lo[1]) * ntk
            for tk in range(ntk):
                sv, st = 0, 0
                for r in range(rr * W + tk * TILE, rr * W + min(tk * TILE + TILE, m2)):
                    sv += nv[r]
                    st += nt[r]
                vt[t0 + tk] = sv
                tt[t0 + tk] = st
                lt[t0 + tk] = nv[rr * W + tk * TILE]
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


_BATCH = 256  # vertices gathered before their arithmetic runs as one vectorized loop


@numba.njit(inline="always")
def _gather(vol, ext, i, j, k, a, n, offset, vals, has_vals, keys, has_keys, dims, keybase, buf, num, q, ga, gb):
    """Gather what vertex n (edge (i, j, k) + axis a) needs into column q of `buf`: the
    sample at the edge's start and the difference to its end, the gradients at both
    ends, its first point (global, float) and the second field's sample and difference;
    number and axis into `num`. No branch on the axis
    (the edges come in an order the branch predictor cannot follow)."""
    q = _u(q)
    di, dj, dk = int(a == 0), int(a == 1), int(a == 2)
    ib, jb, kb = i + di, j + dj, k + dk
    # float() keeps a float32 sample float32: differences are taken in the samples' type
    # (as the kernels always have), then widened
    va = float(vol[_u(i), _u(j), _u(k)])
    buf[0, q] = va
    buf[1, q] = float(vol[_u(ib), _u(jb), _u(kb)]) - va
    if ext[0] < i and ib < ext[3] and ext[1] < j and jb < ext[4] and ext[2] < k and kb < ext[5]:
        # Both ends inside: central differences, as _grad takes them, without its tests
        buf[2, q] = (float(vol[_u(i + 1), _u(j), _u(k)]) - float(vol[_u(i - 1), _u(j), _u(k)])) / 2.0
        buf[3, q] = (float(vol[_u(i), _u(j + 1), _u(k)]) - float(vol[_u(i), _u(j - 1), _u(k)])) / 2.0
        buf[4, q] = (float(vol[_u(i), _u(j), _u(k + 1)]) - float(vol[_u(i), _u(j), _u(k - 1)])) / 2.0
        buf[5, q] = (float(vol[_u(ib + 1), _u(jb), _u(kb)]) - float(vol[_u(ib - 1), _u(jb), _u(kb)])) / 2.0
        buf[6, q] = (float(vol[_u(ib), _u(jb + 1), _u(kb)]) - float(vol[_u(ib), _u(jb - 1), _u(kb)])) / 2.0
        buf[7, q] = (float(vol[_u(ib), _u(jb), _u(kb + 1)]) - float(vol[_u(ib), _u(jb), _u(kb - 1)])) / 2.0
    else:
        _grad(vol, i, j, k, ext, ga)
        _grad(vol, ib, jb, kb, ext, gb)
        for d in range(3):
            buf[2 + d, q] = ga[d]
            buf[5 + d, q] = gb[d]
    buf[8, q] = float(i + offset[0])
    buf[9, q] = float(j + offset[1])
    buf[10, q] = float(k + offset[2])
    if has_vals:
        sa = float(vals[_u(i), _u(j), _u(k)])
        buf[11, q] = sa
        buf[12, q] = float(vals[_u(ib), _u(jb), _u(kb)]) - sa
    if has_keys:
        keys[n] = keybase + ((a * dims[0] + i + offset[0]) * dims[1] + j + offset[1]) * dims[2] + k + offset[2]
    num[0, q] = n
    num[1, q] = a


@numba.njit(cache=True, error_model="numpy")  # called, not inlined: one copy to compile
def _emit(buf, num, cnt, level, geo, res, has_vals, verts, normals, vout):
    """Positions, normals (and sampled values) of the `cnt` gathered vertices: the
    divisions and square roots in one loop the compiler vectorizes, then stored."""
    # Whole vectors (columns past cnt hold earlier or zero values, computed and dropped):
    # a scalar remainder would cost as much as the vectorized rest of a batch
    m = min(-(-cnt // 64) * 64, buf.shape[1])
    if geo[0] == 1.0 and geo[1] == 1.0 and geo[2] == 1.0:  # x / 1.0 is x: three divisions fewer
        _arith(buf, num, m, level, geo, res, has_vals, True)
    else:
        _arith(buf, num, m, level, geo, res, has_vals, False)
    for q in range(cnt):
        n = _u(num[0, q])
        verts[n, 0] = res[0, q]
        verts[n, 1] = res[1, q]
        verts[n, 2] = res[2, q]
        normals[n, 0] = res[3, q]
        normals[n, 1] = res[4, q]
        normals[n, 2] = res[5, q]
        if has_vals:
            vout[n] = res[6, q]


@numba.njit(inline="always")
def _arith(buf, num, m, level, geo, res, has_vals, unit):
    """_emit's arithmetic over columns 0 .. m - 1 (`unit`: the spacing is 1, 1, 1)."""
    s0, s1, s2, o0, o1, o2 = geo[0], geo[1], geo[2], geo[3], geo[4], geo[5]
    for q in range(m):
        t = (level - buf[0, q]) / buf[1, q]
        a = num[1, q]
        res[0, q] = (buf[8, q] + (t if a == 0 else 0.0)) * s0 + o0
        res[1, q] = (buf[9, q] + (t if a == 1 else 0.0)) * s1 + o1
        res[2, q] = (buf[10, q] + (t if a == 2 else 0.0)) * s2 + o2
        g0 = buf[2, q] + (buf[5, q] - buf[2, q]) * t
        g1 = buf[3, q] + (buf[6, q] - buf[3, q]) * t
        g2 = buf[4, q] + (buf[7, q] - buf[4, q]) * t
        if not unit:
            g0, g1, g2 = g0 / s0, g1 / s1, g2 / s2
        nn = math.sqrt(g0 * g0 + g1 * g1 + g2 * g2)
        pos = nn > 0
        res[3, q] = -g0 / nn if pos else 0.0
        res[4, q] = -g1 / nn if pos else 0.0
        res[5, q] = -g2 / nn if pos else 0.0
        if has_vals:
            res[6, q] = buf[11, q] + buf[12, q] * t


@numba.njit(inline="always")
def _cursors(vbase, lt, row0, ntk, ta, ny, lead, cur):
    """The first vertex number of the lead column (`lead`) and of the other points
    (`cur`) of tiles ta, ta + 1, .. of rows row0 .. row0 + ny - 1 (tile rows: chunk x
    rows + row), from the scan of the tiles `vbase` and their lead columns' counts `lt`."""
    for rr in range(ny):
        for t in range(lead.shape[1]):
            if ta + t < ntk:
                x = (row0 + rr) * ntk + ta + t
                lead[rr, t] = vbase[x]
                cur[rr, t] = vbase[x] + lt[x]


@numba.njit(parallel=True, cache=True, error_model="numpy")  # divisions vectorize: no zero test
def generate(vol, ext, level, lo, hi, chunk, vt, tt, lt, vbase, tbase, ntri, tri, edge, geo, offset,
             vals, has_vals, keys, has_keys, dims, keybase, verts, faces, normals, vout):
    """Pass 2: write vertices, faces, normals (and sampled values, global edge keys).

    `vt`, `tt`, `lt`: pass 1's tile counts; `vbase`/`tbase`: the first vertex and
    triangle of each tile (the exclusive scan of `vt`/`tt`, over all levels).
    `ext`: the samples gradients use (lo then hi, inclusive); `geo`: spacing then origin.

    A task takes pass 1's chunk and rows, over the tiles of its rows that have anything
    to write. Plane by plane it finds, for all its rows at once, the crossed edges and
    the case of each cube (loops over whole planes of bytes). Walking the set bits of
    64-bit words (one per crossed edge, one per crossed cube: no branch per point) in
    the numbering's order, it numbers the crossed edges of the next plane into E from
    per-tile counters and gathers their vertices, whose arithmetic then runs in
    vectorized batches (_emit); the triangles of the cubes between the two planes then
    read their vertex numbers from E.
    """
    m1, m2 = hi[1] - lo[1] + 1, hi[2] - lo[2] + 1
    nch = (hi[0] - lo[0]) // chunk + 1
    ngr = (m1 + _ROWS - 1) // _ROWS
    ntk = (m2 + TILE - 1) // TILE
    for s in numba.prange(nch * ngr):
        c, g = s // ngr, s % ngr
        j0 = lo[1] + g * _ROWS
        nj = min(_ROWS, m1 - g * _ROWS)
        row0 = c * m1 + g * _ROWS  # the tile row of the task's first row
        ta, tb = ntk, -1  # the tiles with anything to write
        for rr in range(nj):
            for tk in range(ntk):
                x = (row0 + rr) * ntk + tk
                if vt[x] != 0 or tt[x] != 0:
                    ta = min(ta, tk)
                    tb = max(tb, tk)
        if tb < 0:
            continue
        i0 = lo[0] + c * chunk
        i1 = min(i0 + chunk - 1, hi[0])
        ka, kb = ta * TILE, min(tb * TILE + TILE - 1, m2 - 1)
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
        E = np.empty(6 * XL, np.int32)  # per parity and axis, the vertex number of each crossed edge
        C64 = np.zeros(XL // 8, np.uint64)  # cube cases
        C = C64.view(np.uint8)
        q = np.zeros(XL + 1, np.uint8)
        nct = tb - ta + 2  # tiles a row's counters cover: ta .. tb and the next (the lead column of kb + 1)
        lead = np.zeros((ny, nct), np.int64)  # per row and tile: the next vertex of its lead column,
        cur = np.zeros((ny, nct), np.int64)  # of its other points,
        tcur = np.zeros((nj, nct), np.int64)  # its next triangle
        for rr in range(nj):
            for t in range(nct - 1):
                tcur[rr, t] = tbase[(row0 + rr) * ntk + ta + t]
        at = np.empty((2, 12), np.int64)  # per parity of i, per cube edge: its place in E at (j0, k0)
        for le in range(12):
            for par in range(2):
                pl = par if edge[le, 0] == 0 else 1 - par
                at[par, le] = (3 * pl + edge[le, 3]) * XL + edge[le, 1] * W + edge[le, 2]
        _cursors(vbase, lt, row0, ntk, ta, ny, lead, cur)
        _plane_edges(S, 0, PL, W, XL, X[:XL], i0 < hi[0], j0, nj, hi[1])
        ga = np.zeros(3)
        gb = np.zeros(3)
        buf = np.zeros((13, _BATCH))
        num = np.empty((2, _BATCH), np.int64)
        res = np.empty((7, _BATCH), np.float32)
        field = (vol, ext, level, geo, offset, vals, has_vals, keys, has_keys, dims, keybase)
        out = (verts, normals, vout, buf, num, res, ga, gb)
        cnt = 0
        for i in range(i0 - 1, i1 + 1):  # from the plane before: plane i0's vertices first
            p = i - i0
            ps = p & 1
            if i == hi[0]:  # the last plane: no cubes
                continue
            if i >= i0:
                # The next plane's crossings and vertex numbers (only numbers when it is the next chunk's)
                _plane_edges(S, p + 1, PL, W, XL, X[(1 - ps) * XL:(2 - ps) * XL], i + 1 < hi[0], j0, nj, hi[1])
                if i == i1:
                    _cursors(vbase, lt, row0 + m1, ntk, ta, ny, lead, cur)
            nown = nj if i < i1 else 0
            cnt = _vertices(field, out, cnt, i + 1, p + 1, j0, k0, X64, X, E, XL, W, ny, nown, nx, nw, lead, cur)
            if i < i0 or ncube_rows <= 0:
                continue
            _cases(S[p * PL:], S[(p + 1) * PL:], S[(p + 1) * PL + W:], S[p * PL + W:], ncube_rows * W, q, C)
            _faces(C64, C, tcur, E, at[ps], ntri, tri, ncube_rows, W, min(nw, nz), faces)
        _emit(buf, num, cnt, level, geo, res, has_vals, verts, normals, vout)


@numba.njit(inline="always")
def _vertices(field, out, cnt, i, p, j0, k0, X64, X, E, XL, W, ny, nown, nx, nw, lead, cur):
    """The vertex numbers of the crossed edges of plane i (the task's plane p) into E,
    rows 0 .. ny - 1, points 0 .. nx - 1 (from a tile's start), taken from the tiles'
    counters `lead` and `cur` in the numbering's order; the vertices themselves of the
    first `nown` rows, points 0 .. nw - 1 (the task's own), gathered `_BATCH` at a time:
    `cnt` gathered before, returns how many are gathered and not yet written.

    `field`: the volume and what generate's vertices take from it; `out`: the mesh's
    arrays and the scratch of _gather and _emit."""
    vol, ext, level, geo, offset, vals, has_vals, keys, has_keys, dims, keybase = field
    verts, normals, vout, buf, num, res, ga, gb = out
    ps = p & 1
    xw = X64[ps * XL // 8:(ps + 1) * XL // 8]
    ep = E[3 * ps * XL:3 * (ps + 1) * XL]
    for rr in range(ny):
        for wd in range(rr * W // 8, (rr * W + nx + 7) // 8):
            word = xw[wd] & _below(rr * W + nx - wd * 8)  # a bit per crossed edge
            mine = word & _below(rr * W + nw - wd * 8) if rr < nown else np.uint64(0)
            while word:  # one pass per edge, whatever its axis, by point then axis
                bit = _cttz(word)
                word &= word - np.uint64(1)
                x = wd * 8 + (bit >> 3)
                a = bit & 7
                w = x - rr * W
                t = w // TILE
                if w - t * TILE == 0:
                    n = lead[_u(rr), _u(t)]
                    lead[_u(rr), _u(t)] = n + 1
                else:
                    n = cur[_u(rr), _u(t)]
                    cur[_u(rr), _u(t)] = n + 1
                ep[_u(a * XL + x)] = n
                if (mine >> bit) & np.uint64(1):  # almost always: others' edges are at the task's edges
                    _gather(vol, ext, i, j0 + rr, k0 + w, a, n, offset, vals, has_vals, keys, has_keys,
                            dims, keybase, buf, num, cnt, ga, gb)
                    cnt += 1
                    if cnt == _BATCH:
                        _emit(buf, num, cnt, level, geo, res, has_vals, verts, normals, vout)
                        cnt = 0
    return cnt


@numba.njit(inline="always")
def _faces(C64, C, tcur, E, ed, ntri, tri, rows, W, last, faces):
    """The triangles of the crossed cubes among the first `last` of each of `rows` rows of
    cases C, numbered from the tiles' counters `tcur`; `ed`: per cube edge its place in E
    relative to the cube's."""
    for rr in range(rows):
        for wd in range(rr * W // 8, (rr * W + last + 7) // 8):
            hot = _crossed(C64[wd]) & _below(rr * W + last - wd * 8)
            while hot:  # one pass per crossed cube, by point
                x = wd * 8 + (_cttz(hot) >> 3)
                hot &= hot - np.uint64(1)
                cs = C[_u(x)]
                nt = ntri[cs]
                t = (x - rr * W) // TILE
                tt = tcur[_u(rr), _u(t)]
                tcur[_u(rr), _u(t)] = tt + nt
                for u in range(nt):
                    r = _u(tt + u)
                    faces[r, 0] = E[_u(ed[_u(tri[cs, _u(3 * u)])] + x)]
                    faces[r, 1] = E[_u(ed[_u(tri[cs, _u(3 * u + 1)])] + x)]
                    faces[r, 2] = E[_u(ed[_u(tri[cs, _u(3 * u + 2)])] + x)]


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
