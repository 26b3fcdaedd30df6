"""Numba kernel of the volume ray caster (the CUDA kernel in _gpu.py is the same
algorithm, one thread per pixel; this one runs image rows in parallel).

Per pixel: the ray through its centre (Camera.rays); its parameter interval
``[t_in, t_out)`` in the whole data set's box (`bnd`) and the near/far clip; the part
``[t_lo, t_hi)`` of it in the box this render owns (`ext`). Samples sit at
``t_k = k * step`` for integer k, counted from the eye, so a block render samples at
exactly the points the single-volume render does. Each sample stands for the part of
``[t_in, t_out)`` nearer to it than to its neighbours (the outermost ones reach the box
faces), so the lengths add up to the chord whatever the step; a chord too short to hold
a sample gets one in its middle. Sample k belongs to this render when
``t_lo <= t_k < t_hi``: blocks whose boxes tile the data set split each ray's samples
between them, none twice, none lost.
"""

from __future__ import annotations

import math

import numba

from insitu.log import watch_jit

from ._params import IOFF, OFF

watch_jit(__name__)  # a first call that compiles takes seconds: logged, so a slow first execute says why

_EYE, _RIGHT, _UP, _FWD = OFF["eye"], OFF["right"], OFF["up"], OFF["fwd"]
_TANX, _TANY, _NEAR, _FAR = OFF["tanx"], OFF["tany"], OFF["near"], OFF["far"]
_ORG, _INVSP, _EXTLO, _EXTHI = OFF["org"], OFF["inv_sp"], OFF["ext_lo"], OFF["ext_hi"]
_BNDLO, _BNDHI, _STEP, _INVUNIT = OFF["bnd_lo"], OFF["bnd_hi"], OFF["step"], OFF["inv_unit"]
_VMIN, _LUTSCALE, _BG, _ET = OFF["vmin"], OFF["lut_scale"], OFF["bg"], OFF["et"]
_CLO, _CHI, _NLUT, _RECT, _AOFF = IOFF["clo"], IOFF["chi"], IOFF["nlut"], IOFF["rect"], IOFF["aoff"]


@numba.njit(inline="always")
def first_k(t, step):
    """Smallest k with ``k * step >= t`` (the product is what every render compares)."""
    k = math.ceil(t / step)
    if (k - 1) * step >= t:
        k -= 1
    elif k * step < t:
        k += 1
    return k


@numba.njit(inline="always")
def slab(e, d, lo, hi, tn, tf):
    """``[tn, tf)`` narrowed to the ray's interval in the slab lo..hi of one axis.

    Half-open on the far side as seen along the ray, so neighbouring slabs split the ray
    with no overlap; a ray parallel to the slab is inside when ``lo <= e < hi``.
    """
    if d == 0.0:
        if not (lo <= e < hi):
            return math.inf, -math.inf
        return tn, tf
    a = (lo - e) / d
    b = (hi - e) / d
    if d > 0.0:
        return max(tn, a), min(tf, b)
    return max(tn, b), min(tf, a)


@numba.njit(inline="always")
def cell(u, lo, hi):
    """Cell index and fraction of index coordinate `u`, clamped to the cells lo..hi."""
    u = min(max(u, lo), hi + 1.0)
    i = min(int(u), hi)
    return i, u - i


@numba.njit(inline="always")
def rect_cell(ax, base, x, lo, hi):
    """Cell index and fraction of coordinate `x` on the axis ``ax[base:]`` (increasing),
    clamped to the cells lo..hi: a binary search, the same steps as the CUDA kernel's."""
    x = min(max(x, ax[base + lo]), ax[base + hi + 1])
    a, b = lo, hi
    while a < b:
        m = (a + b + 1) >> 1
        if ax[base + m] <= x:
            a = m
        else:
            b = m - 1
    x0 = ax[base + a]
    return a, min((x - x0) / (ax[base + a + 1] - x0), 1.0)


