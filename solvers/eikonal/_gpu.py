"""CuPy kernel: the same Jacobi sweep of the first-order Godunov update as _cpu.py."""

from __future__ import annotations

import functools

import numpy as np

from insitu.log import compiling, cupy_cache_dir, get_logger

_log = get_logger(__name__)

_SOURCE = r"""
__device__ __forceinline__ double godunov(double a, double b, double c,
                                          double ha, double hb, double hc, double w)
{
    double t_, th;
    if (a > b) { t_ = a; a = b; b = t_; th = ha; ha = hb; hb = th; }
    if (b > c) { t_ = b; b = c; c = t_; th = hb; hb = hc; hc = th; }
    if (a > b) { t_ = a; a = b; b = t_; th = ha; ha = hb; hb = th; }
    if (isinf(a)) return a;
    double t = a + ha * w;
    if (t <= b) return t;
    const double pa = 1.0 / (ha * ha), pb = 1.0 / (hb * hb);
    double A = pa + pb, B = a * pa + b * pb, C = a * a * pa + b * b * pb - w * w;
    t = (B + sqrt(fmax(B * B - A * C, 0.0))) / A;
    if (t <= c) return t;
    const double pc = 1.0 / (hc * hc);
    A += pc; B += c * pc; C += c * c * pc;
    return (B + sqrt(fmax(B * B - A * C, 0.0))) / A;
}

// One Jacobi sweep over a padded block; the largest change is folded into *maxchange
// (non-negative doubles order like their bit patterns). 32 x 8 thread tiles cover the
// (k, j) plane (narrow in k, so rows like 258 waste little of the last tile) and
// and march along i over a chunk of planes, keeping T at i-1, i, i+1 in registers, so
// each T value comes from memory once (the i-neighbours are a whole plane apart, too
// far for the caches at large sizes); j/k neighbours are cache hits.
extern "C" __global__ void eikonal_sweep_f64(const double* __restrict__ T, double* __restrict__ out,
                                             const double* __restrict__ w,
                                             const unsigned char* __restrict__ frozen,
                                             const int nx, const int ny, const int nz,
                                             const double hx, const double hy, const double hz,
                                             const int chunk, unsigned long long* maxchange)
{
    __shared__ double smax[256];  // blockDim.x * blockDim.y <= 256
    const long long sx = (long long)ny * nz, sy = nz;
    const int k = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y;
    const int i0 = blockIdx.z * chunk, i1 = min(i0 + chunk, nx);
    const int tid = threadIdx.y * blockDim.x + threadIdx.x, nthreads = blockDim.x * blockDim.y;
    double m = 0.0;
    if (k < nz && j < ny && i0 < nx) {
        const bool edge = (j == 0 || k == 0 || j == ny - 1 || k == nz - 1);
        long long p = i0 * sx + j * sy + k;
        double tm = i0 > 0 ? T[p - sx] : 0.0, t = T[p];
        for (int i = i0; i < i1; ++i, p += sx) {
            const double tp = i + 1 < nx ? T[p + sx] : 0.0;
            if (edge || i == 0 || i == nx - 1 || frozen[p]) {
                out[p] = t;  // seeds and the border (ghosts) are copied: the buffers can swap
            } else {
                const double a = fmin(tm, tp);
                const double b = fmin(T[p - sy], T[p + sy]);
                const double c = fmin(T[p - 1], T[p + 1]);
                const double nw = fmin(t, godunov(a, b, c, hx, hy, hz, w[p]));
                out[p] = nw;
                if (nw < t) m = fmax(m, isinf(t) ? t : t - nw);  // t = +inf: an infinite change
            }
            tm = t;
            t = tp;
        }
    }
    smax[tid] = m;
    __syncthreads();
    for (int s = nthreads / 2; s > 0; s >>= 1) {
        if (tid < s) smax[tid] = fmax(smax[tid], smax[tid + s]);
        __syncthreads();
    }
    if (tid == 0 && smax[0] > 0.0)
        atomicMax(maxchange, (unsigned long long)__double_as_longlong(smax[0]));
}
"""


_T32_EDITS = (
    ("const double* __restrict__ T, double* __restrict__ out,",
     "const float* __restrict__ T, float* __restrict__ out,"),
    ("out[p] = nw;\n                if (nw < t) m = fmax(m, isinf(t) ? t : t - nw);",
     "const float st = (float)nw;\n                out[p] = st;\n"
     "                if (st < t) m = fmax(m, isinf(t) ? t : t - (double)st);"),
)


