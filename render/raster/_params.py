"""The per-frame scalars of the software rasterizer, laid out once.

The Numba kernels read them from one float64 vector at the offsets below; the CUDA
kernels get the same values as a float32 struct passed by value (a kernel argument, not
a copy through the transfer gateway), declared from the same list.
"""

from __future__ import annotations

import numpy as np

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
    ("cmap", 1),  # index of the colormap in the kernel's table
    ("use_cmap", 1),
)


def _offsets() -> dict[str, int]:
    out, n = {}, 0
    for name, length in FIELDS:
        out[name] = n
        n += length
    return out


OFF = _offsets()
_N = sum(n for _, n in FIELDS)
_DTYPE = np.dtype([(name, "f4" if n == 1 else f"{n}f4") for name, n in FIELDS])


def vector(values: dict) -> np.ndarray:
    """`values` (name -> scalar or sequence) as the Numba kernels' float64 vector."""
    out = np.empty(_N)
    for name, n in FIELDS:
        out[OFF[name]:OFF[name] + n] = values[name]
    return out


def record(values: dict) -> np.void:
    """`values` as one ``struct RP`` (:func:`cuda_struct`), passed by value."""
    rec = np.zeros((), _DTYPE)
    for name, _ in FIELDS:
        rec[name] = values[name]
    return rec[()]


def cuda_struct() -> str:
    """The C declaration of ``struct RP``, field for field as :func:`record` lays it out."""
    lines = [f"    float {name}{f'[{n}]' if n > 1 else ''};" for name, n in FIELDS]
    return ("struct RP {\n" + "\n".join(lines) + "\n};\n"
            f"static_assert(sizeof(RP) == {_DTYPE.itemsize}, \"RP layout\");\n")
