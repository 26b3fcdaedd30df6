"""Benchmark: Ascent's gradient-based filters (divergence, vorticity, qcriterion) against VTK.

    python tests/gpu/bench_ascent_filters.py --cpu 32 64        # insitu (1 thread) vs VTK (Sequential)
    python tests/gpu/bench_ascent_filters.py --gpu 128 256      # CuPy, CUDA events

Meshes: an n^3-node uniform grid (insitu: a grid domain, NumPy/CuPy gradients; VTK:
vtkImageData) and the same nodes as (n-1)^3 jittered hexahedra (insitu: render.cells'
point gradient; VTK: vtkUnstructuredGrid), with a smooth 3-component velocity. Each filter
runs through adaptors.pipelines.run_pipeline on domains parsed beforehand; VTK runs
vtkGradientFilter computing only the matching quantity. CPU: best of `--reps`, Numba on one
thread, VTK's Sequential SMP backend. GPU: CUDA events around each call after a warm-up,
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

OPS = ("divergence", "vorticity", "qcriterion")


def velocity(x, y, z):
    return np.sin(2 * y) * z, np.cos(x) * z * z, np.exp(0.5 * x) * y


def meshes(n: int, xp=np):
    """(name, Blueprint mesh, points (N, 3) or None for the grid, (u, v, w) on the host)."""
    import adaptors
    from adaptors.mesh import unstructured
    from render.cells import grid_cells

    ax = np.linspace(-1.0, 1.0, n)
    x, y, z = np.meshgrid(ax, ax, ax, indexing="ij")
    vel = velocity(x, y, z)
    g = adaptors.uniform({"T": xp.asarray(x)}, origin=(-1.0,) * 3, spacing=(ax[1] - ax[0],) * 3)
    g["fields"]["velocity"] = {"association": "vertex", "topology": "mesh",
                               "values": dict(zip("uvw", (xp.asarray(np.asfortranarray(c)) for c in vel)))}
    c = grid_cells(ax, ax, ax)
    rng = np.random.default_rng(0)
    p = c.points + rng.uniform(-0.2, 0.2, c.points.shape) * (ax[1] - ax[0])
    hv = velocity(p[:, 0], p[:, 1], p[:, 2])
    h = unstructured(xp.asarray(p), xp.asarray(c.connectivity), "hex", {"T": xp.asarray(p[:, 0])})
    h["fields"]["velocity"] = {"association": "vertex", "topology": "mesh",
                               "values": dict(zip("uvw", (xp.asarray(v) for v in hv)))}
    return [("grid", g, None, vel, c.connectivity), ("hex", h, p, hv, c.connectivity)]


def ours(mesh):
    from adaptors.config import load
    from adaptors.context import Context
    from adaptors.mesh import parse
    from adaptors.pipelines import run_pipeline

    domains = parse(mesh, cells=True)
    out = {}
    for op in OPS:
        cfg = load({"pipelines": {"p": {"f": {"type": op, "params": {"field": "velocity"}}}}})
        out[op] = (lambda c=cfg: run_pipeline("p", c["pipelines"]["p"], domains, Context(), {}))
    return out


def vtk_filters(n, points, vel, conn):
    import vtk
    from vtk.util import numpy_support as ns

    if points is None:
        data = vtk.vtkImageData()
        data.SetDimensions(n, n, n)
        data.SetOrigin(-1.0, -1.0, -1.0)
        data.SetSpacing(*(2.0 / (n - 1),) * 3)
        arr = np.stack([c.ravel(order="F") for c in vel], axis=1)  # VTK: x fastest
    else:
        data = vtk.vtkUnstructuredGrid()
        pts = vtk.vtkPoints()
        pts.SetData(ns.numpy_to_vtk(points, deep=True))
        data.SetPoints(pts)
        ca = vtk.vtkCellArray()
        ca.SetData(ns.numpy_to_vtkIdTypeArray(np.arange(0, conn.size + 1, 8, dtype=np.int64), deep=True),
                   ns.numpy_to_vtkIdTypeArray(conn.astype(np.int64), deep=True))
        data.SetCells(vtk.VTK_HEXAHEDRON, ca)
        arr = np.stack(vel, axis=1)
    a = ns.numpy_to_vtk(np.ascontiguousarray(arr), deep=True)
    a.SetName("velocity")
    data.GetPointData().AddArray(a)
    out = {}
    for op in OPS:
        f = vtk.vtkGradientFilter()
        f.SetInputData(data)
        f.SetInputArrayToProcess(0, 0, 0, vtk.vtkDataObject.FIELD_ASSOCIATION_POINTS, "velocity")
        f.SetComputeGradient(False)
        f.SetComputeDivergence(op == "divergence")
        f.SetComputeVorticity(op == "vorticity")
        f.SetComputeQCriterion(op == "qcriterion")

        def go(f=f):
            f.Modified()
            f.Update()
        out[op] = go
    return out



def cpu(sizes, reps):
    import numba
    import vtk

    vtk.vtkSMPTools.SetBackend("Sequential")
    numba.set_num_threads(1)
    rows = []
    for n in sizes:
        for name, mesh, points, vel, conn in meshes(n):
            ofs, vfs = ours(mesh), vtk_filters(n, points, vel, conn)
            for op in OPS:
                ofs[op]()  # compile / warm
                a, b = best_of(ofs[op], reps), best_of(vfs[op], reps)
                rows.append((n, name, op, a, b))
                print(rows[-1], flush=True)
    out = ["### Ascent gradient filters, CPU: divergence, vorticity, Q-criterion vs vtkGradientFilter", "",
           f"Device: {host()}; VTK {vtk.vtkVersion.GetVTKVersion()} (Sequential SMP backend), Numba "
           f"{numba.__version__} on 1 thread; date {datetime.date.today()}; commit {commit()}; command "
           f"`python tests/gpu/bench_ascent_filters.py --cpu {' '.join(map(str, sizes))}`. Best of {reps}; "
           "n^3 nodes as a uniform grid (VTK: vtkImageData) and as jittered hexahedra.", "",
           "| n | mesh | filter | insitu, ms | VTK, ms | VTK / insitu |", "| ---: | --- | --- | ---: | ---: | ---: |"]
    out += [f"| {n} | {name} | {op} | {a * 1e3:.1f} | {b * 1e3:.1f} | {b / a:.1f}x |" for n, name, op, a, b in rows]
    return "\n".join(out) + "\n"


def gpu(sizes):
    import cupy as cp

    rows = []
    for n in sizes:
        for name, mesh, *_ in meshes(n, cp):
            for op, f in ours(mesh).items():
                f()
                rows.append((n, name, op, device_median_ms(f, reps=5)))
                print(rows[-1], flush=True)
            del mesh
            cp.get_default_memory_pool().free_all_blocks()
    dev = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"].decode()
    out = ["### Ascent gradient filters, GPU: divergence, vorticity, Q-criterion", "",
           f"Device: {dev}; CuPy {cp.__version__}; date {datetime.date.today()}; commit {commit()}; command "
           f"`python tests/gpu/bench_ascent_filters.py --gpu {' '.join(map(str, sizes))}`. CUDA events around "
           "each call after a warm-up, median of 5.", "",
           "| n | mesh | filter | ms |", "| ---: | --- | --- | ---: |"]
    out += [f"| {n} | {name} | {op} | {t:.2f} |" for n, name, op, t in rows]
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
