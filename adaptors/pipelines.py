"""Pipeline filters: contour, threshold, eikonal; run on this rank's domains.

A pipeline is an ordered map of filters; each takes a :class:`Dataset` and returns one.
Filters that need the whole job (global ranges, the eikonal solve) do their part of a
collective through :class:`adaptors.context.Context`; every rank runs every pipeline in the same order.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

from insitu import arrays

from .context import Context
from .errors import MeshError
from .mesh import MeshDomain, Field

__all__ = ["Dataset", "FILTERS", "run_pipeline"]


@dataclasses.dataclass
class Surface:
    """How a pipeline's output becomes triangles: contour `field` at `levels`."""

    field: str
    levels: list[float]
    color_default: str


@dataclasses.dataclass
class Dataset:
    domains: list[MeshDomain]
    surface: Surface | None = None
    #: Field a volume plot of this dataset ray casts instead of the named one (a threshold's masked copy).
    volume_names: dict = dataclasses.field(default_factory=dict)


def _with_field(d: MeshDomain, name: str, field: Field) -> MeshDomain:
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
    field, lo, hi = params["field"], params["min_value"], params["max_value"]
    _require(ds, field)
    out = []
    kept, masked = f"{field}__kept", f"{field}__thresholded"
    for d in ds.domains:
        f = d.fields[field]
        xp = arrays.get_array_module(f.values)
        inside = (f.values >= lo) & (f.values <= hi)
        d = _with_field(d, kept, Field(f.association, inside.astype(xp.float32)))
        # NaN is transparent to the ray caster: volume plots of this pipeline see the kept cells only.
        out.append(_with_field(d, masked, Field(f.association, xp.where(inside, f.values.astype(xp.float64), xp.nan))))
    # Its surface: the boundary of the kept region (the indicator's 0.5 level), coloured by the field.
    return Dataset(out, Surface(kept, [0.5], field), {**ds.volume_names, field: masked})


def eikonal(ds: Dataset, params: Mapping, ctx: Context, steer: Mapping) -> Dataset:
    from .eikonal_filter import arrival_times

    times = arrival_times(ds.domains, params, ctx)
    out = [_with_field(d, params["output"], Field("vertex", t)) for d, t in zip(ds.domains, times)]
    return Dataset(out, ds.surface, ds.volume_names)


#: Filters by the type name a configuration uses.
FILTERS: dict[str, Callable[..., Dataset]] = {"contour": contour, "threshold": threshold, "eikonal": eikonal}


def _require(ds: Dataset, field: str) -> None:
    for d in ds.domains:
        if field not in d.fields:
            raise MeshError(f"domain {d.domain_id}: no field {field!r}; fields: {', '.join(sorted(d.fields))}")


def run_pipeline(name: str, filters: Mapping[str, Mapping], domains: list[MeshDomain], ctx: Context,
                 steer: Mapping[str, Any]) -> Dataset:
    """Run pipeline `name` on this rank's domains; `steer` holds steered values by
    filter name ({"f1": {"iso_values": [...]}})."""
    ds = Dataset(list(domains))
    for fname, f in filters.items():
        try:
            ds = FILTERS[f["type"]](ds, f["params"], ctx, steer.get(fname, {}))
        except Exception as e:
            e.add_note(f"in pipelines/{name}/{fname} ({f['type']})")
            raise
    return ds
