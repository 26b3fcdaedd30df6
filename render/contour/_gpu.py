"""CUDA kernels of the marching cubes: the algorithm and numbering of _cpu.py.

A warp holds 32 consecutive points along k of a few rows j and walks one chunk of planes
along axis 0; each sample is loaded once per warp (coalesced, issued planes ahead) and
turned into one bit of a ballot, so a point's neighbours are neighbouring bits and the
cube cases, crossed edges and their counts come from bit operations on the masks. A
plane where no bit within reach differs is stepped over after its loads.

Both passes work on units: a chunk of planes x 24 rows j x 30 points k (24 tiles). Only
units where the level can be crossed are visited: mc_units tests each unit's samples
against the volume's per-tile (min, max) (insitu.ranges), mc_list lists those units and
the ones whose tiles they number vertices from (one unit further along each axis), and the
passes run a block per listed unit (the walk: per sixth of one; the grid covers every unit,
the blocks beyond the list leave at once). So a surface touching a few percent of a large
volume costs a few percent of its reads.

Pass 1 (mc_count) counts per tile (30 points of a row in a chunk, _tables.TILE) its
vertices, triangles and lead column's vertices (the caller scans the tiles, zero where
no unit was visited) and adds up the totals in 64 bits (over a whole volume of 4-byte
samples in 16-byte aligned rows, mc_count4 does, with 16-byte loads); pass 2 (mc_walk) writes faces
and, per vertex, its packed edge, numbered plane by plane within each tile (a warp's
lanes write neighbouring entries; faces 32 cubes at a time from a queue), skipping
warps whose tiles have nothing and, in the others, the planes before the first and
after the last where pass 1 saw samples on both sides (it keeps that span per warp);
a flat kernel (mc_vertex) then computes the vertices one per thread (the gradients
need registers that would starve the walk of occupancy; in this numbering neighbouring
threads gather neighbouring samples). Vertex and face numbers are the CPU's (unvisited
tiles hold nothing).
"""

from __future__ import annotations

import functools
import math
import threading

import numpy as np

from insitu import arrays
from insitu.log import get_logger

from ._tables import CORNERS, EDGE_AXIS, EDGE_BASE, TILE, tile_columns

_log = get_logger(__name__)

_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double", np.dtype(np.uint8): "unsigned char",
          np.dtype(np.int8): "signed char", np.dtype(np.uint16): "unsigned short", np.dtype(np.int16): "short",
          np.dtype(np.int32): "int", np.dtype(np.uint32): "unsigned int"}

