"""CUDA kernels of the cell contour: the algorithm and numbering of _contour_cpu.py.

A thread takes CPT = 4 consecutive cells, a warp a tile of 128 (standing for the CPU's
chunks), in both passes; no pass synchronises more than a warp. Cells lie one after the
other in the connectivity, sized by their types (cell_mesh checks it), so a tile reads
one offset and scans its cells' sizes instead of reading an offset per cell. Per level:
cc_count reads the cells' corner values once, writes each case (a byte) and adds up the
tile's crossed edges and faces; one CuPy cumsum scans the tile totals; after one read of
the totals (to size the outputs) cc_emit skips the tiles where nothing is crossed, scans
the rest's counts again from the cases and lets the crossed cells write their edge keys,
faces (slot numbers) and cell ids. The weld orders each level's keys as the CPU does: a
counting sort into buckets of a few consecutive lower point ids (cc_hist, a cumsum,
cc_scatter), then each key placed by counting its bucket's smaller keys (cc_bucket, which
marks the first of each key); a cumsum numbers the keys, cc_vertex
interpolates each vertex once and maps every slot to its vertex, cc_faces maps the
faces' slots; a second read fetches the vertex counts.
"""

from __future__ import annotations

import functools

import numpy as np

from insitu import arrays
from insitu.log import get_logger

from ._contour_tables import MAX_FACES, MAX_SLOTS, TABLES

_log = get_logger(__name__)

_BLOCK = 256
_CPT = 4
_CTYPE = {np.dtype(np.int32): "int", np.dtype(np.int64): "long long", np.dtype(np.float32): "float",
          np.dtype(np.float64): "double"}

