"""Benchmark: the memory access patterns of the marching-cubes passes, without marching cubes.

    python tests/gpu/bench_access.py [--n 1024] [--md docs/BENCHMARKS.md]

Reads: a warp reads 32 lanes x 4 rows of a plane of an (n, n, n) float32 volume and walks a
chunk of 64 planes with two planes of loads in flight, turning each row into a ballot (what
pass 1 does before it counts anything), for tiles of 30 points (pass 1's: rows start 120
bytes apart, off the 128-byte lines) and of 32 points, with and without lane 31 also
loading the point after its tile, at full occupancy and at 5 blocks per SM (pass 1's),
against a linear float4 read of the volume. Writes: threads append 0-12 four-byte entries
a step, each to its own run of one array (runs back to back, as the walk writes faces),
with one store per entry or staged per thread in shared memory and written a whole
32-byte sector at a time. Median of 9 launches between CUDA events.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import commit, device_median_ms, emit

_READS = r"""
// TK: points a warp owns along k (lanes beyond lend samples); R: rows it owns (it loads R + 1);
// EX: lane 31 also loads the point after the tile (the neighbour a tile's last cube needs).
template <int TK, int R, bool EX>
__global__ void rows(const float* __restrict__ v, int n, int chunk, int nbx, int nby, unsigned* out) {
    const int lane = threadIdx.x;
    const int u = blockIdx.x, bx = u % nbx, by = (u / nbx) % nby, c = u / (nbx * nby);
    const int j0 = (bx * 8 + threadIdx.y) * R, k = by * TK + lane;
    if (j0 >= n) return;
    const long long s0 = (long long)n * n;
    const float* p = v + (long long)c * chunk * s0 + (long long)j0 * n + k;
    const bool kin = k < n, xin = EX && lane == 31 && k + 1 < n;
    unsigned acc = 0u;
    float q[2][R + 1], e[2][R + 1];
    #pragma unroll
    for (int h = 0; h < 2; ++h)
        #pragma unroll
        for (int r = 0; r <= R; ++r) {
            q[h][r] = kin && j0 + r < n ? p[h * s0 + r * n] : 0.f;
            e[h][r] = xin && j0 + r < n ? p[h * s0 + r * n + 1] : 0.f;
        }
    for (int i = 0; i < chunk; i += 2) {
        #pragma unroll
        for (int h = 0; h < 2; ++h) {
            #pragma unroll
            for (int r = 0; r <= R; ++r) {
                acc ^= __ballot_sync(0xFFFFFFFFu, q[h][r] > 0.5f) + r;
                if (EX) acc += __ballot_sync(0xFFFFFFFFu, e[h][r] > 0.5f) << 1;
            }
            if (i + h + 2 < chunk) {
                #pragma unroll
                for (int r = 0; r <= R; ++r) {
                    q[h][r] = kin && j0 + r < n ? p[(i + h + 2) * s0 + r * n] : 0.f;
                    e[h][r] = xin && j0 + r < n ? p[(i + h + 2) * s0 + r * n + 1] : 0.f;
                }
            }
        }
    }
    if (acc == 0x12345678u) out[0] = acc;  // keeps the loads
}

