"""Checks of the scalar volumes the renderers sample, shared by contouring and ray casting."""

from __future__ import annotations

from typing import Any, Callable

from insitu import arrays


def check_volume(volume: Any, name: str, *, supported: Callable[[Any], bool], fallback: str):
    """`volume` as a 3-D array on its own device (NumPy or CuPy) in a dtype the kernels read.

    Parameters
    ----------
    volume : array_like
        Real numbers (bool, integer or floating), at least 2 samples per axis.
    name : str
        What to call it in errors (``"volume"``, ``"block 3"``).
    supported : callable
        Whether the kernels read a dtype directly; other dtypes are converted to `fallback`
        on the array's own backend (no host transfer).
    fallback : str
        NumPy dtype name the others are converted to.

    Raises
    ------
    TypeError
        Not real numbers (complex, strings, objects).
    ValueError
        Not 3-D, or fewer than 2 samples along an axis.
    """
    vol = arrays.asarray(volume, name=name)
    if vol.ndim != 3:
        raise ValueError(f"{name}: expected a 3-D array, got {vol.ndim}-D of shape {tuple(vol.shape)}")
    if vol.dtype.kind not in "fiub":
        raise TypeError(f"{name}: expected real numbers (bool, integer or floating), got dtype {vol.dtype}")
    if min(vol.shape) < 2:
        raise ValueError(f"{name}: needs at least 2 samples per axis, got shape {tuple(vol.shape)}")
    xp = arrays.get_array_module(vol)
    if not supported(vol.dtype):
        vol = vol.astype(xp.dtype(fallback))
    if any(s % vol.dtype.itemsize for s in vol.strides):
        vol = xp.ascontiguousarray(vol)  # the kernels index whole elements
    return vol
