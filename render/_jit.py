"""Calling Numba kernels with as few compiled specializations as their inputs allow.

A Numba dispatcher compiles a new specialization for every combination of argument types:
an input array that happens to be read-only, Fortran-ordered or a strided view costs a
compile of the whole kernel (tens of seconds for the marching cubes) although the code
reads it alike. :func:`call` types the inputs it is told of as read-only arrays (C layout
when they are C-contiguous, any layout otherwise), so every caller passing the same dtypes
shares one specialization (and one entry of Numba's on-disk cache).
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
from numba.core import types


def input_type(a: np.ndarray) -> types.Array:
    """Numba's type for the read-only input array `a`: its dtype and rank, read-only, C layout
    if `a` is C-contiguous, any layout ('A') otherwise."""
    layout = "C" if a.flags.c_contiguous else "A"
    return types.Array(numba.from_dtype(a.dtype), a.ndim, layout, readonly=True, aligned=a.flags.aligned)


def call(kernel: Any, *args: Any, inputs: tuple[int, ...] = ()) -> Any:
    """Call the Numba dispatcher `kernel` on `args`, the arrays at positions `inputs` typed by
    :func:`input_type` (the others as Numba types them).

    Parameters
    ----------
    kernel : numba dispatcher
        An ``@numba.njit`` function (with ``cache=True`` the specialization is also looked
        up in, and written to, Numba's on-disk cache).
    *args
        Its arguments.
    inputs : tuple of int
        Positions of arrays the kernel only reads.

    Returns
    -------
    What the kernel returns.
    """
    sig = tuple(input_type(a) if n in inputs else numba.typeof(a) for n, a in enumerate(args))
    # Found without compile(), which takes Numba's process-wide compiler lock: a call would
    # wait for whatever another thread is compiling.
    known = kernel.overloads.get(sig)
    return (known.entry_point if known is not None else kernel.compile(sig))(*args)
