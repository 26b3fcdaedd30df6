"""Benchmark: rasterizing marching-cubes surfaces through CUDA-GL interop.

    python tests/gpu/bench_surface.py --n 545 1358 --size 1024 2048 [--md FILE]

The Mandelbulb isosurface at n^3 (545 -> ~10 M triangles, 1358 -> ~100 M) is written by
marching cubes straight into the renderer's GL buffers; then each frame is drawn with a
new camera angle and read back into CuPy arrays (colour and depth), median of 10 wall
times (glFinish and a device sync included).
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import commit, emit  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "examples"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[545, 1358])
    ap.add_argument("--size", type=int, nargs="+", default=[1024, 2048])
    ap.add_argument("--reps", type=int, default=10)
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
        for size in args.size:
            r = SurfaceRenderer(size, size)
            assert r.interop, r.ctx
            v, f, _ = marching_cubes(vol, 11.0, **geo)  # sizes only
            nv, nf = len(v), len(f)
            del v, f
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
                GL.glFinish()
                cp.cuda.runtime.deviceSynchronize()
                times.append(time.perf_counter() - t)
            cover = float((rgba[..., 3] > 0).mean())
            rows.append((n, nf, size, t_mc, float(np.median(times[1:])), cover))
            print(rows[-1], flush=True)
            r.close()
        del vol
        cp.get_default_memory_pool().free_all_blocks()
    dev = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    out = ["### Surface rendering, GPU: Mandelbulb isosurfaces through CUDA-GL interop", "",
           f"Device: {dev} (OpenGL {r.ctx.renderer}, {r.ctx.platform}); date {datetime.date.today()}; "
           f"commit {commit()}; command `python tests/gpu/bench_surface.py --n {' '.join(map(str, args.n))} "
           f"--size {' '.join(map(str, args.size))}`. Median of {args.reps} frames (draw + colour and depth into "
           "CuPy arrays, synchronized).", "",
           "| volume | triangles | image | marching cubes into GL buffers, ms | frame, ms | Mtriangles/s | "
           "pixels covered |", "| --- | ---: | --- | ---: | ---: | ---: | ---: |"]
    out += [f"| {n}^3 | {nf} | {s}^2 | {tm * 1e3:.1f} | {t * 1e3:.2f} | {nf / t / 1e6:.0f} | {c:.0%} |"
            for n, nf, s, tm, t, c in rows]
    text = "\n".join(out) + "\n"
    emit(text, args.md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
