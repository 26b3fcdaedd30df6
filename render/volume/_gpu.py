"""CUDA kernel of the volume ray caster: the algorithm of _cpu.py (read its docstring),
one thread per pixel in 16 x 16 tiles, so neighbouring rays read neighbouring samples
(cache hits).

The ray set-up (direction, box intervals, which samples are this render's, segment
lengths) is done in double with explicitly rounded operations, so it matches the CPU
kernel bit for bit: both backends take the same samples. Sampling and compositing run in
the volume's precision and float; only the camera and grid scalars travel, by value, as
the kernel's ``Params`` argument. The colour table is the one array the kernel needs
from the host, uploaded once per transfer function and device by the caller.
"""

from __future__ import annotations

import functools

import numpy as np

from insitu import arrays
from insitu.log import get_logger

from ._params import cuda_struct, record

_log = get_logger(__name__)

_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}

SRC = cuda_struct() + r"""
// NVRTC has no INFINITY macro.
#define INF_D __longlong_as_double(0x7ff0000000000000LL)

// Rounded as written (no fused multiply-add), like the CPU kernel.
#define MUL __dmul_rn
#define ADD __dadd_rn
#define SUB __dsub_rn

// Smallest k with k * step >= t (the product is what every render compares).
__device__ __forceinline__ long long first_k(double t, double step) {
    long long k = (long long)ceil(t / step);
    if (MUL((double)(k - 1), step) >= t) --k;
    else if (MUL((double)k, step) < t) ++k;
    return k;
}

// [tn, tf) narrowed to the ray's interval in the slab lo..hi of one axis; half-open on
// the far side as seen along the ray, so neighbouring slabs split the ray exactly.
__device__ __forceinline__ void slab(double e, double d, double lo, double hi, double& tn, double& tf) {
    if (d == 0.0) {
        if (!(lo <= e && e < hi)) { tn = INF_D; tf = -INF_D; }
        return;
    }
    const double a = SUB(lo, e) / d, b = SUB(hi, e) / d;
    if (d > 0.0) { tn = fmax(tn, a); tf = fmin(tf, b); }
    else { tn = fmax(tn, b); tf = fmin(tf, a); }
}

template <typename T>
__device__ __forceinline__ T at(const T* v, long long s0, long long s1, long long s2, int i, int j, int k) {
    return v[i * s0 + j * s1 + k * s2];
}

// Cell index and fraction along one axis, clamped to the cells this render may read.
__device__ __forceinline__ int cell(double u, int lo, int hi, double& f) {
    u = fmin(fmax(u, (double)lo), hi + 1.0);
    const int i = min((int)u, hi);
    f = u - i;
    return i;
}

// The same along a rectilinear grid's axis ax (increasing): a binary search, as the CPU's.
__device__ __forceinline__ int rect_cell(const double* __restrict__ ax, double x, int lo, int hi, double& f) {
    x = fmin(fmax(x, ax[lo]), ax[hi + 1]);
    int a = lo, b = hi;
    while (a < b) {
        const int m = (a + b + 1) >> 1;
        if (ax[m] <= x) a = m;
        else b = m - 1;
    }
    const double x0 = ax[a];
    f = fmin(SUB(x, x0) / SUB(ax[a + 1], x0), 1.0);
    return a;
}

template <typename T>
__global__ void __launch_bounds__(256) vr_render(const T* __restrict__ vol, const long long s0,
        const long long s1, const long long s2, const float4* __restrict__ lut, const Params p,
        const double* __restrict__ ax, float4* __restrict__ rgba, float* __restrict__ depth, const int width,
        const int height) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y * blockDim.y + threadIdx.y;
    if (c >= width || r >= height) return;
    const double step = p.step;
    const double y = MUL(SUB(1.0, MUL(2.0, ADD((double)r, 0.5)) / height), p.tany);
    const double x = MUL(SUB(MUL(2.0, ADD((double)c, 0.5)) / width, 1.0), p.tanx);
    double d[3];
    #pragma unroll
    for (int a = 0; a < 3; ++a) d[a] = ADD(ADD(p.fwd[a], MUL(x, p.right[a])), MUL(y, p.up[a]));
    const double norm = sqrt(ADD(ADD(MUL(d[0], d[0]), MUL(d[1], d[1])), MUL(d[2], d[2])));
    #pragma unroll
    for (int a = 0; a < 3; ++a) d[a] /= norm;
    const double cosang = 1.0 / norm;  // forward is orthogonal to right and up
    double t_in = p.near / cosang, t_out = p.far / cosang;
    #pragma unroll
    for (int a = 0; a < 3; ++a) slab(p.eye[a], d[a], p.bnd_lo[a], p.bnd_hi[a], t_in, t_out);
    double t_lo = t_in, t_hi = t_out;
    #pragma unroll
    for (int a = 0; a < 3; ++a) slab(p.eye[a], d[a], p.ext_lo[a], p.ext_hi[a], t_lo, t_hi);
    float cr = 0.f, cg = 0.f, cb = 0.f, ca = 0.f;
    double z = INF_D;
    if (t_lo < t_hi) {
        const long long k_first = first_k(t_in, step), k_last = first_k(t_out, step) - 1;
        long long k_beg = first_k(t_lo, step), k_end = first_k(t_hi, step);
        // A chord shorter than the step holds no sample: give it one, in its middle.
        const bool single = k_first > k_last;
        const double t_mid = MUL(0.5, ADD(t_in, t_out));
        if (single) { k_beg = 0; k_end = t_lo <= t_mid && t_mid < t_hi; }
        double u0[3], du[3];
        #pragma unroll
        for (int a = 0; a < 3; ++a) {
            u0[a] = MUL(SUB(p.eye[a], p.org[a]), p.inv_sp[a]);
            du[a] = MUL(d[a], p.inv_sp[a]);
        }
        const T vmin = (T)p.vmin, lut_scale = (T)p.lut_scale;
        const float top = (float)(p.nlut - 1);
        for (long long k = k_beg; k < k_end; ++k) {
            const double t = single ? t_mid : MUL((double)k, step);
            double f0, f1, f2;
            int i, j, m;
            if (p.rect) {
                i = rect_cell(ax + p.aoff[0], ADD(p.eye[0], MUL(t, d[0])), p.clo[0], p.chi[0], f0);
                j = rect_cell(ax + p.aoff[1], ADD(p.eye[1], MUL(t, d[1])), p.clo[1], p.chi[1], f1);
                m = rect_cell(ax + p.aoff[2], ADD(p.eye[2], MUL(t, d[2])), p.clo[2], p.chi[2], f2);
            } else {
                i = cell(u0[0] + t * du[0], p.clo[0], p.chi[0], f0);
                j = cell(u0[1] + t * du[1], p.clo[1], p.chi[1], f1);
                m = cell(u0[2] + t * du[2], p.clo[2], p.chi[2], f2);
            }
            const T fi = (T)f0, fj = (T)f1, fm = (T)f2;
            const T* q = vol + i * s0 + j * s1 + m * s2;
            const T v000 = q[0], v001 = q[s2], v010 = q[s1], v011 = q[s1 + s2];
            const T v100 = q[s0], v101 = q[s0 + s2], v110 = q[s0 + s1], v111 = q[s0 + s1 + s2];
            const T c00 = v000 + (v001 - v000) * fm, c01 = v010 + (v011 - v010) * fm;
            const T c10 = v100 + (v101 - v100) * fm, c11 = v110 + (v111 - v110) * fm;
            const T c0 = c00 + (c01 - c00) * fj, c1 = c10 + (c11 - c10) * fj;
            const T v = c0 + (c1 - c0) * fi;
            if (!isfinite(v)) continue;  // NaN (or inf) nearby: the sample is transparent
            const float xl = fminf(fmaxf((float)((v - vmin) * lut_scale), 0.f), top);
            const int n = min((int)xl, p.nlut - 2);
            const float g = xl - n;
            const float4 a = lut[n], b = lut[n + 1];
            const float op = a.w + (b.w - a.w) * g;
            if (op <= 0.f) continue;
            const double lo = single || k == k_first ? t_in : SUB(t, MUL(0.5, step));
            const double hi = single || k == k_last ? t_out : ADD(t, MUL(0.5, step));
            const float alpha = 1.f - expf((float)(SUB(hi, lo) * p.inv_unit) * log1pf(-op));
            if (z == INF_D) z = t * cosang;
            const float w = (1.f - ca) * alpha;
            cr += w * (a.x + (b.x - a.x) * g);
            cg += w * (a.y + (b.y - a.y) * g);
            cb += w * (a.z + (b.z - a.z) * g);
            ca += w;
            if (ca >= p.et) break;
        }
    }
    const float rest = 1.f - ca;
    const long long o = (long long)r * width + c;
    rgba[o] = make_float4(cr + rest * (float)p.bg[0], cg + rest * (float)p.bg[1], cb + rest * (float)p.bg[2],
                          ca + rest * (float)p.bg[3]);
    depth[o] = (float)z;
}
"""

