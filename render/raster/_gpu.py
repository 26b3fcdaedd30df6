"""CUDA kernels of the software rasterizer (a visibility buffer).

Pass 1 (``vis_raster``), one thread per triangle: the vertices go to eye space, the
triangle's pixel box is found (clipped at the near plane), and every pixel centre in it
is tested against the three planes through the eye and an edge; a covered pixel whose
depth lies in [near, far] takes ``atomicMin(depth bits << 32 | triangle)``: positive
floats order as their bits, so the nearest triangle wins (the lower index on a tie).
Triangles whose box is large are drawn by the whole warp, one pixel per lane, so a few
screen-filling triangles do not hold up a warp of tiny ones.

Pass 2 (``vis_shade``), one thread per pixel: the winning triangle's barycentric
coordinates along the pixel's ray (perspective-correct by construction), the normal and
value interpolated with them, Phong lighting and the colormap as the OpenGL fragment
shader of render/surface.py does, rounded to 8 bits as an RGBA8 framebuffer stores.

The edge planes are computed from the lower vertex index first and without fused
multiply-adds, so the two triangles sharing an edge see exactly opposite values there:
no pixel falls between them. The colormap is an argument: any table (N RGB samples),
uploaded once per contents and device (render.colormap.device_copy), so a new table costs
no compile and a frame needs nothing from the host but its parameters, passed by value.
"""

from __future__ import annotations

import functools

import numpy as np

from insitu import arrays
from insitu.log import get_logger

from ..colormap import device_copy, name_at, table
from ._params import cuda_struct, record

_log = get_logger(__name__)

#: Triangles whose pixel box exceeds this many pixels are drawn by a whole warp.
WARP_BOX = 32


