"""The simulation's domains as ADIOS2 steps: :class:`MeshStream` writes them (one stream
per simulation rank), :func:`read_steps` reads them back as Blueprint domains.

The transport of the in-transit path (:mod:`adaptors.intransit`); the adaptor's
``adios2_mesh`` extract writes through it. SST as :mod:`insitu.stream` does it (it has
no authentication): readers open only contact files of the user's own
(:class:`~insitu.stream.ContactFileError` otherwise), contact files name the loopback
interface unless ``$INSITU_SST_INTERFACE`` says otherwise, and a lossless writer waits
for its reader at most ``deadline`` seconds per step and in ``close``
(:class:`~insitu.stream.ReaderTimeoutError`, the reader dropped). Device fields are
staged to the host for ADIOS2 (counted).
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from insitu import arrays
from insitu.stream import DEADLINE, FrameWriter, open_contact, sst_parameters
from insitu.stream import LOSSLESS as _LOSSLESS

from .mesh import MeshDomain

__all__ = ["LOSSLESS", "MeshStream", "app_comm", "read_steps"]

#: In transit nothing may be lost: the writer waits for its reader and for queue room (up to a deadline).
LOSSLESS = {**_LOSSLESS, "QueueLimit": "2"}


def app_comm(world=None):
    """This MPMD application's ranks: ``world`` split by ``MPI_APPNUM`` (all of it for a plain job)."""
    from mpi4py import MPI

    world = world or MPI.COMM_WORLD
    app = world.Get_attr(MPI.APPNUM)
    return world.Split(0 if app is None else int(app), world.Get_rank())


class MeshStream:
    """Writes one rank's domains, step after step, as ADIOS2 variables.

    SST goes through :class:`insitu.stream.FrameWriter`'s machinery: the writer runs in a
    process of its own, its contact file names the loopback interface unless told
    otherwise, and no reader holds the simulation longer than `deadline`.

    Parameters
    ----------
    name : str
        The extract's filename: this rank writes the stream ``<name>.rank<rank>``.
    engine : {"SST", "BP5"}
    rank : int
    lossless : bool
        SST: wait for the analysis reader and for queue room, up to `deadline` (in transit
        nothing is dropped while a reader keeps up).
    deadline : float or None
        SST: the most seconds one ``write`` waits for the reader (lossless: to connect, or to
        take a step off the full queue) and ``close`` waits for it to release its steps.
        Past it ``write``/``close`` raise :class:`~insitu.stream.ReaderTimeoutError` naming
        the stream and the reader, which is dropped; the stream is opened again and steps
        written until a reader connects are dropped (counted in ``dropped``). It must exceed
        the analysis's time per step. None waits without limit. Default
        :data:`insitu.stream.DEADLINE`.
    interface : str, optional
        SST: the network interface written into the contact file
        (:func:`insitu.stream.sst_parameters`; default ``$INSITU_SST_INTERFACE`` or "lo").
    """

    def __init__(self, name: str, engine: str = "SST", *, rank: int = 0, lossless: bool = True,
                 deadline: float | None = DEADLINE, interface: str | None = None) -> None:
        self.path = f"{name}.rank{rank}"
        lossless_queue = {"QueueLimit": LOSSLESS["QueueLimit"]} if lossless and str(engine).upper() == "SST" else {}
        self._writer = FrameWriter(self.path, engine, lossless=lossless, parameters=lossless_queue,
                                   deadline=deadline, interface=interface)

    @property
    def steps(self) -> int:
        """Steps written."""
        return self._writer.steps

    @property
    def dropped(self) -> int:
        """Steps dropped: lossless SST after a deadline, until a reader connects again;
        default SST, steps replaced by a newer one while the writer process was busy."""
        return self._writer.dropped

    def write(self, domains: list[MeshDomain], fields: list[str] | None, *, step: int, time: float) -> bool:
        """Write this rank's `domains` (`fields` of each; default all) as one step.

        Returns
        -------
        False when the step was dropped (see `deadline`), else True.

        Raises
        ------
        insitu.stream.ReaderTimeoutError
            SST: the reader held the writer past `deadline` and was dropped.
        """
        ids = np.array([d.domain_id for d in domains], np.int64)
        out = [("step", np.array([step], np.int64)), ("time", np.array([time], np.float64)), ("domains", ids)]
        for d in domains:
            p = f"d{d.domain_id}/"
            out.append((p + "meta", np.array([*d.dims, *d.origin, *d.spacing, *d.cells[0], *d.cells[1]], np.float64)))
            for name in fields or sorted(d.fields):
                f = d.fields[name]
                # Index [i, j, k] in C order on the wire: the reader's arrays are plain.
                out.append((p + ("v/" if f.association == "vertex" else "e/") + name,
                            np.ascontiguousarray(arrays.to_host(f.values))))
        return self._writer.write_variables(out)

    def close(self) -> None:
        """Close the stream; SST waits at most `deadline` for the reader to release its steps
        (:class:`~insitu.stream.ReaderTimeoutError` past it)."""
        self._writer.close()


