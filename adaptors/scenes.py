"""Scenes: plots rendered per rank, composited across ranks, written as frames.

Each rank draws only its own domains, on its engine's worker: one command package per
render hands the domains' fields to the worker (by reference: it lives in the rank's
process) and runs :func:`adaptors.draw.draw_block` on each, as the Spark engine's
daemons do. Pseudocolor plots rasterize the pipeline's surface (OpenGL for host meshes,
CUDA rasterization for device ones), volume plots ray cast each domain over the box of
its real cells. Surfaces composite across ranks by
depth, volumes by "over" in visibility order; at the root the volume goes over the
surfaces and both over the background. Images stay on their device until the final
frame is written.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np

from insitu import arrays
from insitu.profile import StageTimer
from render.annotate import annotate, foreground_for
from render.camera import from_settings as camera_from_settings

from . import draw as _draw
from .draw import (BlockSpec, DomainImage, Renderers, View, describe_domain, draw_block, flatten, front_to_back,
                   merge_domains)
from .context import Context
from .pipelines import Dataset

__all__ = ["Rendered", "SceneRenderer", "frame_path"]


@dataclasses.dataclass
class Rendered:
    """One render's composited result at the root rank."""

    rgba: Any  # (H, W, 4) premultiplied float, over the background
    depth: Any  # (H, W) float32 surface depth (inf where none), or None without surfaces
    camera: Any  # render.camera.Camera
    ranges: dict  # plotted field -> (lo, hi)
    path: str | None  # the PNG to write, if the render has an image_prefix
    stats: dict = dataclasses.field(default_factory=dict)  # plotted field -> {"min", "max", "mean"} of its data
    timings: dict = dataclasses.field(default_factory=dict)  # profile: true: this step's stages so far (seconds)


def frame_path(prefix: str, step: int, *, name: str | None = None) -> str:
    """``out/frame_%04d`` and step 7 -> ``out/frame_0007.png``; a prefix without ``%`` is
    Ascent's: the step appended as is (``out/image_`` -> ``out/image_7.png``). With Ascent's
    `name` (image_name): that file every step."""
    if name:
        return name if name.endswith(".png") else name + ".png"
    try:
        p = prefix % step if "%" in prefix else f"{prefix}{step}"
    except (TypeError, ValueError):
        p = f"{prefix}{step}"
    return p if p.endswith(".png") else p + ".png"