def _source() -> str:
    return cuda_struct() + f"#define WARP_BOX {WARP_BOX}\n" + r"""
#define EMPTY 0xFFFFFFFFFFFFFFFFull

__device__ __forceinline__ float3 eye(const RP& p, const float* __restrict__ v, long long i) {
    const float x = v[3 * i], y = v[3 * i + 1], z = v[3 * i + 2];
    return make_float3(p.rot[0] * x + p.rot[1] * y + p.rot[2] * z + p.shift[0],
                       p.rot[3] * x + p.rot[4] * y + p.rot[5] * z + p.shift[1],
                       p.rot[6] * x + p.rot[7] * y + p.rot[8] * z + p.shift[2]);
}
__device__ __forceinline__ float3 cross3(float3 a, float3 b) {
    return make_float3(a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x);
}
__device__ __forceinline__ float dot3(float3 a, float3 b) { return a.x * b.x + a.y * b.y + a.z * b.z; }
__device__ __forceinline__ float3 edge(float3 a, float3 b, int ia, int ib) {
    if (ia < ib) return cross3(a, b);
    const float3 e = cross3(b, a);
    return make_float3(-e.x, -e.y, -e.z);
}
__device__ __forceinline__ float3 ray(const RP& p, int w, int h, int c, int r) {
    return make_float3(((2.f * c + 1.f) / w - 1.f) * p.tanx, (1.f - (2.f * r + 1.f) / h) * p.tany, -1.f);
}
struct Tri { float3 e0, e1, e2; float z0, z1, z2; };

__device__ __forceinline__ Tri triangle(const RP& p, const float* __restrict__ verts, int i0, int i1, int i2,
                                        float3& v0, float3& v1, float3& v2) {
    v0 = eye(p, verts, i0); v1 = eye(p, verts, i1); v2 = eye(p, verts, i2);
    Tri t;
    t.e0 = edge(v1, v2, i1, i2); t.e1 = edge(v2, v0, i2, i0); t.e2 = edge(v0, v1, i0, i1);
    t.z0 = -v0.z; t.z1 = -v1.z; t.z2 = -v2.z;
    return t;
}
__device__ __forceinline__ bool hit(const Tri& t, float3 d, float& w0, float& w1, float& w2, float& z) {
    w0 = dot3(d, t.e0); w1 = dot3(d, t.e1); w2 = dot3(d, t.e2);
    const float s = w0 + w1 + w2;
    const bool in = (w0 >= 0.f && w1 >= 0.f && w2 >= 0.f) || (w0 <= 0.f && w1 <= 0.f && w2 <= 0.f);
    if (!in || s == 0.f) return false;
    z = (w0 * t.z0 + w1 * t.z1 + w2 * t.z2) / s;
    return true;
}
__device__ __forceinline__ void extend(float4& box, float x, float y, float z, const RP& p, int w, int h) {
    const float c = (x / (z * p.tanx) + 1.f) * w / 2 - 0.5f, r = (1.f - y / (z * p.tany)) * h / 2 - 0.5f;
    box.x = fminf(box.x, c); box.y = fmaxf(box.y, c); box.z = fminf(box.z, r); box.w = fmaxf(box.w, r);
}
__device__ __forceinline__ void cover(const RP& p, const Tri& t, unsigned int id, int w, int h, int c, int r,
                                      unsigned long long* __restrict__ keys) {
    float w0, w1, w2, z;
    if (hit(t, ray(p, w, h, c, r), w0, w1, w2, z) && z >= p.near && z <= p.far)
        atomicMin(keys + (long long)r * w + c, ((unsigned long long)__float_as_uint(z) << 32) | id);
}

extern "C" __global__ void __launch_bounds__(256) vis_raster(const float* __restrict__ verts,
        const int* __restrict__ faces, const long long nf, const long long nv, const RP p, const int w,
        const int h, unsigned long long* __restrict__ keys) {
    const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    const int lane = threadIdx.x & 31;
    bool live = t < nf;
    int c0 = 0, c1 = -1, r0 = 0, r1 = -1;
    Tri tri;
    if (live) {
        const int i0 = faces[3 * t], i1 = faces[3 * t + 1], i2 = faces[3 * t + 2];
        // An index outside the vertices (caller's mesh) draws nothing rather than reading
        // foreign memory; host meshes are checked with a clear error before this.
        live = (unsigned long long)i0 < (unsigned long long)nv && (unsigned long long)i1 < (unsigned long long)nv
               && (unsigned long long)i2 < (unsigned long long)nv;
    }
    if (live) {
        const int i0 = faces[3 * t], i1 = faces[3 * t + 1], i2 = faces[3 * t + 2];
        float3 v[3];
        tri = triangle(p, verts, i0, i1, i2, v[0], v[1], v[2]);
        const float zs[3] = {tri.z0, tri.z1, tri.z2};
        if (fminf(fminf(zs[0], zs[1]), zs[2]) > p.far || fmaxf(fmaxf(zs[0], zs[1]), zs[2]) < p.near) {
            live = false;
        } else {
            const float inf = __int_as_float(0x7f800000);
            float4 box = make_float4(inf, -inf, inf, -inf);
            #pragma unroll
            for (int a = 0; a < 3; ++a) {
                const int b = (a + 1) % 3;
                if (zs[a] >= p.near) extend(box, v[a].x, v[a].y, zs[a], p, w, h);
                if ((zs[a] >= p.near) != (zs[b] >= p.near)) {  // the edge crosses the near plane
                    const float f = (p.near - zs[a]) / (zs[b] - zs[a]);
                    extend(box, v[a].x + f * (v[b].x - v[a].x), v[a].y + f * (v[b].y - v[a].y), p.near, p, w, h);
                }
            }
            c0 = max(0, (int)ceilf(fmaxf(box.x, -1.f) - 0.01f));
            c1 = min(w - 1, (int)floorf(fminf(box.y, (float)w) + 0.01f));
            r0 = max(0, (int)ceilf(fmaxf(box.z, -1.f) - 0.01f));
            r1 = min(h - 1, (int)floorf(fminf(box.w, (float)h) + 0.01f));
            live = c0 <= c1 && r0 <= r1;
        }
    }
    const bool big = live && (long long)(c1 - c0 + 1) * (r1 - r0 + 1) > WARP_BOX;
    if (live && !big)
        for (int r = r0; r <= r1; ++r)
            for (int c = c0; c <= c1; ++c) cover(p, tri, (unsigned int)t, w, h, c, r, keys);
    unsigned int queue = __ballot_sync(0xffffffffu, big);
    while (queue) {  // the warp's big triangles, one after another, a pixel per lane
        const int src = __ffs(queue) - 1;
        queue &= queue - 1;
        Tri s;
        s.e0 = make_float3(__shfl_sync(0xffffffffu, tri.e0.x, src), __shfl_sync(0xffffffffu, tri.e0.y, src),
                           __shfl_sync(0xffffffffu, tri.e0.z, src));
        s.e1 = make_float3(__shfl_sync(0xffffffffu, tri.e1.x, src), __shfl_sync(0xffffffffu, tri.e1.y, src),
                           __shfl_sync(0xffffffffu, tri.e1.z, src));
        s.e2 = make_float3(__shfl_sync(0xffffffffu, tri.e2.x, src), __shfl_sync(0xffffffffu, tri.e2.y, src),
                           __shfl_sync(0xffffffffu, tri.e2.z, src));
        s.z0 = __shfl_sync(0xffffffffu, tri.z0, src);
        s.z1 = __shfl_sync(0xffffffffu, tri.z1, src);
        s.z2 = __shfl_sync(0xffffffffu, tri.z2, src);
        const int bc0 = __shfl_sync(0xffffffffu, c0, src), bc1 = __shfl_sync(0xffffffffu, c1, src);
        const int br0 = __shfl_sync(0xffffffffu, r0, src), br1 = __shfl_sync(0xffffffffu, r1, src);
        const unsigned int id = (unsigned int)(t - lane + src);
        const int bw = bc1 - bc0 + 1;
        const long long n = (long long)bw * (br1 - br0 + 1);
        for (long long q = lane; q < n; q += 32)
            cover(p, s, id, w, h, bc0 + (int)(q % bw), br0 + (int)(q / bw), keys);
    }
}

extern "C" __global__ void __launch_bounds__(256) vis_shade(const unsigned long long* __restrict__ keys,
        const float* __restrict__ verts, const int* __restrict__ faces, const float* __restrict__ normals,
        const float* __restrict__ values, const float* __restrict__ cmap, const int cmap_n, const RP p,
        const int w, const int h, float4* __restrict__ rgba, float* __restrict__ depth) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y * blockDim.y + threadIdx.y;
    if (c >= w || r >= h) return;
    const long long o = (long long)r * w + c;
    const unsigned long long key = keys[o];
    if (key == EMPTY) {
        rgba[o] = make_float4(p.bg[0], p.bg[1], p.bg[2], p.bg[3]);
        depth[o] = __int_as_float(0x7f800000);
        return;
    }
    const long long t = (long long)(key & 0xFFFFFFFFull);
    const int i[3] = {faces[3 * t], faces[3 * t + 1], faces[3 * t + 2]};
    float3 v0, v1, v2;
    const Tri tri = triangle(p, verts, i[0], i[1], i[2], v0, v1, v2);
    const float3 d = ray(p, w, h, c, r);
    float w0, w1, w2, z;
    hit(tri, d, w0, w1, w2, z);  // covered: pass 1 made the same test bit for bit
    z = __uint_as_float((unsigned int)(key >> 32));
    const float s = w0 + w1 + w2;
    const float b[3] = {w0 / s, w1 / s, w2 / s};
    float nw[3] = {0.f, 0.f, 0.f};
    #pragma unroll
    for (int k = 0; k < 3; ++k)
        #pragma unroll
        for (int a = 0; a < 3; ++a) nw[a] += b[k] * normals[3LL * i[k] + a];
    float3 n = make_float3(p.rot[0] * nw[0] + p.rot[1] * nw[1] + p.rot[2] * nw[2],
                           p.rot[3] * nw[0] + p.rot[4] * nw[1] + p.rot[5] * nw[2],
                           p.rot[6] * nw[0] + p.rot[7] * nw[1] + p.rot[8] * nw[2]);
    const float ln = sqrtf(dot3(n, n)), dn = sqrtf(dot3(d, d));
    const float3 vv = make_float3(-d.x / dn, -d.y / dn, -d.z / dn);
    const float sg = dot3(n, vv) >= 0.f ? 1.f : -1.f;  // two-sided, as the fragment shader
    n = make_float3(sg * n.x / ln, sg * n.y / ln, sg * n.z / ln);
    float base[3] = {p.color[0], p.color[1], p.color[2]};
    if (p.use_cmap > 0.f) {
        const float val = b[0] * values[i[0]] + b[1] * values[i[1]] + b[2] * values[i[2]];
        const float u = fminf(fmaxf((val - p.vmin) * p.vscale, 0.f), 1.f) * (cmap_n - 1);
        const int k = min((int)u, cmap_n - 2);
        const float g = u - k;
        const float* tab = cmap + 3 * k;
        #pragma unroll
        for (int a = 0; a < 3; ++a) base[a] = tab[a] + (tab[a + 3] - tab[a]) * g;
    }
    const float3 light = make_float3(p.light[0], p.light[1], p.light[2]);
    const float dif = fmaxf(dot3(n, light), 0.f);
    float spec = 0.f;
    if (dif > 0.f) {
        const float3 hv = make_float3(light.x + vv.x, light.y + vv.y, light.z + vv.z);
        const float hn = sqrtf(dot3(hv, hv));
        if (hn > 0.f) spec = powf(fmaxf(dot3(n, hv) / hn, 0.f), p.shininess);
    }
    float out[3];
    #pragma unroll
    for (int a = 0; a < 3; ++a)
        out[a] = floorf(fminf(fmaxf(base[a] * (p.ambient + p.diffuse * dif) + p.specular * spec, 0.f), 1.f)
                        * 255.f + 0.5f) / 255.f;  // RGBA8, as the GL framebuffer stores it
    rgba[o] = make_float4(out[0], out[1], out[2], 1.f);
    depth[o] = z;
}

__device__ __forceinline__ bool clip_box(float c0, float r0, float c1, float r1, int w, int h, float& u0,
                                         float& u1) {
    u0 = 0.f; u1 = 1.f;
    const float q[4] = {c0 + 0.5f, w - 0.5f - c0, r0 + 0.5f, h - 0.5f - r0};
    const float d[4] = {c0 - c1, c1 - c0, r0 - r1, r1 - r0};
    #pragma unroll
    for (int i = 0; i < 4; ++i) {
        if (d[i] == 0.f) { if (q[i] < 0.f) return false; }
        else if (d[i] < 0.f) u0 = fmaxf(u0, q[i] / d[i]);
        else u1 = fminf(u1, q[i] / d[i]);
    }
    return u0 <= u1;
}

// One thread per segment: the algorithm of _cpu.raster_lines, in float32.
extern "C" __global__ void __launch_bounds__(256) vis_lines(const float* __restrict__ verts,
        const int* __restrict__ segs, const long long ns, const long long nv, const RP p, const int w, const int h,
        const float bias, unsigned long long* __restrict__ keys) {
    const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (t >= ns) return;
    const int ia = segs[2 * t], ib = segs[2 * t + 1];
    if ((unsigned long long)ia >= (unsigned long long)nv || (unsigned long long)ib >= (unsigned long long)nv) return;
    const float3 a = eye(p, verts, ia), b = eye(p, verts, ib);
    const float za = -a.z, dz = -b.z - za;
    float s0 = 0.f, s1 = 1.f;
    if (dz == 0.f) { if (za < p.near || za > p.far) return; }
    else if (dz > 0.f) { s0 = fmaxf(s0, (p.near - za) / dz); s1 = fminf(s1, (p.far - za) / dz); }
    else { s0 = fmaxf(s0, (p.far - za) / dz); s1 = fminf(s1, (p.near - za) / dz); }
    if (s0 > s1) return;
    float e[2][3];
    const float ss[2] = {s0, s1};
    #pragma unroll
    for (int k = 0; k < 2; ++k) {
        const float x = a.x + ss[k] * (b.x - a.x), y = a.y + ss[k] * (b.y - a.y), z = za + ss[k] * dz;
        e[k][0] = (x / (z * p.tanx) + 1.f) * w / 2 - 0.5f;
        e[k][1] = (1.f - y / (z * p.tany)) * h / 2 - 0.5f;
        e[k][2] = 1.f / z;
    }
    float u0, u1;
    if (!clip_box(e[0][0], e[0][1], e[1][0], e[1][1], w, h, u0, u1)) return;
    float q0[3], q1[3];
    #pragma unroll
    for (int i = 0; i < 3; ++i) {
        q0[i] = e[0][i] + u0 * (e[1][i] - e[0][i]);
        q1[i] = e[0][i] + u1 * (e[1][i] - e[0][i]);
    }
    const int n = max((int)ceilf(fmaxf(fabsf(q1[0] - q0[0]), fabsf(q1[1] - q0[1]))), 1);
    for (int k = 0; k <= n; ++k) {
        const float u = (float)k / n;
        const int c = (int)floorf(q0[0] + u * (q1[0] - q0[0]) + 0.5f);
        const int r = (int)floorf(q0[1] + u * (q1[1] - q0[1]) + 0.5f);
        if (c < 0 || c >= w || r < 0 || r >= h) continue;
        const float z = (1.f - bias) / (q0[2] + u * (q1[2] - q0[2]));
        atomicMin(keys + (long long)r * w + c, ((unsigned long long)__float_as_uint(z) << 32) | (unsigned int)t);
    }
}
"""


