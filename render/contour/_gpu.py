"""CUDA kernels of the segmented marching cubes: the algorithm of _cpu.py, one thread per
segment. Threads of a 32 x 8 tile cover neighbouring (k, j) and walk along axis 0 in
step, so their loads coalesce; plane masks roll in registers, so each sample is loaded
about once per pass from memory (the overlapping neighbours are cache hits).

Pass 2 is split: the segment walk writes faces and, per vertex, its packed edge; a flat
kernel then computes the vertices one per thread (the gradients need many registers,
which would starve the walk of occupancy).
"""

from __future__ import annotations

import functools

import numpy as np

from ._tables import CORNERS

_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double", np.dtype(np.uint8): "unsigned char",
          np.dtype(np.int8): "signed char", np.dtype(np.uint16): "unsigned short", np.dtype(np.int16): "short",
          np.dtype(np.int32): "int", np.dtype(np.uint32): "unsigned int"}

_SOURCE = r"""
#define CORNER0 {%(c0)s}
#define CORNER1 {%(c1)s}
#define CORNER2 {%(c2)s}

struct Vol { long long s0, s1, s2; int elo[3], ehi[3]; };  // strides; samples gradients use
struct Box { int lo0, lo1, lo2, hi0, hi1, hi2, chunk; };

template <typename T>
__device__ __forceinline__ double at(const T* v, const Vol& g, int i, int j, int k) {
    return (double)v[i * g.s0 + j * g.s1 + k * g.s2];
}

// Which points (i, j + dj, k + dk) of a plane lie in the box: bit 3 * dj + dk, (2, 2) left out.
__device__ __forceinline__ unsigned box_ok(int j, int k, const Box& b) {
    unsigned ok = 0;
    #pragma unroll
    for (int dj = 0; dj < 3; ++dj)
        #pragma unroll
        for (int dk = 0; dk < 3; ++dk)
            if (dj + dk < 4 && j + dj <= b.hi1 && k + dk <= b.hi2) ok |= 1u << (3 * dj + dk);
    return ok;
}

template <typename T>
__device__ __forceinline__ bool finite(T) { return true; }  // integer samples
template <>
__device__ __forceinline__ bool finite<float>(float x) { return isfinite(x); }
template <>
__device__ __forceinline__ bool finite<double>(double x) { return isfinite(x); }

template <typename T>
__device__ __forceinline__ bool above(T x, double level, float) { return (double)x > level; }
// float samples compare in float against the largest float <= level: the same answer.
template <>
__device__ __forceinline__ bool above<float>(float x, double, float levelf) { return x > levelf; }

// Inside bits of the plane's points (j + dj, k + dk), dj, dk < R, that `ok` selects; p
// points at (i, j, k). Neighbouring threads load the same samples: cache hits.
template <typename T, int R>
__device__ __forceinline__ unsigned plane_mask(const T* p, long long s1, long long s2, unsigned ok, double level,
                                               float levelf) {
    unsigned m = 0;
    #pragma unroll
    for (int dj = 0; dj < R; ++dj)
        #pragma unroll
        for (int dk = 0; dk < R; ++dk) {
            const int bit = 3 * dj + dk;
            if (dj + dk < 4 && ((ok >> bit) & 1u) && above(p[dj * s1 + dk * s2], level, levelf)) m |= 1u << bit;
        }
    return m;
}

// Crossed-edge bits (axis 0, 1, 2) at point (i, j + dj, k + dk): P is plane i, Pn plane i + 1.
__device__ __forceinline__ int cross(unsigned P, unsigned Pn, int dj, int dk, bool xok, unsigned ok) {
    const int s = 3 * dj + dk;
    if (!((ok >> s) & 1u)) return 0;
    const unsigned in = (P >> s) & 1u;
    int r = 0;
    if (xok && in != ((Pn >> s) & 1u)) r |= 1;
    if (((ok >> (s + 3)) & 1u) && in != ((P >> (s + 3)) & 1u)) r |= 2;
    if (((ok >> (s + 1)) & 1u) && in != ((P >> (s + 1)) & 1u)) r |= 4;
    return r;
}

__device__ __forceinline__ int cube_case(unsigned P, unsigned Pn) {
    const int c0[8] = CORNER0, c1[8] = CORNER1, c2[8] = CORNER2;
    int c = 0;
    #pragma unroll
    for (int n = 0; n < 8; ++n)
        if ((((c0[n] ? Pn : P) >> (3 * c1[n] + c2[n])) & 1u)) c |= 1 << n;
    return c;
}

#define SEGMENT                                                                         \
    const int m1 = b.hi1 - b.lo1 + 1, m2 = b.hi2 - b.lo2 + 1;                           \
    const int r2 = blockIdx.x * blockDim.x + threadIdx.x, r1 = blockIdx.y * blockDim.y + threadIdx.y; \
    if (r1 >= m1 || r2 >= m2) return;                                                   \
    const int c = blockIdx.z, j = b.lo1 + r1, k = b.lo2 + r2;                           \
    const int i0 = b.lo0 + c * b.chunk, i1 = min(i0 + b.chunk - 1, b.hi0);              \
    const long long seg = ((long long)c * m1 + r1) * m2 + r2;

template <typename T>
__global__ void __launch_bounds__(256) mc_count(const T* __restrict__ v, const Vol g, const Box b,
        const double level, const float levelf, const signed char* __restrict__ ntri, int* nvert_out,
        int* ntri_out, unsigned int* bad) {
    SEGMENT
    const unsigned ok = box_ok(j, k, b) & 0x1Bu;  // (0,0) (0,1) (1,0) (1,1)
    const bool cube = j < b.hi1 && k < b.hi2;
    const T* p = v + i0 * g.s0 + j * g.s1 + k * g.s2;
    int nv = 0, nt = 0;
    bool all_finite = true;
    unsigned P = plane_mask<T, 2>(p, g.s1, g.s2, ok, level, levelf);
    for (int i = i0; i <= i1; ++i, p += g.s0) {
        all_finite &= finite(p[0]);
        const bool xok = i < b.hi0;
        const unsigned Pn = xok ? plane_mask<T, 2>(p + g.s0, g.s1, g.s2, ok, level, levelf) : 0u;
        if (P != Pn || (P != 0u && P != ok)) {  // else all of them on one side: nothing crossed
            nv += __popc(cross(P, Pn, 0, 0, xok, ok));
            if (xok && cube) nt += ntri[cube_case(P, Pn)];
        }
        P = Pn;
    }
    nvert_out[seg] = nv;
    ntri_out[seg] = nt;
    if (!all_finite) atomicAdd(bad, 1u);
}

// The segments with a vertex or a triangle, in order: list[flags_scan[s] - 1] = s.
template <typename I>
__global__ void mc_compact(const I* __restrict__ nvert, const I* __restrict__ ntri_seg,
                           const I* __restrict__ scan, const long long nseg, I* __restrict__ list) {
    for (long long s = blockIdx.x * (long long)blockDim.x + threadIdx.x; s < nseg;
         s += (long long)gridDim.x * blockDim.x)
        if (nvert[s] != 0 || ntri_seg[s] != 0) list[scan[s] - 1] = (I)s;
}

// A vertex's edge packed: point (i, j, k) and axis a.
__device__ __forceinline__ long long pack(int i, int j, int k, int a) {
    return ((long long)i << 42) | ((long long)j << 22) | ((long long)k << 2) | a;
}

// Faces, and the edge of each vertex the segment owns (positions come in mc_vertex, one
// thread per vertex: the walk stays light on registers).
template <typename T>
__global__ void __launch_bounds__(256) mc_walk(const T* __restrict__ v, const Vol g, const Box b,
        const double level, const float levelf, const int* __restrict__ active, const int* __restrict__ nactive,
        const int* __restrict__ nvert, const int* __restrict__ ntri_seg, const long long* __restrict__ vincl, const long long* __restrict__ tincl,
        const signed char* __restrict__ ntri, const signed char* __restrict__ tri,
        const signed char* __restrict__ edge, int* __restrict__ faces, long long* __restrict__ vedge) {
    // One thread per active segment (listed by mc_compact, in segment order, so neighbours
    // in a warp are mostly neighbours in k): warps are not held up by empty segments.
    const long long tid = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (tid >= *nactive) return;
    const long long seg = active[tid];
    const int m1 = b.hi1 - b.lo1 + 1, m2 = b.hi2 - b.lo2 + 1;
    const int r2 = (int)(seg %% m2), r1 = (int)((seg / m2) %% m1), c = (int)(seg / ((long long)m1 * m2));
    const int j = b.lo1 + r1, k = b.lo2 + r2;
    const int i0 = b.lo0 + c * b.chunk, i1 = min(i0 + b.chunk - 1, b.hi0);
    const unsigned ok = box_ok(j, k, b);
    const bool cube = j < b.hi1 && k < b.hi2;
    long long cnt[4];
    int B[4], Bn[4];
    #pragma unroll
    for (int r = 0; r < 4; ++r) {
        const long long s = seg + (r >> 1) * m2 + (r & 1);
        cnt[r] = ((ok >> (3 * (r >> 1) + (r & 1))) & 1u) ? vincl[s] - nvert[s] : 0;
    }
    const T* p = v + i0 * g.s0 + j * g.s1 + k * g.s2;
    unsigned P = plane_mask<T, 3>(p, g.s1, g.s2, ok, level, levelf);
    unsigned Pn = i0 < b.hi0 ? plane_mask<T, 3>(p + g.s0, g.s1, g.s2, ok, level, levelf) : 0u;
    #pragma unroll
    for (int r = 0; r < 4; ++r) B[r] = cross(P, Pn, r >> 1, r & 1, i0 < b.hi0, ok);
    long long t = tincl[seg] - ntri_seg[seg];
    for (int i = i0; i <= i1; ++i, p += g.s0) {
        long long n = cnt[0];
        #pragma unroll
        for (int a = 0; a < 3; ++a)
            if ((B[0] >> a) & 1) vedge[n++] = pack(i, j, k, a);
        if (i < b.hi0) {
            const bool xok = i + 1 < b.hi0;
            const unsigned Pnn = xok ? plane_mask<T, 3>(p + 2 * g.s0, g.s1, g.s2, ok, level, levelf) : 0u;
            #pragma unroll
            for (int r = 0; r < 4; ++r) Bn[r] = cross(Pn, Pnn, r >> 1, r & 1, xok, ok);
            if (cube) {
                const int cs = cube_case(P, Pn);
                const int ne = 3 * ntri[cs];
                for (int e = 0; e < ne; ++e) {
                    const int le = tri[15 * cs + e];
                    const int a = edge[4 * le + 3], dj = edge[4 * le + 1], dk = edge[4 * le + 2];
                    const int r = 2 * dj + dk;
                    long long id;
                    if (edge[4 * le] == 0) {
                        id = cnt[r] + __popc(B[r] & ((1 << a) - 1));
                    } else {
                        long long base = cnt[r] + __popc(B[r]);
                        if (i == i1) {  // the next plane starts the next segment
                            const long long s = seg + (long long)m1 * m2 + dj * m2 + dk;
                            base = vincl[s] - nvert[s];
                        }
                        id = base + __popc(Bn[r] & ((1 << a) - 1));
                    }
                    faces[3 * t + e] = (int)id;
                }
                t += ne / 3;
            }
            P = Pn;
            Pn = Pnn;
        } else {
            #pragma unroll
            for (int r = 0; r < 4; ++r) Bn[r] = 0;
        }
        #pragma unroll
        for (int r = 0; r < 4; ++r) { cnt[r] += __popc(B[r]); B[r] = Bn[r]; }
    }
}

template <typename T>
__device__ __forceinline__ void grad(const T* v, const Vol& g, int i, int j, int k, double* out) {
    const int p[3] = {i, j, k};
    #pragma unroll
    for (int a = 0; a < 3; ++a) {
        const int di = a == 0, dj = a == 1, dk = a == 2;
        out[a] = g.elo[a] == g.ehi[a] ? 0.0
               : p[a] == g.elo[a] ? at(v, g, i + di, j + dj, k + dk) - at(v, g, i, j, k)
               : p[a] == g.ehi[a] ? at(v, g, i, j, k) - at(v, g, i - di, j - dj, k - dk)
               : (at(v, g, i + di, j + dj, k + dk) - at(v, g, i - di, j - dj, k - dk)) / 2.0;
    }
}

struct Out {
    double sp[3], org[3];
    long long off[3], dims[3], keybase;
    float* verts; int* faces; float* normals; float* vout; long long* keys;
    const void* vals; int vals_f32; Vol vg;  // the sampled field: float32 or float64, read as it is
};

__device__ __forceinline__ double sample(const Out& o, int i, int j, int k) {
    return o.vals_f32 ? at((const float*)o.vals, o.vg, i, j, k) : at((const double*)o.vals, o.vg, i, j, k);
}

// Position, normal (and sampled value, global key) of vertices start .. start + count - 1.
template <typename T>
__global__ void __launch_bounds__(256) mc_vertex(const T* __restrict__ v, const Vol g, const double level,
        const long long* __restrict__ vedge, const long long start, const long long count, const Out o) {
    for (long long n = start + blockIdx.x * (long long)blockDim.x + threadIdx.x; n < start + count;
         n += (long long)gridDim.x * blockDim.x) {
        const long long e = vedge[n];
        const int i = (int)(e >> 42), j = (int)((e >> 22) & 0xFFFFF), k = (int)((e >> 2) & 0xFFFFF);
        const int a = (int)(e & 3);
        const int di = a == 0, dj = a == 1, dk = a == 2;
        const double va = at(v, g, i, j, k), vb = at(v, g, i + di, j + dj, k + dk);
        const double t = (level - va) / (vb - va);
        const int p[3] = {i, j, k};
        double ga[3], gb[3], nn = 0.0;
        grad(v, g, i, j, k, ga);
        grad(v, g, i + di, j + dj, k + dk, gb);
        #pragma unroll
        for (int d = 0; d < 3; ++d) {
            const double x = (double)(p[d] + o.off[d]) + (d == a ? t : 0.0);
            o.verts[3 * n + d] = (float)(x * o.sp[d] + o.org[d]);
            ga[d] = (ga[d] + (gb[d] - ga[d]) * t) / o.sp[d];
            nn += ga[d] * ga[d];
        }
        nn = sqrt(nn);
        #pragma unroll
        for (int d = 0; d < 3; ++d) o.normals[3 * n + d] = nn > 0.0 ? (float)(-ga[d] / nn) : 0.0f;
        if (o.vout) {
            const double sa = sample(o, i, j, k);
            o.vout[n] = (float)(sa + (sample(o, i + di, j + dj, k + dk) - sa) * t);
        }
        if (o.keys)
            o.keys[n] = o.keybase + ((a * o.dims[0] + i + o.off[0]) * o.dims[1] + j + o.off[1]) * o.dims[2]
                        + k + o.off[2];
    }
}
"""


