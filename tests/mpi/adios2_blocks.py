"""Ranks writing a decomposed grid through the ``adios2_mesh`` stream (argv: out path, steps).

Four blocks of a 12 x 8 x 5-cell grid (x split at 5, y at 3), dealt round-robin to the
ranks, each with one ghost layer on its inner sides holding garbage: what reaches the
stream must be the real nodes and cells only. Fields: ``T`` (vertex, float64),
``E`` (element, float32), both exact functions of the global index and the step.
"""

import sys

import numpy as np
from mpi4py import MPI

from adaptors.context import Context
from adaptors.mesh import parse, uniform
from adaptors.meshstream import MeshStream

CELLS = (12, 8, 5)
ORIGIN = (0.5, -1.0, 2.0)
SPACING = (0.25, 0.5, 1.0)
SPLITS = ([0, 5, 12], [0, 3, 8], [0, 5])
GARBAGE = -1e9


def blocks():
    """Each block's cells [lo, hi) along x, y, z, in domain id order."""
    return [((x0, y0, 0), (x1, y1, 5)) for x0, x1 in zip(SPLITS[0], SPLITS[0][1:])
            for y0, y1 in zip(SPLITS[1], SPLITS[1][1:])]


def domain(b: int, step: int) -> dict:
    lo, hi = blocks()[b]
    glo = [1 if lo[a] > 0 else 0 for a in range(3)]
    ghi = [1 if hi[a] < CELLS[a] else 0 for a in range(3)]
    c0 = [lo[a] - glo[a] for a in range(3)]
    c1 = [hi[a] + ghi[a] for a in range(3)]
    i, j, k = np.meshgrid(*(np.arange(c0[a], c1[a] + 1) for a in range(3)), indexing="ij")
    t = (i + 100.0 * j + 10000.0 * k + 0.5 * step).astype(np.float64)
    ic, jc, kc = (g[:-1, :-1, :-1] for g in (i, j, k))
    e = (7 * ic + 3 * jc + 11 * kc + step).astype(np.float32)
    real_n = tuple(slice(glo[a], glo[a] + hi[a] - lo[a] + 1) for a in range(3))
    real_c = tuple(slice(glo[a], glo[a] + hi[a] - lo[a]) for a in range(3))
    mt, me = np.full_like(t, GARBAGE), np.full_like(e, GARBAGE)
    mt[real_n], me[real_c] = t[real_n], e[real_c]
    origin = [ORIGIN[a] + c0[a] * SPACING[a] for a in range(3)]
    return uniform({"T": mt, "E": me}, origin=origin, spacing=SPACING, element=["E"],
                   ghost=tuple(zip(glo, ghi)), domain_id=10 + b)


def main() -> None:
    out, steps = sys.argv[1], int(sys.argv[2])
    comm = MPI.COMM_WORLD
    ctx = Context(comm, timeout=60)
    stream = MeshStream(out, "BP5", ctx=ctx)
    for step in range(steps):
        ctx.step_begin()
        mine = [domain(b, step) for b in range(len(blocks())) if b % comm.Get_size() == comm.Get_rank()]
        stream.write(parse(mine), None, step=step, time=0.25 * step)
    stream.close()
    ctx.close()
    if comm.Get_rank() == 0:
        print(f"wrote {steps} steps from {comm.Get_size()} ranks", flush=True)


if __name__ == "__main__":
    main()
