"""Transport conformance, written once: every rank sends every other rank a buffer.

Usage: mpiexec -n N python tests/mpi/transport_check.py NAME [--backend numpy|cupy]

Rank r sends (r + 1) * 1000 + p + arange(count) to rank p, with count varying per pair,
three rounds in a row (buffers are reused). Prints "OK transport=NAME" on rank 0.
"""

import argparse
import sys
import time

import numpy as np
from mpi4py import MPI

import insitu
from insitu.transports import PeerInfo, TransportContext, alloc_area, get_transport

ap = argparse.ArgumentParser()
ap.add_argument("name")
ap.add_argument("--backend", default="numpy")
args = ap.parse_args()
comm = MPI.COMM_WORLD.Dup()
rank, size = comm.rank, comm.size
xp = np
if args.backend == "cupy":
    import cupy as xp

    insitu.arrays.select_device(MPI.COMM_WORLD)
infos = comm.allgather(PeerInfo.here(rank, args.backend))
ctx = TransportContext(comm, rank, infos, timeout=30.0)
peers = [p for p in range(size) if p != rank]
count = lambda src, dst: 5 + 3 * src + 7 * dst  # noqa: E731
# One area: send segments, then receive segments, as the halo exchange lays it out.
sizes = [count(rank, p) for p in peers] + [count(p, rank) for p in peers]
area = alloc_area(sum(sizes), np.float64, args.backend)
bounds = np.concatenate([[0], np.cumsum(sizes)])
views = [area[bounds[i]:bounds[i + 1]] for i in range(len(sizes))]
send = dict(zip(peers, views[:len(peers)]))
recv = dict(zip(peers, views[len(peers):]))
T = get_transport(args.name)(ctx, send, recv, area)
received = []
with insitu.count_transfers() as tc:
    for rnd in range(3):
        deadline = time.monotonic() + 30
        T.prepare(deadline)
        for p in peers:
            send[p][...] = xp.arange(count(rank, p), dtype=np.float64) + (rank + 1) * 1000 + p + rnd
        T.start()
        T.wait(deadline)
        received.append({p: recv[p].copy() for p in peers})  # same-device copy, uncounted
        T.release()
    T.close()
bad = 0
for rnd, got in enumerate(received):
    for p in peers:
        want = np.arange(count(p, rank), dtype=np.float64) + (p + 1) * 1000 + rank + rnd
        g = insitu.arrays.to_host(got[p])
        if not np.array_equal(g, want):
            print(f"FAIL rank {rank} from {p} round {rnd}: {g[:4]} != {want[:4]}", flush=True)
            bad += 1
staged = comm.allreduce(tc.calls)
bad = comm.allreduce(bad)
if rank == 0:
    print(f"{'OK' if not bad else 'FAILED'} transport={args.name} ranks={size} staged_calls={staged}")
sys.exit(1 if bad else 0)
