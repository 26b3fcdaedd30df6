"""Mandelbulb volume and its isosurface (the paper's contouring workload).

    python examples/mandelbulb.py --n 128 --out out/mandelbulb.npz [--gpu]

The volume is a smoothed escape-time field of the power-8 Mandelbulb on [-1.2, 1.2]^3;
its isosurface comes from :func:`render.contour.marching_cubes`. Prints the number of
faces and the times; writes vertices, faces and normals to an .npz file.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from insitu import arrays
from render.contour import marching_cubes


def mandelbulb(n: int, *, power: int = 8, iterations: int = 12, extent: float = 1.2, xp=np,
               slab: int = 32):
    """(n, n, n) float32 field: iterations survived before |z| > 2, smoothed.

    Values near `iterations` are inside the set; the surface at ``iterations - 1``
    is the usual picture. `xp` (NumPy or CuPy) is where it is computed and kept,
    `slab` planes at a time so the temporaries stay small.
    """
    if n < 2:
        raise ValueError(f"n must be >= 2, got {n}")
    out = xp.empty((n, n, n), xp.float32)
    x = xp.linspace(-extent, extent, n, dtype=xp.float32)
    for s0 in range(0, n, slab):
        cx, cy, cz = xp.meshgrid(x[s0:s0 + slab], x, x, indexing="ij")
        out[s0:s0 + slab] = _escape(cx, cy, cz, power, iterations, xp)
    return out


def _escape(cx, cy, cz, power, iterations, xp):
    zx, zy, zz = cx.copy(), cy.copy(), cz.copy()
    out = xp.full(cx.shape, float(iterations), xp.float32)
    alive = xp.ones(cx.shape, bool)
    for it in range(iterations):
        r = xp.sqrt(zx * zx + zy * zy + zz * zz)
        escaped = alive & (r > 2.0)
        # Smooth escape count: the fractional part from how far past 2 the radius went.
        smooth = it + 1 - xp.log(xp.log(xp.maximum(r, 2.0)) / np.log(2.0)) / np.log(power)
        out = xp.where(escaped, smooth, out)
        alive &= ~escaped
        theta = xp.arccos(xp.clip(zz / xp.where(r > 0, r, 1), -1, 1))
        phi = xp.arctan2(zy, zx)
        rp = r ** power
        zx = xp.where(alive, rp * xp.sin(power * theta) * xp.cos(power * phi) + cx, zx)
        zy = xp.where(alive, rp * xp.sin(power * theta) * xp.sin(power * phi) + cy, zy)
        zz = xp.where(alive, rp * xp.cos(power * theta) + cz, zz)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=96)
    ap.add_argument("--iterations", type=int, default=12)
    ap.add_argument("--out", default="out/mandelbulb.npz")
    ap.add_argument("--gpu", action="store_true", help="compute on the GPU (CuPy), mesh left there until saved")
    args = ap.parse_args(argv)
    xp = np
    if args.gpu:
        import cupy as xp
    t0 = time.perf_counter()
    vol = mandelbulb(args.n, iterations=args.iterations, xp=xp)
    t1 = time.perf_counter()
    h = 2.4 / (args.n - 1)
    verts, faces, normals = marching_cubes(vol, args.iterations - 1.0, spacing=(h, h, h), origin=(-1.2,) * 3)
    t2 = time.perf_counter()
    if args.gpu:
        verts, faces, normals = (arrays.to_host(a) for a in (verts, faces, normals))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    np.savez_compressed(args.out, verts=verts, faces=faces, normals=normals)
    print(f"mandelbulb {args.n}^3: volume {t1 - t0:.2f} s, marching cubes {t2 - t1:.2f} s, "
          f"{len(verts)} vertices, {len(faces)} faces -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
