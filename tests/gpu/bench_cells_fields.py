"""Benchmark: field operations, outer surface and resampling of unstructured meshes against VTK.

    python tests/gpu/bench_cells_fields.py --cpu 24 40          # insitu (1 thread) vs VTK (Sequential)
    python tests/gpu/bench_cells_fields.py --gpu 64 128 200     # CuPy, CUDA events

Meshes: an n^3 grid of jittered hexahedra, and the same grid cut into 6 n^3 tetrahedra; a
smooth point field and a cell field. Each operation is timed on the same mesh in insitu
and in VTK's matching filter on a vtkUnstructuredGrid (building the VTK grid not timed):
cell_to_point / vtkCellDataToPointData, point_to_cell / vtkPointDataToCellData, gradient /
vtkGradientFilter, outer_surface / vtkGeometryFilter, resample onto an n^3 grid /
vtkResampleToImage. CPU: best of `--reps` wall times, insitu with Numba on one thread,
VTK on its Sequential SMP backend. GPU: CUDA events around each call after a warm-up,
median of 5.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import best_of, commit, device_median_ms, emit, host

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

HEX_TO_TETS = np.array([[0, 1, 2, 6], [0, 2, 3, 6], [0, 3, 7, 6], [0, 7, 4, 6], [0, 4, 5, 6], [0, 5, 1, 6]])


def meshes(n: int):
    """(name, CellMesh) of the jittered hex grid and its tets (points inside the box)."""
    from render.cells import TETRA, cell_mesh, grid_cells

    rng = np.random.default_rng(0)
    ax = np.arange(n + 1, dtype=float)
    x, y, z = np.meshgrid(ax, ax, ax, indexing="ij")
    p = np.stack([x, y, z], -1)
    inner = (p > 0) & (p < n)
    p = p + np.where(inner.all(-1, keepdims=True), rng.uniform(-0.2, 0.2, p.shape), 0)
    hexes = grid_cells(p[..., 0], p[..., 1], p[..., 2])
    tets = cell_mesh(hexes.points, hexes.connectivity.reshape(-1, 8)[:, HEX_TO_TETS].ravel(), TETRA)
    return [("hex", hexes), ("tet", tets)]


def vtk_grid(mesh):
    import vtk
    from vtk.util import numpy_support as ns

    ug = vtk.vtkUnstructuredGrid()
    pts = vtk.vtkPoints()
    pts.SetData(ns.numpy_to_vtk(np.ascontiguousarray(mesh.points, np.float64), deep=True))
    ug.SetPoints(pts)
    ca = vtk.vtkCellArray()
    ca.SetData(ns.numpy_to_vtkIdTypeArray(mesh.offsets.astype(np.int64), deep=True),
               ns.numpy_to_vtkIdTypeArray(mesh.connectivity.astype(np.int64), deep=True))
    ug.SetCells(ns.numpy_to_vtk(mesh.types, deep=True, array_type=vtk.VTK_UNSIGNED_CHAR), ca)
    return ug


def field(p):
    return np.sin(0.3 * p[:, 0]) * np.cos(0.2 * p[:, 1]) + 0.01 * p[:, 2] ** 2


def vtk_filters(mesh, n):
    """name -> a function running VTK's filter once (inputs set up beforehand)."""
    import vtk
    from vtk.util import numpy_support as ns

    def with_array(assoc, name, vals):
        ug = vtk_grid(mesh)
        a = ns.numpy_to_vtk(vals, deep=True)
        a.SetName(name)
        (ug.GetPointData() if assoc == "p" else ug.GetCellData()).AddArray(a)
        if assoc == "p":
            ug.GetPointData().SetActiveScalars(name)
        return ug

    pv = field(mesh.points)
    cv = np.arange(mesh.n_cells, dtype=np.float64)

    def run(f):
        def go():
            f.Modified()
            f.Update()
        return go

    c2p = vtk.vtkCellDataToPointData()
    c2p.SetInputData(with_array("c", "c", cv))
    p2c = vtk.vtkPointDataToCellData()
    p2c.SetInputData(with_array("p", "p", pv))
    grad = vtk.vtkGradientFilter()
    grad.SetInputData(with_array("p", "p", pv))
    grad.SetInputArrayToProcess(0, 0, 0, vtk.vtkDataObject.FIELD_ASSOCIATION_POINTS, "p")
    geo = vtk.vtkGeometryFilter()
    geo.SetInputData(vtk_grid(mesh))
    res = vtk.vtkResampleToImage()
    res.SetInputDataObject(with_array("p", "p", pv))
    res.SetSamplingDimensions(n, n, n)
    return {"cell_to_point": run(c2p), "point_to_cell": run(p2c), "gradient": run(grad),
            "outer_surface": run(geo), "resample": run(res)}


