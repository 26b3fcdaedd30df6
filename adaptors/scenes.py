"""Scenes: plots rendered per rank, composited across ranks, written as frames.

Each rank draws only its own domains: pseudocolor plots rasterize the pipeline's
surface with OpenGL (CUDA-GL interop where the mesh is on a GPU), volume plots ray
cast each domain over the box of its real cells. Surfaces composite across ranks by
depth, volumes by "over" in visibility order; at the root the volume goes over the
surfaces and both over the background. Images stay on their device until the final
frame is written.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Mapping

import numpy as np

from insitu import arrays
from insitu.profile import StageTimer

from .pipelines import Context, Dataset

__all__ = ["Rendered", "SceneRenderer", "camera_for", "frame_path"]


@dataclasses.dataclass
class Rendered:
    """One render's composited result at the root rank."""

    rgba: Any  # (H, W, 4) premultiplied float, over the background
    depth: Any  # (H, W) float32 surface depth (inf where none), or None without surfaces
    camera: Any  # render.camera.Camera
    ranges: dict  # plotted field -> (lo, hi)
    path: str | None  # the PNG to write, if the render has an image_prefix


def camera_for(cfg: Mapping[str, Any], bounds):
    """A render.camera.Camera from a render's camera settings and the data bounds."""
    from render.camera import Camera

    b = np.asarray(bounds, np.float64).reshape(3, 2)
    if cfg.get("position") is not None:
        look = cfg.get("look_at") or tuple(b.mean(axis=1))
        return Camera(tuple(cfg["position"]), tuple(look), tuple(cfg.get("up") or (0.0, 1.0, 0.0)),
                      float(cfg.get("fov") or 30.0))
    kw = {"azimuth": float(cfg.get("azimuth") or 0.0), "elevation": float(cfg.get("elevation") or 0.0),
          "zoom": float(cfg.get("zoom") or 1.0), "fov": float(cfg.get("fov") or 30.0)}
    if cfg.get("up") is not None:
        kw["up"] = tuple(cfg["up"])
    return Camera.fit(tuple(b.ravel()), **kw)


def frame_path(prefix: str, step: int) -> str:
    """``out/frame_%04d`` and step 7 -> ``out/frame_0007.png`` (no format: the step is appended)."""
    try:
        p = prefix % step if "%" in prefix else f"{prefix}_{step:06d}"
    except (TypeError, ValueError):
        p = f"{prefix}_{step:06d}"
    return p if p.endswith(".png") else p + ".png"


def _merge(parts: list[tuple]):
    """One mesh from per-domain meshes (vertex indices offset)."""
    parts = [p for p in parts if len(p[1])]
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    xp = arrays.get_array_module(parts[0][0])
    offs = np.cumsum([0] + [len(p[0]) for p in parts[:-1]])
    verts = xp.concatenate([p[0] for p in parts])
    faces = xp.concatenate([p[1] + int(o) for p, o in zip(parts, offs)])
    normals = xp.concatenate([p[2] for p in parts])
    vals = xp.concatenate([p[3] for p in parts])
    return verts, faces, normals, vals


def _front_to_back(boxes: list, eye) -> list[int]:
    """Indices of axis-aligned, non-overlapping boxes from nearest to farthest: of two
    boxes, the one on the eye's side of a plane that separates them comes first."""
    def cmp(i, j):
        a, b = boxes[i], boxes[j]
        for ax in range(3):
            if a[2 * ax + 1] <= b[2 * ax]:  # a below b on this axis
                return -1 if eye[ax] < a[2 * ax + 1] else 1
            if b[2 * ax + 1] <= a[2 * ax]:
                return 1 if eye[ax] < b[2 * ax + 1] else -1
        return 0
    return sorted(range(len(boxes)), key=functools.cmp_to_key(cmp))


