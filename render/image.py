"""Images: premultiplied float RGBA (NumPy or CuPy) to 8-bit and PNG files."""

from __future__ import annotations

import os

import numpy as np

from insitu import arrays

__all__ = ["read_png", "to_uint8", "write_png"]


def to_uint8(rgba, *, unpremultiply: bool = False) -> np.ndarray:
    """(H, W, 4) float RGBA in [0, 1] (NumPy or CuPy) as uint8 on the host; with
    `unpremultiply`, colour divided by alpha (straight alpha, as PNG stores it)."""
    a = arrays.asarray(rgba, name="rgba")
    if a.ndim != 3 or a.shape[2] not in (3, 4):
        raise ValueError(f"rgba: expected shape (H, W, 3|4), got {tuple(a.shape)}")
    if arrays.is_device_array(a):
        a = arrays.to_host(a)  # the final frame leaves the GPU here (counted)
    if a.dtype == np.uint8:
        return np.ascontiguousarray(a)
    a = np.nan_to_num(np.asarray(a, np.float64), nan=0.0)
    if unpremultiply and a.shape[2] == 4:
        alpha = a[..., 3:]
        a = np.concatenate([np.where(alpha > 0, a[..., :3] / np.where(alpha > 0, alpha, 1), 0), alpha], axis=2)
    return np.clip(np.rint(a * 255), 0, 255).astype(np.uint8)


def write_png(path: str, rgba) -> str:
    """Write premultiplied RGBA (or RGB) as a PNG with straight alpha; returns the path."""
    from PIL import Image

    img = to_uint8(rgba, unpremultiply=True)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    Image.fromarray(img, "RGBA" if img.shape[2] == 4 else "RGB").save(path)
    return path


def read_png(path: str) -> np.ndarray:
    """The PNG at `path` as uint8 (H, W, C)."""
    from PIL import Image

    with Image.open(path) as im:
        return np.asarray(im).copy()
