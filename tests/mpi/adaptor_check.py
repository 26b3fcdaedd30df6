"""The adaptor on an mpirun job: composited frames equal a one-process render of the whole field.

Usage: mpiexec -n N python tests/mpi/adaptor_check.py OUTDIR [ENGINE]

ENGINE (default embedded) draws the decomposed run: ``spark`` hands the blocks to worker
daemons and draws them in Spark tasks (local[2]); a JSON object is the whole engine entry
(``{"type": "spark", "params": {...}}``); the reference is always drawn by one process on
the embedded engine.

Each rank hands its blocks (two ghost nodes, the Blueprint ghost field marking them) of a field
decomposed over N ranks; the frame rank 0 writes is compared with a frame of the same
configuration rendered by one process holding the whole field (not decomposed), within
1/255 on 99.9% of the pixels. The eikonal filter's arrival times on the decomposed
domains are compared with solvers.eikonal.solve on the whole grid.
Prints "OK ranks=N" on rank 0.
"""

import os
import sys

import numpy as np
from mpi4py import MPI

import adaptors
from adaptors.mesh import parse
from adaptors.context import Context
from adaptors.pipelines import run_pipeline
from insitu import Domain

out = sys.argv[1]
engine = sys.argv[2] if len(sys.argv) > 2 else "embedded"
if engine.startswith("{"):  # a whole engine entry: {"type": "spark", "params": {...}}
    import json

    engine = json.loads(engine)
comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
dims = (33, 29, 25)
h = 1.0 / 32
x, y, z = (np.arange(n) * h for n in dims)
field = np.sqrt((x[:, None, None] - 0.5) ** 2 + (y[None, :, None] - 0.45) ** 2 + (z[None, None, :] - 0.4) ** 2)
speed = 1.0 + x[:, None, None] + 0.5 * np.sin(6 * y[None, :, None]) * np.ones(dims)


def cfg(prefix, engine="embedded"):
    contour = {"type": "contour", "params": {"field": "f", "iso_values": [0.3]}}
    return {"engine": engine, "pipelines": {"pl": {"c": contour}},
            "scenes": {"s": {"plots": {"p": {"type": "pseudocolor", "pipeline": "pl", "field": "s"},
                                       "v": {"type": "volume", "field": "f", "min_value": 0.0, "max_value": 0.8,
                                             "color_table": {"name": "plasma", "opacity": [[0, 0.9], [0.8, 0.0]]}}},
                             "renders": {"r": {"image_width": 120, "image_height": 100, "image_prefix": prefix,
                                               "camera": {"azimuth": 30, "elevation": 20}}}}}}


def block_mesh(dom, g):
    b = dom.block(g)
    # Two ghost nodes beyond the owned ones: normals at the seams see both sides.
    lo = [max(a - 2, 0) for a in b.lo]
    hi = [min(a + 2, n) for a, n in zip(b.hi, dims)]
    sl = tuple(slice(a, c) for a, c in zip(lo, hi))
    # Real cells: from the block's first node to the next block's first node.
    ghost = tuple((a - l, c - (a2 + 1 if a2 < n else a2)) for a, l, c, a2, n in zip(b.lo, lo, hi, b.hi, dims))
    return adaptors.uniform({"f": field[sl], "s": speed[sl]}, origin=[l * h for l in lo], spacing=(h,) * 3,
                            ghost=ghost, domain_id=g)


dom = Domain.create(dims, nblocks=size * 2 if size < 4 else size, nranks=size, ghost=1)
mesh = [block_mesh(dom, g) for g in dom.blocks_of(rank)]
bad = []
with adaptors.Adaptor(cfg(os.path.join(out, "split_%d"), engine), comm) as a:
    if not a.execute(0, 0.0, mesh):
        bad.append(f"rank {rank}: {a.results()['errors']}")
    serving = getattr(a._scenes, "_serving", None)
    if rank == 0 and serving is not None and serving._nodes:  # network mode: where the drawing tasks ran
        print("serving tasks on nodes:", sorted(set(serving._nodes.values())), flush=True)

# Eikonal across ranks against the whole-grid solve.
e = adaptors.load({"pipelines": {"p": {"e": {"type": "eikonal", "params": {
    "speed": "s", "seeds": [[0.25, 0.5, 0.5]], "output": "T", "tol": 0.0}}}}})
ds = run_pipeline("p", e["pipelines"]["p"], parse(mesh), Context(comm), {})
mine = {g: d.vertex_values("T") for g, d in zip(dom.blocks_of(rank), ds.domains)}
parts = comm.gather(mine, root=0)
bad = [b for per in comm.gather(bad, root=0) or [] for b in per] if rank == 0 else comm.gather(bad, root=0)
if rank == 0:
    from render.image import read_png
    from solvers.eikonal import solve

    with adaptors.Adaptor(cfg(os.path.join(out, "whole_%d"))) as a:
        whole = adaptors.uniform({"f": field, "s": speed}, spacing=(h,) * 3)
        assert a.execute(0, 0.0, whole), a.results()["errors"]
    A = read_png(os.path.join(out, "split_0.png")).astype(int)
    B = read_png(os.path.join(out, "whole_0.png")).astype(int)
    close = (np.abs(A - B) <= 1).all(axis=2).mean()
    if close < 0.999:
        bad.append(f"frame: only {close:.4%} of pixels within 1/255 of the one-process render")
    if (A[..., 3] > 0).mean() < 0.05:
        bad.append("frame: nearly empty")
    i, j, k = (round(v / h) for v in (0.25, 0.5, 0.5))
    ref = solve(speed, [(i, j, k)], (h, h, h))
    worst = 0.0
    for per in parts:
        for g, T in per.items():
            b = dom.block(g)
            sl = tuple(slice(a, min(c + 1, n)) for a, c, n in zip(b.lo, b.hi, dims))
            worst = max(worst, float(np.abs(T - ref[sl]).max()))
    if worst > 1e-12:
        bad.append(f"eikonal: decomposed arrival times differ from the whole-grid solve by {worst:.3e}")
    for b in bad:
        print("FAIL", b, flush=True)
    name = engine if isinstance(engine, str) else engine["type"]
    print(f"{'OK' if not bad else 'FAILED'} ranks={size} engine={name} pixels_close={close:.5f} "
          f"eikonal_err={worst:.2e}", flush=True)
sys.exit(1 if rank == 0 and bad else 0)
