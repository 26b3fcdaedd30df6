"""Faults in a shuffle: a rank that stays away; ranks sending arrays to a rank that is not there.

Usage: mpiexec -n 2 python tests/mpi/engine_faults.py silent|badrank
Prints "rank 0: <ExceptionType>: <message>" for what rank 0 raised.
"""

import sys
import time

import numpy as np
from mpi4py import MPI

from insitu.engine import EmbeddedEngine

fault = sys.argv[1]
comm = MPI.COMM_WORLD
engine = EmbeddedEngine(comm, device=None, timeout=2.0)
blocks = engine.blocks({comm.rank: np.full(5, float(comm.rank))})
try:
    if fault == "silent" and comm.rank == 1:
        time.sleep(4)  # rank 0 must give up after its 2 s, not hang
    elif fault == "badrank":
        engine.move(blocks, {comm.rank: 9})
    else:
        engine.move(blocks, {comm.rank: 1 - comm.rank})
except Exception as e:
    print(f"rank {comm.rank}: {type(e).__name__}: {e}", flush=True)
comm.Barrier()