_NAMES = {dt: f"vr_render<{c}>" for dt, c in _TYPES.items()}


def supported(dtype) -> bool:
    """Whether the kernel reads `dtype` directly (others are converted first)."""
    return np.dtype(dtype) in _TYPES


def source() -> tuple[str, list[str], tuple[str, ...]]:
    """The CUDA source of the ray caster, its instances and the compile options."""
    return SRC, list(_NAMES.values()), ("-std=c++14",)


@functools.cache
def _module():
    return arrays.cuda_module(source(), "the ray casting kernels (vr_render)", _log, templates=True)


def render(vol, lut, params: dict, ax, rgba, depth) -> None:
    """Ray cast `vol` (float32 or float64, any strides that are whole elements) into
    `rgba` ((H, W, 4) float32, C order) and `depth` ((H, W) float32); `lut` is the
    device copy of the (N, 4) float32 table, `params` the _params values, `ax` a
    rectilinear grid's float64 coordinates on the device (None for a uniform grid)."""
    item = vol.dtype.itemsize
    s0, s1, s2 = (np.int64(s // item) for s in vol.strides)
    h, w = depth.shape
    tile = (16, 16)
    grid = (-(-w // tile[0]), -(-h // tile[1]))
    kernel = _module().get_function(_NAMES[np.dtype(vol.dtype)])
    kernel(grid, tile, (vol, s0, s1, s2, lut, record(params), ax if ax is not None else lut, rgba, depth,
                         np.int32(w), np.int32(h)))
