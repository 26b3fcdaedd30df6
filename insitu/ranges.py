"""Per-tile value ranges of a 3-D field: where a level can be crossed at all.

A :class:`TileRanges` cuts an array's samples into tiles of ``span = (si, sj, sk)``
samples (the last tile along an axis may be shorter) and keeps each tile's smallest and
largest sample. A tile holding a NaN or an infinity has the range ``(nan, nan)``:
"unknown, look at the samples". Marching cubes reads only the parts of a volume whose
ranges (with their neighbours') straddle the level, so an isosurface of a large field
costs what its surface touches; a solver that already visits the tiles can write the
ranges in the same pass (the eikonal solver's display copy does), else
:func:`tile_ranges` computes them in one read of the field.

In a Blueprint field they travel as ``fields/<f>/tile_ranges = {"span": [si, sj, sk],
"values": (gi, gj, gk, 2) float64}`` beside ``values`` (see :func:`as_tile_ranges`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Sequence

import numpy as np

from . import arrays
from .log import get_logger

__all__ = ["TileRanges", "as_tile_ranges", "tile_grid", "tile_ranges"]

_log = get_logger(__name__)

#: Tile span (along i, j, k) of :func:`tile_ranges` by default: 32 samples along the
#: fastest axis for coalesced reads, small along j so ranges follow a surface closely.
SPAN = (32, 8, 32)


@dataclasses.dataclass(frozen=True)
class TileRanges:
    """Smallest and largest sample of each tile of a 3-D array.

    Attributes
    ----------
    values : (gi, gj, gk, 2) float64 array
        ``values[a, b, c] = (min, max)`` of the samples ``[a*si, (a+1)*si) x [b*sj, ...) x
        [c*sk, ...)``; ``(nan, nan)`` where a sample is NaN or infinite. On the array's
        device (NumPy or CuPy).
    span : (si, sj, sk) ints
        Samples per tile along each axis.
    shape : (ni, nj, nk) ints
        Shape of the array summarized.
    """

    values: Any
    span: tuple[int, int, int]
    shape: tuple[int, int, int]


def tile_grid(shape: Sequence[int], span: Sequence[int]) -> tuple[int, int, int]:
    """Tiles along each axis of an array of `shape` cut into tiles of `span`."""
    gi, gj, gk = (-(-int(n) // int(s)) for n, s in zip(shape, span))
    return gi, gj, gk


def _check_span(span, name: str) -> tuple[int, int, int]:
    try:
        s = tuple(int(v) for v in span)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: span must be three positive integers, got {span!r}") from None
    if len(s) != 3 or min(s) < 1 or any(float(a) != float(b) for a, b in zip(s, span)):
        raise ValueError(f"{name}: span must be three positive integers, got {span!r}")
    return s[0], s[1], s[2]


def tile_ranges(volume, span: Sequence[int] = SPAN, *, out=None) -> TileRanges:
    """The per-tile (min, max) of `volume` in one read, on its own device.

    Parameters
    ----------
    volume : (ni, nj, nk) array
        Real numbers, NumPy or CuPy, any strides.
    span : (si, sj, sk) ints
        Samples per tile along each axis.
    out : (gi, gj, gk, 2) float64 array, optional
        Written in place (same backend as `volume`, C-contiguous).

    Returns
    -------
    TileRanges
    """
    vol = arrays.asarray(volume, name="volume")
    if vol.ndim != 3:
        raise ValueError(f"volume: expected a 3-D array, got shape {tuple(vol.shape)}")
    if vol.dtype.kind not in "fiub":
        raise TypeError(f"volume: expected real numbers, got dtype {vol.dtype}")
    s = _check_span(span, "tile_ranges")
    grid = tile_grid(vol.shape, s)
    gpu = arrays.is_device_array(vol)
    xp = arrays.get_array_module(vol)
    if out is None:
        out = xp.empty((*grid, 2), xp.float64)
    elif (tuple(out.shape) != (*grid, 2) or out.dtype != np.float64 or not out.flags.c_contiguous
          or arrays.is_device_array(out) != gpu):
        raise ValueError(f"tile_ranges: out must be C-contiguous float64 {(*grid, 2)} on the volume's device, "
                         f"got {out.dtype} {tuple(out.shape)}")
    if min(vol.shape) == 0:
        out[...] = np.nan
    elif gpu:
        _gpu_ranges(vol, s, grid, out)
    else:
        if vol.dtype == np.bool_:
            vol = vol.view(np.uint8)
        _cpu_kernel()(vol, *s, out)
    return TileRanges(out, s, (int(vol.shape[0]), int(vol.shape[1]), int(vol.shape[2])))


def as_tile_ranges(obj, shape: Sequence[int], like, name: str = "tile_ranges") -> TileRanges:
    """Check ranges handed in for an array of `shape` living where `like` lives.

    `obj`: a :class:`TileRanges` or a Blueprint-style mapping ``{"span": [si, sj, sk],
    "values": (gi, gj, gk, 2) or flat float64}``. Raises ValueError naming `name` when
    the span, the shape, the dtype or the device does not fit.
    """
    if isinstance(obj, TileRanges):
        span, values = obj.span, obj.values
        if tuple(obj.shape) != tuple(int(n) for n in shape):
            raise ValueError(f"{name}: ranges of an array of shape {tuple(obj.shape)}, the field has "
                             f"{tuple(int(n) for n in shape)}")
    elif isinstance(obj, dict) and "span" in obj and "values" in obj:
        span, values = obj["span"], obj["values"]
    else:
        raise ValueError(f"{name}: expected TileRanges or {{'span': [si, sj, sk], 'values': array}}, "
                         f"got {type(obj).__name__}")
    s = _check_span(arrays.to_host(span) if arrays.is_device_array(span) else span, name)
    grid = tile_grid(shape, s)
    vals = arrays.asarray(values, name=f"{name} values")
    if vals.dtype != np.float64:
        raise ValueError(f"{name}: values must be float64, got {vals.dtype}")
    if vals.size != int(np.prod(grid)) * 2:
        raise ValueError(f"{name}: {vals.size} values for {grid} tiles of span {s} (need {int(np.prod(grid)) * 2})")
    if arrays.is_device_array(vals) != arrays.is_device_array(like) or (
            arrays.is_device_array(vals) and arrays.device_id(vals) != arrays.device_id(like)):
        raise ValueError(f"{name}: values live on {arrays.backend_of(vals)} device {arrays.device_id(vals)}, "
                         f"the field on {arrays.backend_of(like)} device {arrays.device_id(like)}")
    if not vals.flags.c_contiguous:
        raise ValueError(f"{name}: values must be C-contiguous")
    return TileRanges(vals.reshape(*grid, 2), s, (int(shape[0]), int(shape[1]), int(shape[2])))


@functools.cache
def _cpu_kernel():
    import numba

    @numba.njit(parallel=True, cache=True)
    def ranges(v, si, sj, sk, out):  # pragma: no cover - compiled
        gi, gj, gk = out.shape[0], out.shape[1], out.shape[2]
        ni, nj, nk = v.shape
        for t in numba.prange(gi * gj):
            a, b = t // gj, t % gj
            for c in range(gk):
                lo, hi, bad = np.inf, -np.inf, False
                for i in range(a * si, min((a + 1) * si, ni)):
                    for j in range(b * sj, min((b + 1) * sj, nj)):
                        for k in range(c * sk, min((c + 1) * sk, nk)):
                            x = float(v[i, j, k])
                            if not np.isfinite(x):
                                bad = True
                            lo = min(lo, x)
                            hi = max(hi, x)
                if bad:
                    lo = hi = np.nan
                out[a, b, c, 0] = lo
                out[a, b, c, 1] = hi

    return ranges


_SOURCE = r"""
// One block per tile: warps take rows j, lanes points k (32 for coalesced rows), each
// thread walks the tile's planes keeping a running min / max in the samples' own type
// (float stays float: no conversions in the loop) and whether it met a non-finite sample.
template <typename T> struct Acc { typedef double type; };
template <> struct Acc<float> { typedef float type; };
template <typename T>
__device__ __forceinline__ bool finite(T x) { return true; }
template <> __device__ __forceinline__ bool finite<float>(float x) { return isfinite(x); }
template <> __device__ __forceinline__ bool finite<double>(double x) { return isfinite(x); }

