"""One domain's drawing, the same for every engine.

A scene's plots become, per domain, a :class:`DomainSpec` (what to draw, with global
colour ranges) and a list of the domain's fields (whole, ghosts included) that the spec
names by index; a contoured field's tile ranges (:mod:`insitu.ranges`), where the
simulation gave them, are in the list too, so they go wherever the fields go.
:func:`draw_domain` draws them: a pseudocolor plot is contoured (marching cubes over the
domain's real cells, given the field's tile ranges) and rasterized, several surfaces
merged by depth; a volume plot is ray cast over the box of the real cells, several
volumes merged by "over".

Both engines hand each domain to a worker as a block and run :func:`draw_block` on it
in a command package: the embedded engine's worker lives in the simulation's process
(the block is the list of arrays, by reference), the Spark engine's on the worker
daemon that holds the domain's arrays packed in one cached array (:func:`pack_block`).
Both merge the domains' images with :func:`merge_domains` before compositing across
ranks or blocks.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from insitu import arrays
from insitu.profile import StageTimer
from insitu.ranges import TileRanges

__all__ = ["BlockSpec", "CellSurfacePlot", "CellVolumePlot", "DomainImage", "DomainSpec", "MeshPlot", "Renderers",
           "SurfacePlot", "View", "VolumePlot", "block_layout", "describe_domain", "draw_block", "draw_domain",
           "flatten", "front_to_back", "merge_domains", "pack_block", "thread_renderers", "unpack_block"]


@dataclasses.dataclass(frozen=True)
class SurfacePlot:
    """A pseudocolor plot: the surface where field `field` crosses `levels`, coloured by
    field `color` from `lo` to `hi` through `colormap` (fields are indices into the
    domain's field list). `tile_ranges`, where given, is ``(index, span)``: the
    ``(gi, gj, gk, 2)`` float64 per-tile ranges of `field` at that index of the list,
    tiles of `span` samples (:class:`insitu.ranges.TileRanges`)."""

    field: int
    color: int
    levels: tuple[float, ...]
    lo: float
    hi: float
    colormap: str
    tile_ranges: tuple[int, tuple[int, int, int]] | None = None
    #: "contour"; "slice" (the grid cut by `planes`, ((point, normal), ...)); "boundary" (the
    #: faces of the box of the real cells: a pseudocolor plot of the grid itself)
    kind: str = "contour"
    planes: tuple | None = None


@dataclasses.dataclass(frozen=True)
class CellSurfacePlot:
    """A pseudocolor plot of a mesh of cells (:class:`render.cells.CellMesh`), whose points,
    connectivity, offsets and types are at indices `mesh` of the field list: its outer
    surface (``kind="surface"``), the contour of point field `field` at `levels`
    (``"contour"``), or its cuts by `planes` (``"slice"``), ghost cells at index `hidden`
    left out, coloured by `color` (point values; with `color_cells`, one value per cell,
    each triangle its cell's)."""

    mesh: tuple[int, int, int, int]
    color: int
    lo: float
    hi: float
    colormap: str
    kind: str = "surface"
    field: int | None = None
    levels: tuple[float, ...] = ()
    planes: tuple | None = None
    hidden: int | None = None
    color_cells: bool = False


@dataclasses.dataclass(frozen=True)
class CellVolumePlot:
    """A volume plot of a mesh of cells: field `field` (per point, or per cell with
    `association` "element") resampled onto a uniform grid over the mesh's box (NaN, so
    transparent, outside its cells; ghost cells at index `hidden` not sampled) and ray cast
    like :class:`VolumePlot`; or, for a rectilinear grid's point field (its axes at
    indices `axes`), ray cast on the grid itself."""

    mesh: tuple[int, int, int, int]
    field: int
    association: str
    lo: float
    hi: float
    colormap: str
    opacity: tuple[tuple[float, float], ...] | None = None
    hidden: int | None = None
    axes: tuple[int, int, int] | None = None


@dataclasses.dataclass(frozen=True)
class VolumePlot:
    """A volume plot: field `field` ray cast through `colormap` from `lo` to `hi`, with
    opacity control points ``((value, alpha), ...)`` (None: the colormap's default)."""

    field: int
    lo: float
    hi: float
    colormap: str
    opacity: tuple[tuple[float, float], ...] | None = None


@dataclasses.dataclass(frozen=True)
class MeshPlot:
    """A mesh plot (Ascent's ``type: mesh``): the edges of the outer surface's cells, one pixel
    wide in `color`. A grid's are its box's grid lines (built on the host from the shape
    alone, kept by :class:`Renderers`: on a device, uploaded once); a mesh of cells at
    indices `mesh` (points, connectivity, offsets, types) has them found where its arrays
    are (render.cells.edges), ghost cells at index `hidden` left out. `like` is the index
    of an array of the domain, whose device the lines are drawn on (None: host)."""

    color: tuple[float, float, float]
    mesh: tuple[int, int, int, int] | None = None
    hidden: int | None = None
    like: int | None = None


@dataclasses.dataclass(frozen=True)
class DomainSpec:
    """Where one domain's fields sit in the world, and the plots to draw of them.

    `cells` are the real cells, ``((i0, j0, k0), (i1, j1, k1))`` (i0..i1-1), in the
    domain's node grid of `spacing` starting at `origin`; `node_origin` is the world
    position of node ``(i0, j0, k0)``, `box` the world box of the real cells
    ``(x0, x1, y0, y1, z0, z1)``.
    """

    spacing: tuple[float, float, float]
    origin: tuple[float, float, float]
    cells: tuple[tuple[int, int, int], tuple[int, int, int]]
    node_origin: tuple[float, float, float]
    box: tuple[float, float, float, float, float, float]
    plots: tuple[SurfacePlot | VolumePlot, ...]

    @property
    def nodes(self) -> tuple[slice, slice, slice]:
        """Node slices spanning the real cells."""
        lo, hi = self.cells
        return tuple(slice(a, b + 1) for a, b in zip(lo, hi))


@dataclasses.dataclass(frozen=True)
class View:
    """The image to draw: camera, size in pixels and the world box of all the data (it
    sets the depth range, so that images drawn apart composite by depth)."""

    camera: Any  # render.camera.Camera
    width: int
    height: int
    bounds: tuple[float, float, float, float, float, float]


@dataclasses.dataclass
class DomainImage:
    """What one domain (or a merge of domains) drew: premultiplied RGBA layers.

    `surface` is ``(rgba (H, W, 4) float32, depth (H, W) float32, inf where empty)`` or
    None where no triangle was drawn; `volume` is ``(H, W, 4) float32`` or None without
    volume plots. Arrays are on the device the fields were on.
    """

    surface: tuple[Any, Any] | None = None
    volume: Any = None

    def packed(self, width: int, height: int, *, like=None):
        """One ``(H, W, 9)`` float32 array: surface RGBA, depth, volume RGBA (zeros and
        inf for a missing layer), for engines that move arrays only; on the device of the
        layers, else of `like`."""
        some = self.volume if self.volume is not None else self.surface[0] if self.surface else like
        xp = np if some is None else arrays.get_array_module(some)
        out = xp.zeros((height, width, 9), xp.float32)
        out[..., 4] = xp.inf
        if self.surface is not None:
            out[..., :4], out[..., 4] = self.surface
        if self.volume is not None:
            out[..., 5:] = self.volume
        return out

    @classmethod
    def unpacked(cls, packed, spec: DomainSpec) -> "DomainImage":
        """The image :meth:`packed` gave for `spec`: a layer where `spec` has plots of its
        kind (a surface only where some pixel has a finite depth)."""
        kinds = {type(p) for p in spec.plots}
        surface = volume = None
        if kinds & {SurfacePlot, CellSurfacePlot, MeshPlot}:
            depth = packed[..., 4]
            xp = arrays.get_array_module(depth)
            if bool(xp.isfinite(depth).any()):
                surface = (packed[..., :4], depth)
        if kinds & {VolumePlot, CellVolumePlot}:
            volume = packed[..., 5:]
        return cls(surface, volume)


class Renderers:
    """What drawing keeps between steps in one thread: surface renderers by image size
    (their GL contexts and buffers), transfer functions by their settings (their tables
    go to the device once, not every step) and grids' lines for mesh plots."""

    MAX_TRANSFER_FUNCTIONS = 16
    MAX_GRID_LINES = 16

    def __init__(self) -> None:
        self._surfaces: dict = {}
        self._tfs: dict = {}
        self._lines: dict = {}

    def grid_lines(self, shape: tuple[int, int, int], spacing, origin, device: int | None):
        """``(verts (V, 3) float32, segments (S, 2) int32)``: the edges of the box of a grid of
        `shape` nodes (render.cells.edges.grid_edges) placed at `origin` with `spacing`, on
        CUDA `device` (None: host), made and uploaded once per grid and device."""
        key = (tuple(shape), tuple(spacing), tuple(origin), device)
        lines = self._lines.get(key)
        if lines is None:
            from render.cells.edges import grid_edges

            nodes, segs = grid_edges(shape)
            verts = (nodes * np.asarray(spacing) + np.asarray(origin)).astype(np.float32)
            if device is not None:
                verts, segs = arrays.to_device(verts, device=device), arrays.to_device(segs, device=device)
            if len(self._lines) >= self.MAX_GRID_LINES:
                self._lines.pop(next(iter(self._lines)))
            lines = self._lines[key] = (verts, segs)
        return lines

    def surface(self, width: int, height: int):
        """The :class:`render.surface.SurfaceRenderer` for images of this size."""
        r = self._surfaces.get((width, height))
        if r is None:
            from render.surface import SurfaceRenderer

            r = self._surfaces[(width, height)] = SurfaceRenderer(width, height)
        return r

    def transfer_function(self, plot: VolumePlot):
        """The :class:`render.volume.TransferFunction` of `plot`'s colours, range and opacity."""
        hi = max(plot.hi, plot.lo + 1e-12)
        key = (plot.colormap, plot.lo, hi, plot.opacity)
        tf = self._tfs.get(key)
        if tf is None:
            from render.volume import TransferFunction

            if len(self._tfs) >= self.MAX_TRANSFER_FUNCTIONS:
                self._tfs.pop(next(iter(self._tfs)))
            from render.colormap import alpha_points

            opacity = [tuple(x) for x in plot.opacity] if plot.opacity else None
            alphas = alpha_points(plot.colormap) if opacity is None else None
            if alphas is not None:  # a table's own alpha points (Ascent's), over the colour range
                opacity = [(plot.lo + x * (hi - plot.lo), a) for x, a in alphas]
            # Opacity in the config is reached over one world unit, whatever the grid spacing.
            tf = self._tfs[key] = TransferFunction.from_colormap(plot.colormap, plot.lo, hi, unit_length=1.0,
                                                                 opacity=opacity)
        return tf

    def close(self) -> None:
        """Release the surface renderers (GL contexts); transfer functions and grid lines are dropped."""
        surfaces, self._surfaces, self._tfs, self._lines = self._surfaces, {}, {}, {}
        for r in surfaces.values():
            r.close()


_THREAD_RENDERERS: dict[int, Renderers] = {}


def thread_renderers() -> Renderers:
    """This thread's :class:`Renderers` (a GL context is current per thread), kept for
    the life of the process: a worker daemon's."""
    key = threading.get_ident()
    r = _THREAD_RENDERERS.get(key)
    if r is None:
        r = _THREAD_RENDERERS[key] = Renderers()
    return r


_NO_TIMER = StageTimer()


def draw_domain(fields: Sequence[Any], spec: DomainSpec, view: View, *, renderers: Renderers,
                prof: StageTimer | None = None) -> DomainImage:
    """Draw one domain's plots.

    Parameters
    ----------
    fields : sequence of arrays
        The domain's (nx, ny, nz) node fields the plots name by index, whole (ghosts
        included: they shape the normals at the domain's faces), NumPy or CuPy, and the
        tile ranges' values surface plots name (passed on to marching cubes).
    spec : DomainSpec
        The domain's place and its plots, with global colour ranges.
    view : View
        Camera, image size and the world box of all the data.
    renderers : Renderers
        Surface renderers and transfer functions kept between calls.
    prof : StageTimer, optional
        Charged with stages ``contour``, ``render`` and ``volume``.

    Returns
    -------
    DomainImage
        Surfaces merged by depth (ties: the earlier plot), volumes by "over" in plot order.
    """
    from render.volume import over, ray_cast

    prof = prof or _NO_TIMER
    w, h = view.width, view.height
    surface = volume = None
    for plot in spec.plots:
        if isinstance(plot, (SurfacePlot, CellSurfacePlot, MeshPlot)):
            if isinstance(plot, MeshPlot):
                with prof.stage("render"):
                    drawn = [_mesh_lines(fields, spec, plot, view, renderers)]
            else:
                with prof.stage("contour"):
                    meshes = (_grid_meshes if isinstance(plot, SurfacePlot) else _cell_meshes)(fields, spec, plot)
                drawn = []
                for verts, faces, normals, vals in meshes:
                    if len(faces) == 0:
                        continue
                    if faces.shape[1] == 2:  # a contour or slice of 2-D cells: lines
                        with prof.stage("render"):
                            drawn.append(_lines(verts, faces, vals, plot, view))
                        continue
                    with prof.stage("render"):
                        rgba, depth = renderers.surface(w, h).render(verts, faces, normals, vals, camera=view.camera,
                                                                     bounds=view.bounds, vmin=plot.lo,
                                                                     vmax=max(plot.hi, plot.lo + 1e-12),
                                                                     colormap=plot.colormap)
                        drawn.append((rgba.copy(), depth.copy()))  # the renderer reuses its frame buffers
            for rgba, depth in drawn:
                if surface is None:
                    surface = (rgba, depth)
                else:
                    xp = arrays.get_array_module(rgba)
                    nearer = (depth < surface[1])[..., None]
                    surface = (xp.where(nearer, rgba, surface[0]), xp.minimum(depth, surface[1]))
        elif isinstance(plot, VolumePlot):
            with prof.stage("volume"):
                img, _ = ray_cast(fields[plot.field][spec.nodes], view.camera, w, h,
                                  renderers.transfer_function(plot), spacing=spec.spacing,
                                  origin=spec.node_origin, extent=spec.box, bounds=view.bounds)
            volume = img if volume is None else over(volume, img)
        elif isinstance(plot, CellVolumePlot):
            with prof.stage("volume"):
                img = _cell_volume(fields, plot, view, renderers.transfer_function(plot))
            if img is not None:
                volume = img if volume is None else over(volume, img)
        else:
            raise TypeError(f"draw_domain: plots must be SurfacePlot, VolumePlot, CellSurfacePlot, CellVolumePlot "
                            f"or MeshPlot, got {type(plot).__name__}")
    return DomainImage(surface, volume)


def _grid_meshes(fields: Sequence[Any], spec: DomainSpec, plot: SurfacePlot) -> list[tuple]:
    """The triangle meshes (verts, faces, normals, values) of a grid's surface plot."""
    from render.contour import marching_cubes

    color = fields[plot.color]
    if plot.kind == "contour":
        return [marching_cubes(fields[plot.field], list(plot.levels), spacing=spec.spacing, origin=spec.origin,
                               values=color, region=spec.cells, tile_ranges=_tile_ranges(fields, plot))]
    xp = arrays.get_array_module(color)
    if plot.kind == "boundary":
        from render.cells.surface import grid_boundary

        (i0, j0, k0), (i1, j1, k1) = spec.cells
        nodes, faces, normals = grid_boundary((i1 - i0 + 1, j1 - j0 + 1, k1 - k0 + 1), xp=xp)
        verts = xp.empty(nodes.shape, xp.float32)
        for a in range(3):  # scalars only: nothing is uploaded
            verts[:, a] = nodes[:, a] * spec.spacing[a] + spec.node_origin[a]
        vals = color[nodes[:, 0] + i0, nodes[:, 1] + j0, nodes[:, 2] + k0]
        return [(verts, faces, normals, vals)]
    out = []
    for point, normal in plot.planes or ():
        # the plane's signed distance at the nodes, as broadcast axes (no upload)
        axes = [xp.arange(color.shape[a], dtype=xp.float32) * xp.float32(spec.spacing[a])
                + xp.float32(spec.origin[a] - point[a]) for a in range(3)]
        dist = (axes[0][:, None, None] * normal[0] + axes[1][None, :, None] * normal[1]
                + axes[2][None, None, :] * normal[2])
        out.append(marching_cubes(dist, [0.0], spacing=spec.spacing, origin=spec.origin, values=color,
                                  region=spec.cells))
    return out


def _mesh_lines(fields: Sequence[Any], spec: DomainSpec, plot: MeshPlot, view: View, renderers: Renderers):
    """(rgba, depth) of a mesh plot's edges in one domain."""
    from render.raster import rasterize_lines

    if plot.mesh is None:  # the same lines every step: kept (and uploaded) once
        (i0, j0, k0), (i1, j1, k1) = spec.cells
        verts, segs = renderers.grid_lines((i1 - i0 + 1, j1 - j0 + 1, k1 - k0 + 1), spec.spacing, spec.node_origin,
                                           None if plot.like is None else arrays.device_id(fields[plot.like]))
    else:
        from render.cells.edges import cell_edges

        mesh = _cell_mesh(fields, plot.mesh)
        xp = mesh.xp
        segs = xp.ascontiguousarray(cell_edges(mesh, hidden=None if plot.hidden is None else fields[plot.hidden]),
                                    dtype=xp.int32)
        verts = xp.ascontiguousarray(mesh.points, dtype=xp.float32)
    return rasterize_lines(verts, segs, view.camera, view.bounds, view.width, view.height, plot.color)


def _cell_mesh(fields: Sequence[Any], at: tuple[int, int, int, int]):
    from render.cells import CellMesh

    return CellMesh(*(fields[i] for i in at))


def _cell_meshes(fields: Sequence[Any], spec: DomainSpec, plot: CellSurfacePlot) -> list[tuple]:
    """The triangle meshes (verts, faces, normals, values) of a cell mesh's surface plot."""
    from render.cells._mesh import check_hidden
    from render.cells.contour import contour, slice_plane
    from render.cells.surface import face_normals, outer_surface, vertex_normals

    mesh = _cell_mesh(fields, plot.mesh)
    color = fields[plot.color]
    xp = mesh.xp
    if plot.kind == "surface":
        # Each triangle its own three vertices: flat normals (a mesh's outer surface has sharp
        # edges that averaged normals would round off), and one colour per cell if asked.
        surf = outer_surface(mesh, hidden=None if plot.hidden is None else fields[plot.hidden])
        ids = surf.faces.reshape(-1)
        verts = mesh.points[ids]
        faces = xp.arange(verts.shape[0], dtype=xp.int32).reshape(-1, 3)
        vals = xp.repeat(color[surf.cells], 3) if plot.color_cells else color[ids]
        return [(verts, faces, face_normals(verts), vals)]
    if plot.kind == "contour":
        parts = [contour(mesh, fields[plot.field], list(plot.levels), color=color)]
    else:
        parts = [slice_plane(mesh, pt, nrm, color=color) for pt, nrm in plot.planes or ()]
    # A ghost cell's pieces are drawn by the block that owns the cell: leave them out here
    # (the vertices they alone used stay, unreferenced).
    keep = check_hidden(mesh, None if plot.hidden is None else fields[plot.hidden])
    out = []
    for c in parts:
        faces = c.faces if keep is None else c.faces[keep[c.cells]]
        lines = faces.shape[1] == 2  # from 2-D cells
        out.append((c.vertices, faces, None if lines else vertex_normals(c.vertices, faces), c.values))
    return out


def _lines(verts, segs, vals, plot: CellSurfacePlot, view: View):
    """(rgba, depth) of a pseudocolor plot's line segments (contours of 2-D cells)."""
    from render.raster import rasterize_lines

    xp = arrays.get_array_module(verts)
    return rasterize_lines(xp.ascontiguousarray(verts, dtype=xp.float32), xp.ascontiguousarray(segs, dtype=xp.int32),
                           view.camera, view.bounds, view.width, view.height, (1.0, 1.0, 1.0), values=vals,
                           vmin=plot.lo, vmax=max(plot.hi, plot.lo + 1e-12), colormap=plot.colormap)


def _cell_volume(fields: Sequence[Any], plot: CellVolumePlot, view: View, tf):
    """A cell mesh's field resampled onto a uniform grid over its box and ray cast (None for a
    mesh without 3-D cells), or a rectilinear grid's ray cast directly. The resampling grid
    has about two samples per cell along each axis, at most 256."""
    from render.cells.resample import resample, sample_grid
    from render.volume import ray_cast

    mesh = _cell_mesh(fields, plot.mesh)
    if mesh.n_cells == 0:
        return None
    if plot.axes is not None:
        coords = [fields[a] for a in plot.axes]
        dims = tuple(int(c.shape[0]) for c in coords)
        vol = fields[plot.field].reshape(dims, order="F")  # Blueprint's order: i fastest
        img, _ = ray_cast(vol, view.camera, view.width, view.height, tf, coords=coords, bounds=view.bounds)
        return img
    xp = mesh.xp
    both = xp.stack([mesh.points.min(axis=0), mesh.points.max(axis=0)], axis=1).ravel()
    box = np.array(arrays.scalars_to_host(both), np.float64)
    ext = np.maximum(box[1::2] - box[::2], 1e-12)
    n = min(256, max(16, int(round(2 * mesh.n_cells ** (1 / 3)))))
    dims = [max(2, int(round(n * e / ext.max()))) for e in ext]
    vol = resample(mesh, fields[plot.field], dims, box, association=plot.association,
                   hidden=None if plot.hidden is None else fields[plot.hidden])
    origin, spacing = sample_grid(mesh, dims, box)
    img, _ = ray_cast(vol, view.camera, view.width, view.height, tf, spacing=tuple(map(float, spacing)),
                      origin=tuple(map(float, origin)), extent=tuple(map(float, box)), bounds=view.bounds)
    return img


def _tile_ranges(fields: Sequence[Any], plot: SurfacePlot) -> TileRanges | None:
    if plot.tile_ranges is None:
        return None
    at, span = plot.tile_ranges
    vol = fields[plot.field]
    return TileRanges(fields[at], span, (int(vol.shape[0]), int(vol.shape[1]), int(vol.shape[2])))


@dataclasses.dataclass(frozen=True)
class BlockSpec:
    """One domain as a worker's block: what to draw, and how the block holds the arrays.

    `layout` is None where the block is the list of arrays itself (a worker in this
    process), else :func:`block_layout` of the list, packed in one array by
    :func:`pack_block` (a block cached on a worker daemon).
    """

    domain: DomainSpec
    layout: tuple[tuple[str, tuple[int, ...]], ...] | None = None


#: Bytes each packed array starts at a multiple of (any dtype's alignment, a CUDA
#: allocation's granularity).
_ALIGN = 256


def block_layout(items: Sequence[Any]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """``((dtype, shape), ...)`` of `items`: what :func:`unpack_block` needs."""
    return tuple((np.dtype(a.dtype).str, tuple(int(n) for n in a.shape)) for a in items)


def _placed(layout) -> tuple[list[tuple[int, int]], int]:
    """Each array's (byte offset, byte count) in a packed block, and the block's size."""
    spans, off = [], 0
    for dtype, shape in layout:
        n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        spans.append((off, n))
        off += -(-n // _ALIGN) * _ALIGN
    return spans, off


def pack_block(*items):
    """One 1-D uint8 array holding `items` (arrays of any dtypes and shapes: a domain's
    fields and tile ranges) back to back in C order, on their device: one cached block
    per domain on a worker daemon, each array given back exactly by :func:`unpack_block`."""
    layout = block_layout(items)
    xp = arrays.get_array_module(items[0]) if items else np
    out = xp.empty(_placed(layout)[1], xp.uint8)
    for a, view in zip(items, unpack_block(out, layout)):
        view[...] = a
    return out


def unpack_block(block, layout) -> list:
    """The arrays :func:`pack_block` packed with :func:`block_layout` `layout` (views of `block`)."""
    spans, _ = _placed(layout)
    return [block[off:off + n].view(np.dtype(dtype)).reshape(shape)
            for (off, n), (dtype, shape) in zip(spans, layout)]


def draw_block(block, key, specs: Mapping[Any, BlockSpec], view: View, draw: Callable[..., DomainImage],
               renderers: Renderers | None = None, prof: StageTimer | None = None, pack: bool = False):
    """Draw one domain on the worker holding it: what both engines' command packages run.

    Parameters
    ----------
    block : sequence of arrays, or 1-D uint8 array
        The domain's fields (and tile ranges), as ``specs[key]`` says they are held.
    key : hashable
        The domain's key in `specs`.
    specs : mapping
        :class:`BlockSpec` by domain key.
    view : View
        Camera, image size and the data bounds.
    draw : callable
        The drawing function, :func:`draw_domain` as the caller's process names it (so
        that both engines run whatever the caller's process calls by that name).
    renderers : Renderers, optional
        Default: this thread's (:func:`thread_renderers`), as a daemon keeps them.
    prof : StageTimer, optional
        Charged with the drawing's stages.
    pack : bool
        Return the image as one array (:meth:`DomainImage.packed`), for engines that
        move arrays only.

    Returns
    -------
    DomainImage, or (H, W, 9) float32 array with `pack`
    """
    s = specs[key]
    fields = list(block) if s.layout is None else unpack_block(block, s.layout)
    image = draw(fields, s.domain, view, renderers=renderers or thread_renderers(), prof=prof)
    return image.packed(view.width, view.height, like=fields[0] if fields else None) if pack else image


def front_to_back(boxes: Sequence[Sequence[float]], eye) -> list[int]:
    """Indices of axis-aligned, non-overlapping boxes ``(x0, x1, y0, y1, z0, z1)`` from
    nearest to farthest from `eye`: of two boxes, the one on the eye's side of a plane
    that separates them comes first."""
    def cmp(i, j):
        a, b = boxes[i], boxes[j]
        for ax in range(3):
            if a[2 * ax + 1] <= b[2 * ax]:  # a below b on this axis
                return -1 if eye[ax] < a[2 * ax + 1] else 1
            if b[2 * ax + 1] <= a[2 * ax]:
                return 1 if eye[ax] < b[2 * ax + 1] else -1
        return 0
    return sorted(range(len(boxes)), key=functools.cmp_to_key(cmp))


def merge_domains(images: Sequence[DomainImage], boxes: Sequence[Sequence[float]], eye) -> DomainImage:
    """Domains' images as one: surfaces by depth (ties: the earlier domain), volumes by
    "over" from the nearest box to the farthest (see :func:`front_to_back`)."""
    from render.composite import depth_composite, over_composite

    surfaces = [im.surface for im in images if im.surface is not None]
    surface = None
    if len(surfaces) == 1:
        surface = surfaces[0]
    elif surfaces:
        surface = depth_composite([s[0] for s in surfaces], [s[1] for s in surfaces])
    volumes = [images[i].volume for i in front_to_back(boxes, eye) if images[i].volume is not None]
    volume = volumes[0] if len(volumes) == 1 else over_composite(volumes) if volumes else None
    return DomainImage(surface, volume)


def flatten(image: DomainImage, width: int, height: int, *, xp=np) -> tuple[Any, Any]:
    """The volume over the surface: ``(rgba (H, W, 4), depth (H, W) or None)``, the depth
    the surface's (None without one); transparent black (of module `xp`) when nothing
    was drawn."""
    from render.volume import over

    surface, volume = image.surface, image.volume
    if surface is None:
        return (xp.zeros((height, width, 4), xp.float32) if volume is None else volume), None
    if volume is None:
        return surface
    return over(volume.astype(surface[0].dtype, copy=False), surface[0]), surface[1]


def describe_domain(plots: Sequence[tuple], i: int, domain) -> tuple[list, DomainSpec]:
    """Domain `i`'s fields and :class:`DomainSpec` for `plots`.

    Parameters
    ----------
    plots : sequence of tuples
        ``(name, plot config, dataset, field, lo, hi, colormap)`` with global ranges
        (the scene renderer's list); every dataset holds domain `i`.
    i : int
        The domain's index in each dataset.
    domain : adaptors.mesh.MeshDomain or CellDomain
        Domain `i` as the simulation gave it (its place in the world).

    Returns
    -------
    fields : list of arrays
        What the plots name, each once (by reference, ghosts included): node fields and
        the tile ranges' values of the contoured fields that carry them; for meshes of
        cells, their points, connectivity, offsets, types and ghost masks too.
    spec : DomainSpec

    Raises
    ------
    ValueError
        A plot without a field to colour by.
    """
    fields: list = []
    index: dict = {}

    def put(key, make) -> int:
        if key not in index:
            index[key] = len(fields)
            fields.append(make())
        return index[key]

    def at(ds, name: str) -> int:
        return put((id(ds), name), lambda: ds.domains[i].vertex_array(name))

    def ranges_of(ds, name: str) -> tuple[int, tuple[int, int, int]] | None:
        # Only a vertex field's own ranges: vertex_array hands its very values to the plot.
        f = ds.domains[i].fields.get(name)
        if f is None or f.tile_ranges is None or f.association != "vertex":
            return None
        return put((id(ds), name, "ranges"), lambda: f.tile_ranges.values), f.tile_ranges.span

    def mesh_of(ds) -> tuple[tuple[int, int, int, int], int | None]:
        d = ds.domains[i]
        m = d.mesh
        at4 = tuple(put((id(ds), "\0mesh", k), lambda a=a: a)
                    for k, a in enumerate((m.points, m.connectivity, m.offsets, m.types)))
        hidden = None if d.ghosts is None else put((id(ds), "\0ghosts"), lambda: d.ghosts)
        return at4, hidden  # type: ignore[return-value]

    specs: list = []
    for pname, p, ds, field, lo, hi, cmap in plots:
        d = ds.domains[i]
        s = ds.surface
        if p["type"] == "mesh":
            if s is not None:
                raise ValueError(f"plot {pname}: a mesh plot draws the edges of cells; its pipeline's output is a "
                                 "contour's or slice's surface, whose edges are not drawn")
            color = tuple(float(c) for c in p["color"][:3])
            if hasattr(d, "mesh"):
                mesh, hidden = mesh_of(ds)
                specs.append(MeshPlot(color, mesh, hidden))  # type: ignore[arg-type]
            else:
                some = next((f.values for f in d.fields.values()), None)
                # only its device matters: one element of it (a view), so an engine that moves blocks moves little
                like = None if some is None else put((id(ds), "\0like"), lambda: some[(slice(0, 1),) * some.ndim])
                specs.append(MeshPlot(color, like=like))
            continue
        if p["type"] == "pseudocolor" and not field:
            raise ValueError(f"plot {pname}: needs a field to colour by (a slice or the mesh itself has none "
                             "of its own)")
        if hasattr(d, "mesh"):  # a mesh of cells
            mesh, hidden = mesh_of(ds)
            if p["type"] == "pseudocolor":
                f = d.field(field)
                if s is None:
                    per_cell = f.association == "element"
                    color = (put((id(ds), field, "cells"), lambda: f.values) if per_cell else at(ds, field))
                    specs.append(CellSurfacePlot(mesh, color, float(lo), float(hi), cmap, "surface", hidden=hidden,
                                                 color_cells=per_cell))
                elif s.planes:
                    specs.append(CellSurfacePlot(mesh, at(ds, field), float(lo), float(hi), cmap, "slice",
                                                 planes=s.planes, hidden=hidden))
                else:
                    specs.append(CellSurfacePlot(mesh, at(ds, field), float(lo), float(hi), cmap, "contour",
                                                 field=at(ds, s.field), levels=tuple(map(float, s.levels)),
                                                 hidden=hidden))
            else:
                f = d.field(field)
                opacity = p["color_table"].get("opacity")
                # a rectilinear grid's point field without ghosts is ray cast as it is, else resampled
                axes = (None if d.axes is None or f.association != "vertex" or hidden is not None
                        else tuple(put((id(ds), "\0axis", a), lambda a=a: d.axes[a]) for a in range(3)))
                specs.append(CellVolumePlot(mesh, put((id(ds), field, "stored"), lambda: f.values), f.association,
                                            float(lo), float(hi), cmap,
                                            None if opacity is None else tuple(tuple(map(float, x)) for x in opacity),
                                            hidden, axes))
            continue
        if p["type"] == "pseudocolor":
            if s is None:
                specs.append(SurfacePlot(-1, at(ds, field), (), float(lo), float(hi), cmap, kind="boundary"))
            elif s.planes:
                specs.append(SurfacePlot(-1, at(ds, field), (0.0,), float(lo), float(hi), cmap, kind="slice",
                                         planes=s.planes))
            else:
                specs.append(SurfacePlot(at(ds, s.field), at(ds, field or s.color_default),
                                         tuple(map(float, s.levels)), float(lo), float(hi), cmap,
                                         ranges_of(ds, s.field)))
        else:
            opacity = p["color_table"].get("opacity")
            specs.append(VolumePlot(at(ds, ds.volume_names.get(field, field)), float(lo), float(hi), cmap,
                                    None if opacity is None else tuple(tuple(map(float, x)) for x in opacity)))
    d = domain
    if hasattr(d, "mesh"):  # a mesh of cells: its plots carry their geometry; the box orders volumes
        spec = DomainSpec((1.0, 1.0, 1.0), (0.0, 0.0, 0.0), ((0, 0, 0), (0, 0, 0)), (0.0, 0.0, 0.0),
                          tuple(map(float, d.box)), tuple(specs))
    else:
        spec = DomainSpec(tuple(map(float, d.spacing)), tuple(map(float, d.origin)),
                          tuple(tuple(map(int, c)) for c in d.cells), tuple(map(float, d.node_origin)),
                          tuple(map(float, d.box)), tuple(specs))
    return fields, spec