_SOURCE = r"""
// Byte offsets in the tables array (see tables()): triangles' edges by case (16 bytes a
// case), case by quad() bits, triangles by case, triangles by quad() bits
#define TRI %(TRI)s
#define CASE_Q %(CASE_Q)s
#define NTRI_C %(NTRI_C)s
#define NTRI_Q %(NTRI_Q)s
#define EDGE_I {%(e0)s}
#define EDGE_J {%(e1)s}
#define EDGE_K {%(e2)s}
#define EDGE_A {%(ea)s}
#define FULL 0xFFFFFFFFu
#define TILE %(tile)s  // points along k per warp: a tile of the numbering (_tables.TILE)
#define WB %(wb)s  // warps (rows) per walk block: a piece of a unit
#define QCAP 64  // cubes a warp's queue holds (at most 31 waiting + 30 of a plane)
#define UROWS %(urows)s  // rows j per unit (8 warps of 3 rows in pass 1, 24 / WB pieces of WB warps of 1 row in pass 2)

struct Vol { long long s0, s1, s2; int elo[3], ehi[3]; };  // strides; samples gradients use
struct Box { int lo0, lo1, lo2, hi0, hi1, hi2, chunk, nbx, nby; };  // nbx, nby: units along j, k

// Unit u = (c * nby + by) * nbx + bx: chunk c, rows lo1 + UROWS bx .., points lo2 + TILE by ..
// (rows fastest: units next in the list share their boundary rows)
__device__ __forceinline__ void unit_of(int u, const Box& b, int& bx, int& by, int& c) {
    bx = u %% b.nbx;
    by = (u / b.nbx) %% b.nby;
    c = u / (b.nby * b.nbx);
}

// Whether the level can be crossed in unit u: the union of the (min, max) of the tiles
// its samples lie in (its cubes' and edges' samples: one more plane, row and point than
// it owns) straddles the level, or some tile holds a NaN or inf (the passes then read the
// samples, and report them).
__global__ void mc_units(const double* __restrict__ rng, const int si, const int sj, const int sk, const int gj,
                         const int gk, const Box b, const double level, const int n,
                         unsigned char* __restrict__ active) {
    const int u = blockIdx.x * blockDim.x + threadIdx.x;
    if (u >= n) return;
    int bx, by, c;
    unit_of(u, b, bx, by, c);
    const int i0 = b.lo0 + c * b.chunk, i1 = min(i0 + b.chunk, b.hi0);
    const int j0 = b.lo1 + UROWS * bx, j1 = min(j0 + UROWS, b.hi1);
    const int k0 = b.lo2 + TILE * by, k1 = min(k0 + TILE, b.hi2);
    double lo = 1.0 / 0.0, hi = -1.0 / 0.0;
    bool nan = false;
    for (int ti = i0 / si; ti <= i1 / si; ++ti)
        for (int tj = j0 / sj; tj <= j1 / sj; ++tj)
            for (int tk = k0 / sk; tk <= k1 / sk; ++tk) {
                const long long t = ((long long)ti * gj + tj) * gk + tk;
                const double mn = rng[2 * t], mx = rng[2 * t + 1];
                nan |= mn != mn || mx != mx;
                lo = fmin(lo, mn);
                hi = fmax(hi, mx);
            }
    active[u] = nan || (lo <= level && hi > level);
}

// The units both passes visit: the active ones and those one unit further along j, k and
// the chunks (pass 2 numbers vertices from the tiles there, so pass 1 must count
// them). units[0]: their number, units[1 ..]: the list (in no particular order).
__global__ void mc_list(const unsigned char* __restrict__ active, const Box b, const int n, int* __restrict__ units) {
    const int u = blockIdx.x * blockDim.x + threadIdx.x;
    bool take = false;
    if (u < n) {
        int bx, by, c;
        unit_of(u, b, bx, by, c);
        for (int dc = 0; dc <= min(c, 1); ++dc)
            for (int dx = 0; dx <= min(bx, 1); ++dx)
                for (int dy = 0; dy <= min(by, 1); ++dy)
                    take |= active[((c - dc) * b.nby + by - dy) * b.nbx + bx - dx] != 0;
    }
    const unsigned m = __ballot_sync(FULL, take);
    if (!m) return;
    const int lane = threadIdx.x & 31, first = __ffs(m) - 1;
    int base = 0;
    if (lane == first) base = atomicAdd(units, __popc(m));
    base = __shfl_sync(FULL, base, first);
    if (take) units[1 + base + __popc(m & ((1u << lane) - 1u))] = u;
}

// Where pass 1 keeps the span of planes of its warp of rows lo1 + R g .. (and the next
// row), points of unit column by, chunk c: the first and last plane where those samples
// are not all on one side, as (first - i0 + 1) << 16 | (last - i0 + 1); 0: none (or a
// warp of a unit not visited). Chunks of 2^16 - 1 planes or more (boxes of a million
// planes) do not fit: the walk then steps over every plane.
__device__ __forceinline__ long long span_of(const Box& b, int c, int g, int by, int R) {
    const int ng = (b.hi1 - b.lo1 + R) / R;
    return ((long long)c * ng + g) * b.nby + by;
}

template <typename T>
__device__ __forceinline__ double at(const T* v, const Vol& g, int i, int j, int k) {
    return (double)v[i * g.s0 + j * g.s1 + k * g.s2];
}

template <typename T>
__device__ __forceinline__ bool above(T x, double level, float) { return (double)x > level; }
// float samples compare in float against the largest float <= level: the same answer.
template <>
__device__ __forceinline__ bool above<float>(float x, double, float levelf) { return x > levelf; }

// NaN or inf in x turns acc into NaN (0 * inf is NaN); integer samples are always finite.
template <typename T>
__device__ __forceinline__ void taint(T, float&) {}
template <>
__device__ __forceinline__ void taint<float>(float x, float& acc) { acc = fmaf(x, 0.0f, acc); }
template <>
__device__ __forceinline__ void taint<double>(double x, float& acc) { acc += (float)(x * 0.0); }

template <bool B>
struct Bool { static constexpr bool value = B; };

// A pass 1 warp's part of the stats: whether it met NaN or inf (acc), its vertices sv and
// triangles st (each lane's); exact in 64 bits, the caller's scans are int32.
__device__ __forceinline__ void add_stats(unsigned long long* stats, unsigned sv, unsigned st, float acc, int lane) {
    sv = __reduce_add_sync(FULL, sv);
    st = __reduce_add_sync(FULL, st);
    const bool nan = __ballot_sync(FULL, acc != acc) != 0u;
    if (lane == 0) {
        if (nan) atomicAdd(stats, 1ull);
        if (sv) atomicAdd(stats + 1, (unsigned long long)sv);
        if (st) atomicAdd(stats + 2, (unsigned long long)st);
    }
}

// step(i, q) for the planes i = first .. last, q alternating between two buffers of loads in
// flight (a plane's loads go into the buffer whose plane was just used: copying a buffer
// would wait for its loads).
template <typename Step, typename Q>
__device__ __forceinline__ void each_plane(int first, int last, Step& step, Q& qa, Q& qb) {
    for (int i = first; i <= last; i += 2) {
        step(i, qa);
        if (i + 1 > last) break;
        step(i + 1, qb);
    }
}

// A warp holds 32 consecutive points along k (lane l: k0 + l) of NR consecutive rows j of
// one plane as NR ballots: bit l of M[r] = sample (i, j0 + r, k0 + l) above the level.
// Every sample is loaded once per warp, coalesced; a point's neighbours along k are the
// next bit. The loads of a plane are issued planes ahead of its ballots, into buffers
// that alternate (copying a buffer would wait for its loads). F: every row and lane of
// the warp lies in the box (no per-sample tests).
template <typename T, int NR>
struct Rows { T x[NR]; };

template <bool F, typename T, int NR>
__device__ __forceinline__ void load_rows(const T* p, long long s1, int nrow, bool kin, Rows<T, NR>& q) {
    #pragma unroll
    for (int r = 0; r < NR; ++r) q.x[r] = F || (r < nrow && kin) ? p[r * s1] : T(0);
}

template <bool F, typename T, int NR>
__device__ __forceinline__ void ballot_rows(const Rows<T, NR>& q, int nrow, bool kin, double level, float levelf,
                                            unsigned* M) {
    #pragma unroll
    for (int r = 0; r < NR; ++r) M[r] = __ballot_sync(FULL, (F || (r < nrow && kin)) && above(q.x[r], level, levelf));
}

// The inside bits of cube (i, j, k) at lane l from the masks of rows j, j + 1 of planes
// i (M0, M1) and i + 1 (N0, N1): bit 4 di + 2 dj + dk for corner (di, dj, dk).
__device__ __forceinline__ int quad(unsigned M0, unsigned M1, unsigned N0, unsigned N1, int l) {
    return ((M0 >> l) & 3u) | (((M1 >> l) & 3u) << 2) | (((N0 >> l) & 3u) << 4) | (((N1 >> l) & 3u) << 6);
}

// Pass 1: a warp counts the vertices (crossed edges starting at its points) and
// triangles (cubes whose lower corner they are) of the R tiles of rows j0 .. j0 + R - 1,
// TILE points k0 .. k0 + TILE - 1 (lanes beyond lend samples), of one chunk of planes,
// walking the chunk's planes; planes where the warp's samples all lie on one side cost
// the loads and ballots only. Every sample of the box is also tested for NaN and inf.
template <typename T, int R, int MINB, bool LIST>
__global__ void __launch_bounds__(256, MINB) mc_count(const T* __restrict__ v, const Vol g, const Box b,
        const double level, const float levelf, const unsigned char* __restrict__ tabs, int* __restrict__ vtile,
        int* __restrict__ ttile, int* __restrict__ ltile, unsigned long long* stats, int* units,
        unsigned* __restrict__ planes) {
    // A block a unit (LIST: the blockIdx.x-th listed; blocks beyond the list leave at once):
    // blocks looping over the list spilled registers inside the loop.
    if ((int)blockIdx.x >= units[0]) return;
    const int u = LIST ? units[1 + blockIdx.x] : (int)blockIdx.x;
    __shared__ unsigned char s_ntri[256];  // by quad() bits
    const int tid = threadIdx.y * 32 + threadIdx.x;
    for (int q = tid; q < 256; q += blockDim.x * blockDim.y) s_ntri[q] = tabs[NTRI_Q + q];
    __syncthreads();
    const int lane = threadIdx.x;
    int bx, by, c;
    unit_of(u, b, bx, by, c);
    // The 8 warps of a block take consecutive row groups (they share the rows between).
    const int j0 = b.lo1 + UROWS * bx + R * threadIdx.y;
    const int k = b.lo2 + TILE * by + lane;
    if (j0 > b.hi1 || k - lane > b.hi2) return;
    const int m1 = b.hi1 - b.lo1 + 1, m2 = b.hi2 - b.lo2 + 1;
    const bool kin = k <= b.hi2, own = kin && lane < TILE;
    const int nrow = min(R + 1, b.hi1 - j0 + 1);  // rows j0 + r that exist
    const unsigned U = __ballot_sync(FULL, kin), K2 = __ballot_sync(FULL, lane < 31 && k < b.hi2);
    const int i0 = b.lo0 + c * b.chunk, i1 = min(i0 + b.chunk - 1, b.hi0);
    const long long s0 = g.s0, s1 = g.s1;
    const T* p = v + i0 * s0 + j0 * s1 + (long long)k * g.s2;
    int nv[R], nt[R];
    #pragma unroll
    for (int r = 0; r < R; ++r) nv[r] = nt[r] = 0;
    float acc = 0.0f;
    // the first and last plane where the warp's samples are not all on one side (see span_of)
    int first = -1, last = -1;
    auto run = [&](auto full) {
        constexpr bool F = decltype(full)::value;
        const unsigned u = F ? FULL : U;
        unsigned M[R + 1], N[R + 1];
        Rows<T, R + 1> q1, q2;  // planes i + 1, i + 2 in flight
        load_rows<F>(p, s1, nrow, kin, q1);
        #pragma unroll
        for (int r = 0; r <= R; ++r) taint(q1.x[r], acc);
        ballot_rows<F>(q1, nrow, kin, level, levelf, M);
        if (i0 + 1 <= b.hi0) load_rows<F>(p + s0, s1, nrow, kin, q1);
        if (i0 + 2 <= b.hi0 && i0 + 1 <= i1) load_rows<F>(p + 2 * s0, s1, nrow, kin, q2);
        // Plane i + 1 comes from q, which then takes plane i + 3.
        auto step = [&](const int i, Rows<T, R + 1>& q) {
            const bool xok = i < b.hi0;
            if (xok) {
                #pragma unroll
                for (int r = 0; r <= R; ++r) taint(q.x[r], acc);
                ballot_rows<F>(q, nrow, kin, level, levelf, N);
            } else {
                #pragma unroll
                for (int r = 0; r <= R; ++r) N[r] = M[r];  // no plane i + 1: no axis-0 edge, no cube
            }
            if (i + 3 <= b.hi0 && i + 2 <= i1) load_rows<F>(p + 3 * s0, s1, nrow, kin, q);
            const unsigned z = M[0] & u;
            unsigned d = 0u;
            #pragma unroll
            for (int r = 0; r <= R; ++r)
                if (F || r < nrow) d |= (M[r] ^ z) | (N[r] ^ z);
            const bool mixed = (d & u) != 0u || (z != 0u && z != u);  // else every sample on one side
            if (mixed) {
                first = first < 0 ? i : first;
                last = i;
                #pragma unroll
                for (int r = 0; r < R; ++r) {
                    if (!F && r >= nrow) continue;
                    const bool jn = F || r + 1 < nrow;  // j < hi1
                    const unsigned x0 = M[r] ^ N[r], x1 = jn ? M[r] ^ M[r + 1] : 0u;
                    const unsigned x2 = (M[r] ^ (M[r] >> 1)) & K2;
                    nv[r] += ((x0 >> lane) & 1u) + ((x1 >> lane) & 1u) + ((x2 >> lane) & 1u);
                    if (xok && jn && ((K2 >> lane) & 1u))
                        nt[r] += s_ntri[quad(M[r], M[r + 1], N[r], N[r + 1], lane)];
                }
            }
            #pragma unroll
            for (int r = 0; r <= R; ++r) M[r] = N[r];
            p += s0;
        };
        each_plane(i0, i1, step, q1, q2);
    };
    if (nrow == R + 1 && U == FULL) run(Bool<true>()); else run(Bool<false>());
    if (lane == 0)
        planes[span_of(b, c, (j0 - b.lo1) / R, by, R)] = first < 0 ? 0u : (first - i0 + 1) << 16 | (last - i0 + 1);
    // Per tile (the TILE points of a row a warp counts: tile (c * m1 + j - lo1) * nby + by) its
    // vertices, triangles and lead column's vertices (see _tables.TILE): the caller scans them.
    #pragma unroll
    for (int r = 0; r < R; ++r) {
        if (r >= nrow) continue;
        const int sv = __reduce_add_sync(FULL, own ? nv[r] : 0), st = __reduce_add_sync(FULL, own ? nt[r] : 0);
        if (lane == 0) {
            const long long tile = ((long long)c * m1 + j0 + r - b.lo1) * b.nby + by;
            vtile[tile] = sv;
            ttile[tile] = st;
            ltile[tile] = nv[r];
        }
    }
    // stats: warps that met NaN or inf, vertices, triangles (see add_stats)
    unsigned sv = 0u, st = 0u;
    #pragma unroll
    for (int r = 0; r < R; ++r)
        if (own && r < nrow) { sv += nv[r]; st += nt[r]; }
    add_stats(stats, sv, st, acc, lane);
}

// Pass 1 over every unit of a volume of 4-byte samples whose rows hold k at unit stride and
// start 16-byte aligned (the whole-volume path): the same counts as mc_count, from one
// 16-byte load per lane and row (lane l: points 4 l .. 4 l + 3 of a segment of 128, a
// 512-byte aligned run of memory, where mc_count's 30-point tiles straddle 128-byte
// lines). The point after a lane's last is the next lane's first (lane 31: one more
// sample). A lane's four points lie in one tile or two (TILE > 4): it counts per tile in
// registers; after the chunk the warp sums each tile of its segment and adds it to the
// tile's counts (zeroed by the caller: a tile can straddle two segments). The plane spans
// are mc_count's, per column of its warps (32 points), from the lanes holding the column's
// points and the point after each (a few more points: never a crossed plane left out),
// merged over the two segments a column can straddle.
template <typename T> struct Vec4;
template <> struct Vec4<float> { typedef float4 type; };
template <> struct Vec4<int> { typedef int4 type; };
template <> struct Vec4<unsigned int> { typedef uint4 type; };

template <typename T, int NR>
struct Rows4 { typename Vec4<T>::type x[NR]; T e[NR]; };  // e: lane 31's next sample

template <bool F, typename T, int NR>
__device__ __forceinline__ void load_rows4(const T* p, long long s1, int nrow, int npt, bool ext, Rows4<T, NR>& q) {
    typedef typename Vec4<T>::type V;
    #pragma unroll
    for (int r = 0; r < NR; ++r) {
        if (F || (r < nrow && npt == 4)) {
            q.x[r] = *reinterpret_cast<const V*>(p + r * s1);
        } else {
            const T* a = p + r * s1;
            const bool in = r < nrow;
            q.x[r].x = in && npt > 0 ? a[0] : T(0);
            q.x[r].y = in && npt > 1 ? a[1] : T(0);
            q.x[r].z = in && npt > 2 ? a[2] : T(0);
            q.x[r].w = T(0);
        }
        q.e[r] = ext && (F || r < nrow) ? p[r * s1 + 4] : T(0);
    }
}

// Bits 0 .. 3 of row r's word: the lane's points above the level; bit 4: the next point's
// (the next lane's bit 0, lane 31's own extra sample).
template <bool F, typename T, int NR>
__device__ __forceinline__ void words4(const Rows4<T, NR>& q, int nrow, int lane, double level, float levelf,
                                       float& acc, unsigned* W) {
    #pragma unroll
    for (int r = 0; r < NR; ++r) {
        const typename Vec4<T>::type x = q.x[r];
        taint(x.x, acc); taint(x.y, acc); taint(x.z, acc); taint(x.w, acc);
        const unsigned w = (unsigned)above(x.x, level, levelf) | (unsigned)above(x.y, level, levelf) << 1
                         | (unsigned)above(x.z, level, levelf) << 2 | (unsigned)above(x.w, level, levelf) << 3;
        const unsigned nx = __shfl_down_sync(FULL, w, 1) & 1u;
        W[r] = (F || r < nrow) ? w | (lane == 31 ? (unsigned)above(q.e[r], level, levelf) : nx) << 4 : 0u;
    }
}

template <typename T, int R, int MINB>
__global__ void __launch_bounds__(256, MINB) mc_count4(const T* __restrict__ v, const Vol g, const Box b,
        const int nseg, const double level, const float levelf, const unsigned char* __restrict__ tabs,
        int* __restrict__ vtile, int* __restrict__ ttile, int* __restrict__ ltile, unsigned long long* stats,
        unsigned* __restrict__ planes) {
    __shared__ unsigned char s_ntri[256];  // by quad() bits
    const int tid = threadIdx.y * 32 + threadIdx.x;
    for (int q = tid; q < 256; q += blockDim.x * blockDim.y) s_ntri[q] = tabs[NTRI_Q + q];
    __syncthreads();
    const int lane = threadIdx.x;
    // Block (c * nbx + bx) * nseg + sg: segments of a row fastest (the next one's first
    // sample is this one's lane 31's extra), then units of rows, then chunks.
    const int sg = blockIdx.x %% nseg, bx = (blockIdx.x / nseg) %% b.nbx, c = blockIdx.x / (nseg * b.nbx);
    const int j0 = b.lo1 + UROWS * bx + R * threadIdx.y;
    if (j0 > b.hi1) return;
    const int ks = b.lo2 + 128 * sg, kl = ks + 4 * lane;  // the segment's first point, the lane's
    const int m1 = b.hi1 - b.lo1 + 1;
    const int nrow = min(R + 1, b.hi1 - j0 + 1), nown = min(R, nrow);  // rows read, rows counted
    const int npt = max(0, min(4, b.hi2 - kl + 1));  // the lane's points in the box
    const bool ext = lane == 31 && ks + 128 <= b.hi2;
    // bits s of the lane's points: in the box (own), with a cube and a k edge (kin: k < hi2),
    // in the second of the lane's tiles (tb); the lead point (a tile's first: its lead column)
    const unsigned own = (1u << npt) - 1u, kin = (1u << max(0, min(4, b.hi2 - kl))) - 1u;
    const int ta = (kl - b.lo2) / TILE, split = TILE * (ta + 1) - (kl - b.lo2);  // tile of bit 0; first s in ta + 1
    const unsigned tb = own & ~((1u << min(split, 4)) - 1u), tA = own & ~tb;
    const int sl = (TILE - (kl - b.lo2) %% TILE) %% TILE;
    const unsigned ld = sl < npt ? 1u << sl : 0u;
    const unsigned valid = own | (kl + 4 <= b.hi2 ? 16u : 0u);  // bits of the word that are samples
    const int i0 = b.lo0 + c * b.chunk, i1 = min(i0 + b.chunk - 1, b.hi0);
    const long long s0 = g.s0, s1 = g.s1;
    const T* p = v + i0 * s0 + j0 * s1 + (long long)kl;
    int nvA[R], nvB[R], ntA[R], ntB[R], nl[R];
    #pragma unroll
    for (int r = 0; r < R; ++r) nvA[r] = nvB[r] = ntA[r] = ntB[r] = nl[r] = 0;
    float acc = 0.0f;
    int first = -1, last = -1;
    const unsigned A3 = tA * 0x111u, B3 = tb * 0x111u, L3 = ld * 0x111u;  // x0 | x1 << 4 | x2 << 8
    // Lane n keeps the plane span of mc_count's column c0 + n (its 32 points: lanes 30, 31
    // of mc_count's warp lend samples), over the lanes holding them (cols: the lanes' masks)
    const int kr = ks - b.lo2, c0 = max(0, (kr - 31 + TILE - 1) / TILE), c1 = min(b.nby - 1, (kr + 127) / TILE);
    const int cl = TILE * (c0 + lane) - kr;  // the column's first point, from the segment's
    const unsigned cols = lane <= c1 - c0
        ? (0xFFFFFFFFu >> (31 - min(31, (cl + 31) / 4))) & (0xFFFFFFFFu << max(0, cl / 4)) : 0u;
    auto run = [&](auto full) {
        constexpr bool F = decltype(full)::value;
        unsigned M[R + 1], N[R + 1];
        Rows4<T, R + 1> q1, q2;  // planes i + 1, i + 2 in flight
        load_rows4<F>(p, s1, nrow, npt, ext, q1);
        words4<F>(q1, nrow, lane, level, levelf, acc, M);
        if (i0 + 1 <= b.hi0) load_rows4<F>(p + s0, s1, nrow, npt, ext, q1);
        if (i0 + 2 <= b.hi0 && i0 + 1 <= i1) load_rows4<F>(p + 2 * s0, s1, nrow, npt, ext, q2);
        auto step = [&](const int i, Rows4<T, R + 1>& q) {
            const bool xok = i < b.hi0;
            if (xok) {
                words4<F>(q, nrow, lane, level, levelf, acc, N);
            } else {
                #pragma unroll
                for (int r = 0; r <= R; ++r) N[r] = M[r];
            }
            if (i + 3 <= b.hi0 && i + 2 <= i1) load_rows4<F>(p + 3 * s0, s1, nrow, npt, ext, q);
            unsigned any = 0u, all = valid;
            #pragma unroll
            for (int r = 0; r <= R; ++r)
                if (F || r < nrow) { any |= M[r] | N[r]; all &= M[r] & N[r]; }
            // mixed: some sample of the warp above the level and some not
            const bool mixed = __any_sync(FULL, (any & valid) != 0u) && __any_sync(FULL, (all & valid) != valid);
            if (mixed) {
                // the column's samples (lane n's column) not all on one side; a lane's next
                // point counts too: where a column straddles two segments, the first one's
                // part then meets the second's first point (two parts each on one side, but
                // different sides, are a mixed column)
                const unsigned up = __ballot_sync(FULL, (any & valid) != 0u);
                const unsigned down = __ballot_sync(FULL, (all & valid) != valid);
                if ((up & cols) && (down & cols)) {
                    first = first < 0 ? i : first;
                    last = i;
                }
                #pragma unroll
                for (int r = 0; r < R; ++r) {
                    if (!F && r >= nown) continue;
                    const bool jn = F || r + 1 < nrow;  // j < hi1
                    const unsigned x0 = xok ? (M[r] ^ N[r]) & 15u : 0u, x1 = jn ? (M[r] ^ M[r + 1]) & 15u : 0u;
                    const unsigned x2 = (M[r] ^ (M[r] >> 1)) & kin;
                    const unsigned X = x0 | x1 << 4 | x2 << 8;
                    nvA[r] += __popc(X & A3);
                    nvB[r] += __popc(X & B3);
                    nl[r] += __popc(X & L3);
                    if (xok && jn) {
                        const unsigned o = M[r] | M[r + 1] | N[r] | N[r + 1], a = M[r] & M[r + 1] & N[r] & N[r + 1];
                        if ((o & 31u) && (a & 31u) != 31u) {
                            #pragma unroll
                            for (int s = 0; s < 4; ++s)
                                if ((kin >> s) & 1u) {
                                    const int t = s_ntri[quad(M[r], M[r + 1], N[r], N[r + 1], s)];
                                    if ((tb >> s) & 1u) ntB[r] += t; else ntA[r] += t;
                                }
                        }
                    }
                }
            }
            #pragma unroll
            for (int r = 0; r <= R; ++r) M[r] = N[r];
            p += s0;
        };
        each_plane(i0, i1, step, q1, q2);
    };
    if (nrow == R + 1 && __all_sync(FULL, npt == 4)) run(Bool<true>()); else run(Bool<false>());
    // the column's span, merged with the other segment's where the column straddles two
    const int gr = (j0 - b.lo1) / R;
    if (first >= 0) {
        unsigned* at = planes + span_of(b, c, gr, c0 + lane, R);
        const unsigned f = (unsigned)(first - i0 + 1), l = (unsigned)(last - i0 + 1);
        unsigned cur = *at;  // a stale value only costs a retry
        while (true) {
            const unsigned want = cur ? min(cur >> 16, f) << 16 | max(cur & 0xFFFFu, l) : f << 16 | l;
            if (want == cur) break;
            const unsigned seen = atomicCAS(at, cur, want);
            if (seen == cur) break;
            cur = seen;
        }
    }
    const int t0 = kr / TILE, t1 = (min(ks + 127, b.hi2) - b.lo2) / TILE;
    unsigned sv = 0u, st = 0u;
    #pragma unroll
    for (int r = 0; r < R; ++r) {
        if (r >= nown) continue;
        sv += nvA[r] + nvB[r];
        st += ntA[r] + ntB[r];
        const long long row = ((long long)c * m1 + j0 + r - b.lo1) * b.nby;
        if (ld) ltile[row + (kl + sl - b.lo2) / TILE] = nl[r];
        for (int t = t0; t <= t1; ++t) {
            const int a = __reduce_add_sync(FULL, (ta == t ? nvA[r] : 0) + (ta + 1 == t ? nvB[r] : 0));
            const int e = __reduce_add_sync(FULL, (ta == t ? ntA[r] : 0) + (ta + 1 == t ? ntB[r] : 0));
            if (lane == 0) {
                if (a) atomicAdd(vtile + row + t, a);
                if (e) atomicAdd(ttile + row + t, e);
            }
        }
    }
    add_stats(stats, sv, st, acc, lane);
}

// A vertex's edge packed: point (i, j, k) and axis a.
__device__ __forceinline__ long long pack(int i, int j, int k, int a) {
    return ((long long)i << 42) | ((long long)j << 22) | ((long long)k << 2) | a;
}

// Crossed-edge bits of every lane's points in rows j, j + 1 of a plane, per axis: X[dj][a]
// bit l for edge (j + dj, k0 + l) + axis a. P, Q: masks of rows j .. j + 2 of this plane
// and the next one (xok: the next one exists).
__device__ __forceinline__ void crossings(const unsigned* P, const unsigned* Q, bool xok, int nrow, unsigned K2,
                                          unsigned X[2][3]) {
    #pragma unroll
    for (int dj = 0; dj < 2; ++dj) {
        X[dj][0] = xok ? P[dj] ^ Q[dj] : 0u;
        X[dj][1] = dj + 1 < nrow ? P[dj] ^ P[dj + 1] : 0u;
        X[dj][2] = (P[dj] ^ (P[dj] >> 1)) & K2;
    }
}

// Bits of the edges starting at lane s's point (dk = 0) and the next (dk = 1) of one row:
// bit 2 a + dk for axis a (pick a point's with PT << dk).
#define PT 0x15u
__device__ __forceinline__ unsigned pair_bits(const unsigned* X, int s) {
    return ((X[0] >> s) & 3u) | (((X[1] >> s) & 3u) << 2) | (((X[2] >> s) & 3u) << 4);
}

// Pass 2: faces, and the edge of each vertex (positions come in mc_vertex, one thread per
// vertex), numbered as _tables.TILE says. A warp walks one tile (row j, TILE = 30 points
// k0 .. k0 + 29; lanes 30, 31 lend samples) plane by plane. A lane's cube uses the vertices
// of four points (j + dj, k + dk): a lead column's (lane 0's own, or lane 30's: the next
// tile's) counted along it from the tile's first vertex, the others' from the first vertex
// of the plane in their tile (the tile's, its lead column's count, the planes before) and
// the warp's lanes before, all from the ballots of rows j .. j + 2. Warps of tiles with
// nothing leave at once, planes with no crossed edge in reach are stepped over. A plane
// has triangles in a few of the warp's cubes: each such cube's 12 vertex numbers and
// first face wait in the warp's queue (shared memory) until 32 cubes wait, and the lanes
// then write their faces a cube each (written as they come, most lanes would idle through
// the writes). Vertex and face numbers fit int32 (checked by the caller).
template <typename T, int MINB, bool LIST>
__global__ void __launch_bounds__(32 * WB, MINB) mc_walk(const T* __restrict__ v, const Vol g, const Box b,
        const double level, const float levelf, const int* __restrict__ vtile, const int* __restrict__ ttile,
        const int* __restrict__ ltile, const int* __restrict__ vti, const int* __restrict__ tti,
        const int* __restrict__ t0, const int ntk, const unsigned char* __restrict__ tabs, int* __restrict__ faces,
        long long* __restrict__ vedge, const unsigned vroom, const unsigned froom, int* units,
        const unsigned* __restrict__ planes) {
    __shared__ unsigned char s_case[256], s_ntri[256];  // case by quad() bits; triangles by case
    __shared__ __align__(16) unsigned char s_tri[256 * 16];  // a case's 15 triangle edges in 16 bytes
    // Per warp a ring of QCAP cubes waiting for their faces: the vertex numbers of their 12
    // edges and their first face (row 12), and their case (rows by slot: a warp's lanes
    // touch 32 consecutive slots, no bank conflicts).
    __shared__ int s_qv[WB][13][QCAP];
    __shared__ unsigned char s_qc[WB][QCAP];
    // A block takes a piece of WB rows of a unit (piece n: part n %% NP of unit n / NP, the
    // next block the next part): the warps each load rows j .. j + 2, so most of their loads
    // hit in L1. A block a piece: the hardware hands the next block to the SM with room
    // (pieces differ widely in work; blocks looping over the list spilled registers). Small
    // blocks, many per SM, keep more warps resident: the walk waits on each warp's chain of
    // dependent steps, so resident warps are its speed.
    constexpr int NP = UROWS / WB;
    if (LIST && (int)blockIdx.x >= NP * units[0]) return;  // unlisted: the grid is every unit's pieces
    const int round = blockIdx.x %% NP, u = LIST ? units[1 + blockIdx.x / NP] : (int)blockIdx.x / NP;
    const int lane = threadIdx.x;
    const int m1 = b.hi1 - b.lo1 + 1;
    int bx, by, c;
    unit_of(u, b, bx, by, c);
    const int r1 = UROWS * bx + WB * round + threadIdx.y, j = b.lo1 + r1;
    const int k = b.lo2 + TILE * by + lane;
    const long long tile = ((long long)c * m1 + r1) * ntk + by;  // the warp's
    // Warps whose tile has nothing (or lies outside the box) leave, and blocks with none
    // that has something before the tables are copied: most blocks of a volume, which
    // would hold their SM's room for two waits on memory.
    const bool work = j <= b.hi1 && k - lane <= b.hi2 && (vtile[tile] | ttile[tile]) != 0;
    if (!__syncthreads_or(work)) return;
    const int tid = threadIdx.y * 32 + threadIdx.x;
    for (int q = tid; q < 256; q += 32 * WB) {
        reinterpret_cast<uint4*>(s_tri)[q] = reinterpret_cast<const uint4*>(tabs + TRI)[q];
        s_case[q] = tabs[CASE_Q + q];
        s_ntri[q] = tabs[NTRI_C + q];
    }
    __syncthreads();
    if (!work) return;
    const bool kin = k <= b.hi2, own = kin && lane < TILE;
    const int i0 = b.lo0 + c * b.chunk, i1 = min(i0 + b.chunk - 1, b.hi0);
    // The planes to walk: from the first to the last where pass 1 saw samples of rows j ..
    // j + 2 on both sides (its warps of CR rows hold rows j0 .. j0 + CR: one or two of them).
    // Outside them no edge of these rows is crossed: no vertex, no face, counts unchanged.
    int ia = i0, ib = i1;
    if (b.chunk < 0xFFFF) {
        constexpr int CR = UROWS / 8;
        const int g = r1 / CR;
        const bool two = r1 %% CR > CR - 2 && (g + 1) * CR <= b.hi1 - b.lo1;
        const unsigned sp = planes[span_of(b, c, g, by, CR)], sq = two ? planes[span_of(b, c, g + 1, by, CR)] : 0u;
        ia = i1 + 1;
        ib = i0 - 1;
        if (sp) { ia = i0 + (int)(sp >> 16) - 1; ib = i0 + (int)(sp & 0xFFFFu) - 1; }
        if (sq) { ia = min(ia, i0 + (int)(sq >> 16) - 1); ib = max(ib, i0 + (int)(sq & 0xFFFFu) - 1); }
        if (ia > ib) return;
    }
    const int nrow = min(3, b.hi1 - j + 1);
    const unsigned K2 = __ballot_sync(FULL, lane < 31 && k < b.hi2);
    const bool cube_jk = own && j < b.hi1 && k < b.hi2;
    const bool jn = j < b.hi1, kn = by + 1 < ntk;  // row j + 1, the next tile along k exist
    // Per row j + dj: the first vertex of this tile and of the next along k (its lead
    // column) in chunk cc, and this tile's lead column's vertex count.
    auto tile_at = [&](int cc, int dj, int dby) { return ((long long)cc * m1 + r1 + dj) * ntk + by + dby; };
    auto first = [&](long long t) { return vti[t] - vtile[t]; };
    int base[2], lead_n[2];
    #pragma unroll
    for (int dj = 0; dj < 2; ++dj) {
        const long long t = tile_at(c, dj, 0);
        base[dj] = dj == 0 || jn ? first(t) : 0;
        lead_n[dj] = dj == 0 || jn ? ltile[t] : 0;
    }
    // cnt[dj]: the next vertex along the lead column at row j + dj that lane 0 (this tile's,
    // at its point) and lane 29 (the next tile's, at its point k + 1) use
    const bool l0 = lane == 0, l29 = lane + 1 == TILE;
    int cnt[2];
    #pragma unroll
    for (int dj = 0; dj < 2; ++dj) {
        const bool row = dj == 0 || jn;
        cnt[dj] = row && l0 ? base[dj] : row && l29 && kn ? first(tile_at(c, dj, 1)) : 0;
    }
    // run[dj]: the first vertex of the plane's other points in row j + dj's tile (its first
    // vertex, its lead column's count and the other points' vertices of the planes before)
    int run[2] = {base[0] + lead_n[0], base[1] + lead_n[1]};
    // the tile's first face: tti runs on from *t0 (one scan over the vertex counts, then the
    // triangle counts), modulo 2^32 (unsigned: its sum may pass int32, each part does not)
    const int f0 = (int)((unsigned)tti[tile] - (unsigned)*t0 - (unsigned)ttile[tile]);
    int trun = 0;
    // A plane's crossed edges per lane as two masks: L the count's low bit, H its high bit
    // (three edges a point: count = L + 2 H); vertices of points 1 .. 29 or of those before
    // a lane's, by two popcounts.
    constexpr unsigned OTHERS = 0x3FFFFFFEu;  // lanes 1 .. 29: the points numbered plane by plane
    const unsigned bl = (1u << lane) - 1u, mine = bl & OTHERS;  // the lanes before, of them the numbered
    auto lo_bit = [](const unsigned* X) { return X[0] ^ X[1] ^ X[2]; };
    auto hi_bit = [](const unsigned* X) { return (X[0] & X[1]) | (X[0] & X[2]) | (X[1] & X[2]); };
    auto count2 = [](unsigned L, unsigned H, unsigned m) { return __popc(L & m) + 2 * __popc(H & m); };
    // triangles of the lanes in m, from the ballots of their counts' bits
    auto count3 = [](unsigned n0, unsigned n1, unsigned n2, unsigned m) {
        return __popc(n0 & m) + 2 * __popc(n1 & m) + 4 * __popc(n2 & m);
    };
    // The warp's queue of cubes (see s_qv): the first waiting at head, qn waiting (at most 31
    // between planes). flush(m) writes the faces of the first m, lane l the l-th cube's.
    const int wq = threadIdx.y;
    int head = 0, qn = 0;
    auto flush = [&](int m) {
        __syncwarp();
        if (lane < m) {
            const int s = (head + lane) & (QCAP - 1);
            const int cs = s_qc[wq][s], nt = s_ntri[cs], t = s_qv[wq][12][s];
            const uint4 row = *reinterpret_cast<const uint4*>(s_tri + 16 * cs);
            const unsigned w[4] = {row.x, row.y, row.z, row.w};
            int* f = faces + 3 * (long long)t;
            const int ne = (unsigned)(t + nt) <= froom ? 3 * nt : 0;  // the room's end
            #pragma unroll
            for (int e = 0; e < 15; ++e)
                if (e < ne) f[e] = s_qv[wq][(w[e >> 2] >> (8 * (e & 3))) & 0xFFu][s];
        }
        __syncwarp();
    };
    const long long s0 = g.s0, s1 = g.s1;
    const T* p = v + ia * s0 + j * s1 + (long long)k * g.s2;
    const int eb0[12] = EDGE_I, eb1[12] = EDGE_J, eb2[12] = EDGE_K, ea[12] = EDGE_A;
    auto run_planes = [&](auto full) {
        constexpr bool F = decltype(full)::value;
        const int nr = F ? 3 : nrow;
        unsigned A[3], Bm[3] = {0u, 0u, 0u}, Cm[3] = {0u, 0u, 0u}, XP[2][3], XN[2][3];
        Rows<T, 3> q0, q1, q2, q3, q4;  // q3, q4: planes i + 3, i + 4 in flight
        // The first planes' loads all go out before any is waited for.
        load_rows<F>(p, s1, nr, kin, q0);
        if (ia + 1 <= b.hi0) load_rows<F>(p + s0, s1, nr, kin, q1);
        if (ia + 2 <= b.hi0) load_rows<F>(p + 2 * s0, s1, nr, kin, q2);
        if (ia + 3 <= b.hi0 && ia + 1 <= i1) load_rows<F>(p + 3 * s0, s1, nr, kin, q3);
        if (ia + 4 <= b.hi0 && ia + 2 <= i1) load_rows<F>(p + 4 * s0, s1, nr, kin, q4);
        ballot_rows<F>(q0, nr, kin, level, levelf, A);
        if (ia + 1 <= b.hi0) ballot_rows<F>(q1, nr, kin, level, levelf, Bm);
        if (ia + 2 <= b.hi0) ballot_rows<F>(q2, nr, kin, level, levelf, Cm);
        crossings(A, Bm, ia < b.hi0, nr, K2, XP);
        auto step = [&](const int i, Rows<T, 3>& q) {
            crossings(Bm, Cm, i + 1 < b.hi0, nr, K2, XN);
            // Every edge of the lanes' cubes and of their points: plane i all axes, plane
            // i + 1 along j and k (bits up to 30: lanes 0..29 and their k + 1 neighbours).
            const unsigned any = XP[0][0] | XP[0][1] | XP[0][2] | XP[1][0] | XP[1][1] | XP[1][2] | XN[0][1]
                               | XN[0][2] | XN[1][1] | XN[1][2];
            if (any & 0x7FFFFFFFu) {
                const unsigned E[2] = {pair_bits(XP[0], lane), pair_bits(XP[1], lane)};
                const unsigned L0 = lo_bit(XP[0]), H0 = hi_bit(XP[0]), L1 = lo_bit(XP[1]), H1 = hi_bit(XP[1]);
                if (own && (E[0] & PT)) {
                    int n = l0 ? cnt[0] : run[0] + count2(L0, H0, mine);
                    #pragma unroll
                    for (int a = 0; a < 3; ++a)
                        if ((E[0] >> 2 * a) & 1) {
                            if ((unsigned)n < vroom) vedge[n] = pack(i, j, k, a);
                            ++n;
                        }
                }
                int cs = 0, nt = 0;
                if (cube_jk && i < b.hi0) {
                    cs = s_case[quad(A[0], A[1], Bm[0], Bm[1], lane)];
                    nt = s_ntri[cs];
                }
                const unsigned n0 = __ballot_sync(FULL, nt & 1), n1 = __ballot_sync(FULL, nt & 2),
                               n2 = __ballot_sync(FULL, nt & 4);
                const unsigned act = n0 | n1 | n2;
                const int slot = (head + qn + __popc(act & bl)) & (QCAP - 1);
                if (nt) {
                    // first vertex number at the four points (j + dj, k + dk), r = 2 dj + dk, in
                    // plane i (P) and i + 1 (Q); a point's next along k: its own vertices on
                    int P[4], Q[4], lead[4], nb[2];
                    const unsigned En[2] = {pair_bits(XN[0], lane), pair_bits(XN[1], lane)};
                    const int p0 = run[0] + count2(L0, H0, mine), p2 = run[1] + count2(L1, H1, mine);
                    P[0] = l0 ? cnt[0] : p0;
                    P[1] = l29 ? cnt[0] : p0 + (l0 ? 0 : __popc(E[0] & PT));
                    P[2] = l0 ? cnt[1] : p2;
                    P[3] = l29 ? cnt[1] : p2 + (l0 ? 0 : __popc(E[1] & PT));
                    if (i < i1) {
                        #pragma unroll
                        for (int r = 0; r < 4; ++r) lead[r] = cnt[r >> 1] + __popc(E[r >> 1] & (PT << (r & 1)));
                        nb[0] = run[0] + count2(L0, H0, OTHERS);
                        nb[1] = run[1] + count2(L1, H1, OTHERS);
                    } else {  // plane i + 1 is the next chunk's first: its tiles
                        #pragma unroll
                        for (int dj = 0; dj < 2; ++dj) {
                            const long long t = tile_at(c + 1, dj, 0);
                            lead[2 * dj] = first(t);
                            nb[dj] = lead[2 * dj] + ltile[t];
                            lead[2 * dj + 1] = l29 ? first(tile_at(c + 1, dj, 1)) : 0;
                        }
                    }
                    const int q0 = nb[0] + count2(lo_bit(XN[0]), hi_bit(XN[0]), mine);
                    const int q2 = nb[1] + count2(lo_bit(XN[1]), hi_bit(XN[1]), mine);
                    Q[0] = l0 ? lead[0] : q0;
                    Q[1] = l29 ? lead[1] : q0 + (l0 ? 0 : __popc(En[0] & PT));
                    Q[2] = l0 ? lead[2] : q2;
                    Q[3] = l29 ? lead[3] : q2 + (l0 ? 0 : __popc(En[1] & PT));
                    #pragma unroll
                    for (int e = 0; e < 12; ++e) {
                        // the point's vertices on the axes before ea[e]
                        const int r = 2 * eb1[e] + eb2[e];
                        const unsigned below = (PT & ((1u << 2 * ea[e]) - 1u)) << eb2[e];
                        s_qv[wq][e][slot] = eb0[e] ? Q[r] + __popc(En[eb1[e]] & below)
                                                   : P[r] + __popc(E[eb1[e]] & below);
                    }
                    // faces plane by plane in the tile, by lane: the cube's first face
                    s_qv[wq][12][slot] = f0 + trun + count3(n0, n1, n2, bl);
                    s_qc[wq][slot] = (unsigned char)cs;
                }
                trun += count3(n0, n1, n2, FULL);
                qn += __popc(act);
                if (qn >= 32) {
                    flush(32);
                    head = (head + 32) & (QCAP - 1);
                    qn -= 32;
                }
                cnt[0] += __popc(E[0] & (l29 ? PT << 1 : PT));
                cnt[1] += __popc(E[1] & (l29 ? PT << 1 : PT));
                run[0] += count2(L0, H0, OTHERS);
                run[1] += count2(L1, H1, OTHERS);
            }
            #pragma unroll
            for (int r = 0; r < 3; ++r) { A[r] = Bm[r]; Bm[r] = Cm[r]; Cm[r] = 0u; }
            #pragma unroll
            for (int dj = 0; dj < 2; ++dj)
                #pragma unroll
                for (int a = 0; a < 3; ++a) XP[dj][a] = XN[dj][a];
            // q: plane i + 3, then i + 5 (q3 and q4 alternate)
            if (i + 3 <= b.hi0 && i < i1) ballot_rows<F>(q, nr, kin, level, levelf, Cm);
            if (i + 5 <= b.hi0 && i + 3 <= i1) load_rows<F>(p + 5 * s0, s1, nr, kin, q);
            p += s0;
        };
        each_plane(ia, ib, step, q3, q4);
    };
    if (nrow == 3 && k - lane + 31 <= b.hi2) run_planes(Bool<true>()); else run_planes(Bool<false>());
    if (qn) flush(qn);
}

struct Out {
    double sp[3], isp[3], org[3];  // isp = 1 / sp
    long long off[3], dims[3], keybase;
    float* verts; float* normals; float* vout; long long* keys;
    const void* vals; int vals_f32; Vol vg;  // the sampled field: float32 or float64, read as it is
};

__device__ __forceinline__ double sample(const Out& o, int i, int j, int k) {
    return o.vals_f32 ? at((const float*)o.vals, o.vg, i, j, k) : at((const double*)o.vals, o.vg, i, j, k);
}

// Position, normal (and sampled value, global key) of the vertices of level lev: from the
// end of the previous level's tiles in vti (the scan of every level's tile totals, ntiles
// a level) to the end of its own, those below room. An edge whose samples lie outside the
// gradient box (the passes disagreeing: a bug) gets a NaN vertex, not a read out of bounds
// (which would lose the CUDA context, and the simulation with it).
template <typename T, int MINB>
__global__ void __launch_bounds__(256, MINB) mc_vertex(const T* __restrict__ v, const Vol g, const double level,
        const long long* __restrict__ vedge, const int* __restrict__ vti, const long long ntiles, const int lev,
        const long long room, const Out o) {
    const long long start = lev ? max(vti[lev * ntiles - 1], 0) : 0;
    const long long end = min((long long)vti[(lev + 1) * ntiles - 1], room);
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long n = start + blockIdx.x * (long long)blockDim.x + threadIdx.x;
    long long next = n < end ? vedge[n] : 0;
    for (; n < end; n += stride) {
        const long long e = next;
        if (n + stride < end) next = vedge[n + stride];  // in flight while this vertex's samples load
        const int i = (int)(e >> 42), j = (int)((e >> 22) & 0xFFFFF), k = (int)((e >> 2) & 0xFFFFF);
        const int a = (int)(e & 3);
        const int di = a == 0, dj = a == 1, dk = a == 2;
        if (a == 3 || i < g.elo[0] || i + di > g.ehi[0] || j < g.elo[1] || j + dj > g.ehi[1] || k < g.elo[2]
                || k + dk > g.ehi[2]) {
            #pragma unroll
            for (int d = 0; d < 3; ++d) o.verts[3 * n + d] = o.normals[3 * n + d] = __int_as_float(0x7FC00000);
            if (o.vout) o.vout[n] = __int_as_float(0x7FC00000);
            if (o.keys) o.keys[n] = -1;
            continue;
        }
        const long long st[3] = {g.s0, g.s1, g.s2};
        const long long sa = a == 0 ? g.s0 : a == 1 ? g.s1 : g.s2;
        const T* pc = v + i * g.s0 + j * g.s1 + k * g.s2;  // the edge runs from pc to pc + sa
        const int p[3] = {i, j, k};
        // Every sample first, so their loads are in flight together (the kernel is bound
        // by their latency): the edge's ends and, per axis, the two samples each end's
        // gradient takes as np.gradient does (central, one-sided at the faces of the
        // gradient box, none where it is one sample thick).
        const T ca = pc[0], cb = pc[sa];
        T lo[3][2], hi[3][2];
        double w[3][2];
        #pragma unroll
        for (int d = 0; d < 3; ++d)
            #pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int x = p[d] + (e && d == a);
                const int xl = max(x - 1, g.elo[d]), xh = min(x + 1, g.ehi[d]);
                const T* c = e ? pc + sa : pc;
                lo[d][e] = c[(xl - x) * st[d]];
                hi[d][e] = c[(xh - x) * st[d]];
                w[d][e] = xh - xl == 2 ? 0.5 : xh - xl == 1 ? 1.0 : 0.0;
            }
        const double va = (double)ca, vb = (double)cb;
        const double t = (level - va) / (vb - va);
        double ga[3], nn = 0.0;
        #pragma unroll
        for (int d = 0; d < 3; ++d) {
            const double x = (double)(p[d] + o.off[d]) + (d == a ? t : 0.0);
            o.verts[3 * n + d] = (float)(x * o.sp[d] + o.org[d]);
            const double g0 = ((double)hi[d][0] - (double)lo[d][0]) * w[d][0];
            const double g1 = ((double)hi[d][1] - (double)lo[d][1]) * w[d][1];
            ga[d] = (g0 + (g1 - g0) * t) * o.isp[d];
            nn += ga[d] * ga[d];
        }
        // one division for the three components (the CPU divides each: equal to float32)
        const double inv = nn > 0.0 ? -1.0 / sqrt(nn) : 0.0;
        #pragma unroll
        for (int d = 0; d < 3; ++d) o.normals[3 * n + d] = (float)(ga[d] * inv);
        if (o.vout) {
            const double s0 = sample(o, i, j, k);
            o.vout[n] = (float)(s0 + (sample(o, i + di, j + dj, k + dk) - s0) * t);
        }
        if (o.keys)
            o.keys[n] = o.keybase + ((a * o.dims[0] + i + o.off[0]) * o.dims[1] + j + o.off[1]) * o.dims[2]
                        + k + o.off[2];
    }
}
"""


