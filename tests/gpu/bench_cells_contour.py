"""Benchmark render.cells.contour: CPU (Numba, 1 thread and all) against VTK's
vtkContourFilter on one thread, and the GPU path (CUDA events, median).

The mesh: n^3 cubes of a uniform grid, each cut into 6 tets (vtkUnstructuredGrid for
VTK), a sphere distance field contoured at radius 0.35 (and, with --levels 3, three
radii).

    python tests/gpu/bench_cells_contour.py --cpu 32 64 96
    python tests/gpu/bench_cells_contour.py --gpu 128 224 --int32
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchutil

sys.path.insert(0, benchutil.ROOT)

from render.cells import TETRA, CellMesh
from render.cells.contour import contour

_CUBE = [(0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 1, 0), (0, 0, 1), (1, 0, 1), (1, 1, 1), (0, 1, 1)]


def tet_grid(n: int, xp=np, conn_dtype=np.int64, dtype=np.float32):
    """n^3 cubes of [0, 1]^3, 6 positively oriented tets each (built on xp)."""
    g = xp.linspace(0.0, 1.0, n + 1, dtype=dtype)
    pts = xp.stack(xp.meshgrid(g, g, g, indexing="ij"), -1).reshape(-1, 3)
    idx = xp.arange((n + 1) ** 3, dtype=conn_dtype).reshape(n + 1, n + 1, n + 1)
    corner = {c: idx[c[0]:n + c[0], c[1]:n + c[1], c[2]:n + c[2]].ravel() for c in _CUBE}
    tets = []
    for perm in itertools.permutations(range(3)):
        cur, path = [0, 0, 0], [(0, 0, 0)]
        for a in perm:
            cur = cur.copy()
            cur[a] = 1
            path.append(tuple(cur))
        # (0,0,0) -> ... -> (1,1,1): odd permutations are negatively oriented
        ref = np.array(path, float)
        if np.dot(np.cross(ref[1] - ref[0], ref[2] - ref[0]), ref[3] - ref[0]) < 0:
            path = [path[0], path[2], path[1], path[3]]
        tets.append(xp.stack([corner[p] for p in path], 1))
    conn = xp.stack(tets, 1).reshape(-1)
    ncells = 6 * n ** 3
    return CellMesh(pts, conn, xp.arange(0, 4 * ncells + 1, 4, dtype=xp.int64), xp.full(ncells, TETRA, xp.uint8))


def field(mesh, xp=np):
    return xp.sqrt(((mesh.points - 0.5) ** 2).sum(axis=1))


def _median_time(fn, repeat: int) -> float:
    fn()
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def vtk_time(mesh, f, levels, repeat: int) -> tuple[float, int]:
    import vtk
    from vtk.util import numpy_support as ns

    vtk.vtkSMPTools.SetBackend("Sequential")
    vtk.vtkSMPTools.Initialize(1)
    ug = vtk.vtkUnstructuredGrid()
    p = vtk.vtkPoints()
    p.SetData(ns.numpy_to_vtk(np.ascontiguousarray(mesh.points), deep=1))
    ug.SetPoints(p)
    ca = vtk.vtkCellArray()
    ca.SetData(ns.numpy_to_vtkIdTypeArray(mesh.offsets.astype(np.int64), deep=1),
               ns.numpy_to_vtkIdTypeArray(mesh.connectivity.astype(np.int64), deep=1))
    ug.SetCells(vtk.VTK_TETRA, ca)
    arr = ns.numpy_to_vtk(f, deep=1)
    arr.SetName("f")
    ug.GetPointData().SetScalars(arr)
    flt = vtk.vtkContourFilter()
    flt.SetInputData(ug)
    for i, lev in enumerate(levels):
        flt.SetValue(i, lev)

    def run():
        flt.Modified()
        flt.Update()

    t = _median_time(run, repeat)
    return t, flt.GetOutput().GetNumberOfCells()


def bench_cpu(sizes, levels, repeat: int) -> None:
    import numba

    rows = []
    for n in sizes:
        mesh = tet_grid(n)
        f = field(mesh)
        nall = numba.config.NUMBA_NUM_THREADS
        res = []
        for th in (1, nall):
            numba.set_num_threads(th)
            res.append(_median_time(lambda: contour(mesh, f, levels), repeat))
        numba.set_num_threads(nall)
        nf = len(contour(mesh, f, levels).faces)
        try:
            tv, nfv = vtk_time(mesh, f, levels, repeat)
            theirs = f"{tv * 1e3:.1f} ({nfv}) | {tv / res[0]:.2f}x"
        except ImportError:  # a machine without the vtk wheel: our columns only
            theirs = "n/a | n/a"
        rows.append(f"| {n}^3 x 6 = {mesh.n_cells / 1e6:.2f} M | {nf} | {res[0] * 1e3:.1f} | {res[1] * 1e3:.1f} "
                    f"({nall}) | {theirs} |")
    head = (f"CPU contour of tets, {len(levels)} level(s), {benchutil.host()}, commit {benchutil.commit()}\n\n"
            "| tets | triangles | ours 1 thread (ms) | ours all threads (ms) | VTK 1 thread (ms) (triangles) "
            "| VTK / ours 1 thread |\n|---|---|---|---|---|---|")
    benchutil.emit("\n".join([head] + rows), None)


def bench_gpu(sizes, levels, repeat: int, int32: bool) -> None:
    import cupy

    from insitu import arrays

    rows = []
    for n in sizes:
        mesh = tet_grid(n, cupy, np.int32 if int32 else np.int64)
        f = field(mesh, cupy)
        start, end = cupy.cuda.Event(), cupy.cuda.Event()

        def once():
            start.record()
            c = contour(mesh, f, levels)
            end.record()
            end.synchronize()
            return cupy.cuda.get_elapsed_time(start, end), c

        once()
        with arrays.count_transfers() as counted:
            ts = [once()[0] for _ in range(repeat)]
        c = once()[1]
        # the floor: one read of connectivity and field and a write of their size (a device copy)
        nbytes = mesh.connectivity.nbytes + f.nbytes
        buf = cupy.empty(nbytes // 4, cupy.float32)
        src = cupy.empty_like(buf)
        start.record()
        for _ in range(5):
            buf[...] = src
        end.record()
        end.synchronize()
        copy_ms = cupy.cuda.get_elapsed_time(start, end) / 5
        med = statistics.median(ts)
        rows.append(f"| {n}^3 x 6 = {mesh.n_cells / 1e6:.1f} M | {mesh.connectivity.dtype} | {len(c.faces)} | "
                    f"{med:.3f} | {copy_ms:.3f} | {med / copy_ms:.2f}x | {counted.scalar_reads // repeat} |")
    dev = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"].decode()
    head = (f"GPU contour of tets, {len(levels)} level(s), {dev}, commit {benchutil.commit()}\n\n"
            "| tets | ids | triangles | contour (ms, median) | copy of connectivity + field (ms) | ratio "
            "| scalar reads per call |\n|---|---|---|---|---|---|---|")
    benchutil.emit("\n".join([head] + rows), None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cpu", type=int, nargs="*", default=[], help="cubes per axis for the CPU table")
    ap.add_argument("--gpu", type=int, nargs="*", default=[], help="cubes per axis for the GPU table")
    ap.add_argument("--levels", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--int32", action="store_true", help="int32 connectivity on the GPU")
    a = ap.parse_args()
    levels = list(np.linspace(0.25, 0.4, a.levels)) if a.levels > 1 else [0.35]
    if a.cpu:
        bench_cpu(a.cpu, levels, a.repeat)
    if a.gpu:
        bench_gpu(a.gpu, levels, a.repeat, a.int32)


if __name__ == "__main__":
    main()
