"""Rendering: marching cubes, volume ray casting, EGL/OpenGL, CUDA-GL interop, compositing.

Empty until contouring (issue 4) and rendering (issue 5) land; the package exists so the
layering is in place.
"""
