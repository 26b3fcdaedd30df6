"""Numba kernels of the software rasterizer: the algorithm of _gpu.py (read its
docstring), serial over triangles and parallel over image rows for shading.

Everything is computed in float64 here; the CUDA kernels compute in float32. Both
cover a pixel by the same test, so they differ only by rounding at triangle edges.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from insitu.log import watch_jit

from ._params import OFF

watch_jit(__name__)  # a first call that compiles takes seconds: logged, so a slow first execute says why

_EMPTY = np.uint64(0xFFFFFFFFFFFFFFFF)
# Offsets into the parameter vector (module constants: Numba folds them).
ROT, SHIFT, TANX, TANY, NEAR, FAR = OFF["rot"], OFF["shift"], OFF["tanx"], OFF["tany"], OFF["near"], OFF["far"]
AMB, DIF, SPEC, SHINE = OFF["ambient"], OFF["diffuse"], OFF["specular"], OFF["shininess"]
COLOR, LIGHT, VMIN, VSCALE = OFF["color"], OFF["light"], OFF["vmin"], OFF["vscale"]
BG, USE_CMAP = OFF["bg"], OFF["use_cmap"]


@numba.njit(cache=True, inline="always")
def _eye(p, verts, i):
    x, y, z = verts[i, 0], verts[i, 1], verts[i, 2]
    return (p[ROT] * x + p[ROT + 1] * y + p[ROT + 2] * z + p[SHIFT],
            p[ROT + 3] * x + p[ROT + 4] * y + p[ROT + 5] * z + p[SHIFT + 1],
            p[ROT + 6] * x + p[ROT + 7] * y + p[ROT + 8] * z + p[SHIFT + 2])


@numba.njit(cache=True, inline="always")
def _cross(a, b):
    return (a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0])


@numba.njit(cache=True, inline="always")
def _edge(a, b, ia, ib):
    # The plane through the eye and edge a-b, computed from the lower vertex index first:
    # the two triangles sharing an edge get exactly opposite values (no cracks, no gaps).
    if ia < ib:
        return _cross(a, b)
    e = _cross(b, a)
    return (-e[0], -e[1], -e[2])


@numba.njit(cache=True, inline="always")
def _ray(p, w, h, c, r):
    return ((2.0 * c + 1.0) / w - 1.0) * p[TANX], (1.0 - (2.0 * r + 1.0) / h) * p[TANY], -1.0


@numba.njit(cache=True, inline="always")
def _dot(a, b):
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]


@numba.njit(cache=True)
def _triangle(p, verts, faces, t):
    i0, i1, i2 = faces[t, 0], faces[t, 1], faces[t, 2]
    v0, v1, v2 = _eye(p, verts, i0), _eye(p, verts, i1), _eye(p, verts, i2)
    return (v0, v1, v2), (_edge(v1, v2, i1, i2), _edge(v2, v0, i2, i0), _edge(v0, v1, i0, i1))


@numba.njit(cache=True, inline="always")
def _hit(e, zs, d):
    """(covered, w0, w1, w2, depth) of the ray `d` against a triangle."""
    w0, w1, w2 = _dot(d, e[0]), _dot(d, e[1]), _dot(d, e[2])
    s = w0 + w1 + w2
    inside = (w0 >= 0 and w1 >= 0 and w2 >= 0) or (w0 <= 0 and w1 <= 0 and w2 <= 0)
    if not inside or s == 0:
        return False, w0, w1, w2, 0.0
    return True, w0, w1, w2, (w0 * zs[0] + w1 * zs[1] + w2 * zs[2]) / s


@numba.njit(cache=True)
def _extend(box, x, y, z, p, w, h):
    c = (x / (z * p[TANX]) + 1.0) * w / 2 - 0.5
    r = (1.0 - y / (z * p[TANY])) * h / 2 - 0.5
    box[0] = min(box[0], c)
    box[1] = max(box[1], c)
    box[2] = min(box[2], r)
    box[3] = max(box[3], r)


@numba.njit(cache=True)
def raster(verts, faces, p, w, h, keys):
    """Visibility pass: ``keys[r, c]`` = min over covering triangles of (depth bits << 32 | index)."""
    near, far = p[NEAR], p[FAR]
    box = np.empty(4)
    for t in range(faces.shape[0]):
        v, e = _triangle(p, verts, faces, t)
        zs = (-v[0][2], -v[1][2], -v[2][2])
        if min(zs) > far or max(zs) < near:
            continue
        box[0], box[1], box[2], box[3] = np.inf, -np.inf, np.inf, -np.inf
        for a in range(3):
            b = (a + 1) % 3
            if zs[a] >= near:
                _extend(box, v[a][0], v[a][1], zs[a], p, w, h)
            if (zs[a] >= near) != (zs[b] >= near):  # the edge crosses the near plane
                f = (near - zs[a]) / (zs[b] - zs[a])
                _extend(box, v[a][0] + f * (v[b][0] - v[a][0]), v[a][1] + f * (v[b][1] - v[a][1]), near, p, w, h)
        c0, c1 = max(0, math.ceil(max(box[0], -1.0) - 0.01)), min(w - 1, math.floor(min(box[1], w) + 0.01))
        r0, r1 = max(0, math.ceil(max(box[2], -1.0) - 0.01)), min(h - 1, math.floor(min(box[3], h) + 0.01))
        for r in range(r0, r1 + 1):
            for c in range(c0, c1 + 1):
                ok, _, _, _, z = _hit(e, zs, _ray(p, w, h, c, r))
                if ok and near <= z <= far:
                    key = (np.uint64(np.float32(z).view(np.uint32)) << np.uint64(32)) | np.uint64(t)
                    if key < keys[r, c]:
                        keys[r, c] = key


@numba.njit(cache=True, parallel=True)
def shade(keys, verts, faces, normals, values, p, table, w, h, rgba, depth):
    """Shading pass: Phong (two-sided) and the colormap at each pixel's visible triangle."""
    for r in numba.prange(h):
        for c in range(w):
            key = keys[r, c]
            if key == _EMPTY:
                for a in range(4):
                    rgba[r, c, a] = p[BG + a]
                depth[r, c] = np.inf
                continue
            t = np.int64(key & np.uint64(0xFFFFFFFF))
            v, e = _triangle(p, verts, faces, t)
            zs = (-v[0][2], -v[1][2], -v[2][2])
            d = _ray(p, w, h, c, r)
            _, w0, w1, w2, z = _hit(e, zs, d)  # covered: the raster pass made the same test
            s = w0 + w1 + w2
            b = (w0 / s, w1 / s, w2 / s)
            i = (faces[t, 0], faces[t, 1], faces[t, 2])
            nw = [0.0, 0.0, 0.0]
            for a in range(3):
                nw[a] = b[0] * normals[i[0], a] + b[1] * normals[i[1], a] + b[2] * normals[i[2], a]
            n = (p[ROT] * nw[0] + p[ROT + 1] * nw[1] + p[ROT + 2] * nw[2],
                 p[ROT + 3] * nw[0] + p[ROT + 4] * nw[1] + p[ROT + 5] * nw[2],
                 p[ROT + 6] * nw[0] + p[ROT + 7] * nw[1] + p[ROT + 8] * nw[2])
            ln = math.sqrt(_dot(n, n))
            dn = math.sqrt(_dot(d, d))
            vv = (-d[0] / dn, -d[1] / dn, -d[2] / dn)
            sgn = 1.0 if _dot(n, vv) >= 0 else -1.0
            n = (sgn * n[0] / ln, sgn * n[1] / ln, sgn * n[2] / ln)
            if p[USE_CMAP] > 0:
                val = b[0] * values[i[0]] + b[1] * values[i[1]] + b[2] * values[i[2]]
                u = min(max((val - p[VMIN]) * p[VSCALE], 0.0), 1.0) * (table.shape[0] - 1)
                k = min(int(u), table.shape[0] - 2)
                g = u - k
                base = (table[k, 0] + (table[k + 1, 0] - table[k, 0]) * g,
                        table[k, 1] + (table[k + 1, 1] - table[k, 1]) * g,
                        table[k, 2] + (table[k + 1, 2] - table[k, 2]) * g)
            else:
                base = (p[COLOR], p[COLOR + 1], p[COLOR + 2])
            light = (p[LIGHT], p[LIGHT + 1], p[LIGHT + 2])
            dif = max(_dot(n, light), 0.0)
            spec = 0.0
            if dif > 0:
                hv = (light[0] + vv[0], light[1] + vv[1], light[2] + vv[2])
                hn = math.sqrt(_dot(hv, hv))
                spec = max(_dot(n, hv) / hn, 0.0) ** p[SHINE] if hn > 0 else 0.0
            for a in range(3):
                x = base[a] * (p[AMB] + p[DIF] * dif) + p[SPEC] * spec
                rgba[r, c, a] = np.floor(min(max(x, 0.0), 1.0) * 255.0 + 0.5) / 255.0  # RGBA8, as GL's
            rgba[r, c, 3] = 1.0
            depth[r, c] = z