template <typename T, int SI>
__device__ __forceinline__ void column(const T* p, long long s0, int n, typename Acc<T>::type& lo,
                                       typename Acc<T>::type& hi, bool& bad) {
    typedef typename Acc<T>::type A;
    if (n == SI) {  // a whole tile along i: every load issued before the first is used
        T x[SI];
        #pragma unroll
        for (int i = 0; i < SI; ++i) x[i] = p[i * s0];
        #pragma unroll
        for (int i = 0; i < SI; ++i) { bad |= !finite(x[i]); lo = min(lo, (A)x[i]); hi = max(hi, (A)x[i]); }
    } else {
        for (int i = 0; i < n; ++i) {
            const T x = p[i * s0];
            bad |= !finite(x);
            lo = min(lo, (A)x);
            hi = max(hi, (A)x);
        }
    }
}

template <typename T>
__global__ void __launch_bounds__(256) tile_ranges(const T* __restrict__ v, const long long s0, const long long s1,
        const long long s2, const int ni, const int nj, const int nk, const int si, const int sj, const int sk,
        const int gj, const int gk, double* __restrict__ out) {
    typedef typename Acc<T>::type A;
    __shared__ double smin[8], smax[8];
    __shared__ int sbad[8];
    const long long t = blockIdx.x;
    const int c = (int)(t % gk), b = (int)((t / gk) % gj), a = (int)(t / ((long long)gk * gj));
    const int i0 = a * si, j0 = b * sj, k0 = c * sk;
    const int i1 = min(i0 + si, ni), j1 = min(j0 + sj, nj), k1 = min(k0 + sk, nk);
    A lo = (A)(1.0 / 0.0), hi = (A)(-1.0 / 0.0);
    bool bad = false;
    for (int j = j0 + threadIdx.y; j < j1; j += blockDim.y)
        for (int k = k0 + threadIdx.x; k < k1; k += blockDim.x) {
            const T* p = v + (long long)i0 * s0 + (long long)j * s1 + (long long)k * s2;
            if (si == 32) column<T, 32>(p, s0, i1 - i0, lo, hi, bad);
            else column<T, 1>(p, s0, i1 - i0, lo, hi, bad);
        }
    double dlo = lo, dhi = hi;
    #pragma unroll
    for (int d = 16; d > 0; d >>= 1) {
        dlo = fmin(dlo, __shfl_xor_sync(0xFFFFFFFFu, dlo, d));
        dhi = fmax(dhi, __shfl_xor_sync(0xFFFFFFFFu, dhi, d));
    }
    bad = __any_sync(0xFFFFFFFFu, bad);
    const int w = threadIdx.y;  // blockDim.x == 32: one warp per y
    if (threadIdx.x == 0) { smin[w] = dlo; smax[w] = dhi; sbad[w] = bad; }
    __syncthreads();
    if (threadIdx.x == 0 && w == 0) {
        for (int q = 1; q < blockDim.y; ++q) {
            dlo = fmin(dlo, smin[q]);
            dhi = fmax(dhi, smax[q]);
            bad |= sbad[q] != 0;
        }
        const double nan = __longlong_as_double(0x7FF8000000000000ll);
        out[2 * t] = bad ? nan : dlo;
        out[2 * t + 1] = bad ? nan : dhi;
    }
}
"""

_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double", np.dtype(np.uint8): "unsigned char",
          np.dtype(np.int8): "signed char", np.dtype(np.uint16): "unsigned short", np.dtype(np.int16): "short",
          np.dtype(np.int32): "int", np.dtype(np.uint32): "unsigned int", np.dtype(np.int64): "long long",
          np.dtype(np.uint64): "unsigned long long", np.dtype(np.bool_): "bool"}


def source() -> tuple[str, list[str], tuple[str, ...]]:
    """The CUDA source of the range kernels, their instances and the compile options."""
    return _SOURCE, [f"tile_ranges<{t}>" for t in _TYPES.values()], ("-std=c++14",)


@functools.cache
def _gpu_module():
    return arrays.cuda_module(source(), "the tile range kernels (tile_ranges)", _log, templates=True)


def _gpu_ranges(vol, span, grid, out) -> None:
    item = vol.dtype.itemsize
    if any(s % item for s in vol.strides):
        raise ValueError(f"tile_ranges: strides {vol.strides} are not multiples of the item size {item}")
    kernel = _gpu_module().get_function(f"tile_ranges<{_TYPES[vol.dtype]}>")
    rows = max(1, min(8, span[1]))
    ntiles = int(np.prod(grid))
    kernel((ntiles,), (32, rows), (vol, *(np.int64(s // item) for s in vol.strides),
                                   *(np.int32(n) for n in vol.shape), *(np.int32(s) for s in span),
                                   np.int32(grid[1]), np.int32(grid[2]), out))
