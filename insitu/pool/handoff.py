"""Messages between a client and a worker daemon on one node, with zero-copy array hand-off.

A message is a pickle (protocol 5) plus its out-of-band buffers, framed for a stream
socket. Arrays anywhere in a message (a package's arguments, lists, dicts, tuples,
results) are replaced by small descriptors through ``Pickler.persistent_id`` and turned
back into arrays by ``Unpickler.persistent_load``:

``("shm", SegmentView)``
    A NumPy array on a shared segment (:mod:`insitu.pool.shared`): the receiver maps
    the same memory. Other NumPy arrays travel by value (out-of-band buffers: one copy
    through the socket, none in user space).
``("ipc", handle, size, offset, shape, dtype, strides, pci_bus_id, lent)``
    A CUDA device array: ``cudaIpcGetMemHandle`` of its allocation (base found with
    ``cuMemGetAddressRange``), its byte offset from that base, and the device by PCI bus
    id (device ordinals differ between processes with other ``CUDA_VISIBLE_DEVICES``).
    ``lent`` numbers the client's allocations in one request.
``("lent", lent, offset, shape, dtype, strides)``
    In a reply: a view of memory the client lent in that request (a kernel that worked
    in place), rebuilt on the client's own allocation.
``("empty", shape, dtype, pci_bus_id)``
    A device array of no elements (it may have no allocation to export).

Limits: a message holds at most :data:`MAX_BUFFERS` out-of-band buffers and
:func:`max_message_bytes` bytes in all; :func:`recv_frames` checks the header against
them before it allocates anything, and allocates large frames untouched (their memory
is committed only as the bytes arrive), so a forged header costs nothing.

What comes back: results travel like requests, but a host array goes by value unless
it is a view of a segment the client sent with this request (then it comes back as a
view of the client's own memory, as from an in-process worker); a device array in
memory the client lent comes back as a view of that memory (``"lent"``); any other
device array (a cached block, a new result) is exported by IPC, kept alive by the
daemon until the connection's next request, and copied device-to-device into memory
of the client's on arrival. Only ``cudaMalloc`` memory (CuPy's default pool) can be
exported; stream-ordered (``cudaMallocAsync``) and managed memory cannot.

Who synchronizes (as mpi4py says it): the client synchronizes the current stream of
each device whose arrays it sends, after pickling and before sending; the daemon
synchronizes each device it used before it replies, so its writes are complete when
the client reads them; the client synchronizes after copying a daemon-owned device
result, before the daemon may free it (its next request on that connection).

Borrowed memory on the daemon (mapped segments, opened IPC handles) stays mapped while
arrays on it live, normally until the end of the package; :func:`own` copies a borrowed
array into the daemon's own memory, which the block cache does for everything it keeps.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib
import io
import os
import pickle
import socket
import struct
import threading
import types
import weakref
from typing import Any, Callable, Iterator

import numpy as np

from insitu import arrays
from insitu.errors import InsituError

from . import shared

__all__ = ["DEFAULT_MAX_MESSAGE_BYTES", "MAX_BUFFERS", "ClientExchange", "DaemonExchange", "MessageTooLargeError",
           "check_size", "dumps", "loads", "max_message_bytes", "own", "pickler_name", "recv_frames", "send_frames"]

# --------------------------------------------------------------------------- framing

_HEADER = struct.Struct("!QI")  # pickle length, number of out-of-band buffers
_LEN = struct.Struct("!Q")

#: Most out-of-band buffers (arrays sent by value) one message may carry.
MAX_BUFFERS = 1 << 16
#: Default of :func:`max_message_bytes`: 16 GiB.
DEFAULT_MAX_MESSAGE_BYTES = 1 << 34
# Frames from this size on are allocated without being touched (np.empty): their pages
# cost memory only as the data arrives, so a header that lies about its size costs nothing.
_LAZY = 1 << 20


class MessageTooLargeError(InsituError, ValueError):
    """A message (its header) exceeds the limits of the wire protocol; nothing of it was read."""


def max_message_bytes() -> int:
    """Most bytes one message may hold (pickle and buffers together):
    ``$INSITU_MAX_MESSAGE_BYTES``, else :data:`DEFAULT_MAX_MESSAGE_BYTES`. Large host
    arrays need not travel in messages: those made by
    :func:`insitu.pool.shared.shared_empty` are handed over as a segment name."""
    v = os.environ.get("INSITU_MAX_MESSAGE_BYTES")
    if not v:
        return DEFAULT_MAX_MESSAGE_BYTES
    try:
        n = int(v)
    except ValueError:
        raise ValueError(f"INSITU_MAX_MESSAGE_BYTES must be a number of bytes, got {v!r}") from None
    if n <= 0:
        raise ValueError(f"INSITU_MAX_MESSAGE_BYTES must be > 0, got {n}")
    return n


def check_size(frames: list, max_bytes: int | None = None) -> int:
    """The bytes `frames` take on the wire; MessageTooLargeError beyond the limits."""
    limit = max_message_bytes() if max_bytes is None else int(max_bytes)
    nbuf = len(frames) - 1
    if nbuf > MAX_BUFFERS:
        raise MessageTooLargeError(f"a message of {nbuf} out-of-band buffers (arrays sent by value) exceeds the "
                                   f"limit of {MAX_BUFFERS}: send fewer arrays per package")
    total = sum(memoryview(f).nbytes for f in frames)
    if total > limit:
        raise MessageTooLargeError(f"a message of {total} B exceeds the limit of {limit} B (max_message_bytes, "
                                   "INSITU_MAX_MESSAGE_BYTES): put large host arrays in shared memory "
                                   "(insitu.pool.shared_empty) or raise the limit")
    return total


def send_frames(sock: socket.socket, frames: list) -> None:
    """Send a pickle and its out-of-band buffers (from :func:`dumps`) as one message."""
    head = _HEADER.pack(len(frames[0]), len(frames) - 1) + b"".join(
        _LEN.pack(memoryview(f).nbytes) for f in frames[1:])
    if len(frames[0]) < 65536:
        sock.sendall(head + frames[0])  # small messages: one system call
    else:
        sock.sendall(head)
        sock.sendall(frames[0])
    for f in frames[1:]:
        sock.sendall(memoryview(f).cast("B"))


def _recv_into(sock: socket.socket, buf) -> None:
    view = memoryview(buf).cast("B")
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            raise EOFError("the peer closed the connection")
        got += n


def _buffer(n: int):
    return bytearray(n) if n < _LAZY else memoryview(np.empty(n, np.uint8))


def recv_frames(sock: socket.socket, *, max_bytes: int | None = None) -> list:
    """Receive one message: ``[pickle, *buffers]`` (raises EOFError on a closed connection).

    Raises
    ------
    MessageTooLargeError
        The header announces more than :data:`MAX_BUFFERS` buffers or more than
        `max_bytes` (default :func:`max_message_bytes`) in all; the rest of the message
        is left unread (the connection cannot be used further).
    """
    limit = max_message_bytes() if max_bytes is None else int(max_bytes)
    head = bytearray(_HEADER.size)
    _recv_into(sock, head)
    size, nbuf = _HEADER.unpack(head)
    if nbuf > MAX_BUFFERS:
        raise MessageTooLargeError(f"a message header announces {nbuf} out-of-band buffers; the limit is "
                                   f"{MAX_BUFFERS}")
    if size > limit:
        raise MessageTooLargeError(f"a message header announces a pickle of {size} B; the limit is {limit} B "
                                   "(max_message_bytes, INSITU_MAX_MESSAGE_BYTES)")
    lens = bytearray(_LEN.size * nbuf)
    _recv_into(sock, lens)
    sizes = [n for (n,) in _LEN.iter_unpack(lens)] if nbuf else []
    total = size + sum(sizes)
    if total > limit:
        raise MessageTooLargeError(f"a message header announces {total} B in all; the limit is {limit} B "
                                   "(max_message_bytes, INSITU_MAX_MESSAGE_BYTES)")
    frames = []
    for n in (size, *sizes):  # each allocated only when its bytes are next on the wire
        f = _buffer(n)
        _recv_into(sock, f)
        frames.append(f)
    return frames


# --------------------------------------------------------------------------- pickling


@functools.cache
def _base_pickler() -> tuple[type, str]:
    # cloudpickle sends lambdas and local functions by value; PySpark ships one (the CPU
    # install), the GPU nodes may have the standalone one; plain pickle otherwise.
    for name in ("pyspark.cloudpickle", "cloudpickle"):
        try:
            return importlib.import_module(name).Pickler, name
        except Exception:  # any import failure means: not this one
            continue
    return pickle.Pickler, "pickle"


def pickler_name() -> str:
    """The module pickling functions: ``"pyspark.cloudpickle"``, ``"cloudpickle"`` or ``"pickle"``."""
    return _base_pickler()[1]


_PLAIN = frozenset({int, float, str, bytes, bool, type(None), tuple, list, dict, complex})


class _ByValue(pickle.PicklingError):
    """Plain pickle would name something in ``__main__``, which the other side cannot import."""

    def __init__(self, obj) -> None:
        super().__init__(f"{getattr(obj, '__qualname__', type(obj).__qualname__)} is defined in __main__, which "
                         "the other process cannot import")


_CODE = frozenset({type, types.FunctionType, types.BuiltinFunctionType})


@functools.cache
def _pickler_class(cloud: bool) -> type:
    base = _base_pickler()[0] if cloud else pickle.Pickler

    class _Pickler(base):
        def __init__(self, file, export, buffers: list) -> None:
            super().__init__(file, protocol=5, buffer_callback=buffers.append)
            self._export = export

        def persistent_id(self, obj):
            t = type(obj)
            if t in _PLAIN:
                return None
            if t in _CODE:  # by reference: no array; the other side must import it
                if not cloud and obj.__module__ == "__main__":
                    raise _ByValue(obj)
                return None
            if not cloud and (t.__module__ == "__main__" or getattr(obj, "__module__", None) == "__main__"):
                raise _ByValue(obj)  # a class (of any metaclass) or an instance from __main__
            return None if self._export is None else self._export(obj)

    return _Pickler


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, load, buffers) -> None:
        super().__init__(file, buffers=buffers)
        self._load = load

    def persistent_load(self, pid):
        if self._load is None:
            raise pickle.UnpicklingError(f"unexpected array descriptor {pid[0]!r} in a message without arrays")
        return self._load(pid)


def dumps(obj: Any, export: Callable[[Any], Any] | None = None) -> list:
    """``[pickle bytes, *out-of-band buffers]`` of `obj`; `export` gives descriptors of arrays."""
    # Plain pickle first: several times faster than cloudpickle to set up, and the same
    # bytes for everything importable; cloudpickle for lambdas, local and __main__ functions.
    try:
        return _dumps(obj, export, cloud=False)
    except (pickle.PicklingError, TypeError, AttributeError):
        if _base_pickler()[0] is pickle.Pickler:
            raise
    return _dumps(obj, export, cloud=True)


def _dumps(obj: Any, export, *, cloud: bool) -> list:
    f = io.BytesIO()
    buffers: list = []
    _pickler_class(cloud)(f, export, buffers).dump(obj)
    return [f.getbuffer(), *(b.raw() for b in buffers)]


def loads(frames: list, load: Callable[[Any], Any] | None = None) -> Any:
    """The object of :func:`dumps`' `frames`; `load` turns descriptors back into arrays."""
    return _Unpickler(io.BytesIO(frames[0]), load, frames[1:]).load()