# Where tables() puts each table (the source's defines of the same names)
_TABLE_AT = {"TRI": 0, "CASE_Q": 256 * 16, "NTRI_C": 256 * 17, "NTRI_Q": 256 * 18}


def tables(ntri: np.ndarray, tri: np.ndarray) -> np.ndarray:
    """The passes' tables in one uint8 array (offsets TRI, CASE_Q, NTRI_C, NTRI_Q of the
    source), from `ntri` (256,) and `tri` (256, 15) of _tables.kernel_tables: uploaded
    once; each block copies its part to shared memory in three loads a thread (the
    walk has a block per sixth of a unit, so per-block arithmetic on the tables adds up).

    Cases are also indexed by quad() bits: bit 4 di + 2 dj + dk for corner (di, dj, dk)."""
    q = np.arange(256)
    case = np.zeros(256, np.int64)
    for n, (di, dj, dk) in enumerate(CORNERS):
        case |= ((q >> (4 * di + 2 * dj + dk)) & 1) << n
    tri16 = np.zeros((256, 16), np.uint8)
    tri16[:, :15] = tri.astype(np.uint8)  # -1 (no triangle) becomes 255: never read (ntri bounds it)
    parts = {"TRI": tri16.ravel(), "CASE_Q": case, "NTRI_C": ntri, "NTRI_Q": ntri[case]}
    out = np.zeros(256 * 19, np.uint8)
    for name, at in _TABLE_AT.items():
        out[at:at + len(parts[name])] = parts[name]
    return out


