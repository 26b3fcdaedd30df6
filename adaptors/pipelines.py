"""Pipeline filters: run on this rank's domains.

A pipeline is an ordered map of filters; each takes a :class:`Dataset` and returns one.
A filter's input is the previous filter's output, or the pipeline named by its ``pipeline``
key (Ascent's chaining), or the simulation's mesh. Filters that need the whole job (global
ranges, the eikonal solve) do their part of a collective through
:class:`adaptors.context.Context`; every rank runs every pipeline in the same order.

Contours and slices are lazy (a :class:`Surface` the drawing contours per domain); the
filters that keep or cut cells (threshold, clip, clip_with_field, isovolume) make cell
domains (:mod:`adaptors.cells`); the field filters add fields.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

import numpy as np

from insitu import arrays

from . import cells as _cells
from .config import UNSUPPORTED_FILTERS, pipeline_inputs, pipeline_order
from .context import Context
from .errors import MeshError
from .mesh import CellDomain, Field, MeshDomain

__all__ = ["Dataset", "FILTERS", "UNSUPPORTED_FILTERS", "added_fields", "pipeline_inputs", "pipeline_order",
           "run_pipeline"]

Domain = MeshDomain | CellDomain


@dataclasses.dataclass
class Surface:
    """How a pipeline's output becomes triangles: contour `field` at `levels`, or, with
    `planes` (``((point, normal), ...)``), slice the domains by those planes."""

    field: str | None
    levels: list[float]
    color_default: str | None
    planes: tuple | None = None


@dataclasses.dataclass
class Dataset:
    domains: list[Domain]
    surface: Surface | None = None
    #: Field a volume plot of this dataset ray casts instead of the named one.
    volume_names: dict = dataclasses.field(default_factory=dict)
    #: Field a pseudocolor plot without one colours by, where no surface says (a threshold's).
    color_default: str | None = None


def _with_field(d: Domain, name: str, field: Field) -> Domain:
    return dataclasses.replace(d, fields={**d.fields, name: field})


def contour(ds: Dataset, params: Mapping, ctx: Context, steer: Mapping) -> Dataset:
    field = params["field"]
    _require(ds, field)
    levels = steer.get("iso_values", params.get("iso_values"))
    if levels is None:
        lo, hi = ctx.reduce_field(ds.domains, field, "min"), ctx.reduce_field(ds.domains, field, "max")
        n = int(params["levels"])
        levels = [lo + (hi - lo) * (i + 1) / (n + 1) for i in range(n)]
    return Dataset(ds.domains, Surface(field, [float(v) for v in levels], field), ds.volume_names)


def threshold(ds: Dataset, params: Mapping, ctx: Context, steer: Mapping) -> Dataset:
    """The cells whose field lies in [min_value, max_value] (a vertex field: all their
    points), whole: a pseudocolor plot draws the kept region's surface, as Ascent does."""
    field, lo, hi = params["field"], params["min_value"], params["max_value"]
    _require(ds, field)
    return Dataset([_cells.threshold(d, field, lo, hi) for d in ds.domains], None, {}, field)


def _bounds_point(ctx: Context, ds: Dataset, offsets) -> list[float]:
    """The point at `offsets` (each in [-1, 1]) of the job's data bounds (Ascent's 3slice)."""
    b = ctx.bounds(ds.domains)
    return [(b[2 * a] + b[2 * a + 1]) / 2 + offsets[a] * (b[2 * a + 1] - b[2 * a]) / 2 for a in range(3)]


def slice_(ds: Dataset, params: Mapping, ctx: Context, steer: Mapping) -> Dataset:
    plane = (tuple(map(float, params["point"])), tuple(map(float, params["normal"])))
    return Dataset(ds.domains, Surface(None, [0.0], ds.color_default, (plane,)), ds.volume_names)


def three_slice(ds: Dataset, params: Mapping, ctx: Context, steer: Mapping) -> Dataset:
    c = _bounds_point(ctx, ds, [params["x_offset"], params["y_offset"], params["z_offset"]])
    planes = tuple((tuple(c), tuple(float(a == b) for b in range(3))) for a in range(3))
    return Dataset(ds.domains, Surface(None, [0.0], ds.color_default, planes), ds.volume_names)


