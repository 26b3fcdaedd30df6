"""Extracts: frames through ADIOS2 (a BP5 file or a live SST stream) and fields to HDF5.

Frames leave the GPU once, as the final composited 8-bit image (counted by
:mod:`insitu.arrays`). Each ADIOS2 step holds ``image`` (H, W, 4) uint8, ``step``,
``time`` and ``camera`` (eye, look_at, up); the attributes name the render and the
field ranges. SST defaults never make a simulation wait for a viewer: no rendezvous,
a short queue whose oldest frames are discarded.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

import numpy as np

from insitu import arrays

from .mesh import Domain

__all__ = ["FrameStream", "SST_DEFAULTS", "write_hdf5"]

#: SST engine parameters for in-situ use (a simulation never waits for a viewer).
SST_DEFAULTS = {"RendezvousReaderCount": "0", "QueueLimit": "4", "QueueFullPolicy": "Discard"}


class FrameStream:
    """Writes composited frames (at the root rank) as ADIOS2 steps."""

    def __init__(self, filename: str, engine: str = "BP5", parameters: Mapping[str, str] | None = None) -> None:
        import adios2

        if os.path.dirname(filename):
            os.makedirs(os.path.dirname(filename), exist_ok=True)
        self.filename, self.engine_type = filename, engine
        self._adios = adios2.Adios()
        io = self._adios.declare_io(f"insitu-frames:{filename}")
        io.set_engine(engine)
        params = dict(SST_DEFAULTS) if engine == "SST" else {}
        params.update(parameters or {})
        if params:
            io.set_parameters(params)
        self._stream = adios2.Stream(io, filename, "w")
        self.steps = 0

    def write(self, rgba, *, step: int, time: float, camera=None, attributes: Mapping[str, Any] | None = None) -> None:
        """Write one frame: premultiplied float RGBA or uint8 (NumPy or CuPy)."""
        from render.image import to_uint8

        img = np.ascontiguousarray(to_uint8(rgba, unpremultiply=True))
        s = self._stream
        s.begin_step()
        s.write("image", img, list(img.shape), [0, 0, 0], list(img.shape))
        s.write("step", np.array([step], np.int64), [1], [0], [1])
        s.write("time", np.array([time], np.float64), [1], [0], [1])
        if camera is not None:
            cam = np.array([*camera.position, *camera.look_at, *camera.up], np.float64)
            s.write("camera", cam, [9], [0], [9])
        if self.steps == 0:
            for k, v in (attributes or {}).items():
                s.write_attribute(k, v)
        s.end_step()
        self.steps += 1

    def close(self) -> None:
        self._stream.close()


def write_hdf5(path: str, domains: list[Domain], fields: list[str] | None, *, step: int, time: float,
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