def supported(dtype) -> bool:
    """Whether the kernels read `dtype` directly (others are converted first)."""
    return np.dtype(dtype) in _TYPES


# Template arguments, measured at 1024^3 (docs/BENCHMARKS.md; H200, the vertex kernel's on
# an H100): rows per warp and blocks per SM in pass 1 (more blocks beat the few registers
# they spill), blocks per SM in the walk and the vertex kernel; in mc_count4 three blocks
# per SM spill its loads in flight, which costs more than the blocks gain. The walk: small
# blocks (_WALK_WARPS warps), many per SM, keep more warps resident, worth the few bytes the
# tighter register cap spills.
_KERNELS = {"count": "3, 5", "walk": "7", "vertex": "3", "count4": "3, 2"}
_WALK_WARPS = 4  # warps per walk block (the source's WB): rows of a unit per piece
_WIDE = {np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.uint32)}  # samples mc_count4 loads 4 at a time


_OPTIONS = ("-std=c++14", "-default-device")


def source(ctype: str) -> tuple[str, list[str], tuple[str, ...]]:
    """The CUDA source of the kernels for samples of C type `ctype`, the kernel instances
    to compile from it and the NVRTC options (what `_module` compiles; tests compile it
    without a GPU)."""
    subst = {f"e{a}": ", ".join(str(int(x)) for x in EDGE_BASE[:, a]) for a in range(3)}
    subst["ea"] = ", ".join(str(int(x)) for x in EDGE_AXIS)
    subst["tile"] = TILE
    subst["wb"] = _WALK_WARPS
    subst["urows"] = _UROWS
    subst.update(_TABLE_AT)
    wide = ctype in {_TYPES[t] for t in _WIDE}
    names = [f"mc_{kind}<{ctype}, {args}{listed}>" for kind, args in _KERNELS.items()
             if kind != "count4" or wide for listed in ((", true", ", false") if kind in ("count", "walk") else ("",))]
    return _SOURCE % subst, names + ["mc_units", "mc_list"], _OPTIONS


