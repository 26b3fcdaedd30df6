"""Benchmark: clip and threshold of unstructured meshes (render.cells) against VTK.

    python tests/gpu/bench_cells_clip.py --cpu 32 64          # ours (NumPy) vs VTK, one thread
    python tests/gpu/bench_cells_clip.py --gpu 64 128 192     # ours on CuPy arrays

Meshes: the n^3 hexahedra of a rectilinear grid on [0, 1]^3, and their 6 n^3 tetrahedra
(our split). Operations: clip by an oblique plane through the centre (keeps about half),
clip by a curved point field (the same cut count order as the plane), threshold by a point
field (all points in range). CPU: best of 5 CPU times, ours on NumPy arrays (Numba
kernels, one thread) against VTK's
vtkTableBasedClipDataSet (plane as a vtkPlane, field as point scalars) and vtkThreshold with
VTK's Sequential SMP backend (one thread); the VTK input is built once, outside the timing.
GPU: the whole call on CuPy arrays timed with CUDA events after a warm-up, median of 5.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import best_of, commit, emit, host

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from render.cells import TETRA, cell_mesh, grid_cells  # noqa: E402
from render.cells.clip import clip, clip_plane  # noqa: E402
from render.cells.measure import simplices  # noqa: E402
from render.cells.threshold import threshold  # noqa: E402

ORIGIN, NORMAL = (0.5, 0.5, 0.5), (0.3, 0.5, 0.8)


def meshes(n: int):
    ax = np.linspace(0.0, 1.0, n + 1)
    h = grid_cells(ax, ax, ax)
    t = cell_mesh(h.points, simplices(h)[0].ravel(), TETRA)
    return {"hex": h, "tet": t}


def field(p):
    return np.sin(6 * p[:, 0]) * np.cos(5 * p[:, 1]) + p[:, 2] - 0.5


def best_cpu(f, reps=5):
    """Best CPU time of the process (both sides run on one thread: on a shared machine
    this is steadier than wall time and the same when it is idle)."""
    return best_of(f, reps, clock=time.process_time)


def vtk_runs(mesh, s):
    import vtk
    from vtk.util import numpy_support as ns

    vtk.vtkSMPTools.SetBackend("Sequential")
    ug = vtk.vtkUnstructuredGrid()
    pts = vtk.vtkPoints()
    pts.SetData(ns.numpy_to_vtk(mesh.points, deep=True))
    ug.SetPoints(pts)
    ca = vtk.vtkCellArray()
    ca.SetData(ns.numpy_to_vtkIdTypeArray(mesh.offsets.astype(np.int64), deep=True),
               ns.numpy_to_vtkIdTypeArray(mesh.connectivity.astype(np.int64), deep=True))
    ug.SetCells(ns.numpy_to_vtk(mesh.types, deep=True, array_type=vtk.VTK_UNSIGNED_CHAR), ca)
    a = ns.numpy_to_vtk(s, deep=True)
    a.SetName("s")
    ug.GetPointData().SetScalars(a)

    def plane():
        f = vtk.vtkTableBasedClipDataSet()
        f.SetInputData(ug)
        p = vtk.vtkPlane()
        p.SetOrigin(*ORIGIN)
        p.SetNormal(*NORMAL)
        f.SetClipFunction(p)
        f.InsideOutOn()
        f.Update()
        return f.GetOutput().GetNumberOfCells()

    def scalar():
        f = vtk.vtkTableBasedClipDataSet()
        f.SetInputData(ug)
        f.SetValue(0.0)
        f.InsideOutOn()
        f.Update()
        return f.GetOutput().GetNumberOfCells()

    def thresh():
        f = vtk.vtkThreshold()
        f.SetInputData(ug)
        f.SetInputArrayToProcess(0, 0, 0, 0, "s")
        f.SetLowerThreshold(-0.5)
        f.SetUpperThreshold(0.5)
        f.SetThresholdFunction(vtk.vtkThreshold.THRESHOLD_BETWEEN)
        f.SetAllScalars(True)
        f.Update()
        return f.GetOutput().GetNumberOfCells()

    return {"clip plane": plane, "clip field": scalar, "threshold": thresh}


def ours(mesh, s):
    return {"clip plane": lambda: clip_plane(mesh, ORIGIN, NORMAL),
            "clip field": lambda: clip(mesh, s, 0.0),
            "threshold": lambda: threshold(mesh, s, -0.5, 0.5)}


def run_cpu(sizes, md):
    rows = []
    for n in sizes:
        for kind, m in meshes(n).items():
            s = field(m.points)
            v, o = vtk_runs(m, s), ours(m, s)
            for op in o:
                o[op]()  # tables built, pages touched
                t_o, t_v = best_cpu(o[op]), best_cpu(v[op])
                cells = o[op]().mesh.n_cells
                rows.append(f"| {n}^3 {kind} ({m.n_cells / 1e6:.2f} M) | {op} | {cells / 1e6:.2f} M | "
                            f"{t_o * 1e3:.1f} | {t_v * 1e3:.1f} | {t_v / t_o:.2f} |")
                print(rows[-1], flush=True)
    text = (f"\n### render.cells clip/threshold, CPU ({host()}, {datetime.date.today()}, commit {commit()})\n\n"
            "| mesh (cells) | operation | output cells | ours (Numba, 1 thread) ms | VTK 1 thread ms | VTK / ours |\n"
            "|---|---|---|---|---|---|\n" + "\n".join(rows))
    emit(text, md)


def run_gpu(sizes, md):
    import cupy as cp

    rows = []
    dev = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    for n in sizes:
        for kind, m in meshes(n).items():
            d = cell_mesh(cp.asarray(m.points), cp.asarray(m.connectivity), cp.asarray(m.types),
                          cp.asarray(m.offsets))
            s = cp.asarray(field(m.points))
            o = ours(d, s)
            cp_copy = cp.empty_like(d.connectivity)
            for op in o:
                o[op]()
                ts = []
                for _ in range(5):
                    a, b = cp.cuda.Event(), cp.cuda.Event()
                    a.record()
                    r = o[op]()
                    b.record()
                    b.synchronize()
                    ts.append(cp.cuda.get_elapsed_time(a, b))
                a, b = cp.cuda.Event(), cp.cuda.Event()
                a.record()
                cp_copy[...] = d.connectivity
                b.record()
                b.synchronize()
                rows.append(f"| {n}^3 {kind} ({m.n_cells / 1e6:.2f} M) | {op} | {r.mesh.n_cells / 1e6:.2f} M | "
                            f"{np.median(ts):.2f} | {cp.cuda.get_elapsed_time(a, b):.3f} |")
                print(rows[-1], flush=True)
    text = (f"\n### render.cells clip/threshold, GPU ({dev}, {datetime.date.today()}, commit {commit()})\n\n"
            "| mesh (cells) | operation | output cells | ours CuPy ms | copy of the connectivity ms |\n"
            "|---|---|---|---|---|\n" + "\n".join(rows))
    emit(text, md)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cpu", type=int, nargs="*", default=[])
    ap.add_argument("--gpu", type=int, nargs="*", default=[])
    ap.add_argument("--md", default=None, help="append the tables to this Markdown file")
    a = ap.parse_args()
    if not a.cpu and not a.gpu:
        a.cpu = [32]
    if a.cpu:
        run_cpu(a.cpu, a.md)
    if a.gpu:
        run_gpu(a.gpu, a.md)


if __name__ == "__main__":
    main()
