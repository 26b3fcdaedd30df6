"""A job that streams frames: rank 0 writes, every rank "simulates" (sleeps) each step.

Usage: mpiexec -n N python tests/mpi/frames_writer.py NAME COUNT SIZE [--lossless] [--work-ms W] [--engine SST]

Frame `step` holds the pixels ``pattern(step, SIZE)``; rank 0 prints
"wrote COUNT frames in S s" at the end.
"""

import argparse
import time

import numpy as np
from mpi4py import MPI

from insitu.stream import FrameWriter


def pattern(step: int, size: int) -> np.ndarray:
    """The pixels of frame `step` (the reader regenerates them to compare)."""
    return np.random.default_rng(step).integers(0, 256, (size, size, 4), dtype=np.uint8)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("name")
    ap.add_argument("count", type=int)
    ap.add_argument("size", type=int)
    ap.add_argument("--lossless", action="store_true")
    ap.add_argument("--work-ms", type=float, default=0.0)
    ap.add_argument("--engine", default="SST")
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    writer = FrameWriter(args.name, args.engine, lossless=args.lossless) if comm.rank == 0 else None
    frames = [pattern(s, args.size) for s in range(min(args.count, 8))]  # made ahead: the loop times writing
    comm.Barrier()
    t0 = time.perf_counter()
    for step in range(args.count):
        time.sleep(args.work_ms / 1000)
        if writer is not None:
            img = frames[step] if step < len(frames) else pattern(step, args.size)
            writer.write(img, step=step, time=step * 0.1, camera=np.arange(9.0), ranges={"T": (0.0, step)})
        comm.Barrier()  # the simulation's ranks move together
    elapsed = time.perf_counter() - t0
    if writer is not None:
        writer.close()
        print(f"wrote {args.count} frames in {elapsed:.3f} s", flush=True)


if __name__ == "__main__":
    main()
