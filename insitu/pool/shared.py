"""Host arrays in shared memory, so a worker daemon on the same node maps them instead of
copying them.

    field = shared_empty((256, 256, 256), np.float32)   # a NumPy array; fill it as usual
    GPUBlocks.from_arrays(daemon_worker, {0: field}).send_gpu().exec_gpu(fn).recv_gpu()

An array made by :func:`shared_empty` (and every view of it: slices, transposes,
``.view(dtype)``) is sent to a worker daemon as the name of its POSIX shared-memory
segment plus the byte offset, shape, dtype and strides of the view
(:func:`segment_of`); the daemon maps the same segment (:func:`attach`), so writes on
either side are seen by the other, with no copy. Any other NumPy array is sent *by
value* (a pickled copy): writes by the daemon do not reach it.

Lifetime: the process that created a segment (its owner) unlinks it when the last array
using it is garbage-collected, or at exit (where it leaves the mapping to the end of the
process, since arrays may still be used by other exit handlers). A process that attached it keeps its
mapping, valid, while it holds arrays on it, even after the owner unlinked the name.
Segments are made with :class:`multiprocessing.shared_memory.SharedMemory`; a process
that only attaches does not register the segment with its resource tracker (which, on
Python < 3.13, would unlink the owner's segment when the attaching process exits).
"""

from __future__ import annotations

import atexit
import dataclasses
import sys
import threading
import weakref
from multiprocessing import resource_tracker, shared_memory

import numpy as np

__all__ = ["SegmentView", "attach", "is_shared", "segment_of", "shared_empty", "shared_zeros", "shared_copy"]

_lock = threading.Lock()
# Segments this process created (owned) or mapped (attached), by name, while arrays use them.
_owned: "weakref.WeakValueDictionary[str, _Segment]" = weakref.WeakValueDictionary()
_attached: "weakref.WeakValueDictionary[str, _Segment]" = weakref.WeakValueDictionary()


class _Segment:
    """Keeps one mapping of a segment alive; arrays on it have it as their base.

    NumPy takes the memory through ``__array_interface__`` (a raw pointer, no buffer
    export), so the mapping can be closed as soon as this object goes, which happens
    only once no array uses it.
    """

    __slots__ = ("__array_interface__", "__weakref__", "address", "name", "owner", "shm", "size")

    def __init__(self, shm: shared_memory.SharedMemory, *, owner: bool) -> None:
        probe = np.frombuffer(shm.buf, np.uint8)
        self.address = int(probe.ctypes.data)
        del probe  # no export of shm.buf may outlive this, or closing it would fail
        self.name, self.size, self.shm, self.owner = shm.name, shm.size, shm, owner
        self.__array_interface__ = {"shape": (shm.size,), "typestr": "|u1", "data": (self.address, False),
                                    "version": 3}
        # Not at exit: arrays on it may still be used then (see _unlink_at_exit).
        weakref.finalize(self, _release, shm, owner).atexit = False


def _release(shm: shared_memory.SharedMemory, owner: bool) -> None:
    shm.close()
    if owner:
        try:
            shm.unlink()
        except FileNotFoundError:
            pass


@atexit.register
def _unlink_at_exit() -> None:
    # Remove the names of the segments still in use; the memory goes with the process.
    for seg in list(_owned.values()):
        try:
            seg.shm.unlink()
        except FileNotFoundError:
            pass


@dataclasses.dataclass(frozen=True)
class SegmentView:
    """Where an array lies in a shared segment: enough to map the same view elsewhere."""

    name: str
    offset: int  # bytes from the segment's start to the array's first element
    shape: tuple
    dtype: str  # numpy dtype.str
    strides: tuple


def _view(seg: _Segment, offset: int, shape, dtype, strides) -> np.ndarray:
    return np.ndarray(tuple(shape), np.dtype(dtype), buffer=np.asarray(seg), offset=int(offset),
                      strides=tuple(strides))


