"""Extracts: what a step writes beside its images, by the ``type`` a configuration names.

:data:`EXTRACTS` maps each type to a function ``f(x: Extract) -> None`` run on every rank
for every step the extract is due; its keys are :data:`adaptors.config.SCHEMA`'s
``extracts`` section, which checks the parameters. ``adios2`` writes composited frames
(rank 0) through :class:`insitu.stream.FrameWriter`, with their plots' colour ranges, data
reductions and (``profile: true``) stage timings, ``adios2_mesh`` writes every rank's
domains into one stream of global arrays (:class:`adaptors.meshstream.MeshStream`: a
collective, rank 0 writes), ``hdf5`` writes the fields. Both ADIOS2 extracts carry the
VTX (``vtk.xml``) and Fides attributes ParaView and VisIt open them with. Streams
live in ``Extract.streams`` across steps; the adaptor closes them at ``finalize``.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Mapping

from insitu import arrays

from .mesh import MeshDomain
from .relay import relay

__all__ = ["EXTRACTS", "Extract", "write_hdf5"]


@dataclasses.dataclass
class Extract:
    """One extract's view of one step."""

    name: str
    params: Mapping[str, Any]
    step: int
    time: float
    rank: int
    size: int
    domains: list  # MeshDomain and adaptors.mesh.CellDomain
    images: Mapping[str, Any]  # "scene/render" -> the composited render (at rank 0)
    streams: dict[str, Any]  # extract name -> its open stream, kept across steps
    steer_readers: list  # viewers' steering streams the adaptor polls (rank 0)
    ctx: Any = None  # the job's Context (adaptors.context), for extracts with collectives (relay)


def _grids_only(x: Extract, kind: str) -> None:
    for d in x.domains:
        if not isinstance(d, MeshDomain):
            raise ValueError(f"extract {x.name!r} ({kind}): writes uniform grids; domain {d.domain_id} is a mesh "
                             "of cells (a relay extract writes any Blueprint mesh)")


def hdf5(x: Extract) -> None:
    """The fields of this rank's domains to an HDF5 file per step (and rank)."""
    _grids_only(x, "hdf5")
    write_hdf5(x.params["path"], x.domains, x.params.get("fields"), step=x.step, time=x.time, rank=x.rank,
               nranks=x.size)


def adios2_mesh(x: Extract) -> None:
    """Every rank's domains to the one stream ``<filename>`` (collective: gathered to rank 0,
    which writes)."""
    from .meshstream import MeshStream

    _grids_only(x, "adios2_mesh")
    prm = x.params
    stream = x.streams.get(x.name)
    if stream is None:
        if x.size > 1 and x.ctx is None:
            raise ValueError(f"extract {x.name!r} (adios2_mesh): {x.size} ranks need the adaptor's Context "
                             "(Extract.ctx) to gather their domains")
        stream = x.streams[x.name] = MeshStream(prm["filename"], prm["engine"], ctx=x.ctx,
                                                lossless=prm["lossless"], deadline=prm["deadline"])
    stream.write(x.domains, prm.get("fields"), step=x.step, time=x.time)


def adios2(x: Extract) -> None:
    """The composited frame of a scene (rank 0) to an ADIOS2 frame stream, with steering
    from viewers on ``<filename>.steer`` for SST."""
    if x.rank != 0:
        return
    prm = x.params
    want = prm.get("scene")
    keys = [k for k in x.images if want is None or k == want or k.split("/")[0] == want]
    if not keys:
        return
    from insitu.stream import FrameWriter, SteeringReader, steering_name
    from render.image import to_uint8

    stream = x.streams.get(x.name)
    if stream is None:
        stream = x.streams[x.name] = FrameWriter(prm["filename"], prm["engine"], lossless=prm["lossless"],
                                                 deadline=prm["deadline"])
        if prm["engine"] == "SST" and prm["steering"]:
            x.steer_readers.append(SteeringReader(steering_name(prm["filename"])))
    r = x.images[keys[0]]
    # The frame leaves the device inside write(), into the writer's page-locked buffer.
    stream.write(to_uint8(r.rgba, unpremultiply=True, host=False), step=x.step, time=x.time, camera=r.camera,
                 depth=r.depth if prm["depth"] else None, ranges=r.ranges, stats=r.stats, timings=r.timings,
                 attributes={"render": keys[0]})


#: Extract types by the name a configuration uses.
EXTRACTS: dict[str, Callable[[Extract], None]] = {"adios2": adios2, "adios2_mesh": adios2_mesh, "hdf5": hdf5,
                                                  "relay": relay}


def write_hdf5(path: str, domains: list[MeshDomain], fields: list[str] | None, *, step: int, time: float,
               rank: int, nranks: int) -> str:
    """Write this rank's domains (one group each: fields plus origin/spacing/dims) to an
    HDF5 file; with several ranks each writes ``<path>.rank<r>.h5``. Returns the path."""
    import h5py

    base = path % step if "%" in path else path
    if not base.endswith((".h5", ".hdf5")):
        base += ".h5"
    if nranks > 1:
        root, ext = os.path.splitext(base)
        base = f"{root}.rank{rank}{ext}"
    if os.path.dirname(base):
        os.makedirs(os.path.dirname(base), exist_ok=True)
    with h5py.File(base, "w") as f:
        f.attrs["step"], f.attrs["time"] = step, time
        for d in domains:
            g = f.create_group(f"domain_{d.domain_id:06d}")
            g.attrs["dims"], g.attrs["origin"], g.attrs["spacing"] = d.dims, d.origin, d.spacing
            g.attrs["real_cells_lo"], g.attrs["real_cells_hi"] = d.cells
            for name in fields or sorted(d.fields):
                fld = d.fields.get(name)
                if fld is None:
                    raise KeyError(f"hdf5 extract: domain {d.domain_id} has no field {name!r}; "
                                   f"fields: {', '.join(sorted(d.fields))}")
                ds = g.create_dataset(name, data=arrays.to_host(fld.values))
                ds.attrs["association"] = fld.association
    return base