# --------------------------------------------------------------------------- CUDA helpers


def _cupy():
    return arrays.cupy_or_none()


@functools.cache
def _pci_bus_id(device: int) -> str:
    return str(_cupy().cuda.Device(device).pci_bus_id)


@functools.cache
def _ordinal(pci_bus_id: str) -> int:
    cp = _cupy()
    try:
        return int(cp.cuda.runtime.deviceGetByPCIBusId(pci_bus_id))
    except Exception as e:  # cupy's CUDARuntimeError
        raise arrays.DeviceUnavailableError(
            f"this process cannot see the CUDA device at PCI bus id {pci_bus_id} ({e}); the client and the worker "
            "daemon must see the same GPU (check CUDA_VISIBLE_DEVICES)") from None


@functools.cache
def _driver():
    """``cuMemGetAddressRange`` as ``ptr -> (base, size)``: cuda.bindings, else libcuda by ctypes."""
    for mod in ("cuda.bindings.driver", "cuda.cuda"):
        try:
            drv = importlib.import_module(mod)
        except Exception:
            continue

        def get_range(ptr: int, drv=drv) -> tuple[int, int]:
            err, base, size = drv.cuMemGetAddressRange(ptr)
            if err != drv.CUresult.CUDA_SUCCESS:
                raise RuntimeError(f"cuMemGetAddressRange(0x{ptr:x}) failed: {err!r}")
            return int(base), int(size)

        return get_range
    lib = ctypes.CDLL("libcuda.so.1")
    fn = lib.cuMemGetAddressRange_v2
    fn.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t), ctypes.c_uint64]

    def get_range(ptr: int) -> tuple[int, int]:
        base, size = ctypes.c_uint64(), ctypes.c_size_t()
        err = fn(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(ptr))
        if err:
            raise RuntimeError(f"cuMemGetAddressRange(0x{ptr:x}) failed: CUresult {err}")
        return int(base.value), int(size.value)

    return get_range