_SOURCE = r"""
#define BLOCK %(block)d
#define CPT %(cpt)d  // cells per thread in both passes
#define TILE (32 * CPT)  // cells per warp: the unit of the scan
#define MAX_SLOTS %(max_slots)d
#define MAX_FACES %(max_faces)d
#define NAN_BIT (1u << 16)
#define FULL 0xFFFFFFFFu

// Exclusive scan of x over the warp, in lane order.
template <typename T>
__device__ __forceinline__ T warp_exclusive(T x) {
    const int lane = threadIdx.x & 31;
    T inc = x;
    #pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const T y = __shfl_up_sync(FULL, inc, d);
        if (lane >= d) inc += y;
    }
    return inc - x;
}

struct Cells {  // the mesh's CSR arrays and their strides (elements)
    const ID* conn; long long cs;
    const long long* off; long long os;
    const unsigned char* types; long long ts;
    long long n;
};

// Corners per cell by type code (VTK's fixed sizes; 0 for polygons and non-cells).
__constant__ int SIZE[16] = {0, 1, 0, 2, 0, 3, 0, 0, 0, 4, 4, 0, 8, 6, 5, 0};
#define POLYGON 7

// Pass 1 for one level: code[c] the case of cell c, tot_v/tot_f[tile] the tile's
// crossed edges and faces, flags |= 1 << type of the types met, NAN_BIT for a NaN corner.
// A thread takes CPT consecutive cells, a warp a tile. Its ids follow one another, sized
// by their types (as cell_mesh checks), so the tile reads one offset and scans its
// threads' sizes: no per-cell offsets, and each thread has all its cells' loads in
// flight at once. A tile holding a polygon (not contoured: the call will raise) only
// reports its types.
extern "C" __global__ void __launch_bounds__(BLOCK) cc_count(
        const Cells m, const VAL* __restrict__ values, const long long vs, const double level,
        const int* __restrict__ base, const unsigned char* __restrict__ nvert, const unsigned char* __restrict__ nface,
        unsigned char* __restrict__ code, int* __restrict__ tot_v, int* __restrict__ tot_f,
        unsigned int* __restrict__ flags) {
    // each warp's ids (at most TILE x 8) as 32-bit words, one word skipped every 32: the
    // warp reads them coalesced, then each thread its run of them without bank conflicts
    __shared__ unsigned int wids[BLOCK / 32][TILE * 8 + TILE * 8 / 32];
    const long long tile = (long long)blockIdx.x * (BLOCK / 32) + (threadIdx.x >> 5);
    const long long c0 = tile * TILE, cb = c0 + (long long)(threadIdx.x & 31) * CPT;
    if (c0 >= m.n) return;
    int t[CPT], sum = 0;
    bool poly = false;
    unsigned int fl = 0;
    #pragma unroll
    for (int j = 0; j < CPT; ++j) {
        t[j] = cb + j < m.n ? m.types[(cb + j) * m.ts] & 15 : 0;
        if (cb + j < m.n) fl |= 1u << t[j];
        sum += SIZE[t[j]];
        poly |= t[j] == POLYGON;
    }
    const long long o0 = m.off[c0 * m.os];
    int p = warp_exclusive(sum);
    int nv = 0, nf = 0;
    if (!__any_sync(FULL, poly)) {
        const int span = __shfl_sync(FULL, p + sum, 31);
        unsigned int* w = wids[threadIdx.x >> 5];
        for (int i = threadIdx.x & 31; i < span; i += 32) w[i + (i >> 5)] = (unsigned int)m.conn[(o0 + i) * m.cs];
        __syncwarp();
        #pragma unroll
        for (int j = 0; j < CPT; ++j) {
            const int size = SIZE[t[j]];
            int mask = 0;
            #pragma unroll
            for (int i = 0; i < 8; ++i) {
                if (i < size) {
                    const int k = p + i;
                    const double x = (double)values[(long long)w[k + (k >> 5)] * vs];
                    mask |= (x >= level) << i;
                    if (x != x) fl |= NAN_BIT;
                }
            }
            p += size;
            const int b = base[t[j]];
            if (b < 0) mask = 0;
            else {
                nv += nvert[b + mask];
                nf += nface[b + mask];
            }
            if (cb + j < m.n) code[cb + j] = (unsigned char)mask;
        }
    } else {
        #pragma unroll
        for (int j = 0; j < CPT; ++j)
            if (cb + j < m.n) code[cb + j] = 0;
    }
    fl = __reduce_or_sync(FULL, fl);
    if ((threadIdx.x & 31) == 0 && fl) atomicOr(flags, fl);
    // both counts in one sum: a tile has at most TILE x 12 crossed edges and TILE x 5 faces
    const int s = __reduce_add_sync(FULL, (nv << 16) | nf);
    if ((threadIdx.x & 31) == 0) {
        tot_v[tile] = s >> 16;
        tot_f[tile] = s & 0xFFFF;
    }
}

// Pass 2 for one level, the cells and tiles of cc_count: every crossed cell writes its
// slots' keys (lo * npoints + hi), its faces (slot numbers) and their cell, from the
// tile's first slot and face (inc - tot: the scan of cc_count's totals, the faces' less
// fsub, the slots of all levels, as one scan runs over both) and the tile's
// scan of its cells' counts; its ids start at the tile's first offset plus the sizes of
// the cells before it (no polygons reach here).
extern "C" __global__ void __launch_bounds__(BLOCK) cc_emit(
        const Cells m, const unsigned char* __restrict__ code, const int* __restrict__ base,
        const unsigned char* __restrict__ nvert, const unsigned char* __restrict__ nface,
        const unsigned char* __restrict__ slots, const unsigned char* __restrict__ ftab,
        const int* __restrict__ tot_v, const int* __restrict__ tot_f, const long long* __restrict__ inc_v,
        const long long* __restrict__ inc_f, const long long fsub, const long long npoints, const int ncol,
        long long* __restrict__ keys,
        int* __restrict__ faces, long long* __restrict__ cells) {
    const long long tile = (long long)blockIdx.x * (BLOCK / 32) + (threadIdx.x >> 5);
    const long long c0 = tile * TILE, cb = c0 + (long long)(threadIdx.x & 31) * CPT;
    if (c0 >= m.n) return;
    const int tv = tot_v[tile];
    if (tv == 0) return;  // nothing crossed in the tile
    const long long v0b = inc_v[tile] - tv, f0b = inc_f[tile] - fsub - tot_f[tile];
    const long long o0 = m.off[c0 * m.os];
    int cs[CPT], sz[CPT];
    long long sum = 0;
    #pragma unroll
    for (int j = 0; j < CPT; ++j) {
        cs[j] = sz[j] = 0;
        if (cb + j < m.n) {
            const int t = m.types[(cb + j) * m.ts] & 15;
            cs[j] = base[t] + code[cb + j];
            sz[j] = SIZE[t];
            sum += ((long long)sz[j] << 40) | (nvert[cs[j]] << 20) | nface[cs[j]];
        }
    }
    // sizes, crossed edges and faces (each < 2^20 a tile) in one scan
    const long long s = warp_exclusive(sum);
    if ((sum & 0xFFFFFFFFFFll) == 0) return;
    long long o = o0 + (s >> 40), v0 = v0b + ((s >> 20) & 0xFFFFF), f0 = f0b + (s & 0xFFFFF);
    #pragma unroll
    for (int j = 0; j < CPT; ++j) {
        if (cb + j >= m.n) break;
        const int c = cs[j], nv = nvert[c], nf = nface[c];
        for (int k = 0; k < nv; ++k) {
            const long long p = (long long)m.conn[(o + slots[(c * MAX_SLOTS + k) * 2]) * m.cs];
            const long long q = (long long)m.conn[(o + slots[(c * MAX_SLOTS + k) * 2 + 1]) * m.cs];
            keys[v0 + k] = p < q ? p * npoints + q : q * npoints + p;
        }
        for (int f = 0; f < nf; ++f) {
            for (int i = 0; i < ncol; ++i) faces[(f0 + f) * ncol + i] = (int)(v0 + ftab[(c * MAX_FACES + f) * 3 + i]);
            cells[f0 + f] = cb + j;
        }
        o += sz[j];
        v0 += nv;
        f0 += nf;
    }
}

// The weld of one level: the order of _contour_cpu._weld_level (by key), by a counting
// sort of the slots into buckets of 2^shift consecutive lower point ids, then each slot's
// place within its bucket counted among the bucket's few keys. cc_hist: rank[s] the place
// of slot s among those of its bucket, cnt[b] their number.
extern "C" __global__ void cc_hist(const long long* __restrict__ keys, const long long n, const long long npoints,
                                   const int shift, int* __restrict__ cnt, int* __restrict__ rank) {
    const long long i = (long long)blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) rank[i] = atomicAdd(cnt + ((keys[i] / npoints) >> shift), 1);
}

// Slot s into its bucket (end: the inclusive scan of cnt): its key and slot number.
extern "C" __global__ void cc_scatter(const long long* __restrict__ keys, const long long n, const long long npoints,
                                      const int shift, const int* __restrict__ cnt, const int* __restrict__ end,
                                      const int* __restrict__ rank, long long* __restrict__ bk,
                                      int* __restrict__ border) {
    const long long i = (long long)blockIdx.x * BLOCK + threadIdx.x;
    if (i >= n) return;
    const long long key = keys[i], b = (key / npoints) >> shift;
    const int at = end[b] - cnt[b] + rank[i];
    bk[at] = key;
    border[at] = (int)i;
}

// Bucketed entry i to its sorted place: the bucket's start plus its keys below key i (and
// its equal keys placed before i); first[place] whether it is the first of its key.
extern "C" __global__ void cc_bucket(const long long* __restrict__ bk, const int* __restrict__ border,
                                     const long long n, const long long npoints, const int shift,
                                     const int* __restrict__ cnt, const int* __restrict__ end,
                                     long long* __restrict__ sk, int* __restrict__ order, int* __restrict__ first) {
    const long long i = (long long)blockIdx.x * BLOCK + threadIdx.x;
    if (i >= n) return;
    const long long key = bk[i], b = (key / npoints) >> shift;
    const int e = end[b], s = e - cnt[b];
    int below = 0, before = 0;
    for (int j = s; j < e; ++j) {
        const long long kj = bk[j];
        below += kj < key;
        before += kj == key && j < i;
    }
    const int at = s + below + before;
    sk[at] = key;
    order[at] = border[i];
    first[at] = before == 0;
}

// Per sorted slot i: remap[order[i]] its vertex (ids[i] - 1, within the level); the
// first slot of a run interpolates the vertex from the edge's lower point id, and its
// colour (stats[nlev] |= 1 for a NaN colour at either end); the last writes the level's
// vertex count to stats[level].
extern "C" __global__ void cc_vertex(const long long* __restrict__ sk, const int* __restrict__ order,
                                     const int* __restrict__ first, const int* __restrict__ ids, const long long n,
                                     const long long npoints, const double level, const VAL* __restrict__ values,
                                     const long long vs, const PT* __restrict__ points, const long long ps0,
                                     const long long ps1, const int has_color, const COL* __restrict__ color,
                                     const long long colstride,
                                     int* __restrict__ remap, PT* __restrict__ verts, COL* __restrict__ vcol,
                                     unsigned long long* __restrict__ stats, const int lev, const int nlev) {
    const long long i = (long long)blockIdx.x * BLOCK + threadIdx.x;
    if (i >= n) return;
    const int id = ids[i] - 1;
    remap[order[i]] = id;
    if (i == n - 1) stats[lev] = id + 1;
    if (!first[i]) return;
    const long long key = sk[i];
    const long long a = key / npoints, b = key - a * npoints;
    const double va = (double)values[a * vs];
    const double t = (level - va) / ((double)values[b * vs] - va);
    #pragma unroll
    for (int d = 0; d < 3; ++d) {
        const double pa = (double)points[a * ps0 + d * ps1];
        verts[(long long)id * 3 + d] = (PT)(pa + t * ((double)points[b * ps0 + d * ps1] - pa));
    }
    if (has_color) {
        const double ca = (double)color[a * colstride], cb = (double)color[b * colstride];
        vcol[id] = (COL)(ca + t * (cb - ca));
        if (ca != ca || cb != cb) atomicOr(stats + nlev, 1ull);
    }
}

// Faces' slot numbers to vertex numbers (plus the level's first vertex).
extern "C" __global__ void cc_faces(int* __restrict__ faces, const long long n, const int* __restrict__ remap,
                                    const int add) {
    const long long i = (long long)blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) faces[i] = remap[faces[i]] + add;
}
"""


