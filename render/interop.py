"""CUDA-GL interop through ``cuda.bindings.runtime``: GL buffers and textures seen as
CuPy arrays, so meshes go into vertex buffers and frames come out of the framebuffer
without visiting the host.

The GL context must run on the CUDA device in use (render.gl picks the EGL device of the
current CUDA device). CuPy has no GL interop of its own.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import numpy as np

from insitu import arrays

__all__ = ["GLBuffer", "GLTexture", "interop_available"]


def _rt():
    from cuda.bindings import runtime

    return runtime


def _check(result, what: str):
    """Unpack a cuda.bindings (err, *values) tuple, raising on an error."""
    err, *values = result if isinstance(result, tuple) else (result,)
    rt = _rt()
    if err != rt.cudaError_t.cudaSuccess:
        name = rt.cudaGetErrorName(err)[1]
        raise RuntimeError(f"CUDA-GL interop: {what} failed: {name.decode() if isinstance(name, bytes) else name}")
    return values[0] if len(values) == 1 else tuple(values)


def interop_available(ctx) -> bool:
    """Whether CUDA can share `ctx`'s objects: a CUDA GPU, cuda.bindings, and a GL context
    on an NVIDIA EGL device."""
    if not arrays.cuda_available() or "NVIDIA" not in ctx.renderer.upper():
        return False
    try:
        _rt()
    except ImportError:
        return False
    return True


class _Resource:
    def __init__(self, resource) -> None:
        self.resource = resource

    @contextlib.contextmanager
    def _mapped(self) -> Iterator[None]:
        cp = arrays.cupy_or_none()
        stream = cp.cuda.get_current_stream().ptr
        _check(_rt().cudaGraphicsMapResources(1, self.resource, stream), "map")
        try:
            yield
        finally:
            _check(_rt().cudaGraphicsUnmapResources(1, self.resource, stream), "unmap")

    def close(self) -> None:
        if self.resource is not None:
            _check(_rt().cudaGraphicsUnregisterResource(self.resource), "unregister")
            self.resource = None


class GLBuffer(_Resource):
    """A GL buffer object registered with CUDA.

    Parameters
    ----------
    buffer : int
        GL buffer name (its storage already allocated with glBufferData).
    write_discard : bool
        CUDA overwrites the whole contents (vertex data written by a kernel).
    """

    def __init__(self, buffer: int, *, write_discard: bool = True) -> None:
        rt = _rt()
        flags = (rt.cudaGraphicsRegisterFlags.cudaGraphicsRegisterFlagsWriteDiscard if write_discard
                 else rt.cudaGraphicsRegisterFlags.cudaGraphicsRegisterFlagsNone)
        super().__init__(_check(rt.cudaGraphicsGLRegisterBuffer(int(buffer), flags), f"registering buffer {buffer}"))
        self.buffer = int(buffer)

    @contextlib.contextmanager
    def map(self, shape, dtype) -> Iterator:
        """The buffer as a CuPy array of `shape`/`dtype` while mapped (GL must not use it then)."""
        cp = arrays.cupy_or_none()
        with self._mapped():
            ptr, size = _check(_rt().cudaGraphicsResourceGetMappedPointer(self.resource), "mapped pointer")
            nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
            if nbytes > size:
                raise ValueError(f"GL buffer {self.buffer}: {size} bytes, {nbytes} asked for")
            mem = cp.cuda.UnownedMemory(int(ptr), size, self)
            yield cp.ndarray(shape, dtype, cp.cuda.MemoryPointer(mem, 0))


class GLTexture(_Resource):
    """A 2-D GL texture registered with CUDA for reading (a framebuffer attachment)."""

    def __init__(self, texture: int, width: int, height: int, dtype, channels: int) -> None:
        from OpenGL import GL

        rt = _rt()
        super().__init__(_check(rt.cudaGraphicsGLRegisterImage(
            int(texture), GL.GL_TEXTURE_2D, rt.cudaGraphicsRegisterFlags.cudaGraphicsRegisterFlagsReadOnly),
            f"registering texture {texture}"))
        self.width, self.height, self.dtype, self.channels = width, height, np.dtype(dtype), channels

    def read(self, out=None):
        """Copy the texture into a CuPy array (height, width[, channels]), GL's bottom row
        first; device to device."""
        cp = arrays.cupy_or_none()
        shape = (self.height, self.width) + ((self.channels,) if self.channels > 1 else ())
        out = cp.empty(shape, self.dtype) if out is None else out
        row = self.width * self.channels * self.dtype.itemsize
        rt = _rt()
        with self._mapped():
            arr = _check(rt.cudaGraphicsSubResourceGetMappedArray(self.resource, 0, 0), "mapped array")
            _check(rt.cudaMemcpy2DFromArrayAsync(out.data.ptr, row, arr, 0, 0, row, self.height,
                                                 rt.cudaMemcpyKind.cudaMemcpyDeviceToDevice,
                                                 cp.cuda.get_current_stream().ptr), "copy from texture")
        return out