# The display copy (EikonalSolver.display_copy): the sweep also stores min(T, clip) as
# float32. A kernel of its own, so the plain sweep carries no trace of it (a branch on a
# null pointer in the one kernel coincided with a slower sweep; tests/gpu/bench_eikonal.py
# --tune times both).
_VIEW_EDITS = (
    ("const int chunk, unsigned long long* maxchange)",
     "const int chunk, unsigned long long* maxchange,\n"
     "                                             float* __restrict__ view, const double clip)"),
    ("the buffers can swap\n", "the buffers can swap\n                view[p] = (float)fmin(t, clip);\n"),
    ("  // t = +inf: an infinite change\n",
     "  // t = +inf: an infinite change\n                view[p] = (float)fmin(nw, clip);\n"),
)


# The display copy's tile ranges (EikonalSolver.display_ranges): the view variant also
# reduces, per thread block, the min and max of the view values it wrote and stores them
# as float64 (nan, nan if one was not finite) at the block's tile in `ranges`; a tile is
# `chunk` planes x blockDim.y rows x blockDim.x points, the span (chunk, tile[1], tile[0])
# of insitu.ranges. Threads outside the array keep (+inf, -inf): they add nothing. Warps
# reduce by shuffles, then thread 0 folds the warps' results after the block's existing
# reduction of the change (whose __syncthreads orders the shared writes). Applied with the
# view edits: the view kernel always writes ranges.
_RANGES_EDITS = (
    ("float* __restrict__ view, const double clip)",
     "float* __restrict__ view, const double clip,\n"
     "                                             double* __restrict__ ranges)"),
    ("    __shared__ double smax[256];  // blockDim.x * blockDim.y <= 256\n",
     "    __shared__ double smax[256];  // blockDim.x * blockDim.y <= 256\n"
     "    __shared__ float rlo[8], rhi[8];  // per warp: <= 256 / 32 warps\n"
     "    __shared__ int rbad[8];\n"),
    ("    double m = 0.0;\n",
     "    double m = 0.0;\n"
     "    float vlo = __int_as_float(0x7F800000), vhi = -vlo;  // +inf, -inf: no view value yet\n"
     "    bool vbad = false;\n"),
    ("                view[p] = (float)fmin(t, clip);\n",
     "                const float v = (float)fmin(t, clip);\n"
     "                view[p] = v;\n"
     "                vlo = fminf(vlo, v); vhi = fmaxf(vhi, v); vbad |= !isfinite(v);\n"),
    ("                view[p] = (float)fmin(nw, clip);\n",
     "                const float v = (float)fmin(nw, clip);\n"
     "                view[p] = v;\n"
     "                vlo = fminf(vlo, v); vhi = fmaxf(vhi, v); vbad |= !isfinite(v);\n"),
    ("    smax[tid] = m;\n",
     "    {\n"
     "        const int lanes = min(nthreads, 32);  // a block of fewer threads is one partial warp\n"
     "        const unsigned mask = lanes == 32 ? 0xFFFFFFFFu : (1u << lanes) - 1u;\n"
     "        for (int d = lanes / 2; d > 0; d >>= 1) {\n"
     "            vlo = fminf(vlo, __shfl_xor_sync(mask, vlo, d));\n"
     "            vhi = fmaxf(vhi, __shfl_xor_sync(mask, vhi, d));\n"
     "        }\n"
     "        vbad = __any_sync(mask, vbad);\n"
     "        if ((tid & 31) == 0) { rlo[tid >> 5] = vlo; rhi[tid >> 5] = vhi; rbad[tid >> 5] = vbad; }\n"
     "    }\n"
     "    smax[tid] = m;\n"),
    ("    if (tid == 0 && smax[0] > 0.0)\n",
     "    if (tid == 0) {\n"
     "        for (int q = 1; q < (nthreads + 31) / 32; ++q) {\n"
     "            vlo = fminf(vlo, rlo[q]); vhi = fmaxf(vhi, rhi[q]); vbad |= rbad[q] != 0;\n"
     "        }\n"
     "        const long long rt = ((long long)blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;\n"
     "        const double nan = __longlong_as_double(0x7FF8000000000000ll);\n"
     "        ranges[2 * rt] = vbad ? nan : (double)vlo;\n"
     "        ranges[2 * rt + 1] = vbad ? nan : (double)vhi;\n"
     "    }\n"
     "    if (tid == 0 && smax[0] > 0.0)\n"),
)


# Skipping idle tiles (ActiveTiles): a thread block whose tile had nothing change in or
# next to it in the previous sweep leaves at once; every tile reports whether it changed.
_TILE_EDITS = (
    ("unsigned long long* maxchange",
     "unsigned long long* maxchange,\n                                             "
     "const unsigned char* __restrict__ active, unsigned char* __restrict__ changed"),
    ("    double m = 0.0;\n",
     "    const long long tile = ((long long)blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;\n"
     "    if (!active[tile]) {  // both buffers already hold this tile's values: nothing to do\n"
     "        if (tid == 0) changed[tile] = 0;\n"
     "        return;\n"
     "    }\n"
     "    double m = 0.0;\n"),
    ("    if (tid == 0 && smax[0] > 0.0)\n",
     "    if (tid == 0) changed[tile] = smax[0] > 0.0;\n    if (tid == 0 && smax[0] > 0.0)\n"),
)

