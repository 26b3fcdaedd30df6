"""Run under mpiexec: every ghost cell equals the global array at that position.

Usage: mpiexec -n N python tests/mpi/halo_check.py BLOCKS_PER_RANK [--backend numpy|cupy]
       [--transport NAME]

Exits non-zero (and prints the first bad block) on failure. The reference is the
global array padded with np.pad (wrap for periodic axes), independent of insitu.
"""

import argparse
import itertools
import sys

import numpy as np
from mpi4py import MPI

import insitu
from insitu import Domain, HaloExchange


def reference(G, g, periodic):
    if all(periodic):
        return np.pad(G, g, mode="wrap")
    P = np.pad(G.astype(np.float64), g, mode="constant", constant_values=np.nan)
    for a in range(3):  # wrap only the periodic axes
        if periodic[a]:
            P = np.moveaxis(P, a, 0)
            P[:g] = P[-2 * g:-g]
            P[-g:] = P[g:2 * g]
            P = np.moveaxis(P, 0, a)
    return P


def interior_mask(shape, g):
    m = np.zeros(shape, bool)
    m[g:-g, g:-g, g:-g] = True
    return m


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("per_rank", type=int)
    ap.add_argument("--backend", default="numpy")
    ap.add_argument("--transport", default=None)
    ap.add_argument("--dims", type=int, nargs=3, default=(23, 18, 20))
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    rank, size = comm.rank, comm.size
    xp = np
    if args.backend == "cupy":
        import cupy as xp

        insitu.arrays.select_device(comm)
    nb = size * args.per_rank
    cases = list(itertools.product((np.float32, np.float64), (1, 2), (False, True, (True, False, True))))
    failures = 0
    for dtype, g, periodic in cases:
        per = (periodic,) * 3 if isinstance(periodic, bool) else periodic
        rng = np.random.default_rng(1234)
        G = rng.standard_normal(args.dims).astype(dtype)
        # Uneven splits: MPI_Dims_create-like factors over non-divisible extents.
        dom = Domain.create(args.dims, nblocks=nb, ghost=g, periodic=per, nranks=size)
        R = reference(G, g, per)
        blocks = {}
        for gid in dom.blocks_of(rank):
            b = dom.block(gid)
            a = np.full(b.padded_shape, -999, dtype)
            a[b.interior] = G[tuple(slice(l, h) for l, h in zip(b.lo, b.hi))]
            blocks[gid] = xp.asarray(a)
        with HaloExchange(dom, comm, transport=args.transport) as ex:
            with insitu.count_transfers() as setup:
                ex.exchange(blocks)  # the first call sets up (uploads copy tables on GPUs)
            for a in blocks.values():  # spoil the ghosts: the next rounds must refill them
                a[...] = xp.where(xp.asarray(interior_mask(a.shape, g)), a, -999)
            with insitu.count_transfers() as steady:
                ex.exchange(blocks)
                ex.exchange(blocks)
        for gid, a in blocks.items():
            b = dom.block(gid)
            got = insitu.arrays.to_host(a) if args.backend == "cupy" else a
            want = R[tuple(slice(l, l + n) for l, n in zip(b.lo, b.padded_shape))]
            inside = ~np.isnan(want)
            if not np.array_equal(got[inside], want[inside].astype(dtype)):
                bad = np.argwhere(inside & (got != want))[:3]
                print(f"FAIL rank {rank} block {gid} dtype={np.dtype(dtype)} g={g} periodic={per} "
                      f"blocks={dom.blocks}: first bad local indices {bad.tolist()}", flush=True)
                failures += 1
        kinds = sorted(set().union(*comm.allgather(set(ex.peer_transport.values()))))
        steady_calls = comm.allreduce(steady.calls)
        setup_bytes = comm.allreduce(setup.bytes)
        if rank == 0 and (dtype, g, periodic) == cases[-1]:
            print(f"transports={kinds} setup_bytes={setup_bytes} steady_calls={steady_calls}", flush=True)
    total = comm.allreduce(failures)
    if rank == 0:
        print(f"{'OK' if total == 0 else 'FAILED'} ranks={size} blocks={nb} cases={len(cases)} failures={total}")
    sys.exit(1 if total else 0)


if __name__ == "__main__":
    main()
