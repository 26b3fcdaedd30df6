"""Mandelbulb volume and its isosurface (the paper's contouring workload).

    python examples/mandelbulb.py --n 128 --out out/mandelbulb.npz

The volume is a smoothed escape-time field of the power-8 Mandelbulb on [-1.2, 1.2]^3;
its isosurface comes from :func:`render.contour.marching_cubes`. Prints the number of
faces and the times; writes vertices, faces and normals to an .npz file.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from render.contour import marching_cubes


def mandelbulb(n: int, *, power: int = 8, iterations: int = 12, extent: float = 1.2) -> np.ndarray:
    """(n, n, n) float32 field: iterations survived before |z| > 2, smoothed.

    Values near `iterations` are inside the set; the surface at ``iterations - 1``
    is the usual picture.
    """
    if n < 2:
        raise ValueError(f"n must be >= 2, got {n}")
    x = np.linspace(-extent, extent, n)
    cx, cy, cz = np.meshgrid(x, x, x, indexing="ij")
    zx, zy, zz = cx.copy(), cy.copy(), cz.copy()
    out = np.full(cx.shape, float(iterations))
    alive = np.ones(cx.shape, bool)
    for it in range(iterations):
        r = np.sqrt(zx * zx + zy * zy + zz * zz)
        escaped = alive & (r > 2.0)
        # Smooth escape count: the fractional part from how far past 2 the radius went.
        out[escaped] = it + 1 - np.log(np.log(r[escaped]) / np.log(2.0)) / np.log(power)
        alive &= ~escaped
        theta = np.arccos(np.clip(zz / np.where(r > 0, r, 1), -1, 1))
        phi = np.arctan2(zy, zx)
        rp = r ** power
        zx = np.where(alive, rp * np.sin(power * theta) * np.cos(power * phi) + cx, zx)
        zy = np.where(alive, rp * np.sin(power * theta) * np.sin(power * phi) + cy, zy)
        zz = np.where(alive, rp * np.cos(power * theta) + cz, zz)
    return out.astype(np.float32)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=96)
    ap.add_argument("--iterations", type=int, default=12)
    ap.add_argument("--out", default="out/mandelbulb.npz")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    vol = mandelbulb(args.n, iterations=args.iterations)
    t1 = time.perf_counter()
    h = 2.4 / (args.n - 1)
    verts, faces, normals = marching_cubes(vol, args.iterations - 1.0, spacing=(h, h, h), origin=(-1.2,) * 3)
    t2 = time.perf_counter()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    np.savez_compressed(args.out, verts=verts, faces=faces, normals=normals)
    print(f"mandelbulb {args.n}^3: volume {t1 - t0:.2f} s, marching cubes {t2 - t1:.2f} s, "
          f"{len(verts)} vertices, {len(faces)} faces -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
