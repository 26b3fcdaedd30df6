"""Extracts beside the frames: fields to HDF5. (Frames go out through
:class:`insitu.stream.FrameWriter`; domains in transit through :mod:`adaptors.intransit`.)
"""

from __future__ import annotations

import os

from insitu import arrays

from .mesh import Domain

__all__ = ["write_hdf5"]

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