def supported(dtype) -> bool:
    """Whether the kernels read `dtype` directly (others are converted first)."""
    return np.dtype(dtype) in _TYPES


@functools.cache
def _module():
    import cupy

    src = _SOURCE % {f"c{a}": ", ".join(str(int(x)) for x in CORNERS[:, a]) for a in range(3)}
    names = [f"mc_{kind}<{t}>" for kind in ("count", "walk", "vertex") for t in _TYPES.values()]
    names.append("mc_compact<int>")
    return cupy.RawModule(code=src, options=("-std=c++14",), name_expressions=names)


def _kernel(kind: str, dtype):
    return _module().get_function(f"mc_{kind}<{_TYPES[np.dtype(dtype)]}>")


def _struct(dtype_fields, values) -> np.ndarray:
    rec = np.zeros((), dtype=np.dtype(dtype_fields, align=True))
    for (name, _), val in zip(dtype_fields, values):
        rec[name] = val
    return rec[()]  # a numpy.void: CuPy passes it by value as the C struct


_VOL = [("s0", "i8"), ("s1", "i8"), ("s2", "i8"), ("elo", "3i4"), ("ehi", "3i4")]
_BOX = [(n, "i4") for n in ("lo0", "lo1", "lo2", "hi0", "hi1", "hi2", "chunk")]