def source(id_t: str, val_t: str, pt_t: str, col_t: str) -> tuple[str, list[str], tuple[str, ...]]:
    """The CUDA source of the kernels for one combination of id, value, point and colour
    C types (extern "C": no instances to name) and the compile options. No fused
    multiply-adds: the vertices come out bit for bit as on the CPU."""
    defs = f"#define ID {id_t}\n#define VAL {val_t}\n#define PT {pt_t}\n#define COL {col_t}\n"
    src = defs + _SOURCE % {"block": _BLOCK, "cpt": _CPT, "max_slots": MAX_SLOTS, "max_faces": MAX_FACES}
    return src, [], ("-std=c++14", "--fmad=false")


@functools.cache
def _module(id_t: str, val_t: str, pt_t: str, col_t: str):
    """The kernels for one combination of id, value, point and colour types."""
    return arrays.cuda_module(source(id_t, val_t, pt_t, col_t), f"the cell contour kernels (cc_*) for ids {id_t}, "
                              f"values {val_t}, points {pt_t}, colour {col_t}", _log)


_tables_on: dict[int, tuple] = {}  # device -> tables


def _tables(device: int) -> tuple:
    """base, nvert, nface, slots, faces on `device`, uploaded once (counted transfers)."""
    if device not in _tables_on:
        _tables_on[device] = tuple(arrays.to_device(np.ascontiguousarray(TABLES[k]))
                                   for k in ("base", "nvert", "nface", "slots", "faces"))
    return _tables_on[device]


