"""The per-frame scalars both kernels take, laid out once.

The CPU kernel reads them from a float64 and an int64 vector at the offsets below; the
CUDA kernel gets the same values as a struct passed by value (a kernel argument, not a
copy through the transfer gateway), its C declaration generated from the same list.
"""

from __future__ import annotations

import numpy as np

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
)


def _offsets(fields) -> dict[str, int]:
    out, n = {}, 0
    for name, length in fields:
        out[name] = n
        n += length
    return out


OFF = _offsets(DOUBLES)
IOFF = _offsets(INTS)
_NDOUBLE = sum(n for _, n in DOUBLES)
_NINT = sum(n for _, n in INTS)
_DTYPE = np.dtype([(name, "f8" if n == 1 else f"{n}f8") for name, n in DOUBLES]
                  + [(name, "i4" if n == 1 else f"{n}i4") for name, n in INTS], align=True)


def pack(values: dict) -> tuple[np.ndarray, np.ndarray]:
    """The float64 and int64 vectors of `values` (name -> scalar or sequence) for the CPU kernel."""
    fp, ip = np.empty(_NDOUBLE), np.empty(_NINT, np.int64)
    for name, n in DOUBLES:
        fp[OFF[name]:OFF[name] + n] = values[name]
    for name, n in INTS:
        ip[IOFF[name]:IOFF[name] + n] = values[name]
    return fp, ip


def record(values: dict) -> np.void:
    """`values` as one C struct (``struct Params`` of :func:`cuda_struct`), passed by value."""
    rec = np.zeros((), _DTYPE)
    for name, _ in DOUBLES + INTS:
        rec[name] = values[name]
    return rec[()]


def cuda_struct() -> str:
    """The C declaration of ``struct Params``, field for field as :func:`record` lays it out."""
    lines = [f"    {c} {name}{f'[{n}]' if n > 1 else ''};"
             for c, fields in (("double", DOUBLES), ("int", INTS)) for name, n in fields]
    # The assert catches a layout that drifted from the NumPy record's.
    return ("struct Params {\n" + "\n".join(lines) + "\n};\n"
            f"static_assert(sizeof(Params) == {_DTYPE.itemsize}, \"Params layout\");\n")
