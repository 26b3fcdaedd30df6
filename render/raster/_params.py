"""The per-frame scalars of the software rasterizer (laid out by render._layout): the
Numba kernels read one float64 vector at the offsets below, the CUDA kernels one float32
struct passed by value.
"""

from __future__ import annotations

import numpy as np

from .._layout import Layout

__all__ = ["FIELDS", "OFF", "cuda_struct", "record", "vector"]

#: (name, length) in order.
FIELDS: tuple[tuple[str, int], ...] = (
    ("rot", 9), ("shift", 3),  # world -> eye: rot (row-major) @ p + shift
    ("tanx", 1), ("tany", 1),  # half extents of the image plane at distance 1
    ("near", 1), ("far", 1),  # depth clip
    ("ambient", 1), ("diffuse", 1), ("specular", 1),
    ("color", 3),  # base colour without a colour field
    ("light", 3),  # unit direction towards the light, eye space
    ("shininess", 1),
    ("vmin", 1), ("vscale", 1),  # colormap coordinate of value v: (v - vmin) * vscale, clamped to [0, 1]
    ("bg", 4),  # premultiplied background, as stored in 8 bits
    ("cmap", 1),  # the colormap: render.colormap.index(name) (its table is a kernel argument)
    ("use_cmap", 1),
)


_LAYOUT = Layout("RP", [("float", FIELDS)])
(OFF,) = _LAYOUT.offsets


def vector(values: dict) -> np.ndarray:
    """`values` (name -> scalar or sequence) as the Numba kernels' float64 vector."""
    return _LAYOUT.vectors(values)[0]


def record(values: dict) -> np.void:
    """`values` as one ``struct RP`` (:func:`cuda_struct`), passed by value."""
    return _LAYOUT.record(values)


def cuda_struct() -> str:
    """The C declaration of ``struct RP``, field for field as :func:`record` lays it out."""
    return _LAYOUT.cuda_struct()
