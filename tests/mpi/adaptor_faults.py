"""Faults inside an adaptor step on an mpirun job: every rank hears of them, the next step runs.

Usage: mpiexec -n N python tests/mpi/adaptor_faults.py OUTDIR MODE

MODE
  png    Two scenes with PNGs in two directories and a BP5 frame extract of the first.
         Step 1: the first scene's PNG is a link to /dev/full (ENOSPC, as on a full disk).
         Step 3: the second scene's directory is a regular file (the PNG cannot be
         created, as in an unwritable directory). Steps 0, 2 and 4 are healthy. Only rank 0
         writes PNGs, so only rank 0 fails.
  stall  ``timeout: 4``; rank 1 sleeps 6 s inside step 1 (before its first scene): the
         others get a PeerTimeoutError naming rank 1 within the timeout; rank 1 catches up
         and step 2 runs on every rank.
  skip   A bare Context (timeout 2 s): rank 1 never joins the second agree(); the others
         raise PeerTimeoutError naming [1].
  finalize  Rank 0 writes three frame extracts: a BP5 file whose files are links to
         /dev/full (every write fails with ENOSPC, as on a full disk: its close fails too),
         a healthy BP5 file, and an SST stream with a steering relay. finalize() must close
         the healthy ones and stop the relay, raise once naming the full one, and the
         process must end normally (ADIOS2 aborts with exit 134 when a writer whose close
         failed is destroyed).

Every rank writes OUTDIR/result.RANK.json (its per-step outcomes and recorded errors); the
test reads those.
"""

import json
import os
import sys
import time

import numpy as np
from mpi4py import MPI

import adaptors
from adaptors.context import Context

out, mode = sys.argv[1], sys.argv[2]
comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
n = 17
h = 1.0 / (n - 1)


def my_mesh():
    """Rank r holds z-slab r of a sphere-distance field (one shared node plane, no ghosts)."""
    k0, k1 = rank * (n - 1) // size, (rank + 1) * (n - 1) // size
    x = np.arange(n) * h
    z = np.arange(k0, k1 + 1) * h
    f = np.sqrt((x[:, None, None] - 0.5) ** 2 + (x[None, :, None] - 0.5) ** 2 + (z[None, None, :] - 0.5) ** 2)
    return adaptors.uniform({"f": f}, origin=(0.0, 0.0, k0 * h), spacing=(h, h, h))


def config(timeout=30):
    plots = {"p": {"type": "pseudocolor", "pipeline": "pl", "field": "f"}}
    render = {"image_width": 40, "image_height": 32, "camera": {"azimuth": 20}}
    return {"timeout": timeout,
            "pipelines": {"pl": {"c": {"type": "contour", "params": {"field": "f", "iso_values": [0.3]}}}},
            "scenes": {"s1": {"plots": plots, "renders": {"r": {**render, "image_prefix": f"{out}/a/s1_%04d"}}},
                       "s2": {"plots": plots, "renders": {"r": {**render, "image_prefix": f"{out}/b/s2_%04d"}}}},
            "extracts": {"frames": {"type": "adios2", "params": {"filename": f"{out}/frames.bp", "engine": "BP5",
                                                                 "scene": "s1"}}}}


report = {"rank": rank, "steps": {}, "errors": []}

if mode == "png":
    mesh = my_mesh()
    with adaptors.Adaptor(config(), comm) as a:
        for step in range(5):
            if rank == 0:
                if step == 1:
                    os.makedirs(f"{out}/a", exist_ok=True)
                    os.symlink("/dev/full", f"{out}/a/s1_0001.png")
                if step == 3:
                    os.rename(f"{out}/b", f"{out}/b.saved")
                    open(f"{out}/b", "w").close()
                if step == 4:
                    os.remove(f"{out}/b")
                    os.rename(f"{out}/b.saved", f"{out}/b")
            t0 = time.monotonic()
            ok = a.execute(step, 0.1 * step, mesh)
            report["steps"][step] = {"ok": ok, "seconds": time.monotonic() - t0, "frames": a.results()["frames"]}
        report["errors"] = a.results()["errors"]
    if rank == 0:
        from insitu.stream import FrameReader

        with FrameReader(f"{out}/frames.bp") as r:
            report["bp5_steps"] = [f.step for f in r]

elif mode == "stall":
    mesh = my_mesh()
    with adaptors.Adaptor(config(timeout=4), comm) as a:
        render = a._scenes.render
        if rank == 1:
            def slow(name, *args, **kw):
                if a._step == 1 and name == "s1":
                    time.sleep(6)  # longer than the timeout: a rank that hangs for a while
                return render(name, *args, **kw)

            a._scenes.render = slow
        for step in range(3):
            t0 = time.monotonic()
            ok = a.execute(step, 0.1 * step, mesh)
            report["steps"][step] = {"ok": ok, "seconds": time.monotonic() - t0}
        report["errors"] = a.results()["errors"]

elif mode == "skip":
    ctx = Context(comm, timeout=2)
    ctx.agree(None, "first")
    if rank == 1:
        time.sleep(4)  # skips the second agree: never arrives
        report["skipped"] = True
    else:
        t0 = time.monotonic()
        try:
            ctx.agree(None, "second")
            report["second"] = "returned"
        except Exception as e:
            report["second"] = f"{type(e).__name__}: {e}"
        report["seconds"] = time.monotonic() - t0
    ctx.close()

elif mode == "finalize":
    full = f"{out}/full.bp"
    if rank == 0:
        os.makedirs(full)
        for name in ("data.0", "md.0", "md.idx", "mmd.0", "profiling.json"):
            os.symlink("/dev/full", os.path.join(full, name))
    cfg = config()
    cfg["extracts"] = {
        "full": {"type": "adios2", "params": {"filename": full, "engine": "BP5", "scene": "s1"}},
        "frames": {"type": "adios2", "params": {"filename": f"{out}/frames.bp", "engine": "BP5", "scene": "s1"}},
        "live": {"type": "adios2", "params": {"filename": f"{out}/live", "engine": "SST", "scene": "s1",
                                              "steering": True}},
    }
    mesh = my_mesh()
    a = adaptors.Adaptor(cfg, comm)
    for step in range(2):
        report["steps"][step] = {"ok": a.execute(step, 0.1 * step, mesh)}
    relays = [r._proc for r in a._steer_readers]
    report["relay_pids"] = [p.pid for p in relays]
    try:
        a.finalize()
        report["finalize"] = "returned"
    except Exception as e:
        report["finalize"] = f"{type(e).__name__}: {e}"
    report["relays_running_after_finalize"] = [p.poll() is None for p in relays]
    report["errors"] = a.results()["errors"]
    if rank == 0:
        from insitu.stream import FrameReader

        with FrameReader(f"{out}/frames.bp") as r:
            report["bp5_steps"] = [f.step for f in r]
    del a  # the adaptor (and whatever ADIOS2 objects it still holds) goes now, not at exit

else:
    raise SystemExit(f"unknown mode {mode!r}")

# A file per rank: mpiexec may interleave the ranks' stdout in the middle of a line.
with open(os.path.join(out, f"result.{rank}.json"), "w") as f:
    json.dump(report, f)
print(f"rank {rank} done", flush=True)
