"""The eikonal solver visualized in situ through the adaptor, a frame every step.

    mpiexec -n 4 python examples/eikonal_insitu.py --out out/eikonal

The simulation is :class:`solvers.eikonal.EikonalSolver` (a front spreading from a
seed through a two-layer medium, halo-synchronized block-Jacobi sweeps). After every
step each rank hands its blocks to the adaptor as Conduit Mesh Blueprint domains
(travel time ``T`` and ``speed``, one ghost layer marked by ``ascent_ghosts``),
without copying them. The configuration (``examples/eikonal_insitu.yaml``, or
``--config``) contours ``T``, colours the surface by speed, ray casts the speed, and
writes a PNG per step and an ADIOS2 BP5 file of the frames. ``--steer-at K
--steer-iso V`` steers the iso value from step K on (as a viewer would); a steering
file named in the config works too; a viewer's "stop" ends the run early.

In transit (the simulation on 2 ranks, the visualization on a third)::

    mpiexec -n 2 python examples/eikonal_insitu.py --config examples/intransit_sim.yaml --out out/it \
          : -n 1 python -m adaptors.intransit --writers 2 --stream out/it/mesh \
                 --config examples/intransit_analysis.yaml
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import adaptors  # noqa: E402
from adaptors.intransit import app_comm  # noqa: E402
from insitu import Domain, arrays  # noqa: E402
from solvers.eikonal import EikonalSolver, seeds_from_fractions  # noqa: E402
from solvers.eikonal.speed import speed_model  # noqa: E402


def blueprint(dom: Domain, gid: int, T, speed, unreached: float) -> dict:
    """One block as a Blueprint domain: padded arrays (ghost 1), ghost cells marked."""
    b = dom.block(gid)
    xp = arrays.get_array_module(T)
    # Not yet reached nodes are +inf: a finite stand-in beyond every iso value keeps
    # the contour well defined (a device-side copy; the solver's state is untouched).
    shown = xp.minimum(T, unreached)
    # Real cells start at the first interior node and end at the next block's first
    # node (a ghost here), except at the grid's upper faces.
    ghost = tuple((1, 1 if hi == n else 0) for hi, n in zip(b.hi, dom.dims))
    origin = [o + (lo - 1) * h for o, lo, h in zip(dom.origin, b.lo, dom.spacing)]
    return adaptors.uniform({"T": shown, "speed": speed}, origin=origin, spacing=dom.spacing, ghost=ghost,
                            domain_id=gid)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", type=int, nargs=3, default=(48, 48, 48))
    ap.add_argument("--steps", type=int, default=24, help="solver steps (a frame after each)")
    ap.add_argument("--speed", default="two-layer")
    ap.add_argument("--seed", default="0.3,0.4,0.5", help="source point as fractions of the box")
    ap.add_argument("--config", default=os.path.join(ROOT, "examples", "eikonal_insitu.yaml"))
    ap.add_argument("--out", default="out/eikonal", help="directory for frames (PNG) and frames.bp")
    ap.add_argument("--size", type=int, nargs=2, default=None, help="override the image width height")
    ap.add_argument("--iso", type=float, default=None, help="override the config's iso value")
    ap.add_argument("--steer-at", type=int, default=None)
    ap.add_argument("--steer-iso", type=float, default=None)
    ap.add_argument("--backend", choices=("numpy", "cupy"), default="numpy")
    ap.add_argument("--engine", default=None,
                    help="override the config's engine: embedded, or a Spark master URL (local[2], spark://...) "
                         "to draw the frames in Spark tasks on worker daemons")
    args = ap.parse_args(argv)

    from mpi4py import MPI

    comm = app_comm(MPI.COMM_WORLD)  # this program's ranks (all of them unless run MPMD, in transit)
    rank, size = comm.rank, comm.size
    xp = np
    if args.backend == "cupy":
        import cupy as xp

        arrays.select_device(comm)
    shape = tuple(args.shape)
    dom = Domain.create(shape, nblocks=size, nranks=size, ghost=1, spacing=[1.0 / (n - 1) for n in shape])
    seeds = seeds_from_fractions([tuple(float(v) for v in args.seed.split(","))], shape)
    model = speed_model(args.speed)
    solver = EikonalSolver(dom, model, seeds, comm, xp=xp)
    speed = {g: xp.asarray(model(*np.meshgrid(*dom.coordinates(g), indexing="ij"))) for g in dom.blocks_of(rank)}

    import yaml

    with open(args.config) as f:
        cfg = yaml.safe_load(f)
    os.makedirs(args.out, exist_ok=True)
    for scene in cfg.get("scenes", {}).values():
        for r in scene.get("renders", {}).values():
            r["image_prefix"] = os.path.join(args.out, os.path.basename(r.get("image_prefix", "frame_%04d")))
            if args.size:
                r["image_width"], r["image_height"] = args.size
    if args.iso is not None:
        for filters in cfg.get("pipelines", {}).values():
            for f in filters.values():
                if f.get("type") == "contour":
                    f["params"] = {**f.get("params", {}), "iso_values": [args.iso]}
                    f["params"].pop("levels", None)
    if args.engine is not None:
        cfg["engine"] = ("embedded" if args.engine == "embedded" else
                         {"type": "spark", "params": {**(cfg.get("engine") or {}).get("params", {}),
                                                      "master": args.engine}})
    for e in cfg.get("extracts", {}).values():
        if e.get("type") in ("adios2", "adios2_mesh"):
            e["params"]["filename"] = os.path.join(args.out, os.path.basename(e["params"]["filename"]))

    t_sim = t_vis = 0.0
    failures = 0
    with adaptors.Adaptor(cfg, comm) as insitu:
        for step in range(args.steps):
            t0 = time.perf_counter()
            change = solver.step()
            t1 = time.perf_counter()
            if args.steer_at is not None and step == args.steer_at:
                insitu.steer({"iso_values": [args.steer_iso]})
            mesh = [blueprint(dom, g, solver.blocks[g], speed[g], 10.0) for g in dom.blocks_of(rank)]
            failures += not insitu.execute(step, float(step), mesh)
            t_vis += time.perf_counter() - t1
            t_sim += t1 - t0
            res = insitu.results()
            if rank == 0:
                iso = next(iter(res["iso_values"].values()), None)
                print(f"step {step:3d} change {change:.3e} iso {iso} frames {res['frames']}", flush=True)
            if res["stop"]:
                break
        errors = insitu.results()["errors"]
    solver.close()
    if rank == 0:
        print(f"ranks={size} grid={shape} steps={step + 1} simulation={t_sim:.2f}s in-situ={t_vis:.2f}s "
              f"failed_steps={failures}", flush=True)
        for e in errors:
            print("error:", e, flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
