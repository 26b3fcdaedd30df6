"""CUDA kernels of the segmented marching cubes: the algorithm of _cpu.py, one thread per
segment. Threads of a 32 x 8 tile cover neighbouring (k, j) and walk along axis 0 in
step, so their loads coalesce; plane masks roll in registers, so each sample is loaded
about once per pass from memory (the overlapping neighbours are cache hits).
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

template <typename T>
__device__ __forceinline__ unsigned mask(const T* v, const Vol& g, const Box& b, int i, int j, int k,
                                         double level, int reach) {
    unsigned m = 0;
    for (int dj = 0; dj < reach; ++dj)
        for (int dk = 0; dk < reach; ++dk)
            if (dj + dk < 4 && j + dj <= b.hi1 && k + dk <= b.hi2 && at(v, g, i, j + dj, k + dk) > level)
                m |= 1u << (3 * dj + dk);
    return m;
}

__device__ __forceinline__ int cross(unsigned P, unsigned Pn, int dj, int dk, bool xok, int j, int k,
                                     const Box& b) {
    if (j + dj > b.hi1 || k + dk > b.hi2) return 0;
    const int s = 3 * dj + dk;
    const unsigned in = (P >> s) & 1u;
    int r = 0;
    if (xok && in != ((Pn >> s) & 1u)) r |= 1;
    if (j + dj < b.hi1 && in != ((P >> (s + 3)) & 1u)) r |= 2;
    if (k + dk < b.hi2 && in != ((P >> (s + 1)) & 1u)) r |= 4;
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

template <typename T>
__global__ void mc_count(const T* __restrict__ v, const Vol g, const Box b, const double level,
                         const signed char* __restrict__ ntri, int* nvert_out, int* ntri_out,
                         unsigned int* bad) {
    const int m1 = b.hi1 - b.lo1 + 1, m2 = b.hi2 - b.lo2 + 1;
    const int r2 = blockIdx.x * blockDim.x + threadIdx.x, r1 = blockIdx.y * blockDim.y + threadIdx.y;
    if (r1 >= m1 || r2 >= m2) return;
    const int c = blockIdx.z, j = b.lo1 + r1, k = b.lo2 + r2;
    const int i0 = b.lo0 + c * b.chunk, i1 = min(i0 + b.chunk - 1, b.hi0);
    int nv = 0, nt = 0;
    unsigned nonfinite = 0;
    unsigned P = mask(v, g, b, i0, j, k, level, 2);
    for (int i = i0; i <= i1; ++i) {
        if (!isfinite(at(v, g, i, j, k))) nonfinite = 1;
        const bool xok = i < b.hi0;
        const unsigned Pn = xok ? mask(v, g, b, i + 1, j, k, level, 2) : 0u;
        nv += __popc(cross(P, Pn, 0, 0, xok, j, k, b));
        if (xok && j < b.hi1 && k < b.hi2) nt += ntri[cube_case(P, Pn)];
        P = Pn;
    }
    const long long seg = ((long long)c * m1 + r1) * m2 + r2;
    nvert_out[seg] = nv;
    ntri_out[seg] = nt;
    if (nonfinite) atomicAdd(bad, 1u);
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
    const double* vals; Vol vg;
};

template <typename T>
__device__ void vertex(const T* v, const Vol& g, double level, int i, int j, int k, int a, long long n,
                       const Out& o) {
    const int di = a == 0, dj = a == 1, dk = a == 2;
    const double va = at(v, g, i, j, k), vb = at(v, g, i + di, j + dj, k + dk);
    const double t = (level - va) / (vb - va);
    const int p[3] = {i, j, k};
    double ga[3], gb[3], nn = 0.0;
    grad(v, g, i, j, k, ga);
    grad(v, g, i + di, j + dj, k + dk, gb);
    for (int d = 0; d < 3; ++d) {
        const double x = (double)(p[d] + o.off[d]) + (d == a ? t : 0.0);
        o.verts[3 * n + d] = (float)(x * o.sp[d] + o.org[d]);
        ga[d] = (ga[d] + (gb[d] - ga[d]) * t) / o.sp[d];
        nn += ga[d] * ga[d];
    }
    nn = sqrt(nn);
    for (int d = 0; d < 3; ++d) o.normals[3 * n + d] = nn > 0.0 ? (float)(-ga[d] / nn) : 0.0f;
    if (o.vout) {
        const double sa = at(o.vals, o.vg, i, j, k);
        o.vout[n] = (float)(sa + (at(o.vals, o.vg, i + di, j + dj, k + dk) - sa) * t);
    }
    if (o.keys)
        o.keys[n] = o.keybase + ((a * o.dims[0] + i + o.off[0]) * o.dims[1] + j + o.off[1]) * o.dims[2]
                    + k + o.off[2];
}

template <typename T>
__global__ void mc_generate(const T* __restrict__ v, const Vol g, const Box b, const double level,
                            const int* __restrict__ nvert, const int* __restrict__ ntri_seg,
                            const long long* __restrict__ voff, const long long* __restrict__ toff,
                            const signed char* __restrict__ ntri, const signed char* __restrict__ tri,
                            const signed char* __restrict__ edge, const Out o) {
    const int m1 = b.hi1 - b.lo1 + 1, m2 = b.hi2 - b.lo2 + 1;
    const int r2 = blockIdx.x * blockDim.x + threadIdx.x, r1 = blockIdx.y * blockDim.y + threadIdx.y;
    if (r1 >= m1 || r2 >= m2) return;
    const long long seg = ((long long)blockIdx.z * m1 + r1) * m2 + r2;
    if (nvert[seg] == 0 && ntri_seg[seg] == 0) return;
    const int c = blockIdx.z, j = b.lo1 + r1, k = b.lo2 + r2;
    const int i0 = b.lo0 + c * b.chunk, i1 = min(i0 + b.chunk - 1, b.hi0);
    const bool cube_row = j < b.hi1 && k < b.hi2;
    long long cnt[4] = {0, 0, 0, 0};
    int B[4], Bn[4];
    #pragma unroll
    for (int r = 0; r < 4; ++r)
        if (j + (r >> 1) <= b.hi1 && k + (r & 1) <= b.hi2)
            cnt[r] = voff[((long long)c * m1 + r1 + (r >> 1)) * m2 + r2 + (r & 1)];
    unsigned P = mask(v, g, b, i0, j, k, level, 3);
    unsigned Pn = i0 < b.hi0 ? mask(v, g, b, i0 + 1, j, k, level, 3) : 0u;
    #pragma unroll
    for (int r = 0; r < 4; ++r) B[r] = cross(P, Pn, r >> 1, r & 1, i0 < b.hi0, j, k, b);
    long long t = toff[seg];
    for (int i = i0; i <= i1; ++i) {
        long long n = cnt[0];
        for (int a = 0; a < 3; ++a)
            if ((B[0] >> a) & 1) vertex(v, g, level, i, j, k, a, n++, o);
        if (i < b.hi0) {
            const unsigned Pnn = i + 1 < b.hi0 ? mask(v, g, b, i + 2, j, k, level, 3) : 0u;
            #pragma unroll
            for (int r = 0; r < 4; ++r) Bn[r] = cross(Pn, Pnn, r >> 1, r & 1, i + 1 < b.hi0, j, k, b);
            if (cube_row) {
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
                        const long long base = i == i1
                            ? voff[((long long)(c + 1) * m1 + r1 + dj) * m2 + r2 + dk]  // next segment
                            : cnt[r] + __popc(B[r]);
                        id = base + __popc(Bn[r] & ((1 << a) - 1));
                    }
                    o.faces[3 * t + e] = (int)id;
                }
                t += ntri[cs];
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
"""