@numba.njit(parallel=True, cache=True)
def render(vol, lut, fp, ip, ax, rgba, depth):
    """Ray cast `vol` into `rgba` (premultiplied, (H, W, 4)) and `depth` ((H, W)).

    `lut`: (N, 4) RGBA, opacity per unit length; `fp`, `ip`: the parameters (_params);
    `ax`: a rectilinear grid's coordinates, axis after axis (unused for uniform grids).
    """
    height, width = depth.shape
    step = fp[_STEP]
    nlut = ip[_NLUT]
    for r in numba.prange(height):
        y = (1.0 - 2.0 * (r + 0.5) / height) * fp[_TANY]
        for c in range(width):
            x = (2.0 * (c + 0.5) / width - 1.0) * fp[_TANX]
            d0 = fp[_FWD] + x * fp[_RIGHT] + y * fp[_UP]
            d1 = fp[_FWD + 1] + x * fp[_RIGHT + 1] + y * fp[_UP + 1]
            d2 = fp[_FWD + 2] + x * fp[_RIGHT + 2] + y * fp[_UP + 2]
            norm = math.sqrt(d0 * d0 + d1 * d1 + d2 * d2)
            d0 /= norm
            d1 /= norm
            d2 /= norm
            cosang = 1.0 / norm  # forward is orthogonal to right and up
            dd = (d0, d1, d2)
            t_in, t_out = fp[_NEAR] / cosang, fp[_FAR] / cosang
            for a in range(3):
                t_in, t_out = slab(fp[_EYE + a], dd[a], fp[_BNDLO + a], fp[_BNDHI + a], t_in, t_out)
            t_lo, t_hi = t_in, t_out
            for a in range(3):
                t_lo, t_hi = slab(fp[_EYE + a], dd[a], fp[_EXTLO + a], fp[_EXTHI + a], t_lo, t_hi)
            cr = cg = cb = ca = 0.0
            z = math.inf
            if t_lo < t_hi:
                k_first, k_last = first_k(t_in, step), first_k(t_out, step) - 1
                k_beg, k_end = first_k(t_lo, step), first_k(t_hi, step)
                # A chord shorter than the step holds no sample: give it one, in its middle.
                single = k_first > k_last
                t_mid = 0.5 * (t_in + t_out)
                if single:
                    k_beg, k_end = 0, 1 if t_lo <= t_mid < t_hi else 0
                # Index coordinate along axis a at parameter t: u0[a] + t * du[a].
                u00 = (fp[_EYE] - fp[_ORG]) * fp[_INVSP]
                u01 = (fp[_EYE + 1] - fp[_ORG + 1]) * fp[_INVSP + 1]
                u02 = (fp[_EYE + 2] - fp[_ORG + 2]) * fp[_INVSP + 2]
                du0, du1, du2 = d0 * fp[_INVSP], d1 * fp[_INVSP + 1], d2 * fp[_INVSP + 2]
                rect = ip[_RECT] != 0
                for k in range(k_beg, k_end):
                    t = t_mid if single else k * step
                    # Clamp to the cells this render may read: only rounding moves a sample out.
                    if rect:
                        i, fi = rect_cell(ax, ip[_AOFF], fp[_EYE] + t * d0, ip[_CLO], ip[_CHI])
                        j, fj = rect_cell(ax, ip[_AOFF + 1], fp[_EYE + 1] + t * d1, ip[_CLO + 1], ip[_CHI + 1])
                        m, fm = rect_cell(ax, ip[_AOFF + 2], fp[_EYE + 2] + t * d2, ip[_CLO + 2], ip[_CHI + 2])
                    else:
                        i, fi = cell(u00 + t * du0, ip[_CLO], ip[_CHI])
                        j, fj = cell(u01 + t * du1, ip[_CLO + 1], ip[_CHI + 1])
                        m, fm = cell(u02 + t * du2, ip[_CLO + 2], ip[_CHI + 2])
                    c00 = vol[i, j, m] + (vol[i, j, m + 1] - vol[i, j, m]) * fm
                    c01 = vol[i, j + 1, m] + (vol[i, j + 1, m + 1] - vol[i, j + 1, m]) * fm
                    c10 = vol[i + 1, j, m] + (vol[i + 1, j, m + 1] - vol[i + 1, j, m]) * fm
                    c11 = vol[i + 1, j + 1, m] + (vol[i + 1, j + 1, m + 1] - vol[i + 1, j + 1, m]) * fm
                    c0 = c00 + (c01 - c00) * fj
                    c1 = c10 + (c11 - c10) * fj
                    v = c0 + (c1 - c0) * fi
                    if not math.isfinite(v):
                        continue  # NaN (or inf) nearby: the sample is transparent
                    xl = min(max((v - fp[_VMIN]) * fp[_LUTSCALE], 0.0), nlut - 1.0)
                    n = min(int(xl), nlut - 2)
                    g = xl - n
                    op = lut[n, 3] + (lut[n + 1, 3] - lut[n, 3]) * g
                    if op <= 0.0:
                        continue
                    lo = t_in if single or k == k_first else t - 0.5 * step
                    hi = t_out if single or k == k_last else t + 0.5 * step
                    alpha = 1.0 - math.exp((hi - lo) * fp[_INVUNIT] * math.log1p(-op))
                    if z == math.inf:
                        z = t * cosang
                    w = (1.0 - ca) * alpha
                    cr += w * (lut[n, 0] + (lut[n + 1, 0] - lut[n, 0]) * g)
                    cg += w * (lut[n, 1] + (lut[n + 1, 1] - lut[n, 1]) * g)
                    cb += w * (lut[n, 2] + (lut[n + 1, 2] - lut[n, 2]) * g)
                    ca += w
                    if ca >= fp[_ET]:
                        break
            rest = 1.0 - ca
            rgba[r, c, 0] = cr + rest * fp[_BG]
            rgba[r, c, 1] = cg + rest * fp[_BG + 1]
            rgba[r, c, 2] = cb + rest * fp[_BG + 2]
            rgba[r, c, 3] = ca + rest * fp[_BG + 3]
            depth[r, c] = z