def _vol(a, ext):
    item = a.dtype.itemsize
    if any(s % item for s in a.strides):
        raise ValueError(f"marching_cubes: strides {a.strides} are not multiples of the item size {item}")
    return _struct(_VOL, [s // item for s in a.strides] + [ext[:3], ext[3:]])


def _grid(lo, hi, chunk):
    m = [h - l + 1 for l, h in zip(lo, hi)]
    tile = (32, 8)
    return (-(-m[2] // tile[0]), -(-m[1] // tile[1]), (m[0] - 1) // chunk + 1), tile


def _levelf(level: float) -> np.float32:
    """The largest float32 <= level (float samples compare against it in float)."""
    with np.errstate(over="ignore"):
        f = np.float32(level)
    return np.nextafter(f, np.float32(-np.inf)) if float(f) > level else f


def count(vol, ext, level, lo, hi, chunk, tables, nvert_out, ntri_out, bad) -> None:
    """Pass 1 (see _cpu.count); adds 1 to the device counter `bad` per segment with a non-finite sample."""
    grid, tile = _grid(lo, hi, chunk)
    box = _struct(_BOX, [*lo, *hi, chunk])
    _kernel("count", vol.dtype)(grid, tile, (vol, _vol(vol, ext), box, np.float64(level), _levelf(level), tables[0],
                                             nvert_out, ntri_out, bad))


def generate(vol, ext, level, lo, hi, chunk, nvert, ntri_seg, vincl, tincl, vstart, vcount, tables, geo,
             offset, vals, keys, dims, keybase, verts, faces, normals, vout, vedge) -> None:
    """Pass 2 (see _cpu.generate) for one level: faces and vertex edges per segment, then
    vertices ``vstart .. vstart + vcount - 1`` one per thread. `vincl`/`tincl`: inclusive
    scans of the counts (global numbering); `vals`, `keys`, `vout` may be None; `vedge`:
    int64 scratch, one per vertex."""
    if max(h - l for l, h in zip(lo, hi)) >= 2**20:
        raise ValueError(f"marching_cubes: box {lo}..{hi} is too long for the GPU path (2^20 samples per axis)")
    import cupy

    box = _struct(_BOX, [*lo, *hi, chunk])
    g = _vol(vol, ext)
    nseg = len(nvert)
    scan = cupy.cumsum((nvert != 0) | (ntri_seg != 0), dtype=cupy.int32)
    bound = min(nseg, vcount + len(faces))  # each active segment has a vertex or a triangle
    if bound == 0:
        return
    active = cupy.empty(bound, cupy.int32)
    _module().get_function("mc_compact<int>")((min(-(-nseg // 256), 65535),), (256,),
                                              (nvert, ntri_seg, scan, np.int64(nseg), active))
    # How many are active stays on the device: the walk's threads read it (no host round trip).
    _kernel("walk", vol.dtype)((-(-bound // 256),), (256,), (vol, g, box, np.float64(level), _levelf(level),
                                                             active, scan[-1:], nvert, ntri_seg, vincl, tincl,
                                                             *tables, faces, vedge))
    if vcount == 0:
        return
    out_fields = [("sp", "3f8"), ("org", "3f8"), ("off", "3i8"), ("dims", "3i8"), ("keybase", "i8"),
                  ("verts", "u8"), ("faces", "u8"), ("normals", "u8"), ("vout", "u8"), ("keys", "u8"),
                  ("vals", "u8"), ("vals_f32", "i4"), ("vg", np.dtype(_VOL, align=True))]
    ptr = lambda a: 0 if a is None else a.data.ptr  # noqa: E731
    vg = _vol(vals, ext) if vals is not None else np.zeros((), np.dtype(_VOL, align=True))
    o = _struct(out_fields, [geo[:3], geo[3:], offset, dims, keybase, ptr(verts), ptr(faces), ptr(normals),
                             ptr(vout), ptr(keys), ptr(vals),
                             int(vals is not None and vals.dtype == np.float32), vg])
    blocks = min(-(-vcount // 256), 2**31 - 1)
    _kernel("vertex", vol.dtype)((blocks,), (256,), (vol, g, np.float64(level), vedge, np.int64(vstart),
                                                     np.int64(vcount), o))