def clip(ds: Dataset, params: Mapping, ctx: Context, steer: Mapping) -> Dataset:
    given = [k for k in ("plane", "sphere", "box") if params.get(k)]
    if len(given) != 1:
        raise MeshError(f"clip: give exactly one of plane, sphere or box, got {', '.join(given) or 'none'}")
    how = given[0]
    shape = dict(params[how])
    if how == "sphere":
        need = {"center": "point", "radius": "number"}
    elif how == "box":
        need = {"min": "point", "max": "point"}
    else:
        need = {"point": "point", "normal": "point"}
    for k in need:
        if k not in shape:
            raise MeshError(f"clip/{how}: missing {k!r} (needs {', '.join(need)})")
        shape[k] = float(shape[k]) if need[k] == "number" else _xyz(shape[k], f"clip/{how}/{k}")
    shape["invert"] = params["invert"]
    return Dataset([_cells.clip(d, how, shape) for d in ds.domains], None, {})


def clip_with_field(ds: Dataset, params: Mapping, ctx: Context, steer: Mapping) -> Dataset:
    _require(ds, params["field"])
    return Dataset([_cells.clip(d, "field", params) for d in ds.domains], None, {}, params["field"])


def isovolume(ds: Dataset, params: Mapping, ctx: Context, steer: Mapping) -> Dataset:
    _require(ds, params["field"])
    if params["min_value"] > params["max_value"]:
        raise MeshError(f"isovolume: min_value {params['min_value']} > max_value {params['max_value']}")
    return Dataset([_cells.clip(d, "isovolume", params) for d in ds.domains], None, {}, params["field"])


def _xyz(v, path: str) -> list[float]:
    """A point as Ascent writes it ({x, y, z}) or as a list."""
    if isinstance(v, Mapping):
        v = [v.get(a, 0.0) for a in "xyz"]
    try:
        out = [float(x) for x in v]
    except (TypeError, ValueError):
        raise MeshError(f"{path}: expected {{x, y, z}} or [x, y, z], got {v!r}") from None
    if len(out) != 3 or not all(np.isfinite(out)):
        raise MeshError(f"{path}: expected three finite numbers, got {v!r}")
    return out


def _field_filter(make: Callable[[Domain, Mapping], tuple[str, Field]], *, vector: bool = False,
                  inputs: tuple[str, ...] = ("field",)):
    """A filter adding the field `make` computes on each domain (a vector's components too,
    as ``<name>/x|y|z``, the way the adaptor names an mcarray's). `vector`: its input is a
    vector, named as the simulation named its mcarray; `inputs`: the params naming input fields."""
    def run(ds: Dataset, params: Mapping, ctx: Context, steer: Mapping) -> Dataset:
        for k in inputs:
            if params.get(k):
                _require(ds, params[k], vector=vector)
        out = []
        for d in ds.domains:
            name, f = make(d, params)
            d = _with_field(d, name, f)
            for c, v in (getattr(f, "components", None) or {}).items():
                d = _with_field(d, f"{name}/{c}", Field(f.association, v))
            out.append(d)
        return Dataset(out, ds.surface, ds.volume_names, ds.color_default)
    return run


def _vector_of(d: Domain, name: str) -> Field:
    """Vector field `name`: an mcarray the adaptor read as ``<name>/magnitude`` and its components."""
    f = d.fields.get(name)
    return f if f is not None and getattr(f, "components", None) else d.fields.get(f"{name}/magnitude", f)


def _components(d: Domain, name: str) -> list:
    """The components of vector field `name` (an mcarray read as <name>/<c>), in order."""
    f = _vector_of(d, name)
    comps = getattr(f, "components", None)
    if comps:
        return list(comps.values())
    raise MeshError(f"domain {d.domain_id}: field {name!r} is not a vector (an mcarray with components)")


def _magnitude(d: Domain, p: Mapping) -> tuple[str, Field]:
    f = _vector_of(d, p["field"])
    comps = _components(d, p["field"])
    xp = arrays.get_array_module(comps[0])
    # any shape (a grid's 3-D arrays, a cell mesh's 1-D ones)
    mag = xp.sqrt(sum(c.astype(xp.float64) ** 2 for c in comps))
    return added_fields("vector_magnitude", p)[0], Field(f.association, mag)


def _component(d: Domain, p: Mapping) -> tuple[str, Field]:
    f = _vector_of(d, p["field"])
    comps = _components(d, p["field"])
    i = int(p["component"])
    if not 0 <= i < len(comps):
        raise MeshError(f"vector_component: component {i} of {p['field']!r}, which has {len(comps)}")
    return added_fields("vector_component", p)[0], Field(f.association, comps[i])