def _stride(a, name: str) -> list[int]:
    item = a.dtype.itemsize
    if any(s % item for s in a.strides):
        raise ValueError(f"{name}: strides {a.strides} are not multiples of the item size {item}")
    return [s // item for s in a.strides]


@functools.lru_cache(maxsize=64)
def _record(conn: int, cs: int, off: int, os: int, types: int, ts: int, n: int):
    """The kernels' mesh record (built once per set of arrays: in-situ calls repeat them,
    and the host work before the first launch leaves the GPU idle)."""
    rec = np.dtype([("conn", "u8"), ("cs", "i8"), ("off", "u8"), ("os", "i8"), ("types", "u8"), ("ts", "i8"),
                    ("n", "i8")], align=True)
    r = np.zeros((), rec)
    r["conn"], r["cs"], r["off"], r["os"], r["types"], r["ts"], r["n"] = conn, cs, off, os, types, ts, n
    return r[()]


def _cells_record(conn, offsets, types):
    return _record(conn.data.ptr, _stride(conn, "connectivity")[0], offsets.data.ptr, _stride(offsets, "offsets")[0],
                   types.data.ptr, _stride(types, "types")[0], types.shape[0])


@functools.cache
def _kernels(id_t: str, val_t: str, pt_t: str, col_t: str) -> dict:
    """The module's kernels by name (looked up once)."""
    mod = _module(id_t, val_t, pt_t, col_t)
    return {k: mod.get_function(f"cc_{k}") for k in ("count", "emit", "hist", "scatter", "bucket", "vertex", "faces")}


def contour(pts, conn, offsets, types, vals, levels, col, check_flags):
    """(vertices, faces, colour or None, cells) on the device; see contour.contour."""
    import cupy

    xp = cupy
    if offsets.dtype != np.int64:
        offsets = offsets.astype(np.int64)
    if types.dtype != np.uint8:
        types = types.astype(np.uint8)
    ncells, npts, nlev = int(types.shape[0]), int(pts.shape[0]), len(levels)
    if npts > 2**32 - 1:  # cc_count keeps ids as 32-bit words
        raise ValueError(f"mesh: {npts} points, more than the GPU path indexes (2^32 - 1)")
    cdt = col.dtype if col is not None else pts.dtype
    if ncells == 0:
        return (xp.zeros((0, 3), pts.dtype), xp.zeros((0, 3), xp.int32),
                None if col is None else xp.zeros(0, cdt), xp.zeros(0, xp.int64))
    k = _kernels(_CTYPE[conn.dtype], _CTYPE[vals.dtype], _CTYPE[pts.dtype], _CTYPE[np.dtype(cdt)])
    base, nvert, nface, slots, ftab = _tables(pts.device.id)
    cells_rec = _cells_record(conn, offsets, types)
    vs = np.int64(_stride(vals, "values")[0])
    nb = -(-ncells // (32 * _CPT))  # tiles: a warp's cells
    grid = (-(-nb // (_BLOCK // 32)),)
    code = xp.empty((nlev, ncells), xp.uint8)
    tot = xp.empty((2, nlev, nb), xp.int32)
    flags = xp.zeros(1, xp.uint32)
    for n, lev in enumerate(levels):
        k["count"](grid, (_BLOCK,), (cells_rec, vals, vs, np.float64(lev), base, nvert, nface, code[n], tot[0, n],
                                      tot[1, n], flags))
    # one scan over the slots and then the faces of every level (the faces' part less the
    # slots' total, see cc_emit); the flags and the levels' ends in one read
    inc = xp.cumsum(tot.reshape(-1), dtype=xp.int64)
    fl, *ends = arrays.scalars_to_host(xp.concatenate([flags.astype(xp.int64), inc[nb - 1::nb]]),
                                       limit=1 + 2 * nlev)
    dim = check_flags(int(fl))
    nslots = ends[nlev - 1]
    vends, fends = ends[:nlev], [e - nslots for e in ends[nlev:]]
    nf = fends[-1]
    if max(nslots, nf) > 2**31 - 1:
        raise ValueError(f"mesh: the contour has {nslots} edge crossings and {nf} faces, more than int32 indices hold")
    keys = xp.empty(nslots, xp.int64)
    faces = xp.empty((nf, dim), xp.int32)
    cells = xp.empty(nf, xp.int64)
    for n in range(nlev):
        at = n * nb
        k["emit"](grid, (_BLOCK,), (cells_rec, code[n], base, nvert, nface, slots, ftab, tot[0, n], tot[1, n],
                                     inc[at:], inc[nlev * nb + at:], np.int64(nslots), np.int64(npts), np.int32(dim),
                                     keys, faces, cells))
    # weld, level by level (the counting sort of _contour_cpu._weld_level)
    verts_all = xp.empty((nslots, 3), pts.dtype)
    vcol_all = xp.empty(nslots, cdt) if col is not None else None
    remap = xp.empty(nslots, xp.int32)
    stats = xp.zeros(nlev + 1, xp.uint64)  # per level its vertex count; the colour's NaN flag
    ps = np.asarray(_stride(pts, "points"), np.int64)
    cstride = np.int64(_stride(col, "color")[0]) if col is not None else np.int64(0)
    # buckets of 2^shift lower point ids, at least one per slot (at most 16 ids: each slot
    # counts its bucket's keys)
    shift = min(4, int(np.log2(max(npts / max(nslots, 1), 1.0))))
    nbk = ((npts - 1) >> shift) + 1
    cnt = xp.empty(nbk, xp.int32)
    bk, sk = xp.empty(nslots, xp.int64), xp.empty(nslots, xp.int64)
    border, order, rank, first = (xp.empty(nslots, xp.int32) for _ in range(4))
    start = 0
    for n, end in enumerate(vends):
        m = end - start
        if m:
            seg, mm, npt, sh = keys[start:end], np.int64(m), np.int64(npts), np.int32(shift)
            grid = (-(-m // _BLOCK),)
            cnt.fill(0)
            k["hist"](grid, (_BLOCK,), (seg, mm, npt, sh, cnt, rank))
            cend = xp.cumsum(cnt, dtype=xp.int32)
            k["scatter"](grid, (_BLOCK,), (seg, mm, npt, sh, cnt, cend, rank, bk, border))
            k["bucket"](grid, (_BLOCK,), (bk, border, mm, npt, sh, cnt, cend, sk, order, first))
            ids = xp.cumsum(first[:m], dtype=xp.int32)
            k["vertex"](grid, (_BLOCK,), (sk, order, first, ids, mm, npt, np.float64(levels[n]),
                                          vals, vs, pts, ps[0], ps[1], np.int32(col is not None),
                                          col if col is not None else pts, cstride, remap[start:end],
                                          verts_all[start:end], vcol_all[start:end] if col is not None else verts_all,
                                          stats, np.int32(n), np.int32(nlev)))
        start = end
    *counts, bad = arrays.scalars_to_host(stats, limit=1 + nlev)
    if bad:
        raise ValueError("color: NaN at an end of a crossed edge")
    # vertices: each level's run of its slots' region; faces: slot -> vertex
    vstarts = [0] + vends[:-1]
    fstarts = [0] + fends[:-1]
    vbase = np.cumsum([0] + counts[:-1])
    for n in range(nlev):
        nn = (fends[n] - fstarts[n]) * dim
        if nn:
            k["faces"]((-(-nn // _BLOCK),), (_BLOCK,), (faces[fstarts[n]:], np.int64(nn), remap, np.int32(vbase[n])))
    if nlev == 1:
        verts = verts_all[:counts[0]]
        vcol = vcol_all[:counts[0]] if col is not None else None
    else:
        verts = xp.concatenate([verts_all[s:s + c] for s, c in zip(vstarts, counts)])
        vcol = xp.concatenate([vcol_all[s:s + c] for s, c in zip(vstarts, counts)]) if col is not None else None
    return verts, faces, vcol, cells