def supported(dtype) -> bool:
    """Whether the kernels read `dtype` directly (others are converted first)."""
    return np.dtype(dtype) in _TYPES


@functools.cache
def _module():
    import cupy

    src = _SOURCE % {f"c{a}": ", ".join(str(int(x)) for x in CORNERS[:, a]) for a in range(3)}
    names = [f"mc_{kind}<{t}>" for kind in ("count", "generate") for t in _TYPES.values()]
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


def count(vol, ext, level, lo, hi, chunk, tables, nvert_out, ntri_out, bad) -> None:
    """Pass 1 (see _cpu.count); adds 1 to the device counter `bad` per segment with a non-finite sample."""
    grid, tile = _grid(lo, hi, chunk)
    box = _struct(_BOX, [*lo, *hi, chunk])
    _kernel("count", vol.dtype)(grid, tile, (vol, _vol(vol, ext), box, np.float64(level), tables[0],
                                             nvert_out, ntri_out, bad))


def generate(vol, ext, level, lo, hi, chunk, nvert, ntri_seg, voff, toff, tables, geo, offset, vals, keys, dims, keybase,
             verts, faces, normals, vout) -> None:
    """Pass 2 (see _cpu.generate); `vals`, `keys`, `vout` may be None."""
    grid, tile = _grid(lo, hi, chunk)
    box = _struct(_BOX, [*lo, *hi, chunk])
    out_fields = [("sp", "3f8"), ("org", "3f8"), ("off", "3i8"), ("dims", "3i8"), ("keybase", "i8"),
                  ("verts", "u8"), ("faces", "u8"), ("normals", "u8"), ("vout", "u8"), ("keys", "u8"),
                  ("vals", "u8"), ("vg", np.dtype(_VOL, align=True))]
    ptr = lambda a: 0 if a is None else a.data.ptr  # noqa: E731
    vg = _vol(vals, ext) if vals is not None else np.zeros((), np.dtype(_VOL, align=True))
    o = _struct(out_fields, [geo[:3], geo[3:], offset, dims, keybase, ptr(verts), ptr(faces), ptr(normals),
                             ptr(vout), ptr(keys), ptr(vals), vg])
    _kernel("generate", vol.dtype)(grid, tile, (vol, _vol(vol, ext), box, np.float64(level), nvert, ntri_seg, voff, toff,
                                                tables[0], tables[1], tables[2], o))
