"""Run under mpiexec -n 2 with a fault: rank 1 breaks the exchange, rank 0 reports it.

Faults: silent (rank 1 joins after rank 0 gave up), stops (rank 1 exchanges once, then stops),
late (after one exchange both switch dtype, so both set up again; rank 1 comes after
rank 0 gave up: both must time out), dtype, ghost, transport (rank 1 differs), pairs
(per-peer transports whose ends differ).
Optional second argument BACKEND:TRANSPORT (e.g. ``cupy:p2p``, one GPU per rank) for
the device paths.
Each rank prints "rank R: ErrorType: message" and exits 0 if it raised as expected.
"""

import sys
import time

import numpy as np
from mpi4py import MPI

from insitu import Domain, HaloExchange, MismatchError, PeerTimeoutError

fault = sys.argv[1]
backend, forced = (sys.argv[2].split(":") + [None])[:2] if len(sys.argv) > 2 else ("numpy", None)
comm = MPI.COMM_WORLD
rank = comm.rank
odd = rank == 1
xp = np
if backend == "cupy":
    import cupy as xp

    import insitu

    insitu.arrays.select_device(comm)
dtype = np.float64 if (fault == "dtype" and odd) else np.float32
ghost = 2 if (fault == "ghost" and odd) else 1
transport = "mpi" if (fault == "transport" and odd) else forced
if fault == "pairs":
    transport = {0: "mpi"} if odd else {1: "ipc"}
dom = Domain.create((8, 8, 8), nblocks=4, ghost=ghost, nranks=2)
blocks = {g: xp.zeros(dom.block(g).padded_shape, dtype) for g in dom.blocks_of(rank)}

if fault == "silent" and odd:
    time.sleep(4)  # longer than rank 0's timeout: it must give up, not hang
    # Then this rank's late half of the set-up's communicator duplication completes the one
    # rank 0 abandoned: collectives on COMM_WORLD stay in the same order on both ranks, so
    # the closing Barrier pairs with rank 0's (Open MPI hangs where a Barrier meets a dup).
    comm.Idup()[1].Wait()
    comm.Barrier()
    sys.exit(0)
timeout = (1.0 if rank == 0 else 2.0) if fault == "late" else 2.0
ex = HaloExchange(dom, comm, transport=transport, timeout=timeout)
if fault == "late":
    comm.Barrier()  # rank 0's 1 s must not be spent waiting for a slow start of rank 1
    ex.exchange(blocks)  # the private communicator exists from here on
    blocks = {g: b.astype(np.float64) for g, b in blocks.items()}  # a new key: set-up again
    if odd:
        # Rank 0 has given up on the second set-up by now; what it left pending must
        # not pair with this rank's half and leave it in a collective rank 0 never enters.
        time.sleep(3)
if fault == "stops":
    ex.exchange(blocks)
    if odd:
        time.sleep(4)
        comm.Barrier()
        sys.exit(0)

t0 = time.monotonic()
try:
    ex.exchange(blocks)
except (MismatchError, PeerTimeoutError) as exc:
    print(f"rank {rank}: {type(exc).__name__}: {exc} (after {time.monotonic() - t0:.1f} s)", flush=True)
    ok = True
else:
    print(f"rank {rank}: no error", flush=True)
    ok = False
if fault in ("silent", "stops", "late"):
    comm.Barrier()
sys.exit(0 if ok else 1)
