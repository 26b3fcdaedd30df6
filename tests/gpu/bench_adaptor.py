"""Benchmark: the adaptor's cost per execute, next to the simulation's own step.

    python tests/gpu/bench_adaptor.py [--n 128] [--size 1024 768] [--backend numpy|cupy] [--md FILE]

The simulation is one rank of the eikonal solver (``EikonalSolver.step``) on an n^3 grid.
Rows: ``execute`` with nothing configured (the floor: what an idle adaptor costs a
time loop), with only a trigger condition on a field (mesh validation plus one global
reduction), and with the demo pipeline (``examples/eikonal_insitu.yaml``: contour,
pseudocolor, volume; no files written). Medians of wall-clock time after warm-up.
Target: under 50 us with no work.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import ROOT, commit, emit

sys.path.insert(0, ROOT)


def median_time(fn, reps: int, sync=lambda: None) -> float:
    ts = []
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=128)
    ap.add_argument("--size", type=int, nargs=2, default=(1024, 768))
    ap.add_argument("--backend", choices=("numpy", "cupy"), default="numpy")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--md")
    args = ap.parse_args(argv)

    import yaml

    import adaptors
    from insitu import Domain, arrays
    from solvers.eikonal import EikonalSolver, seeds_from_fractions
    from solvers.eikonal.speed import speed_model

    sys.path.insert(0, os.path.join(ROOT, "examples"))
    from eikonal_insitu import blueprint

    xp, sync, device = np, (lambda: None), f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"
    if args.backend == "cupy":
        import cupy as xp

        sync = xp.cuda.Device().synchronize
        device = xp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    shape = (args.n,) * 3
    dom = Domain.create(shape, nblocks=1, ghost=1, spacing=[1.0 / (args.n - 1)] * 3)
    model = speed_model("two-layer")
    solver = EikonalSolver(dom, model, seeds_from_fractions([(0.3, 0.4, 0.5)], shape), xp=xp)
    for _ in range(args.n // 4):  # a front well inside the box
        solver.step()
    speed = xp.asarray(model(*np.meshgrid(*dom.coordinates(0), indexing="ij")))

    def mesh():
        return [blueprint(dom, 0, solver.blocks[0], speed, 10.0)]

    with open(os.path.join(ROOT, "examples", "eikonal_insitu.yaml")) as f:
        demo = yaml.safe_load(f)
    demo["extracts"] = {}
    for r in demo["scenes"]["view"]["renders"].values():
        r.pop("image_prefix")
        r["image_width"], r["image_height"] = args.size
    configs = [
        ("nothing configured", {}),
        ("trigger condition only (mesh checked, one reduction)",
         {"extracts": {"h": {"type": "hdf5", "params": {"path": "/tmp/never_%d"}}},
          "triggers": {"t": {"condition": "max(field('T')) > 1e9", "actions": ["h"]}}}),
        (f"demo pipeline: contour + pseudocolor + volume at {args.size[0]}x{args.size[1]}", demo),
    ]
    m = mesh()
    sim = median_time(solver.step, max(3, args.reps // 2), sync)
    rows = []
    for name, cfg in configs:
        with adaptors.Adaptor(cfg) as a:
            for i in range(3):
                assert a.execute(i, 0.0, m), a.results()["errors"]
            reps = args.reps * (50 if not cfg.get("scenes") else 1)
            with arrays.count_transfers() as tc:
                t = median_time(lambda: a.execute(0, 0.0, m), reps, sync)
            rows.append((name, t, tc.calls, tc.scalar_reads / reps))
    head = (f"### Adaptor overhead per execute, {args.backend}\n\nDevice: {device}; date "
            f"{datetime.date.today()}; commit {commit()}; command `python tests/gpu/bench_adaptor.py --n {args.n} "
            f"--size {args.size[0]} {args.size[1]} --backend {args.backend}`; grid {args.n}^3 float64, one rank.\n\n"
            f"| execute with | median | host<->device array transfers | scalar reads per execute |\n"
            f"| --- | ---: | ---: | ---: |\n")
    body = "".join(f"| {n} | {t * 1e6:.1f} us | {c} | {s:.0f} |\n" if t < 1e-3 else
                   f"| {n} | {t * 1e3:.2f} ms | {c} | {s:.0f} |\n" for n, t, c, s in rows)
    body += f"| *the simulation's own step (EikonalSolver.step)* | {sim * 1e3:.2f} ms | | |\n"
    emit(head + body, args.md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
