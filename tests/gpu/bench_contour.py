"""Benchmark: marching cubes on the Mandelbulb volume (the paper's contouring workload).

    python tests/gpu/bench_contour.py --cpu 128 256          # Numba vs scikit-image, VTK
    python tests/gpu/bench_contour.py --gpu 256 512 1024 [2048]
    python tests/gpu/bench_contour.py --parts 1024              # time of each GPU kernel

CPU: best of 10 wall times of insitu (Numba), scikit-image's marching_cubes (lewiner and
lorensen) and VTK's vtkFlyingEdges3D (normals on) on the same float32 volume and level;
insitu and VTK each on one thread (Numba's set_num_threads(1), VTK's Sequential SMP
backend, its default in the wheel) and on all cores (VTK's STDThread backend).
GPU: the whole call (two passes, scan, three scalar reads, allocation of the mesh) timed
with CUDA events after warm-up, median of 5; set against a device-to-device copy of the
volume in the same run (one read of the volume at copy bandwidth = half that copy). Where
NVIDIA Warp is installed, its ``wp.geometry.IsoSurfaceMarchingCubes`` runs on the same
CuPy volume (shared through DLPack) in the same process, timed alike.
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

LEVEL = 11.0  # iterations - 1: the usual Mandelbulb surface


def best_of(f, reps=3):
    best, res = float("inf"), None
    for _ in range(reps):
        t = time.perf_counter()
        res = f()
        best = min(best, time.perf_counter() - t)
    return best, res


def vtk_flying_edges(vol, level):
    import vtk
    from vtk.util import numpy_support

    img = vtk.vtkImageData()
    img.SetDimensions(*vol.shape[::-1])  # VTK's x is the fastest axis: our last
    img.GetPointData().SetScalars(numpy_support.numpy_to_vtk(vol.ravel(), deep=False))
    fe = vtk.vtkFlyingEdges3D()
    fe.SetInputData(img)
    fe.SetValue(0, level)
    fe.ComputeNormalsOn()
    fe.ComputeScalarsOff()

    def run():
        fe.Modified()
        fe.Update()
        return fe.GetOutput().GetNumberOfPolys()
    return run


def cpu(sizes, reps=10):
    import numba
    import skimage
    import vtk
    from mandelbulb import mandelbulb
    from skimage import measure

    from render.contour import marching_cubes

    smp = vtk.vtkSMPTools
    backend = smp.GetBackend()
    if not smp.SetBackend("STDThread"):
        raise RuntimeError(f"VTK {vtk.vtkVersion.GetVTKVersion()}: no STDThread SMP backend to compare threaded")
    vtk_threads = smp.GetEstimatedNumberOfThreads()
    nthreads = numba.get_num_threads()

    def timed(f, threads, vtk_backend=None):
        numba.set_num_threads(threads)
        if vtk_backend:
            smp.SetBackend(vtk_backend)
        try:
            return best_of(f, reps)
        finally:
            numba.set_num_threads(nthreads)
            smp.SetBackend(backend)

    rows = []
    for n in sizes:
        vol = mandelbulb(n)
        marching_cubes(vol[:8, :8, :8], LEVEL)  # compile
        ours1, _ = timed(lambda: marching_cubes(vol, LEVEL), 1)
        ours, (v, f, _) = timed(lambda: marching_cubes(vol, LEVEL), nthreads)
        lew, _ = best_of(lambda: measure.marching_cubes(vol, LEVEL), reps)
        lor, (sv, _, _, _) = best_of(lambda: measure.marching_cubes(vol, LEVEL, method="lorensen"), reps)
        fe1, nfe = timed(vtk_flying_edges(vol, LEVEL), 1, "Sequential")
        fe, _ = timed(vtk_flying_edges(vol, LEVEL), nthreads, "STDThread")
        assert len(v) == len(sv), (len(v), len(sv))  # lewiner adds vertices inside some cubes
        rows.append((n, len(f), ours1, ours, lew, lor, fe1, fe, nfe))
        print(rows[-1], flush=True)
    out = ["### Marching cubes, CPU: Mandelbulb volume, float32, level 11", "",
           f"Device: this project's CPU machine ({os.cpu_count()} cores; Numba {numba.__version__}, "
           f"{numba.threading_layer()} threading layer; scikit-image {skimage.__version__}; VTK "
           f"{vtk.vtkVersion.GetVTKVersion()}, SMP backends Sequential (1 thread) and STDThread ({vtk_threads} "
           f"threads)); date {datetime.date.today()}; commit {commit()}; command "
           f"`python tests/gpu/bench_contour.py --cpu {' '.join(map(str, sizes))}`. Best of {reps}; "
           f"threaded columns on {nthreads} threads; scikit-image is single-threaded.", "",
           f"| grid | triangles | insitu (Numba) 1 thread, ms | VTK FlyingEdges3D 1 thread, ms | "
           f"insitu {nthreads} threads, ms | VTK {nthreads} threads, ms | skimage lewiner, ms | "
           "skimage lorensen, ms | insitu Mvoxels/s | insitu Mtriangles/s | speed-up vs lewiner |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    out += [f"| {n}^3 | {nf} | {a1 * 1e3:.1f} | {d1 * 1e3:.1f} | {a * 1e3:.1f} | {d * 1e3:.1f} | "
            f"{b * 1e3:.1f} | {c * 1e3:.1f} | {n ** 3 / a / 1e6:.0f} | {nf / a / 1e6:.1f} | {b / a:.1f}x |"
            for n, nf, a1, a, b, c, d1, d, _ in rows]
    return "\n".join(out) + "\n"


def warp_surface(vol, level):
    """A function running Warp's marching cubes on the CuPy volume (no copy), returning
    its triangle count; None where Warp is not installed."""
    try:
        import warp as wp
        import warp.geometry  # a submodule: `import warp` does not load it
    except ImportError:
        return None
    wp.config.quiet = True
    wp.init()
    field = wp.from_dlpack(vol)
    mc = wp.geometry.IsoSurfaceMarchingCubes(*vol.shape)

    def run():
        mc.surface(field, level)
        wp.synchronize_device()
        return len(mc.indices) // 3
    return run


def warp_time(vol, level, reps):
    """Median seconds of Warp's marching cubes on `vol` (wall clock, synchronized), its
    triangles, or a reason it gave none."""
    import cupy as cp

    run = warp_surface(vol, level)
    if run is None:
        return "not installed"
    try:
        run()
        ts = []
        for _ in range(reps):
            cp.cuda.Device().synchronize()
            t = time.perf_counter()
            nf = run()
            ts.append(time.perf_counter() - t)
        return float(np.median(ts)), nf
    except Exception as e:  # Warp's own limits (32-bit sizes): reported in the table
        return f"fails ({type(e).__name__}: {str(e)[:80]})"


def gpu(sizes, reps=5):
    import cupy as cp
    from mandelbulb import mandelbulb

    from render.contour import marching_cubes

    dev = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    rows, peers = [], []
    for n in sizes:
        vol = mandelbulb(n, xp=cp)
        scratch = cp.empty_like(vol)
        marching_cubes(vol[:40, :40, :40], LEVEL)  # compile
        times, copies = [], []
        for _ in range(reps + 1):
            a, b = cp.cuda.Event(), cp.cuda.Event()
            a.record()
            cp.copyto(scratch, vol)
            b.record()
            b.synchronize()
            copies.append(cp.cuda.get_elapsed_time(a, b) * 1e-3)
            a.record()
            v, f, nrm = marching_cubes(vol, LEVEL)
            b.record()
            b.synchronize()
            times.append(cp.cuda.get_elapsed_time(a, b) * 1e-3)
            del v, nrm
            nf = len(f)
            del f
        t, tc = float(np.median(times[1:])), float(np.median(copies[1:]))
        bw = 2 * vol.nbytes / tc
        rows.append((n, nf, t, tc, bw, t / (tc / 2)))
        print(rows[-1], flush=True)
        peers.append((n, t, nf, warp_time(vol, LEVEL, reps)))
        print(peers[-1], flush=True)
        del vol, scratch
        cp.get_default_memory_pool().free_all_blocks()
    out = ["### Marching cubes, GPU: Mandelbulb volume, float32, level 11", "",
           f"Device: {dev}; date {datetime.date.today()}; commit {commit()}; command "
           f"`python tests/gpu/bench_contour.py --gpu {' '.join(map(str, sizes))}`. Median of {reps}, CUDA events "
           "around the whole call; copy = device-to-device copy of the volume in the same run.", "",
           "| grid | triangles | marching cubes, ms | Gvoxels/s | Mtriangles/s | volume copy, ms (GB/s) | "
           "time / one read at copy bandwidth (target <= 3.5) |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    out += [f"| {n}^3 | {nf} | {t * 1e3:.2f} | {n ** 3 / t / 1e9:.1f} | {nf / t / 1e6:.0f} | "
            f"{tc * 1e3:.2f} ({bw / 1e9:.0f}) | {r:.1f} |" for n, nf, t, tc, bw, r in rows]
    out += ["", "The GPU peer in the same process (NVIDIA Warp's `wp.geometry.IsoSurfaceMarchingCubes`, wall "
            "clock around `surface()` and a device synchronize, median of the same runs):", "",
            "| grid | insitu, ms | insitu triangles | Warp, ms | Warp triangles |",
            "| --- | ---: | ---: | ---: | ---: |"]
    out += [f"| {n}^3 | {t * 1e3:.2f} | {nf} | " + (f"{w[0] * 1e3:.2f} | {w[1]} |" if isinstance(w, tuple)
                                                     else f"{w} | - |") for n, t, nf, w in peers]
    return "\n".join(out) + "\n"


def parts(sizes, reps=7):
    """Median time of each kernel launch (CUDA events around each, so the launches do
    not overlap) and of the whole call, per grid size."""
    import collections

    import cupy as cp
    from mandelbulb import mandelbulb

    from insitu import ranges
    from render.contour import _gpu, marching_cubes

    launch, summarize = _gpu._kernel, ranges._gpu_ranges
    times = collections.defaultdict(list)

    def timed(kind, dtype=None, listed=None):
        f = launch(kind, dtype, listed)

        def run(*args):
            a, b = cp.cuda.Event(), cp.cuda.Event()
            a.record()
            f(*args)
            b.record()
            b.synchronize()
            times[kind].append(cp.cuda.get_elapsed_time(a, b))
        return run

    def timed_ranges(*args):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        summarize(*args)
        b.record()
        b.synchronize()
        times["ranges"].append(cp.cuda.get_elapsed_time(a, b))

    dev = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    rows = []
    for n in sizes:
        vol = mandelbulb(n, xp=cp)
        marching_cubes(vol, LEVEL)
        times.clear()
        _gpu._kernel, ranges._gpu_ranges = timed, timed_ranges
        try:
            for _ in range(reps):
                a, b = cp.cuda.Event(), cp.cuda.Event()
                a.record()
                marching_cubes(vol, LEVEL)
                b.record()
                b.synchronize()
                times["whole call"].append(cp.cuda.get_elapsed_time(a, b))
        finally:
            _gpu._kernel, ranges._gpu_ranges = launch, summarize
        rows.append((n, {k: float(np.median(v)) for k, v in times.items()}))
        print(rows[-1], flush=True)
        del vol
        cp.get_default_memory_pool().free_all_blocks()
    kinds = ["ranges", "units", "list", "count", "count4", "walk", "vertex", "whole call"]
    out = ["### Marching cubes, GPU: time per kernel, Mandelbulb volume, float32, level 11", "",
           f"Device: {dev}; date {datetime.date.today()}; commit {commit()}; command "
           f"`python tests/gpu/bench_contour.py --parts {' '.join(map(str, sizes))}`. Median of {reps}; each "
           "launch waited for (the whole call is the longer for it).", "",
           "| grid | " + " | ".join(f"{k}, ms" for k in kinds) + " |", "| --- |" + " ---: |" * len(kinds)]
    out += [f"| {n}^3 | " + " | ".join(f"{t.get(k, 0.0):.2f}" for k in kinds) + " |" for n, t in rows]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", type=int, nargs="*", default=[])
    ap.add_argument("--gpu", type=int, nargs="*", default=[])
    ap.add_argument("--parts", type=int, nargs="*", default=[])
    ap.add_argument("--md", help="append the tables to this Markdown file")
    args = ap.parse_args(argv)
    text = (cpu(args.cpu) if args.cpu else "") + ("\n" if args.cpu and args.gpu else "") + \
        (gpu(args.gpu) if args.gpu else "") + (parts(args.parts) if args.parts else "")
    emit(text, args.md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