@numba.njit(cache=True, inline="always")
def _clip_box(c0, r0, c1, r1, w, h):
    """Liang-Barsky: the parameters (u0, u1) of the segment's part inside the pixel centres'
    box [-0.5, w - 0.5] x [-0.5, h - 0.5] (u0 > u1: none)."""
    u0, u1 = 0.0, 1.0
    dc, dr = c1 - c0, r1 - r0
    for q, d in ((c0 + 0.5, -dc), (w - 0.5 - c0, dc), (r0 + 0.5, -dr), (h - 0.5 - r0, dr)):
        if d == 0.0:
            if q < 0.0:
                return 1.0, 0.0
        else:
            u = q / d
            if d < 0.0:
                u0 = max(u0, u)
            else:
                u1 = min(u1, u)
    return u0, u1


@numba.njit(cache=True)
def raster_lines(verts, segs, p, w, h, bias, keys):
    """Line pass: every segment, clipped to [near, far] and to the image, covers one pixel per
    step along its longer screen axis; ``keys[r, c]`` = min of (depth bits << 32 | segment),
    depth (1/z interpolated along the screen, so perspective-correct) times ``1 - bias``."""
    near, far = p[NEAR], p[FAR]
    for t in range(segs.shape[0]):
        a, b = _eye(p, verts, segs[t, 0]), _eye(p, verts, segs[t, 1])
        za, zb = -a[2], -b[2]
        s0, s1 = 0.0, 1.0
        dz = zb - za
        if dz == 0.0:
            if za < near or za > far:
                continue
        elif dz > 0.0:
            s0, s1 = max(s0, (near - za) / dz), min(s1, (far - za) / dz)
        else:
            s0, s1 = max(s0, (far - za) / dz), min(s1, (near - za) / dz)
        if s0 > s1:
            continue
        ends = np.empty((2, 3))
        for e, s in ((0, s0), (1, s1)):
            x, y, z = a[0] + s * (b[0] - a[0]), a[1] + s * (b[1] - a[1]), za + s * dz
            ends[e, 0] = (x / (z * p[TANX]) + 1.0) * w / 2 - 0.5
            ends[e, 1] = (1.0 - y / (z * p[TANY])) * h / 2 - 0.5
            ends[e, 2] = 1.0 / z
        u0, u1 = _clip_box(ends[0, 0], ends[0, 1], ends[1, 0], ends[1, 1], w, h)
        if u0 > u1:
            continue
        c0 = ends[0, 0] + u0 * (ends[1, 0] - ends[0, 0])
        r0 = ends[0, 1] + u0 * (ends[1, 1] - ends[0, 1])
        i0 = ends[0, 2] + u0 * (ends[1, 2] - ends[0, 2])
        c1 = ends[0, 0] + u1 * (ends[1, 0] - ends[0, 0])
        r1 = ends[0, 1] + u1 * (ends[1, 1] - ends[0, 1])
        i1 = ends[0, 2] + u1 * (ends[1, 2] - ends[0, 2])
        n = max(int(math.ceil(max(abs(c1 - c0), abs(r1 - r0)))), 1)
        for k in range(n + 1):
            u = k / n
            c, r = int(math.floor(c0 + u * (c1 - c0) + 0.5)), int(math.floor(r0 + u * (r1 - r0) + 0.5))
            if 0 <= c < w and 0 <= r < h:
                z = (1.0 - bias) / (i0 + u * (i1 - i0))
                key = (np.uint64(np.float32(z).view(np.uint32)) << np.uint64(32)) | np.uint64(t)
                if key < keys[r, c]:
                    keys[r, c] = key