def _domain(stream, did: int, variables) -> dict:
    p = f"d{did}/"
    meta = stream.read(p + "meta")
    dims = [int(v) for v in meta[0:3]]
    lo, hi = meta[9:12].astype(int), meta[12:15].astype(int)
    fields = {}
    for var in variables:
        if var.startswith(p + "v/") or var.startswith(p + "e/"):
            assoc = "vertex" if var[len(p)] == "v" else "element"
            fields[var[len(p) + 2:]] = {"association": assoc, "topology": "mesh", "values": stream.read(var)}
    cdims = [n - 1 for n in dims]
    if any(lo[a] > 0 or hi[a] < cdims[a] for a in range(3)):
        g = np.ones(cdims, np.int32)
        g[tuple(slice(a, b) for a, b in zip(lo, hi))] = 0
        fields["ascent_ghosts"] = {"association": "element", "topology": "mesh", "values": g}
    return {"coordsets": {"coords": {"type": "uniform", "dims": dict(zip("ijk", dims)),
                                     "origin": dict(zip("xyz", meta[3:6].tolist())),
                                     "spacing": dict(zip(("dx", "dy", "dz"), meta[6:9].tolist()))}},
            "topologies": {"mesh": {"type": "uniform", "coordset": "coords"}},
            "fields": fields, "state": {"domain_id": did}}


def read_steps(paths: list[str], *, engine: str = "SST", timeout: float = 60.0,
               interface: str | None = None) -> Iterator[tuple[int, float, list]]:
    """Yield ``(step, time, [Blueprint domain, ...])`` from the streams at `paths`, step
    by step, until every writer has ended its stream.

    SST opens only contact files of the user's own (:func:`insitu.stream.read_contact`),
    waiting up to `timeout` for each, and advertises `interface` (default
    ``$INSITU_SST_INTERFACE`` or "lo").

    Raises
    ------
    insitu.stream.ContactFileError
        A stream's contact file someone else could have written; the message names it and its owner.
    """
    import adios2

    ad = adios2.Adios()
    streams = []
    try:
        for path in paths:
            io = ad.declare_io(f"insitu-mesh-reader:{path}")
            io.set_engine(engine)
            if engine == "SST":
                io.set_parameters({"OpenTimeoutSecs": str(max(1, int(timeout))), **sst_parameters(interface)})
                streams.append(open_contact(path, lambda copy: adios2.Stream(io, copy, "r"), timeout=timeout))
            else:
                streams.append(adios2.Stream(io, path, "r"))
        while True:
            status = [s.begin_step(timeout=timeout) for s in streams]
            ok = [st == adios2.bindings.StepStatus.OK for st in status]
            if not any(ok):
                return
            if not all(ok):
                raise RuntimeError(f"in transit: the streams ended unevenly ({dict(zip(paths, map(str, status)))})")
            mesh, step, time = [], None, None
            for s in streams:
                variables = s.available_variables()
                step = int(s.read("step")[0])
                time = float(s.read("time")[0])
                for did in s.read("domains").astype(int).tolist():
                    mesh.append(_domain(s, did, variables))
            for s in streams:
                s.end_step()
            yield step, time, mesh
    finally:
        for s in streams:
            s.close()
