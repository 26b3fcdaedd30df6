"""Pipeline filters: contour, threshold, eikonal; run on this rank's domains.

A pipeline is an ordered map of filters; each takes a :class:`Dataset` and returns one.
Filters that need the whole job (global ranges, the eikonal solve) do their part of a
collective through :class:`Context`; every rank runs every pipeline in the same order.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

import numpy as np

from insitu import arrays

from .errors import AdaptorError, MeshError
from .mesh import Domain, Field

__all__ = ["Context", "Dataset", "FILTERS", "PeerFailedError", "run_pipeline"]


class PeerFailedError(AdaptorError):
    """Another rank failed in a step this rank was part of."""


class Context:
    """What filters and plots need from the job: global reductions and bounds."""

    def __init__(self, comm=None) -> None:
        self.comm = comm
        self.rank, self.size = (0, 1) if comm is None else (comm.Get_rank(), comm.Get_size())

    def allreduce(self, value: float, op: str) -> float:
        if self.comm is None:
            return value
        from mpi4py import MPI

        return self.comm.allreduce(value, op={"min": MPI.MIN, "max": MPI.MAX, "sum": MPI.SUM}[op])

    def reduce_field(self, domains: list[Domain], name: str, op: str) -> float:
        """``min``/``max``/``sum``/``avg`` of a field over the real part of every domain
        of every rank (NaN ignored); collective."""
        vals, count = [], 0
        for d in domains:
            if name not in d.fields:
                raise MeshError(f"domain {d.domain_id}: no field {name!r}; fields: {', '.join(sorted(d.fields))}")
            v = d.real_values(name)
            xp = arrays.get_array_module(v)
            if op in ("min", "max"):
                r = _reduce(getattr(xp, f"nan{op}") if v.dtype.kind == "f" else getattr(xp, op), v)
            else:
                r = _reduce(xp.nansum if v.dtype.kind == "f" else xp.sum, v)
                count += int(arrays.scalar_to_host(xp.count_nonzero(~xp.isnan(v)))) if v.dtype.kind == "f" else v.size
            vals.append(float(arrays.scalar_to_host(r)))
        if op == "min":
            return self.allreduce(min(vals, default=np.inf), "min")
        if op == "max":
            return self.allreduce(max(vals, default=-np.inf), "max")
        total = self.allreduce(float(sum(vals)), "sum")
        if op == "sum":
            return total
        n = self.allreduce(float(count), "sum")
        return total / n if n else float("nan")

    def agree(self, error: BaseException | None, what: str) -> None:
        """Collective: raise on every rank if `error` happened on any (before a collective
        step, so that no rank waits for one that gave up)."""
        if self.comm is None:
            if error is not None:
                raise error
            return
        msgs = self.comm.allgather(None if error is None else f"{type(error).__name__}: {error}")
        if error is not None:
            raise error
        bad = [(r, m) for r, m in enumerate(msgs) if m is not None]
        if bad:
            raise PeerFailedError(f"{what}: rank {bad[0][0]} failed ({bad[0][1]})"
                                  + (f" and {len(bad) - 1} more rank(s)" if len(bad) > 1 else ""))

    def bounds(self, domains: list[Domain]) -> tuple:
        """The world box of all real cells of the job: (x0, x1, y0, y1, z0, z1)."""
        lo = [min((d.box[2 * a] for d in domains), default=np.inf) for a in range(3)]
        hi = [max((d.box[2 * a + 1] for d in domains), default=-np.inf) for a in range(3)]
        lo = [self.allreduce(float(v), "min") for v in lo]
        hi = [self.allreduce(float(v), "max") for v in hi]
        return (lo[0], hi[0], lo[1], hi[1], lo[2], hi[2])


def _reduce(fn, v):
    """`fn` over all of `v` in two stages: along the last axis, then over the (contiguous)
    rest. A strided view (a domain's real part) reduced to one value at once runs in a
    single thread block on the GPU; the first stage spreads it over the whole device."""
    return fn(fn(v, axis=-1)) if v.ndim > 1 else fn(v)


@dataclasses.dataclass
class Surface:
    """How a pipeline's output becomes triangles: contour `field` at `levels`."""

    field: str
    levels: list[float]
    color_default: str


@dataclasses.dataclass
class Dataset:
    domains: list[Domain]
    surface: Surface | None = None
    #: Field a volume plot of this dataset ray casts instead of the named one (a threshold's masked copy).
    volume_names: dict = dataclasses.field(default_factory=dict)

    def surface_parts(self, color: str | None) -> list[tuple]:
        """Per domain: (verts, faces, normals, values) of the surface, coloured by `color`."""
        from render.contour import marching_cubes

        if self.surface is None:
            raise ValueError("this pipeline makes no surface; end it with a contour or threshold filter")
        s = self.surface
        parts = []
        for d in self.domains:
            # The whole domain goes in, its real cells are contoured: ghost samples shape
            # the normals at the domain's faces exactly as a neighbour's samples would.
            vol = d.vertex_array(s.field)
            vals = d.vertex_array(color or s.color_default)
            parts.append(marching_cubes(vol, s.levels, spacing=d.spacing, origin=d.origin, values=vals,
                                        region=d.cells))
        return parts


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


def run_pipeline(name: str, filters: Mapping[str, Mapping], domains: list[Domain], ctx: Context,
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
