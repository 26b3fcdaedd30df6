"""Benchmark: rasterizing marching-cubes surfaces, OpenGL (CUDA-GL interop) against the
CUDA software rasterizer.

    python tests/gpu/bench_surface.py --n 545 1358 --size 1024 2048 [--rasterizer gl software] [--md FILE]

The Mandelbulb isosurface at n^3 (545 -> ~10 M triangles, 1358 -> ~100 M) is written by
marching cubes straight into the renderer's mesh buffers (GL buffers for "gl", CuPy
arrays for "software"); then each frame is drawn with a new camera angle into CuPy arrays
(colour and depth), median of 10 wall times (glFinish and a device sync included).
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import commit, emit

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "examples"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[545, 1358])
    ap.add_argument("--size", type=int, nargs="+", default=[1024, 2048])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--rasterizer", nargs="+", default=["gl", "software"], choices=["gl", "software"])
    ap.add_argument("--md")
    args = ap.parse_args(argv)
    import cupy as cp
    from mandelbulb import mandelbulb
    from OpenGL import GL

    from render.camera import Camera
    from render.contour import marching_cubes
    from render.surface import SurfaceRenderer

    rows = []
    for n in args.n:
        vol = mandelbulb(n, xp=cp)
        h = 2.4 / (n - 1)
        geo = dict(spacing=(h, h, h), origin=(-1.2,) * 3)
        v, f, _ = marching_cubes(vol, 11.0, **geo)  # sizes only
        nv, nf = len(v), len(f)
        del v, f
        for size, rast in [(s, k) for s in args.size for k in args.rasterizer]:
            r = SurfaceRenderer(size, size, rast)
            assert rast != "gl" or r.interop, r.ctx
            t0 = time.perf_counter()
            with r.mesh_buffers(nv, nf) as (bv, bf, bn, _):
                marching_cubes(vol, 11.0, out=(bv, bf, bn), **geo)
            cp.cuda.runtime.deviceSynchronize()
            t_mc = time.perf_counter() - t0
            box = (-1.2, 1.2) * 3
            times = []
            for k in range(args.reps + 1):
                cam = Camera.fit(box, azimuth=10 * k, elevation=20)
                t = time.perf_counter()
                rgba, depth = r.draw(nf, camera=cam, bounds=box, device=True)
                if rast == "gl":
                    GL.glFinish()
                cp.cuda.runtime.deviceSynchronize()
                times.append(time.perf_counter() - t)
            cover = float((rgba[..., 3] > 0).mean())
            rows.append((n, nf, size, rast, t_mc, float(np.median(times[1:])), cover))
            print(rows[-1], flush=True)
            r.close()
        del vol
        cp.get_default_memory_pool().free_all_blocks()
    dev = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    from render.gl import get_context

    ctx = get_context() if "gl" in args.rasterizer else None
    gl = f" (OpenGL {ctx.renderer}, {ctx.platform})" if ctx else ""
    out = ["### Surface rendering, GPU: Mandelbulb isosurfaces, OpenGL (interop) vs CUDA software rasterizer", "",
           f"Device: {dev}{gl}; date {datetime.date.today()}; "
           f"commit {commit()}; command `python tests/gpu/bench_surface.py --n {' '.join(map(str, args.n))} "
           f"--size {' '.join(map(str, args.size))} --rasterizer {' '.join(args.rasterizer)}`. Median of "
           f"{args.reps} frames (draw + colour and depth into CuPy arrays, synchronized).", "",
           "| volume | triangles | image | rasterizer | marching cubes into mesh buffers, ms | frame, ms | "
           "Mtriangles/s | pixels covered |", "| --- | ---: | --- | --- | ---: | ---: | ---: | ---: |"]
    out += [f"| {n}^3 | {nf} | {s}^2 | {k} | {tm * 1e3:.1f} | {t * 1e3:.2f} | {nf / t / 1e6:.0f} | {c:.0%} |"
            for n, nf, s, k, tm, t, c in rows]
    text = "\n".join(out) + "\n"
    emit(text, args.md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