extern "C" __global__ void linear(const float4* __restrict__ v, long long n, float* out) {
    float s = 0.f;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += step) {
        const float4 x = v[i];
        s += x.x + x.y + x.z + x.w;
    }
    if (s == 1234.5f) out[0] = s;
}
"""

_WRITES = r"""
__device__ __forceinline__ unsigned mix(unsigned x) {
    x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16; return x;
}
// entries thread t appends at step s: none three times in four, else 3, 6, 9 or 12
__device__ __forceinline__ int burst(unsigned t, int s) {
    const unsigned h = mix(t * 977u + s);
    return (h & 3u) ? 0 : 3 * (1 + (h >> 8) % 4);
}
extern "C" __global__ void sizes(int steps, int* total) {
    const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    int n = 0;
    for (int s = 0; s < steps; ++s) n += burst(t, s);
    total[t] = n;
}
extern "C" __global__ void direct(int steps, const long long* start, int* out) {
    const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    long long w = start[t];
    for (int s = 0; s < steps; ++s) {
        const int b = burst(t, s);
        for (int e = 0; e < 12; ++e)
            if (e < b) out[w + e] = s * 16 + e;
        w += b;
    }
}
extern "C" __global__ void staged(int steps, const long long* start, int* out) {
    __shared__ __align__(16) int buf[256 * 8];
    const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    long long w = start[t];
    int* my = buf + threadIdx.x * 8;
    const long long head = (w + 7) & ~7LL;  // the run's first whole sector: buffered from there
    for (int s = 0; s < steps; ++s) {
        const int b = burst(t, s);
        for (int e = 0; e < 12; ++e)
            if (e < b) {
                const long long x = w + e;
                if (x < head) {
                    out[x] = s * 16 + e;
                    continue;
                }
                my[x & 7] = s * 16 + e;
                if ((x & 7) == 7) {
                    int4* d = reinterpret_cast<int4*>(out + (x & ~7LL));
                    d[0] = *reinterpret_cast<const int4*>(my);
                    d[1] = *reinterpret_cast<const int4*>(my + 4);
                }
            }
        w += b;
    }
    for (long long x = (w & ~7LL) > head ? (w & ~7LL) : head; x < w; ++x) out[x] = my[x & 7];
}
"""

# (tile points, rows, lane 31 loads the next point, blocks per SM or 0: as many as fit)
_PATTERNS = [(30, 3, False, 0), (32, 3, False, 0), (32, 3, True, 0), (30, 3, False, 5), (32, 3, False, 5),
             (32, 3, True, 5)]


def reads(n: int, chunk: int = 64) -> list[tuple[str, float]]:
    """Time of each read pattern on an (n, n, n) float32 volume, ms."""
    import cupy as cp

    names = [f"rows<{tk}, {r}, {'true' if ex else 'false'}>" for tk, r, ex, _ in _PATTERNS]
    mod = cp.RawModule(code=_READS, options=("-std=c++14",), name_expressions=sorted(set(names)))
    vol = cp.random.random((n, n, n), dtype=cp.float32)
    out = cp.zeros(1, cp.uint32)
    smem_per_sm = cp.cuda.Device().attributes["MaxSharedMemoryPerMultiprocessor"]
    rows = []
    for (tk, r, ex, blocks), name in zip(_PATTERNS, names):
        f = mod.get_function(name)
        nbx, nby = -(-n // (8 * r)), -(-n // tk)
        grid = (nbx * nby * -(-n // chunk),)
        # occupancy held to `blocks` per SM by shared memory the kernel does not use
        smem = smem_per_sm // blocks - 1024 if blocks else 0
        if smem > 48 * 1024:
            f.max_dynamic_shared_size_bytes = smem

        def run(f=f, grid=grid, smem=smem, nbx=nbx, nby=nby):
            f(grid, (32, 8), (vol, np.int32(n), np.int32(chunk), np.int32(nbx), np.int32(nby), out), shared_mem=smem)

        run()
        what = (f"{tk}-point tiles{', lane 31 loading the next point' if ex else ''}, "
                f"{f'{blocks} blocks per SM' if blocks else 'full occupancy'}")
        rows.append((what, device_median_ms(run)))
    lin = mod.get_function("linear")
    nsm = cp.cuda.Device().attributes["MultiProcessorCount"]
    fout = cp.zeros(1, cp.float32)

    def run_linear():
        lin((8 * nsm,), (256,), (vol, np.int64(vol.size // 4), fout))

    run_linear()
    rows.append(("linear float4 read of the volume", device_median_ms(run_linear)))
    return rows


def writes(threads: int, steps: int) -> tuple[int, list[tuple[str, float]]]:
    """Entries appended and the time of each write pattern, ms (both patterns write the same array)."""
    import cupy as cp

    mod = cp.RawModule(code=_WRITES)
    total = cp.zeros(threads, cp.int32)
    grid = (threads // 256,)
    mod.get_function("sizes")(grid, (256,), (np.int32(steps), total))
    start = cp.concatenate([cp.zeros(1, cp.int64), cp.cumsum(total.astype(cp.int64))])
    entries = int(start[-1])
    got = []
    rows = []
    for name, what in (("direct", "one 4-byte store per entry"),
                       ("staged", "staged per thread, a whole 32-byte sector a store")):
        out = cp.full(entries + 8, -1, cp.int32)
        f = mod.get_function(name)

        def run(f=f, out=out):
            f(grid, (256,), (np.int32(steps), start, out))

        run()
        got.append(out)
        rows.append((what, device_median_ms(run)))
    if not bool((got[0] == got[1]).all()) or bool((got[0][:entries] == -1).any()):
        raise RuntimeError("the two write patterns wrote different arrays")
    return entries, rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1024, help="volume side for the read patterns")
    ap.add_argument("--md", help="append the tables to this Markdown file")
    args = ap.parse_args(argv)
    import cupy as cp

    dev = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    nsm = cp.cuda.Device().attributes["MultiProcessorCount"]
    head = f"Device: {dev}; date {datetime.date.today()}; commit {commit()}; command " \
           f"`python tests/gpu/bench_access.py --n {args.n}`. Median of 9 launches between CUDA events."
    out = [f"### Access patterns of the marching-cubes passes ({args.n}^3 float32, chunks of 64 planes)", "", head,
           "", "| reads: a warp of 32 lanes x 4 rows walking the planes | ms |", "| --- | ---: |"]
    out += [f"| {what} | {ms:.3f} |" for what, ms in reads(args.n)]
    entries, rows = writes(768 * nsm, 768)
    out += ["", f"| writes: {entries} entries appended by {768 * nsm} threads, each to its own run | ms |",
            "| --- | ---: |"]
    out += [f"| {what} | {ms:.3f} |" for what, ms in rows]
    emit("\n".join(out) + "\n", args.md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
