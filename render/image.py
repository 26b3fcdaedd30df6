"""Images: premultiplied float RGBA (NumPy or CuPy) to 8-bit and PNG files."""

from __future__ import annotations

import functools
import os

import numpy as np

from insitu import arrays

__all__ = ["read_png", "to_uint8", "write_png"]


def to_uint8(rgba, *, unpremultiply: bool = False, host: bool = True):
    """(H, W, 4) float RGBA in [0, 1] (NumPy or CuPy) as uint8 on the host; with
    `unpremultiply`, colour divided by alpha (straight alpha, as PNG stores it). With
    ``host=False`` a device frame stays on the device (for a writer that stages it in
    page-locked memory itself, :class:`insitu.stream.FrameWriter`)."""
    a = arrays.asarray(rgba, name="rgba")
    if a.ndim != 3 or a.shape[2] not in (3, 4):
        raise ValueError(f"rgba: expected shape (H, W, 3|4), got {tuple(a.shape)}")
    # Converted where it is: a device frame leaves the GPU as bytes, a quarter of its
    # float32 size, and the host does no per-pixel work (which took ~100 ms at 1024^2
    # on the GPU node). The same float64 arithmetic on both: the same bytes.
    xp = arrays.get_array_module(a)
    if a.dtype != np.uint8 and arrays.is_device_array(a):
        # One kernel, the arithmetic below in the same order (the same bytes).
        a = xp.ascontiguousarray(a)
        a = _uint8_kernel()(a, np.int32(a.shape[2]), bool(unpremultiply), size=a.size).reshape(a.shape)
    elif a.dtype != np.uint8:
        a = xp.nan_to_num(a.astype(xp.float64), nan=0.0)
        if unpremultiply and a.shape[2] == 4:
            alpha = a[..., 3:]
            a = xp.concatenate([xp.where(alpha > 0, a[..., :3] / xp.where(alpha > 0, alpha, 1), 0), alpha], axis=2)
        a = xp.clip(xp.rint(a * 255), 0, 255).astype(xp.uint8)
    if not host:
        return a if a.flags.c_contiguous else xp.ascontiguousarray(a)
    if arrays.is_device_array(a):
        a = arrays.to_host(a)  # the final frame leaves the GPU here (counted)
    return np.ascontiguousarray(a)


@functools.cache
def _uint8_kernel():
    import cupy

    return cupy.ElementwiseKernel(
        "raw T rgba, int32 nc, bool unpremultiply", "uint8 out",
        """
        const int c = i % nc;
        double v = clean((double)rgba[i]);
        if (unpremultiply && nc == 4 && c < 3) {
            const double alpha = clean((double)rgba[i - c + 3]);
            v = alpha > 0 ? v / alpha : 0.0;
        }
        out = (unsigned char)fmin(fmax(rint(v * 255), 0.0), 255.0);
        """,
        "insitu_to_uint8",
        preamble="""
        // numpy.nan_to_num: NaN -> 0, +-inf -> the largest finite double of that sign
        __device__ double clean(double x) {
            return isnan(x) ? 0.0 : isinf(x) ? (x > 0 ? 1.7976931348623157e308 : -1.7976931348623157e308) : x;
        }
        """)


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
