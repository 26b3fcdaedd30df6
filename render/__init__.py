"""Rendering: marching cubes, volume ray casting, EGL/OpenGL, CUDA-GL interop, compositing.

Subpackages and modules: ``contour`` (marching cubes), ``surface`` (triangle meshes, through
``gl`` + ``interop`` or the software rasterizer ``raster``), ``volume`` (ray casting),
``composite`` (sort-last across ranks), ``camera``, ``colormap``, ``image`` (PNG, 8-bit frames).
"""