def _allocation(ptr: int, device: int) -> tuple[int, int]:
    """Base address and size of the CUDA allocation holding `ptr`."""
    cp = _cupy()
    with cp.cuda.Device(device):
        cp.cuda.runtime.setDevice(device)  # makes its primary context current for the driver call
        try:
            return _driver()(ptr)
        except Exception as e:
            raise arrays.DeviceUnavailableError(
                f"cannot find the CUDA allocation holding device pointer 0x{ptr:x} ({e}); only memory from "
                "cudaMalloc (CuPy's default pool) can be handed to a worker daemon by CUDA IPC") from None


def _wrap(cp, base: int, size: int, owner, device: int, offset: int, shape, dtype, strides):
    mem = cp.cuda.UnownedMemory(base, size, owner, device_id=device)
    return cp.ndarray(tuple(shape), np.dtype(dtype), cp.cuda.MemoryPointer(mem, int(offset)), strides=tuple(strides))


class _Mapping:
    """An opened IPC handle in this process; closed when no array uses it any more."""

    __slots__ = ("__weakref__", "base", "device", "size")

    def __init__(self, handle: bytes, size: int, device: int) -> None:
        cp = _cupy()
        with cp.cuda.Device(device):
            self.base = int(cp.cuda.runtime.ipcOpenMemHandle(handle))
        self.size, self.device = size, device
        weakref.finalize(self, _close_mapping, self.base, device)