class SceneRenderer:
    """Renders the scenes of a configuration, step after step (keeps GL renderers)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.prof = StageTimer()  # the adaptor gives its own
        self._surfaces: dict = {}
        self._tfs: dict = {}

    def close(self) -> None:
        for r in self._surfaces.values():
            r.close()
        self._surfaces.clear()

    def _transfer_function(self, cmap: str, lo: float, hi: float, opacity):
        """The same transfer function object while its settings stay: its table goes to
        the GPU once, not every step."""
        from render.volume import TransferFunction

        key = (cmap, lo, hi, None if opacity is None else tuple(tuple(p) for p in opacity))
        tf = self._tfs.get(key)
        if tf is None:
            if len(self._tfs) >= 16:
                self._tfs.pop(next(iter(self._tfs)))
            # Opacity in the config is reached over one world unit, whatever the grid spacing.
            tf = self._tfs[key] = TransferFunction.from_colormap(cmap, lo, hi, unit_length=1.0,
                                                                 opacity=[tuple(x) for x in opacity] if opacity else None)
        return tf

    def _surface_renderer(self, w: int, h: int):
        r = self._surfaces.get((w, h))
        if r is None:
            from render.surface import SurfaceRenderer

            r = self._surfaces[(w, h)] = SurfaceRenderer(w, h)
        return r

    def render(self, name: str, scene: Mapping, datasets: Mapping[str, Dataset], raw: Dataset,
               steer: Mapping, step: int) -> dict:
        """Render every render of scene `name`; returns ``{render name: Rendered}`` at the
        root (images on the device they were drawn on), ``{}`` elsewhere."""
        ctx = self.ctx
        bounds = ctx.bounds(raw.domains)
        out = {}
        for rname, r in scene["renders"].items():
            cam_cfg = {**r["camera"], **(steer.get("camera") or {})}
            cam = camera_for(cam_cfg, bounds)
            w, h = r["image_width"], r["image_height"]
            # Global ranges first: collectives every rank reaches before any local work.
            plots = []
            for pname, p in scene["plots"].items():
                ds = datasets[p["pipeline"]] if p.get("pipeline") else raw
                field = p.get("field") or (ds.surface.color_default if ds.surface else None)
                with self.prof.stage("ranges"):
                    lo = p["min_value"] if p["min_value"] is not None else ctx.reduce_field(ds.domains, field, "min")
                    hi = p["max_value"] if p["max_value"] is not None else ctx.reduce_field(ds.domains, field, "max")
                cmap = steer.get("colormap") or p["color_table"]["name"]
                if p["type"] == "volume" and steer.get("transfer_function"):
                    p = {**p, "color_table": {**p["color_table"], "opacity": steer["transfer_function"]}}
                plots.append((pname, p, ds, field, lo, hi, cmap))
            rgba, depth = self._draw(f"scenes/{name}/renders/{rname}", plots, cam, w, h, bounds, raw, step)
            if ctx.rank != 0:
                continue
            bg = [float(c) for c in (list(r["bg_color"]) + [1.0])[:4]]
            with self.prof.stage("composite"):
                behind = 1 - rgba[..., 3]
                rgba = rgba.copy()
                for c in range(4):  # scalars as kernel arguments: nothing is uploaded
                    rgba[..., c] += behind * (bg[c] * bg[3] if c < 3 else bg[3])
            path = frame_path(r["image_prefix"], step) if r.get("image_prefix") else None
            ranges = {f: (lo, hi) for _, _, _, f, lo, hi, _ in plots}
            out[rname] = Rendered(rgba, depth, cam, ranges, path)
        return out

    def _draw(self, where: str, plots: list, cam, w: int, h: int, bounds, raw: Dataset, step: int):
        """The composited (rgba, depth) of `plots` at the root, (None, None) elsewhere.
        `plots` holds ``(name, plot config, dataset, field, lo, hi, colormap)`` with
        global ranges; every rank calls it."""
        ctx = self.ctx
        surface, volume, error = None, None, None
        try:
            surface, volume = self._local(plots, cam, w, h, bounds)
        except Exception as e:
            e.add_note(f"in {where} on rank {ctx.rank}")
            error = e
        with self.prof.stage("composite"):
            ctx.agree(error, where)
            return self._composite(surface, volume, raw, cam, w, h)

    def _local(self, plots, cam, w, h, bounds):
        from render.volume import over, ray_cast

        surface = volume = None
        for pname, p, ds, field, lo, hi, cmap in plots:
            if p["type"] == "pseudocolor":
                if ds.surface is None:
                    raise ValueError(f"plot {pname}: pipeline {p['pipeline']!r} makes no surface "
                                     "(end it with a contour or threshold filter)")
                with self.prof.stage("contour"):
                    mesh = _merge(ds.surface_parts(field))
                if mesh is None:
                    continue
                with self.prof.stage("render"):
                    r = self._surface_renderer(w, h)
                    rgba, depth = r.render(*mesh, camera=cam, bounds=bounds, vmin=lo, vmax=max(hi, lo + 1e-12),
                                           colormap=cmap)
                    rgba, depth = rgba.copy(), depth.copy()  # the renderer reuses its frame buffers
                if surface is None:
                    surface = (rgba, depth)
                else:
                    xp = arrays.get_array_module(rgba)
                    nearer = (depth < surface[1])[..., None]
                    surface = (xp.where(nearer, rgba, surface[0]), xp.minimum(depth, surface[1]))
            else:
                opacity = p["color_table"].get("opacity")
                tf = self._transfer_function(cmap, lo, max(hi, lo + 1e-12), opacity)
                order = _front_to_back([d.box for d in ds.domains], cam.position)
                for i in order:
                    d = ds.domains[i]
                    with self.prof.stage("volume"):
                        img, _ = ray_cast(d.vertex_values(ds.volume_names.get(field, field)), cam, w, h, tf,
                                          spacing=d.spacing, origin=d.node_origin, extent=d.box, bounds=bounds)
                    volume = img if volume is None else over(volume, img)
        return surface, volume

    def _composite(self, surface, volume, raw: Dataset, cam, w, h):
        """Both layers across ranks (depth, then over in rank visibility order); at the root
        the volume over the surface."""
        from render.composite import composite
        from render.volume import over

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
                order = [ranks[i] for i in _front_to_back([boxes[r] for r in ranks], cam.position)]
                order += [r for r in range(ctx.size) if r not in order]
                volume = composite(volume.astype(xp.float32), comm=ctx.comm, mode="over", order=order,
                                   timeout=ctx.timeout)
        if ctx.rank != 0:
            return None, None
        if surface is None and volume is None:
            return xp.zeros((h, w, 4), xp.float32), None
        if surface is None:
            return volume, None
        if volume is None:
            return surface[0], surface[1]
        return over(volume.astype(surface[0].dtype), surface[0]), surface[1]