def _gradient(d: Domain, p: Mapping) -> tuple[str, Field]:
    name = added_fields("gradient", p)[0]
    if isinstance(d, MeshDomain):
        v = d.vertex_array(p["field"])
        xp = arrays.get_array_module(v)
        g = xp.gradient(v.astype(xp.float64), *map(float, d.spacing))  # central inside, one-sided at the faces
        return name, _vector("vertex", g)
    from render.cells.fields import gradient

    g = gradient(d.mesh, d.vertex_array(p["field"]))
    return name, _vector("vertex", [g[:, a] for a in range(3)])


def _vector(association: str, comps) -> Field:
    from .mesh import VectorField

    return VectorField(association, dict(zip("xyz", comps)))


def _recenter(d: Domain, p: Mapping) -> tuple[str, Field]:
    name, want = p["field"], p["association"]
    f = d.fields[name]
    out = added_fields("recenter", p)[0]
    if f.association == want:
        return out, f
    if isinstance(d, MeshDomain):
        if want == "vertex":
            return out, Field("vertex", d.vertex_array(name))
        v = f.values.astype(arrays.get_array_module(f.values).float64)
        cellv = sum(v[i:v.shape[0] - 1 + i, j:v.shape[1] - 1 + j, k:v.shape[2] - 1 + k]
                    for i in (0, 1) for j in (0, 1) for k in (0, 1)) / 8
        return out, Field("element", cellv)
    from render.cells.fields import cell_to_point, point_to_cell

    conv = cell_to_point if want == "vertex" else point_to_cell
    return out, Field(want, conv(d.mesh, f.values))


def _log(base: str):
    """Ascent's log/log2/log10: the field's logarithm (values below clamp_min_value first
    raised to it); element or vertex as the field is."""
    def make(d: Domain, p: Mapping) -> tuple[str, Field]:
        f = d.fields[p["field"]]
        xp = arrays.get_array_module(f.values)
        v = f.values.astype(xp.float64)
        if p.get("clamp_min_value") is not None:
            v = xp.maximum(v, float(p["clamp_min_value"]))
        fn = {"log": xp.log, "log2": xp.log2, "log10": xp.log10}[base]
        with np.errstate(divide="ignore", invalid="ignore"):  # log of 0 or less: -inf / nan, as VTK-m's
            out = fn(v)
        return added_fields(base, p)[0], Field(f.association, out)
    return make


def _composite(d: Domain, p: Mapping) -> tuple[str, Field]:
    names = [p[k] for k in ("field1", "field2", "field3") if p.get(k)]
    fields = [d.fields[n] for n in names]
    assoc = {f.association for f in fields}
    if len(assoc) != 1:
        raise MeshError(f"composite_vector: fields {', '.join(map(repr, names))} are not all vertex or all element "
                        "fields")
    xp = arrays.get_array_module(fields[0].values)
    return added_fields("composite_vector", p)[0], _vector(assoc.pop(), [f.values.astype(xp.float64) for f in fields])


def _jacobian(d: Domain, name: str) -> list[list]:
    """J[i][j] = d(component i)/d(axis j) of vector field `name` at the domain's points
    (element fields recentred first; a 2-component vector gets a zero third)."""
    f = _vector_of(d, name)
    keys = list(getattr(f, "components", None) or {})
    if not 2 <= len(keys) <= 3:
        raise MeshError(f"domain {d.domain_id}: field {name!r} is not a vector of 2 or 3 components (an mcarray)")
    comps = [d.vertex_array(f"{name}/{k}") if f"{name}/{k}" in d.fields else f.components[k] for k in keys]
    xp = arrays.get_array_module(comps[0])
    if isinstance(d, MeshDomain):
        sp = [float(s) for s in d.spacing]
        rows = [list(xp.gradient(c.astype(xp.float64), *sp)) for c in comps]
    else:
        from render.cells.fields import gradient

        g = gradient(d.mesh, xp.stack([c.astype(xp.float64) for c in comps], axis=1))  # (n, k, 3)
        rows = [[g[:, i, j] for j in range(3)] for i in range(len(comps))]
    if len(rows) == 2:
        rows.append([xp.zeros_like(rows[0][0])] * 3)
    return rows


def _divergence(d: Domain, p: Mapping) -> tuple[str, Field]:
    j = _jacobian(d, p["field"])
    return added_fields("divergence", p)[0], Field("vertex", j[0][0] + j[1][1] + j[2][2])


def _vorticity(d: Domain, p: Mapping) -> tuple[str, Field]:
    j = _jacobian(d, p["field"])
    curl = [j[2][1] - j[1][2], j[0][2] - j[2][0], j[1][0] - j[0][1]]
    return added_fields("vorticity", p)[0], _vector("vertex", curl)


