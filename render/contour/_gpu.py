"""CUDA kernels of the segmented marching cubes: the algorithm and numbering of _cpu.py.

A warp holds 32 consecutive points along k of a few rows j and walks one chunk of planes
along axis 0; each sample is loaded once per warp (coalesced, issued planes ahead) and
turned into one bit of a ballot, so a point's neighbours are neighbouring bits and the
cube cases, crossed edges and their counts come from bit operations on the masks. A
plane where no bit within reach differs is stepped over after its loads.

Both passes work on units: a chunk of planes x 24 rows j x 30 points k. Only units where
the level can be crossed are visited: mc_units tests each unit's samples against the
volume's per-tile (min, max) (insitu.ranges), mc_list lists those units and the ones
whose segments they number vertices from (one unit further along each axis), and the
passes' blocks loop over that list (a grid sized to the GPU, not to the volume). So a
surface touching a few percent of a large volume costs a few percent of its reads.

Pass 1 (mc_count) counts vertices and triangles per segment, scans them within each
warp's 30 segments (the first level of the scan; the caller scans the tile totals, zero
where no unit was visited) and adds up the totals in 64 bits; pass 2 (mc_walk) writes
faces and, per vertex, its packed edge, skipping warps whose segments have nothing; a
flat kernel (mc_vertex) then computes the vertices one per thread (the gradients need
registers that would starve the walk of occupancy). Vertex and face numbers are those
of a pass over every segment (unvisited ones hold nothing).
"""

from __future__ import annotations

import functools

import numpy as np

from insitu.log import compiling, cupy_cache_dir, get_logger

from ._tables import CORNERS, EDGE_AXIS, EDGE_BASE

_log = get_logger(__name__)

_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double", np.dtype(np.uint8): "unsigned char",
          np.dtype(np.int8): "signed char", np.dtype(np.uint16): "unsigned short", np.dtype(np.int16): "short",
          np.dtype(np.int32): "int", np.dtype(np.uint32): "unsigned int"}