@functools.cache
def _module(ctype: str):
    """The kernels for samples of C type `ctype` (a module per type: a call compiles only
    what its volume needs)."""
    return arrays.cuda_module(source(ctype), f"the marching cubes kernels (mc_*) for {ctype}", _log, templates=True)


@functools.cache
def _kernel(kind: str, dtype=None, listed: bool | None = None):
    if dtype is None:
        return _module("float").get_function(f"mc_{kind}")
    ctype = _TYPES[np.dtype(dtype)]
    tail = "" if listed is None else (", true" if listed else ", false")
    return _module(ctype).get_function(f"mc_{kind}<{ctype}, {_KERNELS[kind]}{tail}>")


@functools.cache
def _vertex_blocks(device: int) -> int:
    """Most blocks of a vertex kernel's launch (they stride over the vertices): more than
    the GPU keeps resident, so every SM stays full whatever the occupancy the registers allow."""
    import cupy

    return 32 * int(cupy.cuda.Device(device).attributes["MultiProcessorCount"])


@functools.cache
def _record(dtype_fields: tuple) -> np.dtype:
    return np.dtype(list(dtype_fields), align=True)


def _struct(dtype_fields, values) -> np.ndarray:
    rec = np.zeros((), dtype=_record(tuple(dtype_fields)))
    for (name, _), val in zip(dtype_fields, values):
        rec[name] = val
    return rec[()]  # a numpy.void: CuPy passes it by value as the C struct


