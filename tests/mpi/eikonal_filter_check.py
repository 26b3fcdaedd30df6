"""The eikonal filter on an mpirun job: EikonalSolver's answer, failures agreed by the Context.

Usage: mpiexec -n N python tests/mpi/eikonal_filter_check.py

Each rank hands its blocks of a 4-block split (one ghost node beyond the real cells) to the
filter; the arrival times must equal, bit for bit, those of EikonalSolver run directly over
the same decomposition and communicator (converged, and stopped after 3 steps). Then the
last rank's speed has a zero: that rank raises the solver's ValueError, every other rank a
PeerFailedError naming it, well within the Context's timeout (no rank waits in a halo
exchange). Prints "OK ranks=N" on rank 0.
"""

import sys
import time

import numpy as np
from mpi4py import MPI

import adaptors
from adaptors.mesh import parse
from adaptors.context import Context, PeerFailedError
from adaptors.pipelines import run_pipeline
from insitu import Domain
from solvers.eikonal import EikonalSolver

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
dims, h = (21, 17, 13), 0.1
speed = 1 + np.random.default_rng(0).random(dims)
dom = Domain.create(dims, nblocks=4, nranks=size, spacing=(h,) * 3)


def block_domains(s):
    out, real = [], []
    for g in dom.blocks_of(rank):
        b = dom.block(g)
        lo = [max(a - 1, 0) for a in b.lo]
        hi = [min(a + 1, n) for a, n in zip(b.hi, dims)]
        sl = tuple(slice(a, c) for a, c in zip(lo, hi))
        ghost = tuple((a - l, c - (a2 + 1 if a2 < n else a2)) for a, l, c, a2, n in zip(b.lo, lo, hi, b.hi, dims))
        out.append(adaptors.uniform({"s": s[sl]}, origin=[l * h for l in lo], spacing=(h,) * 3, ghost=ghost,
                                    domain_id=g))
        real.append(tuple(slice(a, min(c + 1, n)) for a, c, n in zip(b.lo, b.hi, dims)))
    return out, real


def eikonal(domains, ctx, **params):
    cfg = adaptors.load({"pipelines": {"p": {"e": {"type": "eikonal", "params": {
        "speed": "s", "seeds": [[0.3, 0.4, 0.5]], "output": "T", **params}}}}})
    ds = run_pipeline("p", cfg["pipelines"]["p"], parse(domains), ctx, {})
    return [d.vertex_values("T") for d in ds.domains]


bad = []
ctx = Context(comm, timeout=30.0)
domains, real = block_domains(speed)
for max_iter in (10000, 3):
    ours = eikonal(domains, ctx, tol=0.0, max_iter=max_iter)
    with EikonalSolver(dom, speed, [(3, 4, 5)], comm) as solver:
        solver.solve(0.0, max_iter, on_limit="stop")
        ref = solver.gather(root=0)
    ref = comm.bcast(ref, root=0)
    ref[np.isinf(ref)] = np.nan
    for T, sl in zip(ours, real):
        if not np.array_equal(T, ref[sl], equal_nan=True):
            bad.append(f"rank {rank}, max_iter {max_iter}: the filter differs from EikonalSolver by "
                       f"{np.nanmax(np.abs(T - ref[sl])):.3e}")

slow = speed.copy()
b = dom.block(dom.blocks_of(size - 1)[0])
slow[b.lo] = 0.0
domains, _ = block_domains(slow)
t0 = time.monotonic()
try:
    eikonal(domains, ctx, tol=0.0)
    bad.append(f"rank {rank}: a zero speed on rank {size - 1} raised nothing")
except ValueError as e:
    if rank != size - 1 or "speed: must be finite and > 0 everywhere" not in str(e):
        bad.append(f"rank {rank}: unexpected {e!r}")
except PeerFailedError as e:
    if rank == size - 1 or f"rank {size - 1} failed" not in str(e) or "eikonal: set-up" not in str(e):
        bad.append(f"rank {rank}: unexpected {e!r}")
if time.monotonic() - t0 > 10.0:
    bad.append(f"rank {rank}: the failure took {time.monotonic() - t0:.1f} s to be agreed")
ctx.close()

bad = [x for per in comm.gather(bad, root=0) or [] for x in per]
if rank == 0:
    for x in bad:
        print("FAIL", x, flush=True)
    print(f"{'OK' if not bad else 'FAILED'} ranks={size}", flush=True)
sys.exit(0)