def ours(mesh, n, xp=np):
    from render.cells.fields import cell_to_point, gradient, point_to_cell
    from render.cells.resample import resample
    from render.cells.surface import outer_surface

    pv = xp.asarray(field(np.asarray(mesh.points.get() if xp is not np else mesh.points)))
    cv = xp.arange(mesh.n_cells, dtype=xp.float64)
    return {"cell_to_point": lambda: cell_to_point(mesh, cv), "point_to_cell": lambda: point_to_cell(mesh, pv),
            "gradient": lambda: gradient(mesh, pv), "outer_surface": lambda: outer_surface(mesh),
            "resample": lambda: resample(mesh, pv, (n, n, n))}



def cpu(sizes, reps):
    import numba
    import vtk

    vtk.vtkSMPTools.SetBackend("Sequential")
    numba.set_num_threads(1)
    rows = []
    for n in sizes:
        for name, mesh in meshes(n):
            ofs, vfs = ours(mesh, n), vtk_filters(mesh, n)
            for op in ofs:
                ofs[op]()  # compile / warm
                a, b = best_of(ofs[op], reps), best_of(vfs[op], reps)
                rows.append((n, name, mesh.n_cells, op, a, b))
                print(rows[-1], flush=True)
    out = ["### Unstructured meshes, CPU: field operations, outer surface, resampling vs VTK", "",
           f"Device: {host()}; VTK {vtk.vtkVersion.GetVTKVersion()} (Sequential SMP backend), Numba "
           f"{numba.__version__} on 1 thread; date {datetime.date.today()}; commit {commit()}; command "
           f"`python tests/gpu/bench_cells_fields.py --cpu {' '.join(map(str, sizes))}`. Best of {reps}; "
           "jittered n^3 hexahedra and the same cut into 6 n^3 tetrahedra; resample onto n^3 points.", "",
           "| n | cells | operation | insitu, ms | VTK, ms | VTK / insitu |",
           "| ---: | --- | --- | ---: | ---: | ---: |"]
    out += [f"| {n} | {c} {name} | {op} | {a * 1e3:.1f} | {b * 1e3:.1f} | {b / a:.1f}x |"
            for n, name, c, op, a, b in rows]
    return "\n".join(out) + "\n"


def gpu(sizes):
    import cupy as cp

    from render.cells import cell_mesh

    rows = []
    for n in sizes:
        for name, hmesh in meshes(n):
            mesh = cell_mesh(cp.asarray(hmesh.points), cp.asarray(hmesh.connectivity), cp.asarray(hmesh.types),
                             cp.asarray(hmesh.offsets))
            ofs = ours(mesh, n, cp)
            for op, f in ofs.items():
                f()
                rows.append((n, name, mesh.n_cells, op, device_median_ms(f, reps=5)))
                print(rows[-1], flush=True)
            del mesh, ofs
            cp.get_default_memory_pool().free_all_blocks()
    dev = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"].decode()
    out = ["### Unstructured meshes, GPU: field operations, outer surface, resampling", "",
           f"Device: {dev}; CuPy {cp.__version__}; date {datetime.date.today()}; commit {commit()}; command "
           f"`python tests/gpu/bench_cells_fields.py --gpu {' '.join(map(str, sizes))}`. CUDA events around "
           "each call after a warm-up, median of 5.", "",
           "| n | cells | operation | ms |", "| ---: | --- | --- | ---: |"]
    out += [f"| {n} | {c} {name} | {op} | {t:.2f} |" for n, name, c, op, t in rows]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", type=int, nargs="*", default=[])
    ap.add_argument("--gpu", type=int, nargs="*", default=[])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--md", help="append the tables to this Markdown file")
    args = ap.parse_args(argv)
    if args.cpu:
        emit(cpu(args.cpu, args.reps), args.md)
    if args.gpu:
        emit(gpu(args.gpu), args.md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
