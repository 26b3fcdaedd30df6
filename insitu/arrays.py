"""Arrays, backends and the one counted gateway for host<->device transfers.

Every array the library receives goes through :func:`asarray`, which never copies:
NumPy and CuPy arrays pass through unchanged, objects exposing
``__cuda_array_interface__`` or ``__dlpack__`` (PyTorch, Numba, JAX, ...) are wrapped as
CuPy or NumPy views of the same memory.

Every host<->device copy the library itself makes goes through :func:`to_host` or
:func:`to_device`, which count bytes and calls per direction. Tests (and users)
prove a pipeline stays on the device with::

    with insitu.arrays.no_host_transfers():
        ...

CuPy is optional: without it (or without a usable CUDA runtime) everything runs on
NumPy, and a device array given to the library raises :class:`DeviceUnavailableError`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import sys
import threading
from typing import Any, Iterator

import numpy as np

__all__ = [
    "DeviceUnavailableError",
    "HostTransferError",
    "TransferStats",
    "asarray",
    "backend_of",
    "count_transfers",
    "cuda_available",
    "cupy_or_none",
    "data_pointer",
    "device_id",
    "get_array_module",
    "is_device_array",
    "no_host_transfers",
    "pinned_empty",
    "scalar_to_host",
    "scalars_to_host",
    "scalars_to_host_async",
    "select_device",
    "to_device",
    "to_host",
    "transfer_stats",
]

# DLPack device types (dlpack.h, DLDeviceType)
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 13


class DeviceUnavailableError(RuntimeError):
    """A device (CUDA) array was given but no usable CUDA runtime is available."""


class HostTransferError(AssertionError):
    """A host<->device transfer happened where none was allowed."""


# --------------------------------------------------------------------------- CuPy


@functools.cache
def _cupy_status() -> tuple[Any, str]:
    """Return ``(cupy module or None, reason it is unusable)``; probed once."""
    try:
        import cupy
    except Exception as exc:  # ImportError, or a broken CUDA install raising at import
        return None, f"CuPy is not installed or failed to import ({exc.__class__.__name__}: {exc})"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return None, f"CuPy found no usable CUDA runtime ({exc.__class__.__name__}: {exc})"
    if n < 1:
        return None, "CuPy found no CUDA device"
    return cupy, ""


def cupy_or_none():
    """The ``cupy`` module when CuPy and a CUDA device are usable, else ``None``."""
    return _cupy_status()[0]


def cuda_available() -> bool:
    """Whether CuPy and at least one CUDA device are usable."""
    return _cupy_status()[0] is not None


def _require_cupy(what: str):
    cp, why = _cupy_status()
    if cp is None:
        raise DeviceUnavailableError(f"{what} is a CUDA device array, but {why}")
    return cp


def _is_cupy_ndarray(x: Any) -> bool:
    # CuPy is not imported just to answer "no" (a CuPy array means it was), and its
    # __cuda_array_interface__ is not built just to test for it (a dict per call, on
    # every launch path).
    cp = sys.modules.get("cupy")
    return cp is not None and isinstance(x, cp.ndarray)


# --------------------------------------------------------------------------- accept


def asarray(x: Any, *, name: str = "array"):
    """Return `x` as a NumPy or CuPy array **without copying**.

    Parameters
    ----------
    x : array-like
        ``numpy.ndarray``, ``cupy.ndarray``, or any object exposing
        ``__cuda_array_interface__``, ``__dlpack__`` or ``__array_interface__``.
    name : str, optional
        Used in error messages ("fields/phi/values", say).

    Returns
    -------
    numpy.ndarray or cupy.ndarray
        A view of the same memory (``data_pointer(result) == data_pointer(x)``).

    Raises
    ------
    DeviceUnavailableError
        `x` lives on a CUDA device and CuPy or the CUDA runtime is unusable.
    TypeError
        `x` exposes no array protocol (a list, say: it would need a copy).
    """
    if isinstance(x, np.ndarray) or _is_cupy_ndarray(x):
        return x
    if hasattr(x, "__cuda_array_interface__"):
        cp = _require_cupy(name)
        return cp.asarray(x)  # zero-copy: wraps the interface's pointer
    if hasattr(x, "__dlpack__"):
        dev_type = x.__dlpack_device__()[0] if hasattr(x, "__dlpack_device__") else _DL_CPU
        if dev_type in (_DL_CUDA, _DL_CUDA_MANAGED):
            return _require_cupy(name).from_dlpack(x)
        if dev_type in (_DL_CPU, _DL_CUDA_HOST):
            return np.from_dlpack(x)
        raise TypeError(f"{name}: DLPack device type {dev_type} is not supported (CPU or CUDA only)")
    if hasattr(x, "__array_interface__") or hasattr(x, "__array_struct__"):
        return np.asarray(x)
    raise TypeError(
        f"{name}: expected an array (NumPy, CuPy, or an object with __cuda_array_interface__, "
        f"__dlpack__ or __array_interface__), got {type(x).__name__}; "
        "insitu does not copy sequences into arrays"
    )


def is_device_array(x: Any) -> bool:
    """Whether `x` (as accepted by :func:`asarray`) lives in CUDA device memory."""
    if isinstance(x, np.ndarray):
        return False
    if _is_cupy_ndarray(x) or hasattr(x, "__cuda_array_interface__"):
        return True
    if hasattr(x, "__dlpack_device__"):
        return x.__dlpack_device__()[0] in (_DL_CUDA, _DL_CUDA_MANAGED)
    return False


def backend_of(x: Any) -> str:
    """``"cupy"`` for device arrays, ``"numpy"`` for host arrays."""
    return "cupy" if is_device_array(x) else "numpy"


def get_array_module(x: Any):
    """The array module (``numpy`` or ``cupy``) that operates on `x`."""
    if is_device_array(x):
        return _require_cupy("array")
    return np


def data_pointer(x: Any) -> int:
    """Address of the first element of `x`, host or device."""
    if hasattr(x, "__cuda_array_interface__"):
        return int(x.__cuda_array_interface__["data"][0])
    if hasattr(x, "__array_interface__"):
        return int(x.__array_interface__["data"][0])
    return data_pointer(asarray(x))


def device_id(x: Any) -> int | None:
    """CUDA device ordinal of a device array, ``None`` for host arrays."""
    if not is_device_array(x):
        return None
    return int(asarray(x).device.id)


# --------------------------------------------------------------------------- gateway


@dataclasses.dataclass
class TransferStats:
    """Host<->device transfers counted by the gateway."""

    h2d_calls: int = 0
    h2d_bytes: int = 0
    d2h_calls: int = 0
    d2h_bytes: int = 0
    #: Single values read back to steer a loop (a convergence test), apart from arrays.
    scalar_reads: int = 0

    @property
    def calls(self) -> int:
        """Array transfers, both directions (scalar reads not included)."""
        return self.h2d_calls + self.d2h_calls

    @property
    def bytes(self) -> int:
        return self.h2d_bytes + self.d2h_bytes

    def __sub__(self, other: "TransferStats") -> "TransferStats":
        return TransferStats(*(a - b for a, b in zip(dataclasses.astuple(self), dataclasses.astuple(other))))


_lock = threading.Lock()
_totals = TransferStats()


def transfer_stats() -> TransferStats:
    """A snapshot of all transfers counted since the process started."""
    with _lock:
        return dataclasses.replace(_totals)


def _count(direction: str, nbytes: int) -> None:
    with _lock:
        if direction == "scalar":
            _totals.scalar_reads += 1
        elif direction == "h2d":
            _totals.h2d_calls += 1
            _totals.h2d_bytes += nbytes
        else:
            _totals.d2h_calls += 1
            _totals.d2h_bytes += nbytes


class _Counting:
    """Live view of the transfers made since it was created."""

    def __init__(self) -> None:
        self._start = transfer_stats()
        self._end: TransferStats | None = None

    @property
    def stats(self) -> TransferStats:
        return (self._end or transfer_stats()) - self._start

    def __getattr__(self, item: str):
        return getattr(self.stats, item)

    def __repr__(self) -> str:
        return f"<transfers {self.stats}>"


@contextlib.contextmanager
def count_transfers() -> Iterator[_Counting]:
    """Count the library's host<->device transfers inside a ``with`` block.

    Yields an object with ``h2d_calls, h2d_bytes, d2h_calls, d2h_bytes, calls, bytes``.
    Counts are process-wide (all threads).
    """
    c = _Counting()
    try:
        yield c
    finally:
        c._end = transfer_stats()


@contextlib.contextmanager
def no_host_transfers(*, allow_scalars: bool = False) -> Iterator[_Counting]:
    """Raise :class:`HostTransferError` if the block made any counted transfer.

    With ``allow_scalars=True``, single values read by :func:`scalar_to_host` (a
    convergence test, say) are allowed; the count is still in the yielded object.
    """
    with count_transfers() as c:
        yield c
    s = c.stats
    if s.calls:
        raise HostTransferError(
            f"expected no host<->device transfers, got {s.h2d_calls} host->device "
            f"({s.h2d_bytes} B) and {s.d2h_calls} device->host ({s.d2h_bytes} B)"
        )
    if s.scalar_reads and not allow_scalars:
        raise HostTransferError(f"expected no host<->device transfers, got {s.scalar_reads} scalar read(s)")


def to_host(x: Any, out: np.ndarray | None = None) -> np.ndarray:
    """Copy a device array to host memory (counted). Host input is returned as is.

    Parameters
    ----------
    x : array
        Device array to copy; a host array is returned unchanged, uncounted.
    out : numpy.ndarray, optional
        Destination (pinned memory from :func:`pinned_empty` makes it fast), with
        `x`'s shape and dtype.
    """
    if not is_device_array(x):
        a = asarray(x)
        if out is None:
            return a
        out[...] = a
        return out
    d = asarray(x)
    if out is not None and (out.shape != d.shape or out.dtype != d.dtype):
        raise ValueError(f"to_host: out is {out.shape} {out.dtype}, array is {d.shape} {d.dtype}")
    res = d.get(out=out) if out is not None else d.get()
    _count("d2h", d.nbytes)
    return res


def to_device(x: Any, out: Any = None, *, device: int | None = None):
    """Copy a host array to a CUDA device (counted). Device input is returned as is.

    Parameters
    ----------
    x : array
        Host array.
    out : cupy.ndarray, optional
        Destination with `x`'s shape and dtype.
    device : int, optional
        Device ordinal for a new array (default: the current device).
    """
    if is_device_array(x):
        return asarray(x)
    cp = _require_cupy("the destination of to_device")
    h = asarray(x)
    if out is not None:
        if out.shape != h.shape or out.dtype != h.dtype:
            raise ValueError(f"to_device: out is {out.shape} {out.dtype}, array is {h.shape} {h.dtype}")
        out.set(h)
        res = out
    else:
        with cp.cuda.Device(device) if device is not None else contextlib.nullcontext():
            res = cp.asarray(h)
    _count("h2d", h.nbytes)
    return res


def scalar_to_host(x) -> float | int:
    """Read one value (a 0-d or 1-element array) to the host; counted as a scalar read.

    Host values are returned as Python numbers, uncounted.
    """
    if not is_device_array(x):
        return np.asarray(x).reshape(()).item()
    d = asarray(x)
    if d.size != 1:
        raise ValueError(f"scalar_to_host: expected one value, got an array of shape {d.shape}")
    v = d.reshape(()).item()
    _count("scalar", d.nbytes)
    return v


def _few(x, limit: int, what: str):
    d = asarray(x)
    if d.ndim != 1 or d.size > limit:
        raise ValueError(f"{what}: expected a 1-D array of at most {limit} values, got shape {d.shape}")
    for _ in range(d.size):
        _count("scalar", d.itemsize)
    return d


def scalars_to_host(x, limit: int = 64) -> list:
    """Read a few values (a 1-D array of at most `limit`) to the host in one copy.

    Each value counts as a scalar read, as if read by :func:`scalar_to_host`; the
    device is waited for once instead of once per value. Host values come back as
    Python numbers, uncounted.
    """
    if not is_device_array(x):
        return np.asarray(x).reshape(-1).tolist()
    return _few(x, limit, "scalars_to_host").get().tolist()


class PendingScalars:
    """Values on their way to the host (see :func:`scalars_to_host_async`)."""

    def __init__(self, values: list | None = None, copy: tuple | None = None) -> None:
        self._values = values
        self._copy = copy  # (pinned buffer, event after the copy, the source kept alive)

    def result(self) -> list:
        """The values as Python numbers, once their copy is done (later work on the
        stream is not waited for)."""
        if self._copy is not None:
            buf, done, _ = self._copy
            done.synchronize()
            self._values, self._copy = buf.tolist(), None
        return self._values  # type: ignore[return-value]

    def __del__(self) -> None:
        # unread: the pinned buffer goes back to CuPy's pool, which must not hand it out
        # while the copy may still write into it
        copy = getattr(self, "_copy", None)
        if copy is not None:
            copy[1].synchronize()


def scalars_to_host_async(x, limit: int = 64) -> PendingScalars:
    """Start reading a few values (a 1-D array of at most `limit`) to the host: the
    copy waits for the work queued so far on the current stream but runs on a stream of
    its own, and ``result()`` waits for it alone, so the device runs on through work
    queued after it, without waiting for the copy, while the host goes on. Counted as
    :func:`scalars_to_host`."""
    if not is_device_array(x):
        return PendingScalars(values=np.asarray(x).reshape(-1).tolist())
    import cupy

    d = cupy.ascontiguousarray(_few(x, limit, "scalars_to_host_async"))
    buf = pinned_empty(d.shape, d.dtype)
    ready = cupy.cuda.Event(disable_timing=True)
    ready.record()
    side = _copy_stream(cupy.cuda.runtime.getDevice())
    side.wait_event(ready)
    cupy.cuda.runtime.memcpyAsync(buf.ctypes.data, d.data.ptr, d.nbytes, 4, side.ptr)  # 4: cudaMemcpyDefault
    done = cupy.cuda.Event(disable_timing=True)
    done.record(side)
    return PendingScalars(copy=(buf, done, d))


@functools.cache
def _copy_stream(device: int):
    """The stream reads of scalars_to_host_async run on, one per device (work queued after
    a read on the caller's stream would otherwise wait for the copy)."""
    import cupy

    return cupy.cuda.Stream(non_blocking=True)


def pinned_empty(shape, dtype) -> np.ndarray:
    """An empty host array in page-locked memory (plain memory without CuPy)."""
    cp = cupy_or_none()
    if cp is None:
        return np.empty(shape, dtype)
    import cupyx

    return cupyx.empty_pinned(shape, dtype)


def cuda_module(source: tuple, what: str, logger, *, templates: bool = False):
    """CuPy's RawModule of a kernel module's ``source()`` (code, kernel instances, NVRTC
    options), its compile logged as `what` on first use (:func:`insitu.log.compiling`).

    `templates`: the instances are template name expressions, compiled with the module.
    """
    import cupy

    from .log import compiling, cupy_cache_dir

    code, names, options = source
    compiling(logger, what, cupy_cache_dir())
    return cupy.RawModule(code=code, options=options, name_expressions=list(names) if templates else None)


def select_device(comm=None) -> int | None:
    """Make ``local_rank % n_devices`` the current CUDA device; return it.

    Returns ``None`` (and does nothing) where no CUDA device is usable. `comm` is an
    mpi4py communicator; the local rank comes from splitting it by shared memory.
    """
    cp = cupy_or_none()
    if cp is None:
        return None
    local = 0
    if comm is not None and comm.Get_size() > 1:
        from mpi4py import MPI

        node = comm.Split_type(MPI.COMM_TYPE_SHARED)
        local = node.Get_rank()
        node.Free()
    dev = local % cp.cuda.runtime.getDeviceCount()
    cp.cuda.Device(dev).use()
    return dev
