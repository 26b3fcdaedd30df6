"""The embedded engine on an mpirun job: halo shuffles, key shuffles and moves.

Usage: mpiexec -n N python tests/mpi/engine_check.py SPILL_DIR [--backend numpy|cupy] [--no-budget]

Each rank holds 2 blocks of a (20, 18, 16) domain. Checked on rank 0 against a single
array computed with NumPy alone:
  * 4 Jacobi sweeps with a halo shuffle before each (periodic in x and z, zero outside
    in y), under a cache budget smaller than the blocks (so blocks spill and reload);
  * a key shuffle: every block sends a partial sum per key (gid % 3) and the sums
    grouped at the key's rank add up to the sums of the whole array;
  * a move of every block to the next rank, and back.
Prints "OK ranks=N" on rank 0, and the host<->device transfers the sweeps made on all
ranks ("transfers=K"; with --no-budget nothing spills, so on GPUs that must be 0).
"""

import argparse
import sys

import numpy as np
from mpi4py import MPI

import insitu
from insitu import Domain
from insitu.engine import EmbeddedEngine

ap = argparse.ArgumentParser()
ap.add_argument("spill_dir")
ap.add_argument("--backend", default="numpy")
ap.add_argument("--no-budget", action="store_true")
args = ap.parse_args()
comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
xp = np
if args.backend == "cupy":
    import cupy as xp

    insitu.arrays.select_device(comm)  # before any array is made: one GPU per rank where there are several

DIMS, PERIODIC, SWEEPS = (20, 18, 16), (True, False, True), 4


def sweep(block):
    """One Jacobi sweep of the interior (ghosts kept)."""
    out = block.copy()
    out[1:-1, 1:-1, 1:-1] = (block[2:, 1:-1, 1:-1] + block[:-2, 1:-1, 1:-1] + block[1:-1, 2:, 1:-1]
                             + block[1:-1, :-2, 1:-1] + block[1:-1, 1:-1, 2:] + block[1:-1, 1:-1, :-2]) / 6
    return out


def partial_sums(block, gid):
    inner = block[1:-1, 1:-1, 1:-1]
    return {gid % 3: inner.sum(keepdims=True).reshape(1), "all": inner.sum(keepdims=True).reshape(1)}


def add_up(parts):
    total = parts[0].copy()
    for p in parts[1:]:
        total += p
    return total


def reference(glob):
    a = glob.copy()
    for _ in range(SWEEPS):
        p = np.pad(a, [(1, 1)] * 3, mode="constant")
        for ax in range(3):
            if PERIODIC[ax]:
                lo, hi = [slice(None)] * 3, [slice(None)] * 3
                lo[ax], hi[ax] = slice(0, 1), slice(-1, None)
                src_lo, src_hi = [slice(None)] * 3, [slice(None)] * 3
                src_lo[ax], src_hi[ax] = slice(-2, -1), slice(1, 2)
                p[tuple(lo)] = p[tuple(src_lo)]
                p[tuple(hi)] = p[tuple(src_hi)]
        a = sweep(p)[1:-1, 1:-1, 1:-1]
    return a


glob = np.random.default_rng(7).random(DIMS)
dom = Domain.create(DIMS, nblocks=2 * size, ghost=1, periodic=PERIODIC, nranks=size)
local = {}
for g in dom.blocks_of(rank):
    b = dom.block(g)
    a = np.zeros(b.padded_shape)  # zero ghosts: the boundary value outside non-periodic faces
    a[b.interior] = glob[tuple(slice(lo, hi) for lo, hi in zip(b.lo, b.hi))]
    local[g] = xp.asarray(a)

block_bytes = max(a.nbytes for a in local.values())
budget = None if args.no_budget else block_bytes + block_bytes // 2
engine = EmbeddedEngine(comm, device=None if args.backend == "numpy" else "auto",
                        budget_bytes=budget, host_budget_bytes=None if budget is None else block_bytes,
                        spill_dir=args.spill_dir, timeout=60)
bad = []

# 1. iterative job, halo shuffle every sweep, under a small cache budget
blocks = engine.blocks(local, domain=dom).cache_gpu()
with insitu.count_transfers() as tc:
    for _ in range(SWEEPS):
        blocks = engine.gpu_shuffle(blocks, "halo", domain=dom).exec_gpu(sweep).cache_gpu()
transfers = comm.allreduce(tc.calls)
stats = engine.worker.cache.stats()
got = engine.gather(blocks)
if rank == 0:
    ref = reference(glob)
    for g, a in got.items():
        b = dom.block(g)
        want = ref[tuple(slice(lo, hi) for lo, hi in zip(b.lo, b.hi))]
        if not np.allclose(a[b.interior], want, rtol=0, atol=1e-12):
            bad.append(f"halo sweeps: block {g} differs by {np.abs(a[b.interior] - want).max()}")
if budget is not None and (stats.spills_to_host + stats.spills_to_disk == 0 or stats.reloads == 0):
    bad.append(f"rank {rank}: expected spills and reloads under the small budget, got {stats}")

# 2. key shuffle: partial sums grouped by key, reduced where the key lands
sums = engine.gpu_shuffle(blocks.exec_gpu(partial_sums, None, with_key=True), "key")
totals = engine.gather(sums.exec_gpu(add_up))
if rank == 0:
    final = engine.gather(blocks)  # (collective: every rank takes part)
else:
    engine.gather(blocks)
if rank == 0:
    ref = reference(glob)
    want = {k: 0.0 for k in (0, 1, 2)}
    for g in range(dom.nblocks):
        b = dom.block(g)
        want[g % 3] += ref[tuple(slice(lo, hi) for lo, hi in zip(b.lo, b.hi))].sum()
    want["all"] = ref.sum()
    want = {k: v for k, v in want.items() if k == "all" or any(g % 3 == k for g in range(dom.nblocks))}
    if set(totals) != set(want):
        bad.append(f"key shuffle: keys {sorted(map(repr, totals))}, expected {sorted(map(repr, want))}")
    for k, v in want.items():
        if k in totals and not np.isclose(float(totals[k][0]), v, rtol=1e-12):
            bad.append(f"key shuffle: key {k!r} sums to {float(totals[k][0])}, expected {v}")

# 3. move every block to the next rank and back
before = {g: insitu.arrays.to_host(v) for g, v in blocks.recv_gpu(host=False).items()}
moved = engine.move(blocks, {g: (rank + 1) % size for g in before})
want_here = set(dom.blocks_of((rank - 1) % size))
if set(moved.keys()) != want_here:
    bad.append(f"move on rank {rank}: holds {sorted(moved.keys())}, expected {sorted(want_here)}")
back = engine.move(moved, {g: dom.owners[g] for g in moved.keys()})
after = back.recv_gpu()
if set(after) != set(before) or any(not np.array_equal(after[g], before[g]) for g in before):
    bad.append(f"move on rank {rank}: blocks changed on the way")

engine.close()
bad = comm.gather(bad, root=0)
if rank == 0:
    bad = [b for per in bad for b in per]
    for b in bad:
        print("FAIL", b, flush=True)
    print(f"{'OK' if not bad else 'FAILED'} ranks={size} transfers={transfers}", flush=True)
sys.exit(1 if rank == 0 and bad else 0)
