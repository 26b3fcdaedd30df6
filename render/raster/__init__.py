"""Software rasterizer for triangle meshes: the surface renderer's image without OpenGL.

A visibility buffer in two passes (see _gpu.py): every triangle writes ``depth | index``
into the pixels whose centres it covers (the nearest wins by an atomic minimum), then
every pixel shades its winning triangle, with perspective-correct interpolation, the
same Phong model, colormap and 8-bit colour as the OpenGL path of render/surface.py.
CuPy meshes are drawn by CUDA kernels (_gpu.py), NumPy meshes by Numba (_cpu.py).
Line segments (a mesh plot's edges) take the same two paths (:func:`rasterize_lines`): one
pixel per step along the segment's longer screen axis, depth-tested the same way.

Why: GPUs built for compute rasterize with few graphics units (an H200 draws ~1 G
triangles/s through OpenGL), while an isosurface of 10^8 triangles covers a few million
pixels at most: one thread per triangle with a pixel test is memory-bound instead.
"""

from __future__ import annotations

import numpy as np

from insitu import arrays

from . import _cpu
from ._params import FIELDS, vector

__all__ = ["LINE_BIAS", "rasterize", "rasterize_lines"]

#: Lines are drawn this fraction nearer than they are, so that the edges of a surface win its depth test.
LINE_BIAS = 2e-3


def rasterize(verts, faces, normals, values, params: dict, width: int, height: int):
    """Draw a mesh with the per-frame `params` (names of render/raster/_params.FIELDS).

    Parameters
    ----------
    verts, normals : (V, 3) float32, C-contiguous
    faces : (F, 3) int32, C-contiguous, indices into `verts`
    values : (V,) float32 or None
        Coloured through the colormap when ``params["use_cmap"]``.
    params : dict
        Camera (world -> eye rotation and shift, image-plane extents, near, far),
        material, light, colour range and background, as render/surface.py builds them.

    Returns
    -------
    rgba : (height, width, 4) float32
        Premultiplied colour (8-bit values), row 0 at the top; on the mesh's backend.
    depth : (height, width) float32
        Distance along the view direction, ``inf`` on the background.
    """
    if len(faces) >= 0xFFFFFFFF:
        raise ValueError(f"faces: at most {0xFFFFFFFF - 1} triangles per draw, got {len(faces)}")
    xp = arrays.get_array_module(verts)
    if xp is np:
        rgba = np.empty((height, width, 4), np.float32)
        depth = np.empty((height, width), np.float32)
        keys = np.full((height, width), np.uint64(0xFFFFFFFFFFFFFFFF))
        from ..colormap import name_at, table

        p = vector(params)
        tab = np.asarray(table(name_at(params["cmap"])), np.float64)
        vals = values if values is not None else np.zeros(1, np.float32)
        _cpu.raster(verts, faces, p, width, height, keys)
        _cpu.shade(keys, verts, faces, normals, vals, p, tab, width, height, rgba, depth)
        return rgba, depth
    from . import _gpu

    with xp.cuda.Device(arrays.device_id(verts)):
        rgba = xp.empty((height, width, 4), xp.float32)  # from CuPy's pool: no allocation per frame
        depth = xp.empty((height, width), xp.float32)
        keys = xp.empty((height, width), xp.uint64)
        _gpu.render(verts, faces, normals, values, params, width, height, rgba, depth, keys)
    return rgba, depth


def rasterize_lines(verts, segments, camera, bounds, width: int, height: int, color, *, bias: float = LINE_BIAS,
                    values=None, vmin: float = 0.0, vmax: float = 1.0, colormap: str = "viridis"):
    """Draw line segments one pixel wide, unlit, in `color` (or coloured by `values`).

    Parameters
    ----------
    verts : (V, 3) float32, C-contiguous
    segments : (S, 2) int32, C-contiguous, indices into `verts`
    camera : render.camera.Camera
    bounds : (6,) floats
        The world box that sets the depth range (as the surfaces drawn with these lines).
    color : (3,) floats in [0, 1]
        Stored as an RGBA8 framebuffer would (rounded to 1/255).
    bias : float
        Depths are stored times ``1 - bias``: a surface's own edges pass its depth test.
    values : (V,) array, optional
        A field at the vertices (on their backend): each segment is drawn in the colour
        of its ends' mean under `colormap` from `vmin` to `vmax` (a pixel shows the
        segment nearest to the eye there), `color` is then not used.

    Returns
    -------
    rgba : (height, width, 4) float32
        The lines' colour with alpha 1 on them, zeros elsewhere; on the segments' backend.
    depth : (height, width) float32
        ``inf`` off the lines.
    """
    import math

    if len(segments) >= 0xFFFFFFFF:
        raise ValueError(f"segments: at most {0xFFFFFFFF - 1} per draw, got {len(segments)}")
    c = np.asarray(color, np.float64)
    if c.shape != (3,) or not np.isfinite(c).all():
        raise ValueError(f"color: expected three numbers in [0, 1], got {color!r}")
    near, far = camera.clip_range(bounds)
    view = camera.view_matrix()
    t = math.tan(math.radians(camera.fov) / 2)
    params = {name: 0.0 for name, _ in FIELDS}
    params.update(rot=view[:3, :3].ravel(), shift=view[:3, 3], tanx=t * width / height, tany=t, near=near, far=far,
                  color=[0.0] * 3, light=[0.0] * 3, bg=[0.0] * 4)
    xp = arrays.get_array_module(verts)
    if xp is np:
        keys = np.full((height, width), np.uint64(0xFFFFFFFFFFFFFFFF))
        _cpu.raster_lines(verts, segments, vector(params), width, height, float(bias), keys)
    else:
        from . import _gpu

        with xp.cuda.Device(arrays.device_id(verts)):
            keys = xp.empty((height, width), xp.uint64)
            _gpu.render_lines(verts, segments, params, width, height, float(bias), keys)
    hit = keys != np.uint64(0xFFFFFFFFFFFFFFFF)
    depth = xp.where(hit, (keys >> np.uint64(32)).astype(xp.uint32).view(xp.float32), xp.float32(np.inf))
    if values is not None:
        from ..colormap import colormap as colour_of

        # each pixel's segment is the low half of its key
        seg = (keys & np.uint64(0xFFFFFFFF)).astype(xp.int64)[hit]
        mean = 0.5 * (values[segments[seg, 0]].astype(xp.float64) + values[segments[seg, 1]])
        rgba = xp.zeros((height, width, 4), xp.float32)
        rgba[hit] = colour_of(colormap, mean, vmin, vmax)
        rgba[..., 3] = hit
        return rgba, depth
    rgba = xp.zeros((height, width, 4), xp.float32)
    for a, v in enumerate(np.round(np.clip(c, 0, 1) * 255) / 255):  # scalars: nothing is uploaded
        rgba[..., a] = xp.where(hit, xp.float32(v), xp.float32(0))
    rgba[..., 3] = hit
    return rgba, depth
