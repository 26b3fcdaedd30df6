"""Benchmark: the adaptor's in-situ step on the embedded engine and on Spark, stage by stage.

    python tests/gpu/bench_spark_adaptor.py [--n 128 256 512] [--master local[2]] [--backend cupy] [--md FILE]

The pipeline of ``examples/eikonal_insitu.py`` (contour + pseudocolor + volume, no files
written) on one rank's n^3 eikonal field, drawn by ``engine: embedded`` and by ``engine:
spark`` on the same device. Each row: the median ``execute`` after warm-up, and the median
of each stage the adaptor times with ``profile: true`` (``results()['timings']``). The Spark
overhead is the difference of the two medians at the same n.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import ROOT, commit, emit, host

sys.path.insert(0, ROOT)


def run_case(n: int, engine, size, reps: int, xp, sync) -> tuple[float, dict]:
    """Median execute and median per-stage times of the demo pipeline at n^3 on `engine`."""
    import time

    import yaml

    import adaptors
    from insitu import Domain
    from solvers.eikonal import EikonalSolver, seeds_from_fractions
    from solvers.eikonal.speed import speed_model

    sys.path.insert(0, os.path.join(ROOT, "examples"))
    from eikonal_insitu import blueprint

    shape = (n,) * 3
    dom = Domain.create(shape, nblocks=1, ghost=1, spacing=[1.0 / (n - 1)] * 3)
    model = speed_model("two-layer")
    solver = EikonalSolver(dom, model, seeds_from_fractions([(0.3, 0.4, 0.5)], shape), xp=xp)
    for _ in range(max(4, n // 16)):  # a front inside the box
        solver.step()
    speed = xp.asarray(model(*np.meshgrid(*dom.coordinates(0), indexing="ij")))
    mesh = [blueprint(dom, 0, solver.blocks[0], speed, 10.0)]
    with open(os.path.join(ROOT, "examples", "eikonal_insitu.yaml")) as f:
        cfg = yaml.safe_load(f)
    cfg["extracts"] = {}
    for r in cfg["scenes"]["view"]["renders"].values():
        r.pop("image_prefix")
        r["image_width"], r["image_height"] = size
    cfg["profile"] = True
    cfg["engine"] = engine
    times, stages = [], {}
    with adaptors.Adaptor(cfg) as a:
        for i in range(3):
            assert a.execute(i, 0.0, mesh), a.results()["errors"]
        for i in range(reps):
            sync()
            t0 = time.perf_counter()
            assert a.execute(i, 0.0, mesh), a.results()["errors"]
            sync()
            times.append(time.perf_counter() - t0)
            for k, v in a.results()["timings"].items():
                stages.setdefault(k, []).append(v)
    solver.close()
    return float(np.median(times)), {k: float(np.median(v)) for k, v in stages.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[128, 256, 512])
    ap.add_argument("--size", type=int, nargs=2, default=(480, 360))
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--backend", choices=("numpy", "cupy"), default="numpy")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--md")
    args = ap.parse_args(argv)
    xp, sync, device = np, (lambda: None), f"CPU: {host()}"
    if args.backend == "cupy":
        import cupy as xp

        sync = xp.cuda.Device().synchronize
        device = xp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    spark = {"type": "spark", "params": {"master": args.master}}
    rows = []
    for n in args.n:
        for name, engine in (("embedded", "embedded"), (f"spark {args.master}", spark)):
            t, st = run_case(n, engine, args.size, args.reps, xp, sync)
            rows.append((n, name, t, st))
            print(f"n={n} {name}: {t * 1e3:.1f} ms  " + " ".join(f"{k}={v * 1e3:.1f}" for k, v in sorted(st.items())),
                  flush=True)
    order = ("mesh", "pipelines", "ranges", "contour", "render", "volume", "handover", "spark", "daemons", "composite")
    stage_names = [s for s in order if any(s in r[3] for r in rows)]
    head = (f"### The adaptor's step on the embedded engine and on Spark, {args.backend}\n\n"
            f"Device: {device}; date {datetime.date.today()}; commit {commit()}; command `python "
            f"tests/gpu/bench_spark_adaptor.py --n {' '.join(map(str, args.n))} --size {args.size[0]} {args.size[1]} "
            f"--master '{args.master}' --backend {args.backend}`; the demo pipeline (contour + pseudocolor + volume, "
            f"no files), one rank, medians of {args.reps} steps after 3 warm-up steps; stages from `profile: true` "
            f"(Spark: `handover` hands the fields to the node's daemon, `spark` is the serving job's step, of which "
            f"`daemons` is the drawing on the daemon).\n\n"
            "| n^3 | engine | execute | Spark overhead | " + " | ".join(stage_names) + " |\n"
            "| ---: | --- | ---: | ---: | " + " | ".join("---:" for _ in stage_names) + " |\n")
    base = {n: t for n, name, t, _ in rows if name == "embedded"}
    body = "".join(
        f"| {n} | {name} | {t * 1e3:.1f} ms | "
        + ("" if name == "embedded" else f"{(t - base[n]) * 1e3:+.1f} ms") + " | "
        + " | ".join(f"{st[s] * 1e3:.1f}" if s in st else "" for s in stage_names) + " |\n"
        for n, name, t, st in rows)
    emit(head + body + "\nStage columns in ms.\n", args.md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
