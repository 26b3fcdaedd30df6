"""In transit: the simulation's domains over ADIOS2 to analysis ranks that run the adaptor.

An MPMD job puts the visualization on ranks of its own::

    mpirun -n 2 python examples/eikonal_insitu.py --config examples/intransit_sim.yaml \\
         : -n 1 python -m adaptors.intransit --writers 2 --stream out/mesh \\
                --config examples/intransit_analysis.yaml

The simulation's configuration has an ``adios2_mesh`` extract: each step the simulation
ranks' domains go into one stream ``<stream>`` of global arrays (SST by default: the
ADIOS2 wheel is serial, so the domains are gathered to simulation rank 0, which writes;
see :mod:`adaptors.meshstream`). Analysis rank 0 reads it (SST serves it one reader) and
hands each analysis rank the blocks ``i % nanalysis == its rank``; every analysis rank
rebuilds its Blueprint domains and runs its own :class:`~adaptors.Adaptor` over the
analysis ranks (compositing among them). Device
fields are staged to the host for ADIOS2 (counted). Both sides split
``MPI_COMM_WORLD`` by MPMD application number.

The streams themselves (SST's checks and deadlines) are :mod:`adaptors.meshstream`'s.
"""

from __future__ import annotations

import argparse
import sys

from .adaptor import Adaptor
from .meshstream import MeshStream, app_comm, read_steps

__all__ = ["MeshStream", "app_comm", "main", "read_steps"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m adaptors.intransit",
                                 description="Analysis ranks of an in-transit job: read the simulation's "
                                             "domains from ADIOS2 and run the adaptor on them.")
    ap.add_argument("--writers", type=int, default=None,
                    help="simulation ranks (informational: they all write one stream)")
    ap.add_argument("--stream", required=True, help="the simulation's adios2_mesh filename")
    ap.add_argument("--config", required=True, help="the analysis side's adaptor configuration")
    ap.add_argument("--engine", default="SST", choices=("SST", "BP5"))
    ap.add_argument("--timeout", type=float, default=120.0)
    args = ap.parse_args(argv)

    comm = app_comm()
    rank, size = comm.Get_rank(), comm.Get_size()
    steps = failed = 0
    with Adaptor(args.config, comm) as a:
        for step, time, mesh in _steps(comm, args.stream, args.engine, args.timeout):
            failed += not a.execute(step, time, mesh)
            steps += 1
        errors = a.results()["errors"]
    if rank == 0:
        writers = f"{args.writers} writer(s)" if args.writers else "the simulation"
        print(f"in transit: {steps} steps from {writers} on {size} analysis rank(s), "
              f"failed_steps={failed}", flush=True)
        for e in errors:
            print("error:", e, file=sys.stderr, flush=True)
    return 1 if failed else 0


def _steps(comm, stream: str, engine: str, timeout: float):
    """``(step, time, this rank's domains)``: rank 0 reads the stream and deals the blocks."""
    rank, size = comm.Get_rank(), comm.Get_size()
    steps = read_steps(stream, engine=engine, timeout=timeout) if rank == 0 else None
    while True:
        deal = None
        if steps is not None:
            got = next(steps, None)
            deal = [None] * size if got is None else [(got[0], got[1], got[2][r::size]) for r in range(size)]
        mine = deal[0] if size == 1 and deal is not None else comm.scatter(deal, root=0)
        if mine is None:
            return
        yield mine


if __name__ == "__main__":
    raise SystemExit(main())
