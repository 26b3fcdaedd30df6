"""The per-frame scalars both ray-casting kernels take (laid out by render._layout): the
CPU kernel reads a float64 and an int64 vector at the offsets below, the CUDA kernel one
struct passed by value.
"""

from __future__ import annotations

import numpy as np

from .._layout import Layout

__all__ = ["DOUBLES", "INTS", "OFF", "IOFF", "cuda_struct", "pack", "record"]

#: (name, length) of the float64 parameters, in order.
DOUBLES: tuple[tuple[str, int], ...] = (
    ("eye", 3), ("right", 3), ("up", 3), ("fwd", 3),  # camera basis (Camera.basis)
    ("tanx", 1), ("tany", 1),  # half extents of the image plane at distance 1
    ("near", 1), ("far", 1),  # depth clip (0, inf when the camera sets none)
    ("org", 3), ("inv_sp", 3),  # index of a world point p is (p - org) * inv_sp
    ("ext_lo", 3), ("ext_hi", 3),  # the box whose samples this render owns
    ("bnd_lo", 3), ("bnd_hi", 3),  # the whole data set's box: outer segments end on its faces
    ("step", 1), ("inv_unit", 1),  # sample spacing along rays; 1 / the TF's unit length
    ("vmin", 1), ("lut_scale", 1),  # table index of value v is (v - vmin) * lut_scale
    ("bg", 4),  # premultiplied background
    ("et", 1),  # early termination opacity
)
#: (name, length) of the integer parameters, in order.
INTS: tuple[tuple[str, int], ...] = (
    ("clo", 3), ("chi", 3),  # first and last cell (lower corner index) that may be read
    ("nlut", 1),
    ("rect", 1),  # 1: a rectilinear grid, sample positions in the coordinate array (org, inv_sp unused)
    ("aoff", 3),  # where each axis's coordinates start in that array
)


_LAYOUT = Layout("Params", [("double", DOUBLES), ("int", INTS)])
OFF, IOFF = _LAYOUT.offsets


def pack(values: dict) -> tuple[np.ndarray, np.ndarray]:
    """The float64 and int64 vectors of `values` (name -> scalar or sequence) for the CPU kernel."""
    fp, ip = _LAYOUT.vectors(values)
    return fp, ip


def record(values: dict) -> np.void:
    """`values` as one C struct (``struct Params`` of :func:`cuda_struct`), passed by value."""
    return _LAYOUT.record(values)


def cuda_struct() -> str:
    """The C declaration of ``struct Params``, field for field as :func:`record` lays it out."""
    return _LAYOUT.cuda_struct()
