"""Pipeline filters over meshes of cells (:class:`adaptors.mesh.CellDomain`).

Filters that keep or cut cells (threshold, clip, isovolume) and the field filters
(vector magnitude and component, gradient, recentre) run here on cell domains; a uniform
grid (:class:`adaptors.mesh.MeshDomain`) handed to a cell filter is first read as
hexahedra (:func:`as_cells`: its points, cells and fields as flat arrays, a copy of each
field in Blueprint's order). Contours and slices stay lazy (the pipeline's
:class:`adaptors.pipelines.Surface`): the drawing contours each domain where it is drawn.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np

from insitu import arrays

from .errors import MeshError
from .mesh import CellDomain, Field, MeshDomain, VectorField

__all__ = ["as_cells", "carried", "clip", "field_values", "threshold"]


def as_cells(d: MeshDomain | CellDomain) -> CellDomain:
    """`d` as a :class:`CellDomain`: a grid's nodes and hexahedra (its ghost cells marked as
    ghosts), every field flattened ``i`` fastest (a copy unless stored that way)."""
    if isinstance(d, CellDomain):
        return d
    from render.cells import grid_cells

    some = next(iter(d.fields.values()), None)
    xp = arrays.get_array_module(some.values) if some is not None and some.components is None else np
    if some is not None and some.components is not None:
        xp = arrays.get_array_module(next(iter(some.components.values())))
    axes = [xp.asarray(d.origin[a] + d.spacing[a] * np.arange(d.dims[a], dtype=np.float64)) for a in range(3)]
    mesh = grid_cells(*axes)
    fields = {}
    for name, f in d.fields.items():
        if isinstance(f, VectorField):
            continue  # its components and magnitude are fields of their own
        fields[name] = Field(f.association, f.values.ravel(order="F"))
    lo, hi = d.cells
    cdims = tuple(n - 1 for n in d.dims)
    real = xp.zeros(cdims, bool)
    real[lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2]] = True
    ghosts = None if bool(real.all()) else ~real.ravel(order="F")
    return CellDomain(d.domain_id, mesh, fields, ghosts, 3, "mesh")


def field_values(d: CellDomain, name: str, *, point: bool = True):
    """Field `name` of `d` at the points (element fields recentred) or as stored."""
    return d.vertex_array(name) if point else d.field(name).values


def carried(d: CellDomain) -> tuple[dict, dict]:
    """`d`'s (point fields, cell fields) as name -> values, for the filters to carry over
    (the ghost mask travels as the cell field ``\\0ghosts``)."""
    pf = {k: f.values for k, f in d.fields.items() if f.association == "vertex" and f.values.ndim == 1}
    cf = {k: f.values for k, f in d.fields.items() if f.association == "element" and f.values.ndim == 1}
    if d.ghosts is not None:
        cf["\0ghosts"] = d.ghosts
    return pf, cf


def _domain(d: CellDomain, res) -> CellDomain:
    """The :class:`CellDomain` of a filter's result (render.cells' ``Clipped``)."""
    cf = dict(res.cell_fields)
    ghosts = cf.pop("\0ghosts", None)
    fields = {k: Field("vertex", v) for k, v in res.point_fields.items()}
    fields.update({k: Field("element", v) for k, v in cf.items()})
    return dataclasses.replace(d, mesh=res.mesh, fields=fields, ghosts=ghosts, axes=None)


def threshold(d: MeshDomain | CellDomain, field: str, lo: float, hi: float) -> CellDomain:
    """The cells of `d` whose `field` lies in ``[lo, hi]`` (a vertex field: all their points),
    whole, with every field carried over."""
    from render.cells.threshold import threshold as keep_cells

    c = as_cells(d)
    f = c.field(field)
    pf, cf = carried(c)
    return _domain(c, keep_cells(c.mesh, f.values, lo, hi, association=f.association, point_fields=pf,
                                 cell_fields=cf))


def clip(d: MeshDomain | CellDomain, how: str, params: Mapping[str, Any]) -> CellDomain:
    """`d` clipped: `how` is ``plane`` (point, normal), ``sphere`` (center, radius), ``box``
    (min, max), ``field`` (field, value) or ``isovolume`` (field, min_value, max_value);
    ``invert`` keeps the other side. Ascent's (VTK-m's) sense: what is kept is where the
    implicit function is positive -- the side a plane's normal points to, the outside of a
    sphere or a box, field values above the clip value."""
    from render.cells import clip_box, clip_field, clip_plane, clip_sphere, isovolume

    c = as_cells(d)
    pf, cf = carried(c)
    kw = {"point_fields": pf, "cell_fields": cf}
    inv = bool(params.get("invert", False))
    if how == "plane":
        res = clip_plane(c.mesh, params["point"], params["normal"], keep="below" if inv else "above", **kw)
    elif how == "sphere":
        res = clip_sphere(c.mesh, params["center"], params["radius"], inside=inv, **kw)
    elif how == "box":
        res = clip_box(c.mesh, params["min"], params["max"], inside=inv, **kw)
    elif how == "field":
        v = c.vertex_array(params["field"])
        res = clip_field(c.mesh, v, params["clip_value"], keep="below" if inv else "above", **kw)
    elif how == "isovolume":
        v = c.vertex_array(params["field"])
        res = isovolume(c.mesh, v, params["min_value"], params["max_value"], **kw)
    else:
        raise MeshError(f"clip: unknown kind {how!r}")
    return _domain(c, res)