def source() -> tuple[str, list[str], tuple[str, ...]]:
    """The CUDA source of the rasterizer (extern "C" kernels: no instances to name) and
    the compile options. No fused multiply-adds: the edge planes of a shared edge must
    negate exactly."""
    return _source(), [], ("-std=c++14", "--fmad=false")


@functools.cache
def _module():
    return arrays.cuda_module(source(), "the rasterizer kernels", _log)


def render(verts, faces, normals, values, params: dict, width: int, height: int, rgba, depth, keys) -> None:
    """Rasterize into `rgba` ((H, W, 4) float32) and `depth` ((H, W) float32); `keys` is
    an (H, W) uint64 scratch buffer. Arrays are C-contiguous float32 / int32 CuPy arrays
    on one device; `values` may be None."""
    import cupy

    mod = _module()
    rec = record(params)
    keys.fill(np.uint64(0xFFFFFFFFFFFFFFFF))
    nf = len(faces)
    if nf:
        mod.get_function("vis_raster")((-(-nf // 256),), (256,), (verts, faces, np.int64(nf), np.int64(len(verts)),
                                                                   rec, np.int32(width), np.int32(height), keys))
    vals = values if values is not None else cupy.empty(1, cupy.float32)
    tab = device_copy(table(name_at(params["cmap"])), int(verts.device.id))  # once per table and device
    grid = (-(-width // 16), -(-height // 16))
    mod.get_function("vis_shade")(grid, (16, 16), (keys, verts, faces, normals, vals, tab, np.int32(len(tab)), rec,
                                                   np.int32(width), np.int32(height), rgba, depth))


def render_lines(verts, segments, params: dict, width: int, height: int, bias: float, keys) -> None:
    """Draw segments into `keys` ((H, W) uint64, filled here) as _cpu.raster_lines does:
    `verts` (V, 3) float32, `segments` (S, 2) int32, C-contiguous CuPy arrays on one device."""
    keys.fill(np.uint64(0xFFFFFFFFFFFFFFFF))
    ns = len(segments)
    if ns:
        _module().get_function("vis_lines")((-(-ns // 256),), (256,), (verts, segments, np.int64(ns),
                                                                     np.int64(len(verts)), record(params),
                                                                     np.int32(width), np.int32(height),
                                                                     np.float32(bias), keys))