def _close_mapping(base: int, device: int) -> None:
    cp = _cupy()
    with cp.cuda.Device(device):
        cp.cuda.runtime.ipcCloseMemHandle(base)


_mappings_lock = threading.Lock()
_mappings: "weakref.WeakValueDictionary[bytes, _Mapping]" = weakref.WeakValueDictionary()


def _open(handle: bytes, size: int, device: int) -> _Mapping:
    # One mapping per handle while arrays use it: CUDA refuses to open a handle twice
    # in one context (or refcounts it, depending on the version).
    with _mappings_lock:
        m = _mappings.get(handle)
        if m is None:
            m = _mappings[handle] = _Mapping(handle, size, device)
        return m


def _is_device(obj) -> bool:
    return (hasattr(obj, "__cuda_array_interface__") or hasattr(obj, "__dlpack_device__")) and \
        arrays.is_device_array(obj)


def _empty_pid(a) -> tuple:
    # An empty device array may have no allocation at all (a null pointer): nothing to map.
    return ("empty", a.shape, a.dtype.str, _pci_bus_id(int(a.device.id)))


def _load_empty(pid):
    cp = _cupy()
    _, shape, dtype, bus = pid
    with cp.cuda.Device(_ordinal(bus)):
        return cp.empty(tuple(shape), np.dtype(dtype))


