"""Software rasterizer for triangle meshes: the surface renderer's image without OpenGL.

A visibility buffer in two passes (see _gpu.py): every triangle writes ``depth | index``
into the pixels whose centres it covers (the nearest wins by an atomic minimum), then
every pixel shades its winning triangle, with perspective-correct interpolation, the
same Phong model, colormap and 8-bit colour as the OpenGL path of render/surface.py.
CuPy meshes are drawn by CUDA kernels (_gpu.py), NumPy meshes by Numba (_cpu.py).

Why: GPUs built for compute rasterize with few graphics units (an H200 draws ~1 G
triangles/s through OpenGL), while an isosurface of 10^8 triangles covers a few million
pixels at most: one thread per triangle with a pixel test is memory-bound instead.
"""

from __future__ import annotations

import numpy as np

from insitu import arrays

from . import _cpu
from ._params import vector

__all__ = ["rasterize"]


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