_SOURCE = r"""
#define CORNER0 {%(c0)s}
#define CORNER1 {%(c1)s}
#define CORNER2 {%(c2)s}
#define EDGE_I {%(e0)s}
#define EDGE_J {%(e1)s}
#define EDGE_K {%(e2)s}
#define EDGE_A {%(ea)s}
#define FULL 0xFFFFFFFFu
#define TILE %(tile)s  // segments along k per warp: a tile of the two-level scan
#define UROWS 24  // rows j per unit (8 warps of 3 rows in pass 1, 3 x 8 warps of 1 row in pass 2)

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

// The marching-cubes case (bit n: corner n of CORNERS inside) of quad() bits q.
__device__ __forceinline__ int case_of(int q) {
    const int c0[8] = CORNER0, c1[8] = CORNER1, c2[8] = CORNER2;
    int c = 0;
    #pragma unroll
    for (int n = 0; n < 8; ++n)
        if ((q >> (4 * c0[n] + 2 * c1[n] + c2[n])) & 1) c |= 1 << n;
    return c;
}

// A vertex's edge packed: point (i, j, k) and axis a.
__device__ __forceinline__ long long pack(int i, int j, int k, int a) {
    return ((long long)i << 42) | ((long long)j << 22) | ((long long)k << 2) | a;
}

// Tiles: the work of one warp. Tile t of a level is sub-tile t %% 3 (rows R (t %% 3) ..
// R (t %% 3) + R - 1 of its unit) of the unit at place t / 3 of the level's list (every
// unit in order, or the units select() listed, in order). Vertices and faces are numbered
// tile by tile in that order, and within a tile plane by plane, row by row, point by point
// (a point's vertices by axis): so a warp writes each plane's vertices and faces to
// consecutive places. A tile's first vertex and face come from a decoupled look-back
// over the tiles before it (ticket order is tile order, so it never waits on a tile no
// warp holds).
#define R 8            // rows j per tile: a unit's UROWS rows are three tiles
#define NR (R + 2)     // rows a tile's warp reads: its own, the next tile's first and one more
#define MAXP 64        // planes per chunk (the host's chunk is at most this)
#define SPL (MAXP + 3) // planes of masks a warp keeps: its chunk's and the next two

// A tile's status word for the look-back: flag (1: its own totals, 2: totals of it and
// every tile before it), triangles and vertices, each saturated to 31 bits.
#define ST_AGG 1ull
#define ST_INC 2ull
#define SAT31(x) ((unsigned long long)((x) < 0x7FFFFFFFLL ? (x) : 0x7FFFFFFFLL))

__device__ __forceinline__ unsigned long long status_word(unsigned long long flag, long long v, long long f) {
    return (flag << 62) | (SAT31(f) << 31) | SAT31(v);
}

// The vertices and faces of the tiles before tile t (the look-back; the whole warp).
__device__ __forceinline__ void look_back(const unsigned long long* status, int t, int lane, long long& ev,
                                          long long& ef) {
    ev = ef = 0;
    for (int p = t - 1; p >= 0; p -= 32) {
        const int q = p - lane;
        unsigned long long w;
        for (;;) {
            w = q >= 0 ? *((volatile const unsigned long long*)(status + q)) : (ST_INC << 62);
            if (__all_sync(FULL, (w >> 62) != 0ull)) break;
            __nanosleep(20);
        }
        const unsigned inc = __ballot_sync(FULL, (w >> 62) == ST_INC);
        const int stop = inc ? __ffs(inc) - 1 : 31;  // the nearest tile that holds everything before it
        long long v = lane <= stop ? (long long)(w & 0x7FFFFFFFull) : 0;
        long long f = lane <= stop ? (long long)((w >> 31) & 0x7FFFFFFFull) : 0;
        #pragma unroll
        for (int d = 16; d; d >>= 1) {
            v += __shfl_xor_sync(FULL, v, d);
            f += __shfl_xor_sync(FULL, f, d);
        }
        ev += v;
        ef += f;
        if (inc) break;
    }
}

// Crossed edges of one row of points at one plane, per axis: bit l for the edge from
// point k0 + l along axis 0, 1, 2 (of every lane: lanes 30, 31 are the next tile's).
struct Cross { unsigned x0, x1, x2; };

__device__ __forceinline__ Cross cross(unsigned m, unsigned m_next_plane, unsigned m_next_row, bool xok, bool jok,
                                       unsigned K2) {
    return {xok ? m ^ m_next_plane : 0u, jok ? m ^ m_next_row : 0u, (m ^ (m >> 1)) & K2};
}

// The vertices of the points of lanes below l that this tile owns (OWN), and the axis bits of lane l.
__device__ __forceinline__ int below(const Cross& x, unsigned own, int l) {
    const unsigned lb = own & ((1u << l) - 1u);
    return __popc(x.x0 & lb) + __popc(x.x1 & lb) + __popc(x.x2 & lb);
}
__device__ __forceinline__ int axes(const Cross& x, int l) {
    return ((x.x0 >> l) & 1u) | (((x.x1 >> l) & 1u) << 1) | (((x.x2 >> l) & 1u) << 2);
}

// A vertex of a later tile (the next rows, the next points along k, the next chunk) is
// written as -1 - code and replaced by mc_fix once every tile's first vertex is known:
// code = flags (1: next rows, 2: next points, 4: next chunk) | plane << 3 | row << 9 |
// rank within that plane and row of that tile << 13.
#define FWD_ROW 1
#define FWD_K 2
#define FWD_CHUNK 4

// One pass over the tiles of one level: count (phase A), look back, then (WALK) write
// the faces and each vertex's packed edge (phase C, from the plane masks phase A keeps
// in shared memory: the samples are read once). Per tile `vfirst` gets its first vertex
// and `pre` the first vertex of each (plane, row) within it, for mc_fix. `lvl`: [0], [1]
// first vertex and face of the level, [2], [3] its end (written by the last tile).
// `stats` (uint64): [0] warps that met NaN or inf, [1] vertices, [2] triangles, [3] the
// faces mc_fix must complete (their list `fix` holds `fixcap`). Writes beyond `vcap`,
// `fcap`, `fixcap` are dropped (the caller checks the totals and runs again).
template <typename T, bool LIST, bool WALK, int MINB>
__global__ void __launch_bounds__(256, MINB) mc_tiles(const T* __restrict__ v, const Vol g, const Box b,
        const double level, const float levelf, const signed char* __restrict__ ntri,
        const signed char* __restrict__ tri, const int* __restrict__ units, const int nall, int* ticket,
        unsigned long long* status, int* __restrict__ vfirst, unsigned short* __restrict__ pre, long long* lvl,
        int* __restrict__ faces, long long* __restrict__ vedge, const long long fcap, const long long vcap,
        int2* __restrict__ fix, const long long fixcap, unsigned long long* stats, unsigned* __restrict__ lists,
        const int lcap) {
    __shared__ unsigned s_m[8][NR * SPL];  // per warp: masks [row][plane]
    __shared__ unsigned short s_p[8][MAXP * R];  // per warp: first vertex of (plane, row) in the tile
    __shared__ unsigned char s_edge[12];  // per cube edge: dp | dr << 1 | dl << 2 | axis << 3
    __shared__ __align__(16) unsigned char s_tri[256 * 16];  // a case's 15 triangle edges in 16 bytes
    __shared__ unsigned char s_case[256], s_ntri[256], s_nq[256];  // case and triangles by quad() bits
    const int tid = threadIdx.y * 32 + threadIdx.x, lane = threadIdx.x, w = threadIdx.y;
    for (int q = tid; q < 256; q += 256) {
        const int cs = case_of(q);
        s_case[q] = (unsigned char)cs;
        s_ntri[q] = ntri[q];
        s_nq[q] = ntri[cs];
    }
    for (int q = tid; q < 256 * 16; q += 256)
        s_tri[q] = (q & 15) < 15 ? (unsigned char)tri[15 * (q >> 4) + (q & 15)] : 0;
    if (tid < 12) {
        const int eb0[12] = EDGE_I, eb1[12] = EDGE_J, eb2[12] = EDGE_K, ea[12] = EDGE_A;
        s_edge[tid] = (unsigned char)(eb0[tid] | (eb1[tid] << 1) | (eb2[tid] << 2) | (ea[tid] << 3));
    }
    __syncthreads();
    unsigned* sm = s_m[w];
    unsigned* sl = lists + ((long long)blockIdx.x * 8 + w) * lcap;  // this warp's list of cubes (phase A)
    unsigned short* sp = s_p[w];
    const int n = LIST ? units[0] : nall;
    for (;;) {
        int t = 0;
        if (lane == 0) t = atomicAdd(ticket, 1);
        t = __shfl_sync(FULL, t, 0);
        if (t >= 3 * n) break;
        __syncwarp();  // the previous tile's reads of sm, sp are done
        const int place = t / 3, s = t - 3 * place;
        const int u = LIST ? units[3 + place] : place;
        int bx, by, c;
        unit_of(u, b, bx, by, c);
        const int j0 = b.lo1 + UROWS * bx + R * s, k0 = b.lo2 + TILE * by;
        const int i0 = b.lo0 + c * b.chunk, i1 = min(i0 + b.chunk - 1, b.hi0);
        const int k = k0 + lane;
        const bool kin = k <= b.hi2, own = kin && lane < TILE;
        const unsigned OWN = __ballot_sync(FULL, own), ALLV = __ballot_sync(FULL, kin);
        const unsigned K2 = __ballot_sync(FULL, lane < 31 && k < b.hi2);
        const int nrow = j0 <= b.hi1 ? min(NR, b.hi1 - j0 + 1) : 0;  // rows read that exist
        const int ro = min(R, nrow);  // rows owned
        const int nown = i1 - i0 + 1;  // planes owned
        const int np = min(i1 + 2, b.hi0) - i0 + 1;  // planes read
        const long long s0 = g.s0, s1 = g.s1;
        int run = 0, nt = 0;  // the tile's vertices (uniform), this lane's triangles
        unsigned long long busy = 0ull;  // planes with crossed edges or cubes
        int nl = 0, ovf = MAXP;  // cubes listed in sl; the first plane whose cubes are not (the list was full)
        float acc = 0.0f;
        if (ro > 0) {
            const T* p = v + i0 * s0 + j0 * s1 + (long long)k * g.s2;
            auto phase_a = [&](auto full) {
                constexpr bool F = decltype(full)::value;
                const unsigned U = F ? FULL : ALLV;
                Rows<T, NR> q;
                unsigned Mp[NR], Mc[NR];
                load_rows<F>(p, s1, nrow, kin, q);
                for (int pl = 0; pl <= np; ++pl) {
                    if (pl < np) {
                        #pragma unroll
                        for (int r = 0; r < NR; ++r) taint(q.x[r], acc);
                        ballot_rows<F>(q, nrow, kin, level, levelf, Mc);
                        if (pl + 1 < np) load_rows<F>(p + (pl + 1) * s0, s1, nrow, kin, q);
                        unsigned mine = 0u;
                        #pragma unroll
                        for (int r = 0; r < NR; ++r)
                            if (lane == r) mine = Mc[r];
                        if (lane < NR) sm[lane * SPL + pl] = mine;
                    } else {
                        #pragma unroll
                        for (int r = 0; r < NR; ++r) Mc[r] = Mp[r];  // no plane beyond the box
                    }
                    const int pp = pl - 1;  // plane counted: its vertices, its cubes
                    if (pp >= 0 && pp < nown) {
                        const bool xok = pl < np;
                        const unsigned z = Mp[0] & U;
                        unsigned d = 0u;
                        #pragma unroll
                        for (int r = 0; r <= R; ++r)
                            if (F || r < nrow) d |= (Mp[r] ^ z) | (Mc[r] ^ z);
                        int cnt[R];
                        #pragma unroll
                        for (int r = 0; r < R; ++r) cnt[r] = 0;
                        if ((d & U) != 0u || (z != 0u && z != U)) {
                            busy |= 1ull << pp;
                            const int nl0 = nl;
                            #pragma unroll
                            for (int r = 0; r < R; ++r) {
                                if (!F && r >= ro) continue;
                                const bool jn = F || r + 1 < nrow;
                                const Cross x = cross(Mp[r], Mc[r], Mp[r + 1], xok, jn, K2);
                                cnt[r] = __popc(x.x0 & OWN) + __popc(x.x1 & OWN) + __popc(x.x2 & OWN);
                                int m = 0, qd = 0;
                                if (xok && jn && ((K2 & OWN) >> lane) & 1u) {
                                    qd = quad(Mp[r], Mp[r + 1], Mc[r], Mc[r + 1], lane);
                                    m = s_nq[qd];
                                }
                                nt += m;
                                // the cubes with triangles, listed plane by plane, row by row, lane by lane
                                const unsigned has = __ballot_sync(FULL, m != 0);
                                if (WALK && has && pp < ovf) {
                                    if (nl + __popc(has) <= lcap) {
                                        if (m) sl[nl + __popc(has & ((1u << lane) - 1u))] =
                                            (unsigned)pp | (unsigned)(r << 6) | (unsigned)(lane << 9)
                                            | ((unsigned)s_case[qd] << 14);
                                        nl += __popc(has);
                                    } else {
                                        ovf = pp;  // this plane's cubes and the later ones: the row path
                                        nl = nl0;
                                    }
                                }
                            }
                        }
                        int mine = run;
                        #pragma unroll
                        for (int r = 0; r < R; ++r) {
                            if (lane == r) mine = run;
                            run += cnt[r];
                        }
                        if (lane < R) sp[pp * R + lane] = (unsigned short)mine;
                    }
                    #pragma unroll
                    for (int r = 0; r < NR; ++r) Mp[r] = Mc[r];
                }
            };
            if (nrow == NR && ALLV == FULL) phase_a(Bool<true>()); else phase_a(Bool<false>());
        }
        int ntt = nt;
        #pragma unroll
        for (int d = 16; d; d >>= 1) ntt += __shfl_xor_sync(FULL, ntt, d);
        if (lane == 0) {
            __threadfence();
            atomicExch(status + t, status_word(ST_AGG, run, ntt));
        }
        long long ev, ef;
        look_back(status, t, lane, ev, ef);
        if (lane == 0) {
            atomicExch(status + t, status_word(ST_INC, ev + run, ef + ntt));
        }
        const long long vb = lvl[0] + ev, fb = lvl[1] + ef;
        const bool nan = __ballot_sync(FULL, acc != acc) != 0u;
        if (lane == 0) {
            vfirst[t] = (int)min(vb, 0x7FFFFFFFLL);
            if (t == 3 * n - 1) { lvl[2] = vb + run; lvl[3] = fb + ntt; }
            if (nan) atomicAdd(stats, 1ull);
            if (run) atomicAdd(stats + 1, (unsigned long long)run);
            if (ntt) atomicAdd(stats + 2, (unsigned long long)ntt);
        }
        if (!WALK || (run == 0 && ntt == 0)) continue;
        __syncwarp();
        for (int x = lane; x < nown * R; x += 32) pre[(long long)t * (MAXP * R) + x] = sp[x];
        // Vertices, one per lane, written in order: the (plane, row) by bisection of sp, the
        // point by bisection of the vertices of the lanes below, then the axis.
        const int ne = nown * R;
        for (int vn = lane; vn < run; vn += 32) {
            int e = 0;
            #pragma unroll
            for (int step = 256; step; step >>= 1)
                if (e + step < ne && sp[e + step] <= vn) e += step;
            const int pl = e / R, r = e - R * pl, i = i0 + pl;
            const unsigned* q = sm + r * SPL + pl;
            const Cross x = cross(q[0], i < b.hi0 ? q[1] : q[0], q[SPL], i < b.hi0, r + 1 < nrow, K2);
            int wv = vn - sp[e], l = 0;
            #pragma unroll
            for (int step = 16; step; step >>= 1)
                if (below(x, OWN, l + step) <= wv) l += step;
            wv -= below(x, OWN, l);
            int bits = axes(x, l);
            for (int n2 = 0; n2 < wv; ++n2) bits &= bits - 1;
            if (vb + vn < vcap) vedge[vb + vn] = pack(i, j0 + r, k0 + l, __ffs(bits) - 1);
        }
        // Faces: the listed cubes one per lane, then cube rows of the planes the list could not hold.
        long long frun = fb;  // the next face of the tile
        // The number (or the code, see FWD_*) of the vertex on cube edge `edge` of cube (i0 + pl,
        // j0 + r, k0 + l), from the crossings of rows r, r + 1 at planes i, i + 1.
        auto emit = [&](int m, int cs, int pl, int r, int l) {
            int sc = m;
            #pragma unroll
            for (int d = 1; d < 32; d <<= 1) {
                const int o = __shfl_up_sync(FULL, sc, d);
                if (lane >= d) sc += o;
            }
            const int tot = __shfl_sync(FULL, sc, 31);
            const long long f0 = frun + sc - m;
            int fxmask = 0;
            if (m) {
                const int i = i0 + pl;
                const bool xok1 = i + 1 < b.hi0, last = pl + 1 == nown;
                const bool jn2 = r + 2 < nrow;
                const unsigned* q = sm + r * SPL + pl;
                const int o2 = xok1 ? 2 : 1;
                const Cross xa0 = cross(q[0], q[1], q[SPL], true, true, K2);
                const Cross xa1 = cross(q[SPL], q[SPL + 1], q[2 * SPL], true, jn2, K2);
                const Cross xb0 = cross(q[1], q[o2], q[SPL + 1], xok1, true, K2);
                const Cross xb1 = cross(q[SPL + 1], q[SPL + o2], q[2 * SPL + 1], xok1, jn2, K2);
                auto vid = [&](int edge) -> int {
                    const int pe = s_edge[edge], dp = pe & 1, dr = (pe >> 1) & 1, dl = (pe >> 2) & 1, a = pe >> 3;
                    const Cross x = dp ? (dr ? xb1 : xb0) : (dr ? xa1 : xa0);
                    const int ll = l + dl, rr = r + dr, pq = pl + dp;
                    const bool fr = rr == R, fk = ll == TILE, fc = dp && last;
                    const int rank = (fk ? 0 : below(x, OWN, ll)) + __popc(axes(x, ll) & ((1 << a) - 1));
                    if (!(fr || fk || fc)) return (int)(vb + sp[pq * R + rr] + rank);
                    return -1 - ((fr ? FWD_ROW : 0) | (fk ? FWD_K : 0) | (fc ? FWD_CHUNK : 0)
                                 | ((fc ? 0 : pq) << 3) | ((fr ? 0 : rr) << 9) | (rank << 13));
                };
                const unsigned char* row = s_tri + 16 * cs;
                int* f = faces + 3 * f0;
                for (int e = 0; e < 3 * m; ++e) {
                    const int x = vid(row[e]);
                    if (f0 + e / 3 < fcap) f[e] = x;
                    if (x < 0) fxmask |= 1 << (e / 3);
                }
            }
            frun += tot;
            const int nfx = __popc(fxmask);
            if (!__any_sync(FULL, nfx)) return;
            // the faces mc_fix completes, listed warp by warp
            int fs = nfx;
            #pragma unroll
            for (int d = 1; d < 32; d <<= 1) {
                const int o = __shfl_up_sync(FULL, fs, d);
                if (lane >= d) fs += o;
            }
            const int fxtot = __shfl_sync(FULL, fs, 31);
            unsigned long long base = 0ull;
            if (lane == 31) base = atomicAdd(stats + 3, (unsigned long long)fxtot);
            base = __shfl_sync(FULL, base, 31) + (unsigned long long)(fs - nfx);
            for (int x = fxmask; x; x &= x - 1) {
                if (base < (unsigned long long)fixcap) fix[base] = make_int2((int)(f0 + __ffs(x) - 1), t);
                ++base;
            }
        };
        for (int c0 = 0; c0 < nl; c0 += 32) {
            const unsigned en = c0 + lane < nl ? sl[c0 + lane] : 0u;
            const int cs = en >> 14;
            emit(c0 + lane < nl ? s_ntri[cs] : 0, cs, en & 63, (en >> 6) & 7, (en >> 9) & 31);
        }
        for (unsigned long long bz = ovf < MAXP ? busy >> ovf << ovf : 0ull; bz; bz &= bz - 1ull) {
            const int pl = __ffsll((long long)bz) - 1;
            const bool xok = i0 + pl < b.hi0;
            for (int r = 0; r < ro; ++r) {
                const unsigned* q = sm + r * SPL + pl;
                const bool cube = own && xok && r + 1 < nrow && k < b.hi2;
                const int cs = cube ? s_case[quad(q[0], q[SPL], q[1], q[SPL + 1], lane)] : 0;
                emit(cube ? s_ntri[cs] : 0, cs, pl, r, lane);
            }
        }
    }
}

// Completes the faces mc_tiles left with a later tile's vertex (see FWD_*): that tile's
// first vertex, the first of the plane and row within it, and the rank there.
__global__ void mc_fix(int* __restrict__ faces, const int2* __restrict__ fix, const unsigned long long* stats,
                       const long long fixcap, const int* __restrict__ units, const int* __restrict__ pos,
                       const Box b, const int* __restrict__ vfirst, const unsigned short* __restrict__ pre) {
    const long long n = min((long long)stats[3], fixcap);
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n;
         e += (long long)gridDim.x * blockDim.x) {
        const int2 en = fix[e];
        const int t = en.y, place = t / 3, s = t - 3 * place;
        const int u = pos ? units[3 + place] : place;
        int bx, by, c;
        unit_of(u, b, bx, by, c);
        #pragma unroll
        for (int x = 0; x < 3; ++x) {
            const int val = faces[3 * (long long)en.x + x];
            if (val >= 0) continue;
            const int code = -1 - val, fl = code & 7;
            const int pq = (code >> 3) & 63, rr = (code >> 9) & 15, rank = code >> 13;
            const bool fr = fl & FWD_ROW;
            const int bx2 = bx + (fr && s == 2), s2 = fr ? (s + 1) %% 3 : s;
            const int by2 = by + ((fl & FWD_K) != 0), c2 = c + ((fl & FWD_CHUNK) != 0);
            const int u2 = (c2 * b.nby + by2) * b.nbx + bx2;
            const int tt = 3 * (pos ? pos[u2] : u2) + s2;
            faces[3 * (long long)en.x + x] = vfirst[tt] + pre[(long long)tt * (MAXP * R) + pq * R + rr] + rank;
        }
    }
}

// The listed units of a level in order (units[3 ..]; units[0] their number) and each
// unit's place in the list (pos), from select()'s active flags and their inclusive scan.
__global__ void mc_order(const unsigned char* __restrict__ active, const int* __restrict__ scan, const int n,
                         int* __restrict__ units, int* __restrict__ pos) {
    const int u = blockIdx.x * blockDim.x + threadIdx.x;
    if (u >= n) return;
    pos[u] = scan[u] - 1;
    if (active[u]) units[3 + scan[u] - 1] = u;
    if (u == n - 1) units[0] = scan[u];
}

// np.gradient (unit spacing) along one axis at sample c (index x of the samples lo .. hi
// gradients use; stride s): central inside, one-sided at the ends.
template <typename T>
__device__ __forceinline__ double grad1(const T* c, long long s, int x, int lo, int hi) {
    return lo == hi ? 0.0
         : x == lo ? (double)c[s] - (double)c[0]
         : x == hi ? (double)c[0] - (double)c[-s]
         : ((double)c[s] - (double)c[-s]) / 2.0;
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

// Position, normal (and sampled value, global key) of vertices start .. start + count - 1.
template <typename T, int MINB>
__global__ void __launch_bounds__(256, MINB) mc_vertex(const T* __restrict__ v, const Vol g, const double level,
        const long long* __restrict__ vedge, const long long start, const long long count, const Out o) {
    for (long long n = start + blockIdx.x * (long long)blockDim.x + threadIdx.x; n < start + count;
         n += (long long)gridDim.x * blockDim.x) {
        const long long e = vedge[n];
        const int i = (int)(e >> 42), j = (int)((e >> 22) & 0xFFFFF), k = (int)((e >> 2) & 0xFFFFF);
        const int a = (int)(e & 3);
        const int di = a == 0, dj = a == 1, dk = a == 2;
        const long long st[3] = {g.s0, g.s1, g.s2};
        const long long sa = a == 0 ? g.s0 : a == 1 ? g.s1 : g.s2;
        const T* pc = v + i * g.s0 + j * g.s1 + k * g.s2;  // the edge runs from pc to pc + sa
        const double va = (double)pc[0], vb = (double)pc[sa];
        const double t = (level - va) / (vb - va);
        const int p[3] = {i, j, k};
        double ga[3], nn = 0.0;
        #pragma unroll
        for (int d = 0; d < 3; ++d) {
            const double x = (double)(p[d] + o.off[d]) + (d == a ? t : 0.0);
            o.verts[3 * n + d] = (float)(x * o.sp[d] + o.org[d]);
            const double g0 = grad1(pc, st[d], p[d], g.elo[d], g.ehi[d]);
            const double g1 = grad1(pc + sa, st[d], p[d] + (d == a), g.elo[d], g.ehi[d]);
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


def supported(dtype) -> bool:
    """Whether the kernels read `dtype` directly (others are converted first)."""
    return np.dtype(dtype) in _TYPES


# Blocks per SM the kernels are compiled for (registers per thread follow): the tile pass
# (its shared memory allows four) and the vertex kernel (measured on an H200 at 1024^3).
_MINB = {"tiles": "4", "vertex": "4"}
CHUNK = 64  # planes per chunk (MAXP in the kernels)
_ROWS = 8  # rows per tile (R)
_PRE = CHUNK * _ROWS  # per tile: first vertex of each (plane, row)
_LCAP = 4096  # cubes with triangles a warp lists per tile (a quarter of them)


@functools.cache
def _module(ctype: str):
    """The kernels for samples of C type `ctype` (a module per type: a call compiles only
    what its volume needs)."""
    import cupy

    subst = {f"c{a}": ", ".join(str(int(x)) for x in CORNERS[:, a]) for a in range(3)}
    subst.update({f"e{a}": ", ".join(str(int(x)) for x in EDGE_BASE[:, a]) for a in range(3)})
    subst["ea"] = ", ".join(str(int(x)) for x in EDGE_AXIS)
    subst["tile"] = _TILE
    names = [f"mc_tiles<{ctype}, {listed}, {walk}, {_MINB['tiles']}>" for listed in ("true", "false")
             for walk in ("true", "false")]
    names += [f"mc_vertex<{ctype}, {_MINB['vertex']}>", "mc_units", "mc_order", "mc_fix"]
    compiling(_log, f"the marching cubes kernels (mc_*) for {ctype}", cupy_cache_dir())
    return cupy.RawModule(code=_SOURCE % subst, options=("-std=c++14", "-default-device"),
                          name_expressions=names)


@functools.cache
def _kernel(kind: str, dtype=None, listed: bool = False, walk: bool = False):
    if dtype is None:
        return _module("float").get_function(f"mc_{kind}")
    ctype = _TYPES[np.dtype(dtype)]
    if kind == "tiles":
        name = f"mc_tiles<{ctype}, {str(listed).lower()}, {str(walk).lower()}, {_MINB['tiles']}>"
    else:
        name = f"mc_{kind}<{ctype}, {_MINB[kind]}>"
    return _module(ctype).get_function(name)


@functools.cache
def _blocks_per_launch(device: int) -> int:
    """Blocks of the tile pass's launch (their warps take tiles until none is left): more
    than the GPU keeps resident, so every SM stays full whatever occupancy registers allow."""
    import cupy

    return 8 * int(cupy.cuda.Device(device).attributes["MultiProcessorCount"])


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
def _vol_record(strides: tuple, ext: tuple):
    return _struct(_VOL, [*strides, ext[:3], ext[3:]])


@functools.lru_cache(maxsize=256)
def _box(lo: tuple, hi: tuple, chunk: int):
    return _struct(_BOX, [*lo, *hi, chunk, *unit_grid(lo, hi, chunk)[1:]])


def _vol(a, ext):
    item = a.dtype.itemsize
    if any(s % item for s in a.strides):
        raise ValueError(f"marching_cubes: strides {a.strides} are not multiples of the item size {item}")
    return _vol_record(tuple(s // item for s in a.strides), tuple(int(x) for x in ext))


@functools.lru_cache(maxsize=256)
def _levelf(level: float) -> np.float32:
    """The largest float32 <= level (float samples compare against it in float)."""
    with np.errstate(over="ignore"):
        f = np.float32(level)
    return np.nextafter(f, np.float32(-np.inf)) if float(f) > level else f


_TILE = 30  # points k a tile owns (lanes 30, 31 lend samples)
_UROWS = 24  # rows j per unit: three tiles


def unit_grid(lo, hi, chunk) -> tuple[int, int, int]:
    """Units of the box along (chunks, rows j, points k): what the tile pass visits or skips."""
    m = [h - l + 1 for l, h in zip(lo, hi)]
    return (m[0] - 1) // chunk + 1, -(-m[1] // _UROWS), -(-m[2] // _TILE)


def select(ranges, level, lo, hi, chunk, active, units, pos) -> None:
    """The units the tile pass visits at `level`, from the volume's TileRanges, in order:
    `active` (uint8, one per unit) scratch, `units` (int32, 3 + units) gets their number
    and the list, `pos` (int32, one per unit) each listed unit's place in it."""
    import cupy

    n = int(np.prod(unit_grid(lo, hi, chunk)))
    box = _box(tuple(lo), tuple(hi), chunk)
    rng = ranges.values
    blocks = (-(-n // 256),)
    _kernel("units")(blocks, (256,), (rng, *(np.int32(x) for x in ranges.span), np.int32(rng.shape[1]),
                                      np.int32(rng.shape[2]), box, np.float64(level), np.int32(n), active))
    scan = cupy.cumsum(active, dtype=cupy.int32)
    _kernel("order")(blocks, (256,), (active, scan, np.int32(n), units, pos))


class Tiles:
    """Scratch of the tile pass over a box, kept across levels and runs of one call."""

    def __init__(self, lo, hi, nlevels: int, listed: bool, walk: bool, grid: int):
        import cupy

        self.lo, self.hi = tuple(lo), tuple(hi)
        self.nunits = int(np.prod(unit_grid(lo, hi, CHUNK)))
        ntick = 3 * self.nunits
        self.status = cupy.empty(ntick, cupy.uint64)
        self.vfirst = cupy.empty(ntick, cupy.int32)
        self.pre = cupy.empty((ntick if walk else 1, _PRE), cupy.uint16)
        self.ticket = cupy.zeros(nlevels, cupy.int32)
        self.lvl = cupy.zeros((nlevels + 1, 2), cupy.int64)  # first vertex and face of each level, then the end
        self.stats = cupy.zeros((nlevels, 4), cupy.uint64)  # per level: non-finite, vertices, faces, to fix
        self.units = self.pos = self.active = None
        # per warp of the launch, its list of a tile's cubes with triangles (more: row by row)
        self.lists = cupy.empty((grid * 8 * _LCAP) if walk else 1, cupy.uint32)
        if listed:
            self.units = cupy.zeros((nlevels, 3 + self.nunits), cupy.int32)
            self.pos = cupy.empty((nlevels, self.nunits), cupy.int32)
            self.active = cupy.empty(self.nunits, cupy.uint8)


def tiles(vol, ext, levels, lo, hi, tables, ranges, faces, vedge, fix, walk: bool) -> Tiles:
    """Count (and with `walk` write) the mesh of the box ``lo..hi`` for each level in order:
    faces (int32 (F, 3), global vertex numbers) and each vertex's packed edge (`vedge`,
    int64) for mc_vertex; `fix` (int32 (N, 2)) scratch for faces that take a later tile's
    vertex. Writes past the buffers are dropped: check ``Tiles.stats`` (per level: warps
    that met NaN or inf, vertices, faces, faces to fix) against their lengths. Returns
    the scratch, whose ``lvl`` holds each level's first vertex and face."""
    if max(h - l for l, h in zip(lo, hi)) >= 2**20:
        raise ValueError(f"marching_cubes: box {lo}..{hi} is too long for the GPU path (2^20 samples per axis)")
    listed = ranges is not None
    nunits = int(np.prod(unit_grid(lo, hi, CHUNK)))
    grid = (max(1, min(-(-3 * nunits // 8), _blocks_per_launch(vol.device.id))),)
    sc = Tiles(lo, hi, len(levels), listed, walk, grid[0])
    box = _box(tuple(lo), tuple(hi), CHUNK)
    g = _vol(vol, ext)
    kern = _kernel("tiles", vol.dtype, listed, walk)
    fix_k = _kernel("fix")
    null = np.uintp(0)
    for n, lev in enumerate(levels):
        sc.status.fill(0)
        sc.lvl[n + 1] = sc.lvl[n]  # a level with no tile ends where it starts
        units = pos = null
        if listed:
            units, pos = sc.units[n], sc.pos[n]
            select(ranges, lev, lo, hi, CHUNK, sc.active, units, pos)
        kern(grid, (32, 8), (vol, g, box, np.float64(lev), _levelf(lev), tables[0], tables[1],
                             units, np.int32(sc.nunits), sc.ticket[n:], sc.status,
                             sc.vfirst, sc.pre, sc.lvl[n], faces, vedge, np.int64(len(faces)), np.int64(len(vedge)),
                             fix, np.int64(len(fix)), sc.stats[n], sc.lists, np.int32(_LCAP if walk else 0)))
        if walk:
            fix_k((min(-(-len(fix) // 256), 4096) or 1,), (256,),
                  (faces, fix, sc.stats[n], np.int64(len(fix)), units if listed else null, pos, box, sc.vfirst,
                   sc.pre))
    return sc


def vertices(vol, ext, level, vstart, vcount, geo, offset, vals, keys, dims, keybase, verts, normals, vout,
             vedge) -> None:
    """Vertices ``vstart .. vstart + vcount - 1`` of one level from their packed edges, one
    per thread: positions, normals (and sampled values, global keys: None to skip)."""
    if vcount == 0:
        return
    g = _vol(vol, ext)
    ptr = lambda a: 0 if a is None else a.data.ptr  # noqa: E731
    vg = _vol(vals, ext) if vals is not None else np.zeros((), _record(tuple(_VOL)))
    o = _struct(_OUT, [geo[:3], 1.0 / geo[:3], geo[3:], offset, dims, keybase, ptr(verts), ptr(normals), ptr(vout),
                       ptr(keys), ptr(vals), int(vals is not None and vals.dtype == np.float32), vg])
    blocks = min(-(-vcount // 256), 2**31 - 1)
    _kernel("vertex", vol.dtype)((blocks,), (256,), (vol, g, np.float64(level), vedge, np.int64(vstart),
                                                     np.int64(vcount), o))
