"""Benchmark: queries (adaptors.expressions over adaptors.queries.MeshData) on one uniform domain.

    python tests/gpu/bench_queries.py --cpu 64 128        # insitu vs NumPy one-liners and VTK
    python tests/gpu/bench_queries.py --gpu 128 256 384   # CuPy, CUDA events

An n^3 float64 vertex field with one ghost layer (the real part is a strided view, as in a
simulation's block). Each expression is evaluated whole (parsing cached) on one process:
``max(field('T'))`` (value and position) against NumPy's argmax plus the position, and
against VTK's GetRange (value only); ``histogram(field('T'), num_bins=256)`` against
``np.histogram`` and vtkImageAccumulate (on the real extent, bin range given); ``entropy(...)``
of it; ``avg(field('T'))`` against ``np.mean``. CPU: best of `--reps` wall times. GPU: CUDA
events around each evaluation after a warm-up, median of 5.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import commit, emit, host

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

EXPRS = ["max(field('T'))", "histogram(field('T'), num_bins=256)", "entropy(histogram(field('T'), num_bins=256))",
         "avg(field('T'))"]


def field(n: int) -> np.ndarray:
    x = np.linspace(-1, 1, n)
    return np.sin(3 * x[:, None, None]) * np.cos(2 * x[None, :, None]) + x[None, None, :] ** 2


def data(values):
    from adaptors.context import Context
    from adaptors.mesh import parse, uniform
    from adaptors.queries import MeshData

    return MeshData(parse(uniform({"T": values}, spacing=(0.1, 0.1, 0.1), ghost=1)), Context(None))


def best(fn, reps: int) -> float:
    fn()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return min(out) * 1e3


def references(T: np.ndarray):
    real = T[1:-1, 1:-1, 1:-1]
    lo, hi = float(real.min()), float(real.max())

    def np_max():
        k = np.unravel_index(np.argmax(real), real.shape)
        return real[k], np.asarray(k) * 0.1

    def np_hist():
        return np.histogram(real, 256, (lo, hi))[0]

    def np_entropy():
        c = np_hist()
        p = c[c > 0] / c.sum()
        return -(p * np.log(p)).sum()

    refs = {EXPRS[0]: [("NumPy argmax", np_max)], EXPRS[1]: [("np.histogram", np_hist)],
            EXPRS[2]: [("NumPy", np_entropy)], EXPRS[3]: [("np.mean", lambda: real.mean())]}
    try:
        import vtk
        from vtk.util import numpy_support

        vtk.vtkMultiThreader.SetGlobalMaximumNumberOfThreads(1)
        img = vtk.vtkImageData()
        img.SetDimensions(*T.shape)
        arr = numpy_support.numpy_to_vtk(np.ascontiguousarray(T.transpose(2, 1, 0)).ravel(), deep=True)
        img.GetPointData().SetScalars(arr)
        voi = vtk.vtkExtractVOI()
        voi.SetInputData(img)
        n = T.shape[0]
        voi.SetVOI(1, n - 2, 1, n - 2, 1, n - 2)
        voi.Update()
        sub = voi.GetOutput()

        def vtk_range():
            s = sub.GetPointData().GetScalars()
            s.Modified()  # else the range cached by the last call comes back
            return s.GetRange()

        acc = vtk.vtkImageAccumulate()
        acc.SetInputData(sub)
        acc.SetComponentExtent(0, 255, 0, 0, 0, 0)
        acc.SetComponentOrigin(lo, 0, 0)
        acc.SetComponentSpacing((hi - lo) / 256, 1, 1)

        def vtk_hist():
            acc.Modified()
            acc.Update()

        refs[EXPRS[0]].append(("VTK GetRange (no position)", vtk_range))
        refs[EXPRS[1]].append(("vtkImageAccumulate", vtk_hist))
    except ImportError:
        pass
    return refs


def run_cpu(sizes, reps: int, md: str | None) -> None:
    from adaptors.expressions import Env, evaluate

    lines = [f"### Queries, CPU ({host()}, commit {commit()}, {datetime.date.today()})", "",
             "| n^3 | expression | insitu ms | reference | reference ms |", "| --- | --- | --- | --- | --- |"]
    for n in sizes:
        T = field(n)
        d = data(T)
        refs = references(T)
        for e in EXPRS:
            ours = best(lambda: evaluate(e, Env(0, 0.0, d)), reps)
            for name, fn in refs[e]:
                lines.append(f"| {n} | `{e}` | {ours:.2f} | {name} | {best(fn, reps):.2f} |")
    emit("\n".join(lines) + "\n", md)


def run_gpu(sizes, md: str | None) -> None:
    import cupy

    from adaptors.expressions import Env, evaluate

    dev = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    lines = [f"### Queries, GPU ({dev}, commit {commit()}, {datetime.date.today()})", "",
             "| n^3 | expression | insitu ms (CUDA events, median of 5) |", "| --- | --- | --- |"]
    for n in sizes:
        d = data(cupy.asarray(field(n)))
        for e in EXPRS:
            evaluate(e, Env(0, 0.0, d))
            times = []
            for _ in range(5):
                a, b = cupy.cuda.Event(), cupy.cuda.Event()
                a.record()
                evaluate(e, Env(0, 0.0, d))
                b.record()
                b.synchronize()
                times.append(cupy.cuda.get_elapsed_time(a, b))
            lines.append(f"| {n} | `{e}` | {statistics.median(times):.3f} |")
    emit("\n".join(lines) + "\n", md)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", type=int, nargs="*", help="CPU sizes n (n^3 nodes)")
    ap.add_argument("--gpu", type=int, nargs="*", help="GPU sizes n")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--md", help="append the tables to this Markdown file")
    args = ap.parse_args()
    if args.cpu is None and args.gpu is None:
        args.cpu = [64, 128]
    if args.cpu:
        run_cpu(args.cpu, args.reps, args.md)
    if args.gpu:
        run_gpu(args.gpu, args.md)


if __name__ == "__main__":
    main()