def _shm_pid(a: np.ndarray):
    sv = shared.segment_of(a)
    return None if sv is None else ("shm", sv)


# --------------------------------------------------------------------------- the client side


class ClientExchange:
    """One request and its reply, on the client: exports arrays, rebuilds the results.

    Use :meth:`export` as the request's ``persistent_id``, then :meth:`synchronize`
    before sending; :meth:`load` as the reply's ``persistent_load``, then :meth:`finish`.
    """

    def __init__(self) -> None:
        self._memo: dict[int, tuple] = {}  # id(obj) -> (obj, descriptor): keeps obj alive, id unique
        self._lent: list[tuple] = []  # (base, size, device, an array keeping the allocation alive)
        self._lent_index: dict[int, int] = {}  # base -> index in _lent
        self._opened: list = []
        self.devices: set[int] = set()

    def export(self, obj):
        if isinstance(obj, np.ndarray):
            return _shm_pid(obj)
        if not _is_device(obj):
            return None
        hit = self._memo.get(id(obj))
        if hit is not None:
            return hit[1]
        a = arrays.asarray(obj, name="an array sent to a worker daemon")
        cp = _cupy()
        dev = int(a.device.id)
        if not a.nbytes:
            return _empty_pid(a)
        ptr = int(a.data.ptr)
        base, size = _allocation(ptr, dev)
        i = self._lent_index.get(base)
        if i is None:
            i = self._lent_index[base] = len(self._lent)
            with cp.cuda.Device(dev):
                handle = bytes(cp.cuda.runtime.ipcGetMemHandle(base))
            self._lent.append((base, size, dev, a, handle))
        handle = self._lent[i][4]
        pid = ("ipc", handle, size, ptr - base, a.shape, a.dtype.str, a.strides, _pci_bus_id(dev), i)
        self._memo[id(obj)] = (obj, pid)
        self.devices.add(dev)
        return pid

    def synchronize(self) -> None:
        """Wait for the current stream of each device whose arrays are being sent."""
        if self.devices:
            cp = _cupy()
            for d in sorted(self.devices):
                with cp.cuda.Device(d):
                    cp.cuda.get_current_stream().synchronize()

    def load(self, pid):
        kind = pid[0]
        if kind == "shm":
            return shared.attach(pid[1])  # our own segment: a view of the very memory we sent
        cp = _cupy()
        if kind == "empty":
            return _load_empty(pid)
        if kind == "lent":
            _, i, offset, shape, dtype, strides = pid
            base, size, dev, keep, _ = self._lent[i]
            return _wrap(cp, base, size, keep, dev, offset, shape, dtype, strides)
        if kind == "ipc":  # daemon-owned memory, valid until our next request: copy it here
            _, handle, size, offset, shape, dtype, strides, bus, _ = pid
            dev = _ordinal(bus)
            m = _open(handle, size, dev)
            self._opened.append(m)
            with cp.cuda.Device(dev):
                view = _wrap(cp, m.base, m.size, m, dev, offset, shape, dtype, strides)
                self.devices.add(dev)
                return view.copy(order="K")
        raise pickle.UnpicklingError(f"unknown array descriptor {kind!r} from the worker daemon")

    def finish(self) -> None:
        """After the reply: wait for the copies out of daemon memory, drop the mappings."""
        if self._opened:
            self.synchronize()
        self._opened.clear()
        self._memo.clear()


# --------------------------------------------------------------------------- the daemon side

_current = threading.local()