def _qcriterion(d: Domain, p: Mapping) -> tuple[str, Field]:
    """Q = (|Omega|^2 - |S|^2) / 2 = -sum_ij J_ij J_ji / 2 (as vtkGradientFilter)."""
    j = _jacobian(d, p["field"])
    q = -0.5 * (j[0][0] ** 2 + j[1][1] ** 2 + j[2][2] ** 2) - (j[0][1] * j[1][0] + j[0][2] * j[2][0]
                                                               + j[1][2] * j[2][1])
    return added_fields("qcriterion", p)[0], Field("vertex", q)


def eikonal(ds: Dataset, params: Mapping, ctx: Context, steer: Mapping) -> Dataset:
    from .eikonal_filter import arrival_times

    for d in ds.domains:
        if isinstance(d, CellDomain):
            raise MeshError(f"eikonal: solves on uniform grids; domain {d.domain_id} is a mesh of cells "
                            f"(topology {d.topology!r})")
    times = arrival_times([d for d in ds.domains if isinstance(d, MeshDomain)], params, ctx)
    out = [_with_field(d, params["output"], Field("vertex", t)) for d, t in zip(ds.domains, times)]
    return Dataset(out, ds.surface, ds.volume_names)


#: Filters by the type name a configuration uses (Ascent's names).
FILTERS: dict[str, Callable[..., Dataset]] = {
    "contour": contour, "threshold": threshold, "eikonal": eikonal, "slice": slice_, "3slice": three_slice,
    "clip": clip, "clip_with_field": clip_with_field, "isovolume": isovolume,
    "vector_magnitude": _field_filter(_magnitude, vector=True),
    "vector_component": _field_filter(_component, vector=True),
    "gradient": _field_filter(_gradient), "recenter": _field_filter(_recenter),
    "log": _field_filter(_log("log")), "log2": _field_filter(_log("log2")), "log10": _field_filter(_log("log10")),
    "composite_vector": _field_filter(_composite, inputs=("field1", "field2", "field3")),
    "divergence": _field_filter(_divergence, vector=True), "vorticity": _field_filter(_vorticity, vector=True),
    "qcriterion": _field_filter(_qcriterion, vector=True)}



def added_fields(ftype: str, params: Mapping) -> list[str]:
    """The names of the fields a filter of type `ftype` adds."""
    out = params.get("output_name")
    f = params.get("field")
    if ftype == "vector_magnitude":
        return [out or f"{f}_magnitude"]
    if ftype == "vector_component":
        return [out or f"{f}_{int(params['component'])}"]
    if ftype == "gradient":
        g = out or f"{f}_gradient"
        return [g, *(f"{g}/{c}" for c in "xyz")]
    if ftype == "recenter":
        return [out or f]
    if ftype in ("log", "log2", "log10"):
        return [out or f"{ftype}({f})"]
    if ftype in ("composite_vector", "vorticity"):
        v = out or ("vorticity" if ftype == "vorticity" else "composite_vector")
        n = 3 if ftype == "vorticity" or params.get("field3") else 2
        return [v, *(f"{v}/{c}" for c in "xyz"[:n])]
    if ftype in ("divergence", "qcriterion"):
        return [out or ftype]
    return []


def _require(ds: Dataset, field: str, *, vector: bool = False) -> None:
    for d in ds.domains:
        if field not in d.fields and not (vector and f"{field}/magnitude" in d.fields):
            raise MeshError(f"domain {d.domain_id}: no field {field!r}; fields: {', '.join(sorted(d.fields))}")


def run_pipeline(name: str, filters: Mapping[str, Mapping], domains: list[Domain], ctx: Context,
                 steer: Mapping[str, Any], outputs: Mapping[str, Dataset] | None = None) -> Dataset:
    """Run pipeline `name` on this rank's domains; `steer` holds steered values by
    filter name ({"f1": {"iso_values": [...]}}). A filter with an ``input`` starts from
    that pipeline's output in `outputs` (run first: :func:`pipeline_order`)."""
    ds = Dataset(list(domains))
    for fname, f in filters.items():
        if f.get("input"):
            if outputs is None or f["input"] not in outputs:
                raise ValueError(f"pipelines/{name}/{fname}: pipeline {f['input']!r} has not run")
            ds = outputs[f["input"]]
        try:
            ds = FILTERS[f["type"]](ds, f["params"], ctx, steer.get(fname, {}))
        except Exception as e:
            e.add_note(f"in pipelines/{name}/{fname} ({f['type']})")
            raise
    return ds
