"""Benchmark: volume ray casting of the Mandelbulb field (float32, n^3 samples).

    python tests/gpu/bench_volume.py --gpu 512 1024 --res 1024 2048
    python tests/gpu/bench_volume.py --cpu 64 128 --res 128 256

GPU: CUDA events around the whole ``ray_cast`` call (allocation of the images
included) after a warm-up call, median of 5. CPU (Numba): best of 3 wall times after a
compile call. Each size is timed with the default early ray termination (0.99) and
with none (1.0); "samples" is the number the rays take without termination (their
chords in the volume divided by the step), so samples/s with termination off is the
kernel's sampling rate. Camera: Camera.fit, azimuth 30, elevation 20; step half a
cell; transfer function: inferno over 0..12 with opacity per cell rising from 0 at 6
to 0.02 at 10, 0.1 at 11 and 0.4 at 12 (the solid interior).
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

EXTENT = 1.2  # mandelbulb's half width


def scene(n):
    """(camera, spacing, origin, transfer function) for an n^3 grid."""
    from render.camera import Camera
    from render.volume import TransferFunction

    sp = 2 * EXTENT / (n - 1)
    bounds = (-EXTENT, EXTENT) * 3
    cam = Camera.fit(bounds, azimuth=30, elevation=20)
    tf = TransferFunction.from_colormap("inferno", 0.0, 12.0,
                                        opacity=[(6.0, 0.0), (10.0, 0.02), (11.0, 0.1), (12.0, 0.4)])
    return cam, (sp,) * 3, (-EXTENT,) * 3, tf


def samples(cam, res, n) -> int:
    """Samples the rays of a res x res image take in the box without early termination."""
    eye, d = cam.rays(res, res, np.float64)
    with np.errstate(divide="ignore"):
        t1, t2 = (-EXTENT - eye) / d, (EXTENT - eye) / d
    t_in = np.maximum(np.minimum(t1, t2).max(axis=2), 0)
    t_out = np.maximum(t1, t2).min(axis=2)
    step = 0.5 * 2 * EXTENT / (n - 1)
    return int(np.sum(np.maximum(t_out - t_in, 0) / step))


def table(title, device, command, how, rows):
    out = [f"### Volume ray casting, {title}: Mandelbulb field, float32", "",
           f"Device: {device}; date {datetime.date.today()}; commit {commit()}; command `{command}`. {how}", "",
           "| grid | image | samples / frame (no termination) | ms (early termination 0.99) | "
           "ms (no termination) | Mrays/s (0.99) | Gsamples/s (no termination) |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    out += [f"| {n}^3 | {r}^2 | {s / 1e6:.3g} M | {t * 1e3:.2f} | {tf * 1e3:.2f} | {r * r / t / 1e6:.3g} | "
            f"{s / tf / 1e9:.3g} |" for n, r, s, t, tf in rows]
    return "\n".join(out) + "\n"


def cpu(sizes, resolutions):
    import numba
    from mandelbulb import mandelbulb

    from render.volume import ray_cast

    rows = []
    for n in sizes:
        vol = mandelbulb(n)
        cam, sp, org, tf = scene(n)
        ray_cast(vol, cam, 8, 8, tf, spacing=sp, origin=org)  # compile
        for res in resolutions:
            times = {}
            for et in (0.99, 1.0):
                best = float("inf")
                for _ in range(3):
                    t = time.perf_counter()
                    ray_cast(vol, cam, res, res, tf, spacing=sp, origin=org, early_termination=et)
                    best = min(best, time.perf_counter() - t)
                times[et] = best
            rows.append((n, res, samples(cam, res, n), times[0.99], times[1.0]))
            print(rows[-1], flush=True)
    device = f"this project's CPU machine ({os.cpu_count()} cores, Numba {numba.__version__} with " \
             f"{numba.config.NUMBA_NUM_THREADS} threads)"
    return table("CPU (Numba)", device, "python " + " ".join(sys.argv), "Best of 3.", rows)


def gpu(sizes, resolutions, reps=5):
    import cupy as cp
    from mandelbulb import mandelbulb

    from render.volume import ray_cast

    dev = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    rows = []
    for n in sizes:
        vol = mandelbulb(n, xp=cp)
        cam, sp, org, tf = scene(n)
        for res in resolutions:
            times = {}
            for et in (0.99, 1.0):
                ts = []
                for _ in range(reps + 1):  # the first: compile, upload the table
                    a, b = cp.cuda.Event(), cp.cuda.Event()
                    a.record()
                    rgba, depth = ray_cast(vol, cam, res, res, tf, spacing=sp, origin=org, early_termination=et)
                    b.record()
                    b.synchronize()
                    ts.append(cp.cuda.get_elapsed_time(a, b) * 1e-3)
                    del rgba, depth
                times[et] = float(np.median(ts[1:]))
            rows.append((n, res, samples(cam, res, n), times[0.99], times[1.0]))
            print(rows[-1], flush=True)
        del vol
        cp.get_default_memory_pool().free_all_blocks()
    return table("GPU", dev, "python " + " ".join(sys.argv),
                 f"Median of {reps}, CUDA events around the whole call.", rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", type=int, nargs="*", default=[], help="grid sizes n (n^3 samples) on the CPU")
    ap.add_argument("--gpu", type=int, nargs="*", default=[], help="grid sizes n on the GPU")
    ap.add_argument("--res", type=int, nargs="+", default=None,
                    help="image sizes (square); default 1024 2048 on the GPU, 128 on the CPU")
    ap.add_argument("--md", help="append the tables to this Markdown file")
    args = ap.parse_args(argv)
    if not (args.cpu or args.gpu):
        ap.error("name sizes with --cpu and/or --gpu")
    parts = []
    if args.cpu:
        parts.append(cpu(args.cpu, args.res or [128]))
    if args.gpu:
        parts.append(gpu(args.gpu, args.res or [1024, 2048]))
    text = "\n".join(parts)
    emit(text, args.md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