_DILATE = r"""
// active = changed grown by one tile in every direction (26 neighbours and itself).
extern "C" __global__ void eikonal_tiles_dilate(const unsigned char* __restrict__ changed,
                                                unsigned char* __restrict__ active,
                                                const int gi, const int gj, const int gk)
{
    const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (t >= (long long)gi * gj * gk) return;
    const int k = (int)(t % gk), j = (int)((t / gk) % gj), i = (int)(t / ((long long)gk * gj));
    unsigned char a = 0;
    for (int di = max(i - 1, 0); di <= min(i + 1, gi - 1); ++di)
        for (int dj = max(j - 1, 0); dj <= min(j + 1, gj - 1); ++dj)
            for (int dk = max(k - 1, 0); dk <= min(k + 1, gk - 1); ++dk)
                a |= changed[((long long)di * gj + dj) * gk + dk];
    active[t] = a;
}
"""

_LOOP = "for (int i = i0; i < i1; ++i, p += sx) {"


def _edit(src: str, edits) -> str:
    for old, new in edits:
        if src.count(old) != 1:  # pragma: no cover - the kernel text changed: fail loudly, not silently
            raise RuntimeError(f"eikonal: cannot derive a kernel variant (no single {old!r} in the source)")
        src = src.replace(old, new)
    return src


def _sweep_source(w32: bool = False, t32: bool = False, view: bool = False, unroll: int = 1,
                  tiles: bool = False) -> tuple[str, str]:
    """(CUDA text, kernel name) of a sweep variant; the name says which edits made it."""
    # The same sweep reading a float32 slowness and/or keeping float32 travel times; the
    # update is computed in double either way (loads widen, the store rounds once, and the
    # change is the stored one: a run ends when no stored value moves).
    src, name = _SOURCE, "eikonal_sweep_f64"
    if w32:
        src, name = src.replace("const double* __restrict__ w,", "const float* __restrict__ w,"), name + "_w32"
    if t32:
        src, name = _edit(src, _T32_EDITS), name + "_t32"
    if view:  # the view's tile ranges come with it
        src, name = _edit(_edit(src, _VIEW_EDITS), _RANGES_EDITS), name + "_view"
    if tiles:  # after the view edits: both extend the parameter list
        src, name = _edit(src, _TILE_EDITS), name + "_tiles"
    if unroll > 1:  # more loads in flight per thread along i
        src = _edit(src, [(_LOOP, f"#pragma unroll {int(unroll)}\n        {_LOOP}")])
        name += f"_u{int(unroll)}"
    return src.replace("eikonal_sweep_f64(", name + "("), name


@functools.cache
def _get_sweep_kernel(w32: bool = False, t32: bool = False, view: bool = False, unroll: int = 1,
                      tiles: bool = False):
    import cupy

    if not (w32 or t32 or view or unroll > 1 or tiles):
        compiling(_log, "the eikonal sweep kernel eikonal_sweep_f64", cupy_cache_dir())
        return cupy.RawKernel(_SOURCE, "eikonal_sweep_f64")
    src, name = _sweep_source(w32, t32, view, unroll, tiles)
    compiling(_log, f"the eikonal sweep kernel {name}", cupy_cache_dir())
    return cupy.RawKernel(src, name)


#: Threads per block along (k, j): narrow in k, a power-of-two count for the block reduction
#: (32x4 beat 32x8 by 1% for the plain sweep and 13% with the display copy on an H200).
TILE = (32, 4)
#: Planes per thread: enough threads at small sizes, long register streams at large.
CHUNK = 32
#: Unrolling of the loop along i (1: none).
UNROLL = 1


