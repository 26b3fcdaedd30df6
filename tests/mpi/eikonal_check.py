"""Run under mpiexec: the decomposed eikonal solve equals the single-block solve.

Usage: mpiexec -n N python tests/mpi/eikonal_check.py BLOCKS_PER_RANK [--backend numpy|cupy]
Prints "OK ranks=N blocks=B iterations=I maxrel=E" on rank 0; exits 1 on a mismatch.
"""

import argparse
import sys

import numpy as np
from mpi4py import MPI

from insitu import Domain, arrays
from solvers.eikonal import EikonalSolver, solve
from solvers.eikonal.speed import random_smooth

ap = argparse.ArgumentParser()
ap.add_argument("per_rank", type=int)
ap.add_argument("--backend", default="numpy")
ap.add_argument("--shape", type=int, nargs=3, default=(26, 22, 24))
args = ap.parse_args()
comm = MPI.COMM_WORLD
xp = np
if args.backend == "cupy":
    import cupy as xp

    arrays.select_device(comm)
shape = tuple(args.shape)
spacing = (0.04, 0.05, 0.045)
seeds = [(3, 4, 5), (20, 15, 18)]
f = random_smooth(seed=7)
dom = Domain.create(shape, nblocks=comm.size * args.per_rank, nranks=comm.size, spacing=spacing)
s = EikonalSolver(dom, f, seeds, comm, xp=xp, local_iters=3)
iters = s.solve()
T = s.gather()
s.close()
if comm.rank == 0:
    x, y, z = (np.arange(n) * h for n, h in zip(shape, spacing))
    sp = np.broadcast_to(f(x[:, None, None], y[None, :, None], z[None, None, :]), shape).copy()
    ref = solve(sp, seeds, spacing)
    rel = float(np.max(np.abs(T - ref) / np.maximum(ref, 1e-300)))
    ok = rel <= 1e-6
    print(f"{'OK' if ok else 'FAILED'} ranks={comm.size} blocks={dom.nblocks} split={dom.blocks} "
          f"iterations={iters} maxrel={rel:.2e}", flush=True)
    sys.exit(0 if ok else 1)
