"""Stand-ins for third-party arrays, so device code paths run on CPU CI.

Each wrapper exposes exactly one array protocol of the array it wraps and nothing
else, the way a PyTorch tensor, a Numba device array or a JAX array reaches insitu.
Like mpi4py's own tests, :class:`FakeCudaArray` publishes
``__cuda_array_interface__`` over *host* memory when it wraps a NumPy array: nothing
may dereference the pointer on CPU, only look at it. Wrapping a CuPy array instead
gives a genuine device array hidden behind one protocol (for ``tests/gpu/``).

Import as ``from fakes import FakeCudaArray`` (``tests/`` is on ``sys.path`` through
its ``conftest.py``).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ArrayInterfaceOnly",
    "DLPackOnly",
    "FakeCudaArray",
    "FakeCudaDLPack",
    "DL_CPU",
    "DL_CUDA",
]

# dlpack.h, DLDeviceType
DL_CPU, DL_CUDA = 1, 2


class ArrayInterfaceOnly:
    """Exposes only ``__array_interface__`` of a NumPy array (keeps it alive)."""

    def __init__(self, array: Any) -> None:
        self.array = array

    @property
    def __array_interface__(self) -> dict:
        return self.array.__array_interface__


class DLPackOnly:
    """Exposes only ``__dlpack__`` / ``__dlpack_device__`` of a NumPy or CuPy array."""

    def __init__(self, array: Any) -> None:
        self.array = array
        self.exports = 0

    def __dlpack__(self, *args, **kwargs):
        self.exports += 1
        return self.array.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


class FakeCudaArray:
    """Exposes only ``__cuda_array_interface__`` (version 3).

    Over a NumPy array (must be C-contiguous) the pointer is a host address, as in
    mpi4py's tests; over a CuPy array (anything with ``__cuda_array_interface__``) it
    is that array's interface, so the fake is a real device array.
    """

    def __init__(self, array: Any) -> None:
        if not hasattr(array, "__cuda_array_interface__") and not array.flags.c_contiguous:
            raise ValueError("FakeCudaArray over host memory needs a C-contiguous array")
        self.array = array

    @property
    def __cuda_array_interface__(self) -> dict:
        a = self.array
        if hasattr(a, "__cuda_array_interface__"):
            cai = dict(a.__cuda_array_interface__)
            cai["version"] = 3
            return cai
        return {
            "shape": tuple(a.shape),
            "typestr": a.dtype.str,
            "data": (a.ctypes.data, False),
            "strides": None,
            "version": 3,
        }


class FakeCudaDLPack:
    """A DLPack producer that says it lives on CUDA device `device_id`.

    Over a NumPy array it must never be exported (there is no device memory behind
    it): ``__dlpack__`` counts the attempt in ``exports`` and raises. Over a CuPy array
    it exports that array.
    """

    def __init__(self, array: Any, device_id: int = 0) -> None:
        self.array = array
        self.device_id = device_id
        self.exports = 0

    def __dlpack__(self, *args, **kwargs):
        self.exports += 1
        if hasattr(self.array, "__cuda_array_interface__"):
            return self.array.__dlpack__(*args, **kwargs)
        raise BufferError("FakeCudaDLPack over host memory cannot be exported")

    def __dlpack_device__(self):
        return (DL_CUDA, self.device_id)