class ActiveTiles:
    """Which thread tiles of one padded block a sweep must visit.

    A node changes only if a neighbour changed in the previous sweep, so a tile with no
    change in it or in the 26 tiles around it is skipped: both ping-pong buffers already
    hold its values, and the result is the full sweep's, bit for bit. A halo exchange may
    refill ghost faces; :meth:`refilled` wakes the tiles along the faces that have a
    neighbour block (`faces`: ``(axis, -1 or +1)`` pairs). Everything starts awake.
    """

    def __init__(self, shape, faces=(), *, tile: tuple[int, int] = TILE, chunk: int = CHUNK) -> None:
        import cupy

        nx, ny, nz = shape
        self.tile, self.chunk = tuple(tile), int(chunk)
        self.shape = (-(-nx // chunk), -(-ny // tile[1]), -(-nz // tile[0]))  # tiles along i, j, k
        self.active = cupy.ones(self.shape, cupy.uint8)
        self.changed = cupy.zeros(self.shape, cupy.uint8)
        self.border = cupy.zeros(self.shape, cupy.uint8)
        from ._tiles import face_tiles

        for cut in face_tiles(shape, faces, (self.chunk, self.tile[1], self.tile[0])):
            self.border[cut] = 1

    def refilled(self) -> None:
        """Ghost faces were refilled by a halo exchange: wake the tiles next to them."""
        import cupy

        cupy.bitwise_or(self.active, self.border, out=self.active)

    def advance(self) -> None:
        """After a sweep: the tiles that changed, and their neighbours, are the next ones."""
        gi, gj, gk = self.shape
        n = gi * gj * gk
        _dilate_kernel()((-(-n // 256),), (256,), (self.changed, self.active, np.int32(gi), np.int32(gj),
                                                    np.int32(gk)))

    def fraction(self) -> float:
        """Share of tiles the next sweep visits (a host read: for reports, not loops)."""
        return float(self.active.mean())


@functools.cache
def _dilate_kernel():
    import cupy

    compiling(_log, "the eikonal kernel eikonal_tiles_dilate", cupy_cache_dir())
    return cupy.RawKernel(_DILATE, "eikonal_tiles_dilate")


def sweep(T, out, w, frozen, hx, hy, hz, maxchange, view=None, clip: float = float("inf"), *,
          tiles: ActiveTiles | None = None, tile: tuple[int, int] = TILE, chunk: int = CHUNK,
          unroll: int = UNROLL, ranges=None) -> None:
    """Enqueue one Jacobi sweep; fold the largest change into the device scalar `maxchange`
    (uint64 view of a float64, reset by the caller); also write ``min(out, clip)`` into the
    float32 array `view` when given (the same pass, so no second read of `out`). `tile`
    (threads along k, j; at most 256, a power of two), `chunk` (planes per thread) and
    `unroll` (of the loop along i) shape the launch (tests/gpu/bench_eikonal.py --tune
    measures them). With `tiles` only its active tiles are visited (their shape wins),
    and it is advanced to the next sweep's. With `view`, the float64 array `ranges` of
    shape (tiles along i, j, k, 2) receives each visited tile's (min, max) of the view
    values written (nan, nan where one is not finite): the tile ranges of `view` with span
    ``(chunk, tile[1], tile[0])`` (scratch when not given)."""

    nx, ny, nz = T.shape
    if tiles is not None:
        tile, chunk = tiles.tile, tiles.chunk
    if tile[0] * tile[1] > 256 or tile[0] * tile[1] & (tile[0] * tile[1] - 1) or chunk < 1:
        raise ValueError(f"eikonal: tile {tile} must hold a power of two <= 256 threads, chunk {chunk} >= 1")
    grid = (-(-nz // tile[0]), -(-ny // tile[1]), -(-nx // chunk))
    if grid[1] > 65535 or grid[2] > 65535:
        raise ValueError(f"eikonal: block of shape {T.shape} exceeds the kernel's grid limits")
    if w.dtype not in (np.float64, np.float32):
        raise TypeError(f"eikonal: slowness must be float64 or float32, got {w.dtype}")
    if T.dtype not in (np.float64, np.float32) or out.dtype != T.dtype:
        raise TypeError(f"eikonal: travel times must be float64 or float32 (both buffers), got {T.dtype}, {out.dtype}")
    kernel = _get_sweep_kernel(w.dtype == np.float32, T.dtype == np.float32, view is not None, int(unroll),
                               tiles is not None)
    extra = ()
    if view is not None:
        shape = (*grid[::-1], 2)
        if ranges is None:
            import cupy

            ranges = cupy.empty(shape, cupy.float64)
        elif tuple(ranges.shape) != shape or ranges.dtype != np.float64 or not ranges.flags.c_contiguous:
            raise ValueError(f"eikonal: ranges must be C-contiguous float64 {shape} for a block of shape "
                             f"{T.shape}, got {ranges.dtype} {tuple(ranges.shape)}")
        extra = (view, np.float64(clip), ranges)
    if tiles is not None:
        if tiles.shape != grid[::-1]:
            raise ValueError(f"eikonal: tiles of shape {tiles.shape} do not fit a block of shape {T.shape}")
        extra = (tiles.active, tiles.changed) + extra
    kernel(grid, tile, (T, out, w, frozen, np.int32(nx), np.int32(ny), np.int32(nz),
                        np.float64(hx), np.float64(hy), np.float64(hz), np.int32(chunk), maxchange) + extra)
    if tiles is not None:
        tiles.advance()