class DaemonExchange:
    """One request and its reply, on the daemon: maps the client's arrays, exports results.

    Parameters
    ----------
    keep : list
        Where exported daemon-owned device arrays are kept alive (the connection clears
        it at its next request, when the client has copied them).
    """

    def __init__(self, keep: list) -> None:
        self._keep = keep
        self._host: list[tuple[int, int]] = []  # borrowed host ranges [lo, hi)
        self._lent: dict[int, tuple[int, int, _Mapping]] = {}  # client's lent index -> (lo, hi, mapping)
        self._refs: list = []  # the request's mappings, held until close()
        self.devices: set[int] = set()

    # request
    def load(self, pid):
        kind = pid[0]
        if kind == "shm":
            a = shared.attach(pid[1])
            seg = shared._segment(a)
            self._host.append((seg.address, seg.address + seg.size))
            self._refs.append(seg)
            return a
        if kind == "ipc":
            cp = _cupy()
            if cp is None:
                raise arrays.DeviceUnavailableError(
                    f"a CUDA array was sent to this worker daemon, but {arrays._cupy_status()[1]}")
            _, handle, size, offset, shape, dtype, strides, bus, i = pid
            dev = _ordinal(bus)
            if i not in self._lent:
                m = _open(handle, size, dev)
                self._lent[i] = (m.base, m.base + size, m)
                self._refs.append(m)
            m = self._lent[i][2]
            self.devices.add(dev)
            return _wrap(cp, m.base, size, m, dev, offset, shape, dtype, strides)
        if kind == "empty":
            return _load_empty(pid)
        raise pickle.UnpicklingError(f"unknown array descriptor {kind!r} from the client")

    def borrowed(self, a) -> bool:
        """Whether array `a` lies in memory the client lent for this request."""
        if isinstance(a, np.ndarray):
            p = int(a.__array_interface__["data"][0])
            return any(lo <= p < hi for lo, hi in self._host)
        if _is_device(a):
            p = arrays.data_pointer(a)
            return any(lo <= p < hi for lo, hi, _ in self._lent.values())
        return False

    def own(self, a):
        """`a` itself, or, if it is borrowed, a copy in this process's memory (same
        device, layout kept)."""
        if not self.borrowed(a):
            return a
        if isinstance(a, np.ndarray):
            return a.copy(order="K")
        cp = _cupy()
        a = arrays.asarray(a)
        with cp.cuda.Device(a.device.id):
            return a.copy(order="K")

    # reply
    def export(self, obj):
        if isinstance(obj, np.ndarray):
            # Only views of segments the client sent go back by reference: the client
            # holds them; any other host array goes by value.
            return _shm_pid(obj) if self.borrowed(obj) else None
        if not _is_device(obj):
            return None
        a = arrays.asarray(obj)
        p = int(a.data.ptr)
        for i, (lo, hi, _) in self._lent.items():
            if lo <= p < hi:
                return ("lent", i, p - lo, a.shape, a.dtype.str, a.strides)
        if not a.nbytes:
            return _empty_pid(a)
        cp = _cupy()
        dev = int(a.device.id)
        base, size = _allocation(p, dev)
        with cp.cuda.Device(dev):
            handle = bytes(cp.cuda.runtime.ipcGetMemHandle(base))
        self._keep.append(a)
        self.devices.add(dev)
        return ("ipc", handle, size, p - base, a.shape, a.dtype.str, a.strides, _pci_bus_id(dev), -1)

    def synchronize(self, device: int | None = None) -> None:
        """Wait for all work on the devices this request used (and `device`)."""
        devs = set(self.devices) | ({device} if device is not None else set())
        if not devs:
            return
        cp = _cupy()
        for d in sorted(devs):
            with cp.cuda.Device(d):
                cp.cuda.runtime.deviceSynchronize()

    def close(self) -> None:
        """Let go of the request's borrowed memory (mappings close once no array uses them)."""
        self._refs.clear()
        self._lent.clear()
        self._host.clear()


@contextlib.contextmanager
def current(exchange: DaemonExchange) -> Iterator[DaemonExchange]:
    """Make `exchange` the one :func:`own` consults in this thread."""
    prev = getattr(_current, "exchange", None)
    _current.exchange = exchange
    try:
        yield exchange
    finally:
        _current.exchange = prev


def own(a):
    """`a`, copied into this process's memory if the request being served borrowed it."""
    ex = getattr(_current, "exchange", None)
    return a if ex is None else ex.own(a)