class SceneRenderer:
    """Renders the scenes of a configuration, step after step (keeps GL renderers).

    Parameters
    ----------
    ctx : Context
        The simulation's ranks.
    engine : insitu.engine.EmbeddedEngine or None
        This rank's engine: its worker draws the rank's domains (the adaptor owns and
        closes it). None where a subclass draws elsewhere.
    """

    def __init__(self, ctx: Context, engine=None) -> None:
        self.ctx = ctx
        self.engine = engine
        self.prof = StageTimer()  # the adaptor gives its own
        self.renderers = Renderers()

    def close(self) -> None:
        self.renderers.close()

    def render(self, name: str, scene: Mapping, datasets: Mapping[str, Dataset], raw: Dataset,
               steer: Mapping, step: int, time: float | None = None) -> dict:
        """Render every render of scene `name`; returns ``{render name: Rendered}`` at the
        root (images on the device they were drawn on), ``{}`` elsewhere. Renders with
        ``annotations`` get the first plot's legend, the step and `time` drawn in. Each
        carries the data reductions (min, max, mean) of its plots whose colour range is
        not fully set in the configuration (they give the range; a fixed range costs no
        pass over the data) and, with ``profile: true``, the step's stage timings so far."""
        ctx = self.ctx
        bounds = ctx.bounds(raw.domains)
        out = {}
        stats: dict = {}  # (domains, field) -> {"min", "max", "mean"}: once per render call
        for rname, r in scene["renders"].items():
            cam_cfg = {**r["camera"], **(steer.get("camera") or {})}
            w, h = r["image_width"], r["image_height"]
            if r.get("type") == "cinema":
                views = self._cinema_views(rname, r, cam_cfg, bounds)
            else:
                path = (frame_path(r.get("image_prefix") or "", step, name=r.get("image_name"))
                        if r.get("image_prefix") or r.get("image_name") else None)
                views = [(rname, camera_from_settings(cam_cfg, bounds, aspect=w / h), path)]
            # Global ranges first: collectives every rank reaches before any local work.
            plots = []
            for pname, p in scene["plots"].items():
                ds = datasets[p["pipeline"]] if p.get("pipeline") else raw
                if p["type"] == "mesh":  # edges in the render's foreground colour; no field, no range
                    bg = [float(c) for c in (list(r["bg_color"]) + [1.0])[:4]]
                    plots.append((pname, {**p, "color": r.get("fg_color") or foreground_for(bg)}, ds, None, 0.0, 0.0,
                                  None))
                    continue
                field = p.get("field") or (ds.surface.color_default if ds.surface else ds.color_default)
                if not field:
                    raise ValueError(f"scenes/{name}/plots/{pname}: needs a field to colour by (a slice, clip or "
                                     "threshold has none of its own)")
                key = (id(ds.domains), field)  # a contour's dataset shares its input's domains
                # Reductions read the whole field (at 1344^3, several times an in-situ step's
                # other work): made only where a colour range is left to the data.
                if key not in stats and (p["min_value"] is None or p["max_value"] is None):
                    with self.prof.stage("ranges"):
                        stats[key] = {op: ctx.reduce_field(ds.domains, field, op) for op in ("min", "max", "avg")}
                        stats[key]["mean"] = stats[key].pop("avg")
                lo = p["min_value"] if p["min_value"] is not None else stats[key]["min"]
                hi = p["max_value"] if p["max_value"] is not None else stats[key]["max"]
                cmap = steer.get("colormap") or p["color_table"]["name"]
                if p["type"] == "volume" and steer.get("transfer_function"):
                    p = {**p, "color_table": {**p["color_table"], "opacity": steer["transfer_function"]}}
                plots.append((pname, p, ds, field, lo, hi, cmap))
            per_field: dict = {}
            for (_, f), st in stats.items():
                per_field.setdefault(f, st)
            for vname, cam, path in views:
                rgba, depth = self._draw(f"scenes/{name}/renders/{vname}", plots, cam, w, h, bounds, raw, step)
                if ctx.rank != 0:
                    continue
                bg = [float(c) for c in (list(r["bg_color"]) + [1.0])[:4]]
                with self.prof.stage("composite"):
                    behind = 1 - rgba[..., 3]
                    rgba = rgba.copy()
                    for c in range(4):  # scalars as kernel arguments: nothing is uploaded
                        rgba[..., c] += behind * (bg[c] * bg[3] if c < 3 else bg[3])
                coloured = [x for x in plots if x[3]]  # mesh plots colour no field
                if r.get("annotations") and coloured:
                    with self.prof.stage("annotate"):  # drawn where the frame is: no copy
                        _, _, _, field, lo, hi, cmap = coloured[0]
                        fg = r.get("fg_color") or foreground_for(bg)
                        annotate(rgba, field=field, lo=lo, hi=hi, colormap=cmap, step=step, time=time, fg=fg)
                ranges = {f: (lo, hi) for _, _, _, f, lo, hi, _ in coloured}
                out[vname] = Rendered(rgba, depth, cam, ranges, path,
                                      {f: per_field[f] for f in ranges if f in per_field}, self._timings_so_far())
        return out

    def _timings_so_far(self) -> dict:
        """The step's stage seconds so far, leaving them counted (``{}`` when not profiling)."""
        so_far = self.prof.times()  # clears: given back at once, so the step's total stays whole
        for k, v in so_far.items():
            self.prof.add(k, v)
        return so_far

    def _cinema_views(self, rname: str, r: Mapping, cam_cfg: Mapping, bounds) -> list:
        """``(name, camera, path)`` of a cinema render's views; at the root the database gets
        this step's directory and metadata (Ascent's names: see :mod:`adaptors.cinema`)."""
        from .cinema import CinemaDatabase, cameras

        views = cameras(bounds, r["phi"], r["theta"], fov=float(cam_cfg.get("fov") or 60.0),
                        zoom=float(cam_cfg.get("zoom") or 1.0))
        if self.ctx.rank != 0:
            return [(f"{rname}/{p:.1f}_{t:.1f}", cam, None) for p, t, cam in views]
        dbs = self.__dict__.setdefault("_cinema", {})  # databases by name, kept across steps (root only)
        db = dbs.setdefault(r["db_name"], CinemaDatabase(r["db_name"], r["phi"], r["theta"]))
        now = db.add_step()
        db.write_metadata(views)
        return [(f"{rname}/{p:.1f}_{t:.1f}", cam, db.image(now, p, t)) for p, t, cam in views]

    def _draw(self, where: str, plots: list, cam, w: int, h: int, bounds, raw: Dataset, step: int):
        """The composited (rgba, depth) of `plots` at the root, (None, None) elsewhere.
        `plots` holds ``(name, plot config, dataset, field, lo, hi, colormap)`` with
        global ranges; every rank calls it."""
        ctx = self.ctx
        surface, volume, error = None, None, None
        try:
            surface, volume = self._local(plots, raw, View(cam, w, h, tuple(map(float, bounds))))
        except Exception as e:
            e.add_note(f"in {where} on rank {ctx.rank}")
            error = e
        if error is not None:  # raised here (and on every rank): the timer's events would hide a device fault
            ctx.agree(error, where)
        with self.prof.stage("composite"):
            ctx.agree(None, where)
            return self._composite(surface, volume, raw, cam, w, h)

    def _local(self, plots: list, raw: Dataset, view: View):
        """This rank's domains drawn on its worker and merged: ``(surface (rgba, depth) or
        None, volume rgba or None)``.

        One command package (one round trip) for all the domains: each domain's fields
        are sent as one block (by reference), :func:`adaptors.draw.draw_block` draws it,
        and the images come back where they were drawn (``recv(host=False)``).
        """
        per_domain = [describe_domain(plots, i, d) for i, d in enumerate(raw.domains)]
        if not per_domain:
            return None, None
        specs = {i: BlockSpec(spec) for i, (_, spec) in enumerate(per_domain)}
        blocks = self.engine.blocks({i: fields for i, (fields, _) in enumerate(per_domain)})
        # draw_domain as this process names it now: the Spark path passes the same name.
        drawn = blocks.exec_gpu(draw_block, None, specs, view, _draw.draw_domain, self.renderers, self.prof,
                                with_key=True).recv_gpu(host=False)
        merged = merge_domains([drawn[i] for i in specs], [s.domain.box for s in specs.values()],
                               view.camera.position)
        return merged.surface, merged.volume

    def _composite(self, surface, volume, raw: Dataset, cam, w, h):
        """Both layers across ranks (depth, then over in rank visibility order); at the root
        the volume over the surface."""
        from render.composite import composite

        ctx = self.ctx
        xp = np
        for layer in (surface[0] if surface else None, volume):
            if layer is not None:
                xp = arrays.get_array_module(layer)
        # Every rank must agree on which layers exist: a rank with no surface sends an empty one.
        has = (surface is not None, volume is not None)
        if ctx.size > 1:
            everyone = ctx.allgather((has, arrays.backend_of(surface[0]) if surface else
                                      arrays.backend_of(volume) if volume is not None else None), what="image layers")
            has = (any(e[0][0] for e in everyone), any(e[0][1] for e in everyone))
            kinds = {e[1] for e in everyone if e[1]}
            if "cupy" in kinds and xp is np:
                import cupy as xp  # this rank drew nothing: match the others' kind
        if has[0] and surface is None:
            surface = (xp.zeros((h, w, 4), xp.float32), xp.full((h, w), xp.inf, xp.float32))
        if has[1] and volume is None:
            volume = xp.zeros((h, w, 4), xp.float32)
        if ctx.comm is not None and ctx.size > 1:
            if surface is not None:
                res = composite(surface[0], surface[1], comm=ctx.comm, mode="depth", timeout=ctx.timeout)
                surface = res
            if volume is not None:
                mine = raw.domains
                box = None
                if mine:
                    b = np.array([d.box for d in mine])
                    box = [b[:, 0].min(), b[:, 1].max(), b[:, 2].min(), b[:, 3].max(), b[:, 4].min(), b[:, 5].max()]
                boxes = ctx.allgather(box, what="volume boxes")
                ranks = [r for r, bx in enumerate(boxes) if bx is not None]
                order = [ranks[i] for i in front_to_back([boxes[r] for r in ranks], cam.position)]
                order += [r for r in range(ctx.size) if r not in order]
                volume = composite(volume.astype(xp.float32), comm=ctx.comm, mode="over", order=order,
                                   timeout=ctx.timeout)
        if ctx.rank != 0:
            return None, None
        return flatten(DomainImage(surface, volume), w, h, xp=xp)
