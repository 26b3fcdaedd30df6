"""Benchmark: reading Blueprint topologies as cells (adaptors.mesh.parse(..., cells=True)).

    python tests/gpu/bench_blueprint_cells.py --cpu 32 64     # n: an n^3 grid of hexes
    python tests/gpu/bench_blueprint_cells.py --gpu 128 256   # CuPy fields, host topology

Meshes from an n^3 grid: its hexes split into 6 tets each (one tet topology), the same as
mixed shapes (half the hexes whole, half as tets), and its points as a curvilinear
structured grid. CPU: best of 3 wall times of parse (which checks the topology and builds a
render.cells.CellMesh) against VTK taking the same NumPy arrays into a vtkUnstructuredGrid
(numpy_to_vtk without copying where the dtypes allow; vtkCellArray.SetData, SetCells), one
thread. A structured grid is set beside VTK's vtkStructuredGrid, whose cells are implicit
(it builds no connectivity: ours does). GPU: parse with CuPy fields, so the points and
connectivity go up once each (synchronized), median of 5, set against a device copy of the
same bytes (to_device of the points and connectivity alone).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import best_of, commit, emit, host

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from adaptors.mesh import parse, unstructured  # noqa: E402

#: Kuhn's six tets of a hex (VTK order 0..7), all positive.
KUHN = np.array([[0, 1, 2, 6], [0, 2, 3, 6], [0, 3, 7, 6], [0, 7, 4, 6], [0, 4, 5, 6], [0, 5, 1, 6]])


def grid(n: int):
    """Points (i fastest) and hexes (VTK order) of an n^3-cell grid, a little curved."""
    t = np.linspace(0.0, 1.0, n + 1)
    z, y, x = np.meshgrid(t, t, t, indexing="ij")
    x = x + 0.05 * np.sin(3 * y)
    pts = np.stack([x.ravel(), y.ravel(), z.ravel()], axis=1)
    ids = np.arange((n + 1) ** 3, dtype=np.int64).reshape(n + 1, n + 1, n + 1)  # [k, j, i]
    a, b = slice(None, -1), slice(1, None)
    corners = [ids[a, a, a], ids[a, a, b], ids[a, b, b], ids[a, b, a],
               ids[b, a, a], ids[b, a, b], ids[b, b, b], ids[b, b, a]]
    hexes = np.stack([c.ravel() for c in corners], axis=1)
    return pts, hexes


def meshes(n: int, xp=np):
    pts, hexes = grid(n)
    tets = hexes[:, KUHN].reshape(-1, 4)
    T = xp.asarray(np.linspace(0, 1, pts.shape[0]))
    half = hexes.shape[0] // 2
    mixed_conn = np.concatenate([hexes[:half].ravel(), hexes[half:, KUHN].ravel()])
    shapes = np.concatenate([np.full(half, 12), np.full(6 * (hexes.shape[0] - half), 10)])
    sizes = np.where(shapes == 12, 8, 4)
    structured = {"coordsets": {"c": {"type": "explicit", "values": {a: pts[:, i] for i, a in enumerate("xyz")}}},
                  "topologies": {"t": {"type": "structured", "coordset": "c",
                                       "elements": {"dims": {"i": n, "j": n, "k": n}}}},
                  "fields": {"T": {"association": "vertex", "topology": "t", "values": T}}}
    return {
        "tets": (unstructured(pts, tets.ravel(), "tet", {"T": T}), pts, tets.ravel(), None, 10),
        "mixed": (unstructured(pts, mixed_conn, "mixed", {"T": T}, sizes=sizes, shapes=shapes), pts, mixed_conn,
                  sizes, shapes),
        "structured": (structured, pts, None, None, None),
    }


def vtk_read(pts, conn, sizes, types, n):
    import vtk
    from vtk.util import numpy_support as ns

    def run():
        if conn is None:
            g = vtk.vtkStructuredGrid()
            g.SetDimensions(n + 1, n + 1, n + 1)
            p = vtk.vtkPoints()
            p.SetData(ns.numpy_to_vtk(pts, deep=False))
            g.SetPoints(p)
            return g
        ug = vtk.vtkUnstructuredGrid()
        p = vtk.vtkPoints()
        p.SetData(ns.numpy_to_vtk(pts, deep=False))
        ug.SetPoints(p)
        k = 4 if sizes is None else None
        ncells = conn.shape[0] // k if k else sizes.shape[0]
        off = np.arange(0, conn.shape[0] + 1, k, dtype=np.int64) if k else \
            np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        cells = vtk.vtkCellArray()
        cells.SetData(ns.numpy_to_vtkIdTypeArray(off, deep=False), ns.numpy_to_vtkIdTypeArray(conn, deep=False))
        t = np.full(ncells, types, np.uint8) if np.isscalar(types) else types.astype(np.uint8)
        ug.SetCells(ns.numpy_to_vtk(t, deep=False, array_type=vtk.VTK_UNSIGNED_CHAR), cells)
        run.keep = (off, t)  # the arrays VTK points at must outlive the call
        return ug

    return run



def cpu(sizes, md):
    rows = ["| mesh | cells | points | insitu parse (ms) | VTK from the same arrays (ms) |",
            "|---|---:|---:|---:|---:|"]
    for n in sizes:
        for name, (m, pts, conn, sz, types) in meshes(n).items():
            (d,) = parse(m, cells=True)
            ours = best_of(lambda: parse(m, cells=True))
            theirs = best_of(vtk_read(pts, conn, sz, types, n))
            what = name + (" (VTK: implicit cells)" if conn is None else "")
            rows.append(f"| {what} {n}^3 | {d.mesh.n_cells:,} | {d.mesh.n_points:,} | {1e3 * ours:.1f} | "
                        f"{1e3 * theirs:.1f} |")
    emit(f"CPU, {host()}, one thread, commit {commit()}\n\n" + "\n".join(rows), md)


def gpu(sizes, md):
    import cupy

    from insitu import arrays

    rows = ["| mesh | cells | insitu parse, CuPy fields (ms) | uploads | to_device of points + connectivity (ms) |",
            "|---|---:|---:|---:|---:|"]
    for n in sizes:
        for name, (m, pts, conn, _, _) in meshes(n, cupy).items():
            def run():
                (d,) = parse(m, cells=True)
                cupy.cuda.Device().synchronize()
                return d

            run()
            with arrays.count_transfers() as c:
                d = run()
            times = []
            for _ in range(5):
                t = time.perf_counter()
                run()
                times.append(time.perf_counter() - t)
            up = [pts] + ([] if conn is None else [conn])

            def copy():
                for a in up:
                    arrays.to_device(a)
                cupy.cuda.Device().synchronize()

            rows.append(f"| {name} {n}^3 | {d.mesh.n_cells:,} | {1e3 * statistics.median(times):.1f} | {c.h2d_calls} | "
                        f"{1e3 * best_of(copy, 5):.1f} |")
    emit(f"GPU, {cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}, commit {commit()}\n\n" + "\n".join(rows),
         md)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpu", type=int, nargs="*", default=None)
    ap.add_argument("--gpu", type=int, nargs="*", default=None)
    ap.add_argument("--md", default=None, help="append the tables to this Markdown file")
    a = ap.parse_args()
    if a.cpu is None and a.gpu is None:
        a.cpu = [32]
    if a.cpu:
        cpu(a.cpu, a.md)
    if a.gpu:
        gpu(a.gpu, a.md)


if __name__ == "__main__":
    main()