def shared_empty(shape, dtype=np.float64, *, order: str = "C") -> np.ndarray:
    """A new uninitialized NumPy array in a POSIX shared-memory segment of its own.

    Parameters
    ----------
    shape : int or tuple of int
    dtype : data-type
    order : {"C", "F"}
        Memory layout.

    Returns
    -------
    numpy.ndarray
        Handed to a worker daemon by reference (see the module docstring). The segment
        is unlinked when this array and all its views are gone.
    """
    if order not in ("C", "F"):
        raise ValueError(f"shared_empty: order must be 'C' or 'F', got {order!r}")
    dt = np.dtype(dtype)
    if dt.hasobject:
        raise TypeError(f"shared_empty: dtype {dt} holds Python objects, which cannot live in shared memory")
    shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(n) for n in shape)
    if any(n < 0 for n in shape):
        raise ValueError(f"shared_empty: negative dimension in shape {shape}")
    nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    shm = shared_memory.SharedMemory(create=True, size=max(nbytes, 1))  # size 0 is refused
    seg = _Segment(shm, owner=True)
    with _lock:
        _owned[seg.name] = seg
    return np.ndarray(shape, dt, buffer=np.asarray(seg), order=order)


def shared_zeros(shape, dtype=np.float64, *, order: str = "C") -> np.ndarray:
    """As :func:`shared_empty`, filled with zeros."""
    a = shared_empty(shape, dtype, order=order)
    a[...] = 0
    return a


def shared_copy(a) -> np.ndarray:
    """A copy of host array `a` in shared memory (same shape, dtype and C/F order)."""
    a = np.asarray(a)
    out = shared_empty(a.shape, a.dtype, order="F" if a.flags.f_contiguous and not a.flags.c_contiguous else "C")
    out[...] = a
    return out


def _segment(a) -> _Segment | None:
    b = a
    while isinstance(b, np.ndarray):
        b = b.base
    return b if isinstance(b, _Segment) else None


def is_shared(a) -> bool:
    """Whether `a` is a NumPy array on a shared segment (made here or attached here)."""
    return isinstance(a, np.ndarray) and _segment(a) is not None


def segment_of(a) -> SegmentView | None:
    """Where NumPy array `a` lies in shared memory, or None if it is not on a segment."""
    if not isinstance(a, np.ndarray):
        return None
    seg = _segment(a)
    if seg is None:
        return None
    return SegmentView(seg.name, int(a.__array_interface__["data"][0]) - seg.address, tuple(a.shape), a.dtype.str,
                       tuple(a.strides))


def _open(name: str) -> shared_memory.SharedMemory:
    """Map an existing segment without handing it to this process's resource tracker."""
    if sys.version_info >= (3, 13):
        return shared_memory.SharedMemory(name=name, track=False)
    shm = shared_memory.SharedMemory(name=name)
    # Python < 3.13 registers attached segments too, and its tracker would unlink the
    # owner's segment when this process exits: take it back out at once.
    resource_tracker.unregister(shm._name, "shared_memory")  # the registered name
    return shm


def attach(view: SegmentView) -> np.ndarray:
    """The array described by `view`, on the same memory (no copy).

    A segment this process created or already mapped is reused; otherwise it is mapped
    now and stays mapped while arrays on it live.

    Raises
    ------
    FileNotFoundError
        No segment of that name (its owner unlinked it: all its arrays were freed).
    ValueError
        The view does not fit in the segment.
    """
    with _lock:
        seg = _owned.get(view.name) or _attached.get(view.name)
        if seg is None:
            try:
                shm = _open(view.name)
            except FileNotFoundError:
                raise FileNotFoundError(f"shared memory segment {view.name!r} does not exist (any more): its owner "
                                        "freed every array on it") from None
            seg = _Segment(shm, owner=False)
            _attached[view.name] = seg
    try:
        return _view(seg, view.offset, view.shape, view.dtype, view.strides)
    except (TypeError, ValueError) as e:
        raise ValueError(f"shared memory segment {view.name!r} ({seg.size} B) cannot hold {view}: {e}") from None