_VOL = [("s0", "i8"), ("s1", "i8"), ("s2", "i8"), ("elo", "3i4"), ("ehi", "3i4")]
_BOX = [(n, "i4") for n in ("lo0", "lo1", "lo2", "hi0", "hi1", "hi2", "chunk", "nbx", "nby")]


_OUT = [("sp", "3f8"), ("isp", "3f8"), ("org", "3f8"), ("off", "3i8"), ("dims", "3i8"), ("keybase", "i8"),
        ("verts", "u8"), ("normals", "u8"), ("vout", "u8"), ("keys", "u8"), ("vals", "u8"),
        ("vals_f32", "i4"), ("vg", _record(tuple(_VOL)))]


# The kernels' parameter records, built once per geometry: a call's host work before each
# launch leaves the GPU idle (in-situ calls repeat the same geometry).
@functools.lru_cache(maxsize=256)
def _vol_record(item: int, strides: tuple, ext: tuple):
    """The Vol record of samples `item` bytes wide at byte `strides`, gradients from the box `ext`."""
    if any(s % item for s in strides):
        raise ValueError(f"marching_cubes: strides {strides} are not multiples of the item size {item}")
    return _struct(_VOL, [*(s // item for s in strides), ext[:3], ext[3:]])


@functools.lru_cache(maxsize=256)
def _box(lo: tuple, hi: tuple, chunk: int):
    return _struct(_BOX, [*lo, *hi, chunk, *unit_grid(lo, hi, chunk)[1:]])


def _vol(a, ext):
    return _vol_record(a.dtype.itemsize, a.strides, tuple(int(x) for x in ext))


@functools.lru_cache(maxsize=256)
def _level_args(level: float) -> tuple[np.float64, np.float32]:
    """The level as the passes take it: in double, and the largest float32 <= level (float
    samples compare against it in float)."""
    with np.errstate(over="ignore"):
        f = np.float32(level)
    return np.float64(level), np.nextafter(f, np.float32(-np.inf)) if float(f) > level else f


_UROWS = 24  # rows j per unit (the source's UROWS): 8 warps of 3 rows in pass 1
assert 8 * int(_KERNELS["count"].split(",")[0]) == _UROWS and _UROWS % _WALK_WARPS == 0


def unit_grid(lo, hi, chunk) -> tuple[int, int, int]:
    """Units of the box along (chunks, rows j, points k): what both passes visit or skip."""
    m = [h - l + 1 for l, h in zip(lo, hi)]
    return (m[0] - 1) // chunk + 1, -(-m[1] // _UROWS), tile_columns(m[2])


class Scratch:
    """The passes' scratch for one geometry, kept across calls (in-situ calls repeat the
    geometry): allocating and zeroing it per call left the GPU idle while the host did
    it. One allocation; per call one memset of the parts that must start at zero, queued
    at the end of the call before (see :meth:`done`) so that the next pass 1 starts at
    once. Kept per device, stream and thread (launches from two threads would
    interleave), the last two."""

    _kept: dict[tuple, "Scratch"] = {}
    KEEP = 2

    @classmethod
    def get(cls, nlevels: int, ntiles: int, nunits: int, nspans: int, listed: bool) -> "Scratch":
        """The scratch for this geometry on the current device, stream and thread, zeroed
        where it must be (by then, on the stream)."""
        import cupy

        key = (cupy.cuda.runtime.getDevice(), cupy.cuda.get_current_stream().ptr, threading.get_ident(), nlevels,
               ntiles, nunits, nspans, listed)
        sc = cls._kept.pop(key, None) or cls(nlevels, ntiles, nunits, nspans, listed)
        cls._kept[key] = sc  # the most recent last
        while len(cls._kept) > cls.KEEP:
            cls._kept.pop(next(iter(cls._kept)))
        if not sc.clean:
            sc.zero()
        sc.clean = False
        return sc

    def __init__(self, nlevels: int, ntiles: int, nunits: int, nspans: int, listed: bool):
        import cupy

        (self.tiles, self.planes, self.bad, self.units, self.active) = mesh_arrays([
            # from here to the end of `units` (listed) or of `bad`: zeroed per call
            (np.int32, (3, nlevels, ntiles)),  # tiles: tiles of units not visited hold nothing
            (np.uint32, (nlevels, nspans)),  # planes: pass 1's plane spans, none in units not visited
            (np.uint64, (3,)),  # bad: non-finite flag, vertex and triangle totals
            (np.int32, (nlevels, 1 + nunits)),  # units: per level how many, which (see select)
            (np.uint8, (nunits,))])  # active
        last = self.units if listed else self.bad  # every unit, a block each: `units` set once (the passes read it)
        self._zero = (self.tiles.data.ptr, last.data.ptr + last.nbytes - self.tiles.data.ptr)
        if not listed:
            self.units[:, 0] = nunits
        # per level the views the passes take, made once: making them per call kept the GPU
        # waiting for pass 1's launch
        self.level = [(tuple(self.tiles[:, n]), self.units[n], self.planes[n]) for n in range(nlevels)]
        self.vedge = cupy.empty(0, cupy.int64)
        self.room: tuple[int, int] | None = None  # (vertices, faces) to make the next mesh in, see _mesh
        self.clean = False  # zeroed for the next call (its memset queued)

    def zero(self) -> None:
        import cupy

        ptr, n = self._zero
        cupy.cuda.runtime.memsetAsync(ptr, 0, n, cupy.cuda.get_current_stream().ptr)

    def done(self) -> None:
        """The call is done with the scratch: every read of it is queued on this stream, or
        finished (the totals' copy on the read stream was waited for). Queue the next
        call's memset behind them, while the host is ahead of the GPU."""
        self.zero()
        self.clean = True

    def edges(self, nv: int):
        """Room for `nv` packed vertex edges (grown by a quarter when short)."""
        import cupy

        if len(self.vedge) < nv:
            self.vedge = cupy.empty(max(nv, len(self.vedge) * 5 // 4), cupy.int64)
        return self.vedge


def mesh_arrays(specs) -> list:
    """New device arrays of (dtype, shape) `specs`, views of one allocation."""
    import cupy

    sizes = [math.prod(shape) * np.dtype(dt).itemsize for dt, shape in specs]
    starts = np.cumsum([0] + [-(-n // 256) * 256 for n in sizes])
    block = cupy.empty(int(starts[-1]), cupy.uint8)
    return [block[a:a + n].view(dt).reshape(shape) for (dt, shape), a, n in zip(specs, starts, sizes)]


def select(ranges, level, lo, hi, chunk, active, units) -> None:
    """The units the passes visit at `level`, from the volume's TileRanges: `active` (uint8,
    one per unit) scratch, `units` (int32, 1 + units, zeroed) gets their number and
    the list (see mc_list)."""
    n = math.prod(unit_grid(lo, hi, chunk))
    box = _box(tuple(lo), tuple(hi), chunk)
    rng = ranges.values
    blocks = (-(-n // 256),)
    _kernel("units")(blocks, (256,), (rng, *(np.int32(x) for x in ranges.span), np.int32(rng.shape[1]),
                                      np.int32(rng.shape[2]), box, np.float64(level), np.int32(n), active))
    _kernel("list")(blocks, (256,), (active, box, np.int32(n), units))


def span_count(lo, hi, chunk) -> int:
    """Pass 1's plane spans of the box (see span_of): per chunk, warp of rows and unit column."""
    m = [h - l + 1 for l, h in zip(lo, hi)]
    return ((m[0] - 1) // chunk + 1) * -(-m[1] // (_UROWS // 8)) * unit_grid(lo, hi, chunk)[2]


def scan(tiles):
    """The inclusive scan of count()'s vtile of every level, continued over their ttile,
    in one launch (a launch costs the host more than the scan costs the GPU), modulo 2^32,
    as int32: each part fits int32 when the exact totals do (the caller checks)."""
    import cupy

    return cupy.cumsum(tiles[:2].reshape(-1), dtype=cupy.uint32).view(cupy.int32)


def _launch(kind: str, lo, hi, chunk) -> tuple:
    """Grid and block of a pass: a block per piece of work of every unit (the blocks of
    the pieces beyond a list leave at once)."""
    if kind == "walk":
        return (math.prod(unit_grid(lo, hi, chunk)) * (_UROWS // _WALK_WARPS),), (32, _WALK_WARPS)
    return (math.prod(unit_grid(lo, hi, chunk)),), (32, 8)


def count(vol, ext, level, lo, hi, chunk, tables, vtile, ttile, ltile, stats, units, planes,
          listed: bool) -> None:
    """Pass 1 (see _cpu.count) over the units listed by select(): per tile its vertices,
    triangles and lead column's vertices (`vtile`, `ttile`, `ltile`, zeroed by the
    caller; see _tables.TILE). Adds to the device uint64 `stats`: [0] the number of warps
    that met a non-finite sample, [1] vertices, [2] triangles (totals in 64 bits, so int32
    scans can be trusted when these fit int32). `planes` (uint32, span_count, zeroed by the
    caller) gets per warp the first and last plane where its samples are not all on one
    side: the walk steps over the planes before and after. `listed`: units from select(),
    else every unit (a list 0, 1, ... of them all)."""
    kind, grid, block, head = _count_plan(vol.dtype, vol.strides, tuple(ext), tuple(lo), tuple(hi), chunk,
                                          vol.data.ptr % 16, listed)
    lev = _level_args(level)
    if kind == "count4":
        _kernel(kind, vol.dtype)(grid, block, (vol, *head, *lev, tables, vtile, ttile, ltile, stats, planes))
    else:
        _kernel(kind, vol.dtype, listed)(grid, block, (vol, *head, *lev, tables, vtile, ttile, ltile, stats, units,
                                                       planes))


@functools.lru_cache(maxsize=256)
def _count_plan(dtype, strides: tuple, ext: tuple, lo: tuple, hi: tuple, chunk: int, misalign: int,
                listed: bool) -> tuple:
    """Pass 1's kernel, grid, block and leading arguments for one geometry (`misalign`: the
    volume's address modulo 16), made once: in-situ calls repeat the geometry, and the
    host's work before this launch leaves the GPU idle."""
    item = np.dtype(dtype).itemsize
    g = _vol_record(item, strides, tuple(int(x) for x in ext))
    box = _box(lo, hi, chunk)
    if not listed and _wide(dtype, g, misalign + item * (lo[0] * g["s0"] + lo[1] * g["s1"] + lo[2])):
        nseg = -(-(hi[2] - lo[2] + 1) // 128)
        return "count4", (math.prod(unit_grid(lo, hi, chunk)[:2]) * nseg,), (32, 8), (g, box, np.int32(nseg))
    return ("count", *_launch("count", lo, hi, chunk), (g, box))


def _wide(dtype, g, at: int) -> bool:
    """Whether mc_count4 can load samples of geometry `g` from byte address `at` on (modulo
    16), 4 at a time (16-byte aligned rows)."""
    return dtype in _WIDE and g["s2"] == 1 and g["s1"] % 4 == 0 and g["s0"] % 4 == 0 and at % 16 == 0


def generate(vol, ext, level, lo, hi, chunk, tiles, scan, n, ntiles, room, known, tables, geo,
             offset, vals, keys, dims, keybase, verts, faces, normals, vout, vedge, units, planes,
             listed: bool) -> None:
    """Pass 2 (see _cpu.generate) for level `n`: faces and vertex edges per tile, then
    its vertices one per thread. `tiles`: count()'s vtile, ttile, ltile of the level;
    `scan`: the inclusive scan, modulo 2^32 (int32), of every level's vtile then every
    level's ttile (`ntiles` a level: the global numbering; see scan()), where the vertex
    kernel also finds the level's first and last vertex; `room`: (vertices, faces) the
    mesh arrays hold, nothing is written beyond (the counts may not be known yet);
    `known`: the level's vertex count when it is; `vals`, `keys`, `vout` may be None;
    `vedge`: int64 scratch, room[0]; `planes`: count()'s plane spans of the level."""
    if max(h - l for l, h in zip(lo, hi)) >= 2**20:
        raise ValueError(f"marching_cubes: box {lo}..{hi} is too long for the GPU path (2^20 samples per axis)")
    if known == 0:  # nothing crossed at this level: no faces either
        return
    box = _box(tuple(lo), tuple(hi), chunk)
    g = _vol(vol, ext)
    grid, block = _launch("walk", lo, hi, chunk)
    ntk = unit_grid(lo, hi, chunk)[2]
    nall = len(scan) // 2
    vti, tti = scan[:nall], scan[nall:]
    level_tiles = slice(n * ntiles, (n + 1) * ntiles)
    _kernel("walk", vol.dtype, listed)(grid, block, (vol, g, box, *_level_args(level), *tiles,
                                                     vti[level_tiles], tti[level_tiles], vti[nall - 1:],
                                                     np.int32(ntk), tables, faces, vedge,
                                                     np.uint32(room[0]), np.uint32(room[1]), units, planes))
    vertices(vol, ext, level, vedge, vti, ntiles, n, room[0], room[0] if known is None else known, geo, offset,
             vals, keys, dims, keybase, verts, normals, vout)


def vertices(vol, ext, level, vedge, vti, ntiles, n, room, most, geo, offset, vals, keys, dims, keybase,
             verts, normals, vout) -> None:
    """The vertex kernel (mc_vertex) for level `n`: positions, normals (values, keys) of
    the vertices whose packed edges pass 2 wrote in `vedge`, from the end of level n - 1
    to the end of level n in `vti` (the scan of the tiles' vertex counts, `ntiles` a
    level), below `room`; `most`: at most how many (the launch's size). An edge outside
    the gradient box `ext` gives a NaN vertex (and key -1)."""
    ptr = lambda a: 0 if a is None else a.data.ptr  # noqa: E731
    vg = _vol(vals, ext) if vals is not None else np.zeros((), _record(tuple(_VOL)))
    o = _struct(_OUT, [geo[:3], 1.0 / geo[:3], geo[3:], offset, dims, keybase, ptr(verts), ptr(normals),
                       ptr(vout), ptr(keys), ptr(vals), int(vals is not None and vals.dtype == np.float32), vg])
    blocks = min(-(-most // 256), _vertex_blocks(vol.device.id))
    _kernel("vertex", vol.dtype)((blocks,), (256,), (vol, _vol(vol, ext), np.float64(level), vedge, vti,
                                                     np.int64(ntiles), np.int32(n), np.int64(room), o))
