"""Composited frames as ADIOS2 steps (SST live, BP5 files), readable with ADIOS2 alone and
by ParaView/VisIt (VTX and Fides schemas).

Each step is a frame: a W x H x 1 image data (origin 0, spacing 1, rows bottom first, as
VTK's y axis points up) whose point data are ``rgba``, (H*W, 4) uint8 (straight alpha:
VTK's layout of a 4-component array), ``luminance``, (1, H, W) uint8 (BT.601, integer
weights), and optionally ``depth``, (1, H, W) float32 (distance along the view, inf where
empty). Beside them: ``step`` (int64), ``time`` (float64), ``frame_number`` (int64: frames
handed to the writer before this one, so a gap between a reader's consecutive frames
counts the frames dropped on the way), ``camera`` (9 float64: eye, look_at, up) and
``ranges`` (2 float64 per field named by the attribute ``range_fields``, "T,rho": the
colour range), and per step any of ``stats/FIELD/min``, ``stats/FIELD/max``,
``stats/FIELD/mean`` (the field's reductions over the data) and ``timings/STAGE``
(seconds, from the adaptor's ``profile: true``): one float64 each, self-describing names
any ADIOS2 tool lists (``bpls``). Attributes set once: ``render`` (which render), ``range_fields``, and the two
schemas of :mod:`insitu.stream.schema` for the first frame's size: ``vtk.xml`` (VTX) and
``Fides_*``. VTX reads one-component arrays only and a size fixed for the whole stream: it
shows ``luminance`` and ``depth``; Fides sizes the grid step by step from ``luminance``
(which is why it is there: Fides needs a point scalar) and shows ``rgba`` as colours.
:class:`FrameReader` gives frames back as (H, W, 4) images, rows top first.

In-situ defaults for SST: the writer opens without waiting for a reader
(``RendezvousReaderCount=0``) and keeps at most a few frames that readers have not
released (``QueueLimit``, ``QueueFullPolicy=Discard``); while that queue is full SST
drops each new frame: a simulation never waits for a viewer, and a slow viewer sees
frames a few steps old and misses those written while it lagged (the stream's last
frame too, when it came then). ``lossless=True`` waits for one reader and for queue
room instead, up to a deadline.

The SST writer runs in a process of its own (``python -m insitu.stream.relay frames``):
ADIOS2's Python calls hold the GIL while SST waits, and SST's writer waits without a
limit (for queue room in lossless mode; in ``close`` for every reader to release its
frames, in any mode), so no thread of the simulation could bound the wait. The
simulation waits for that process at most ``deadline`` seconds; past it the readers are
reported (address and user) and dropped with the process, and a fresh stream is opened.
A frame costs the simulation one copy into memory shared with that process (a device
frame first crosses into page-locked memory the writer reuses, one copy); in the
default mode it never waits for the process either: a frame that comes while the
previous one is still being written waits for the next ``write`` (or ``close``), and a
newer one replaces it (counted in ``FrameWriter.dropped``).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
import mmap
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time as _time
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from .. import arrays
from ..log import compiling, cupy_cache_dir, get_logger
from ._sst import ReaderTimeoutError, open_contact, peers, sst_parameters
from .schema import fides_uniform, vtx_image

__all__ = ["DEADLINE", "Frame", "FrameReader", "FrameWriter", "LOSSLESS", "SST_DEFAULTS", "device_frame_bytes",
           "frame_schemas", "serve"]

_log = get_logger(__name__)

#: SST writer parameters for in-situ use: never wait for a reader.
SST_DEFAULTS = {"RendezvousReaderCount": "0", "QueueLimit": "3", "QueueFullPolicy": "Discard"}
#: SST writer parameters when nothing may be lost: wait for a reader, block when its queue is full.
LOSSLESS = {"RendezvousReaderCount": "1", "QueueLimit": "4", "QueueFullPolicy": "Block"}
ENGINES = ("SST", "BP5")
#: Seconds an SST writer waits for its readers (lossless queue room, close) before dropping them.
DEADLINE = 30.0


def _engine(engine: str) -> str:
    e = str(engine).upper()
    if e not in ENGINES:
        raise ValueError(f"frame stream engine: expected one of {', '.join(ENGINES)}, got {engine!r}")
    return e


class _Stream:
    """One end of an ADIOS2 stream (``self._stream``): ``close()`` and ``with``."""

    _stream: Any

    def close(self) -> None:
        self._stream.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclasses.dataclass
class Frame:
    """One frame as read back."""

    step: int
    time: float
    image: np.ndarray  # (H, W, 4) uint8
    camera: np.ndarray | None = None  # (9,) eye, look_at, up
    depth: np.ndarray | None = None  # (H, W) float32
    ranges: dict = dataclasses.field(default_factory=dict)  # field -> (lo, hi)
    stats: dict = dataclasses.field(default_factory=dict)  # field -> {"min": .., "max": .., "mean": ..}
    timings: dict = dataclasses.field(default_factory=dict)  # stage -> seconds
    frame_number: int | None = None  # frames the writer was handed before this one


class FrameWriter(_Stream):
    """Writes frames, one ADIOS2 step each (on one rank: the one holding the composited image).

    Parameters
    ----------
    name : str
        Stream name (SST: readers open the same name; a contact file ``name.sst`` appears
        beside it) or BP5 directory.
    engine : {"SST", "BP5"}
    lossless : bool
        SST: wait for a reader and for queue room, up to `deadline` (default: never wait).
    parameters : mapping, optional
        More ADIOS2 engine parameters (they win over the defaults).
    deadline : float or None
        SST: the most seconds one ``write`` waits for readers (lossless) and ``close``
        waits for them to release their frames (any mode). Past it the writer raises
        :class:`ReaderTimeoutError` naming the stream and the readers, drops them and goes
        on with a fresh stream (lossless: frames written until a reader connects again are
        dropped and counted in ``dropped``). None waits without limit.
    interface : str, optional
        SST: the network interface written into the contact file
        (:func:`insitu.stream.sst_parameters`; default ``$INSITU_SST_INTERFACE`` or "lo").
    """

    def __init__(self, name: str, engine: str = "SST", *, lossless: bool = False,
                 parameters: Mapping[str, str] | None = None, deadline: float | None = DEADLINE,
                 interface: str | None = None) -> None:
        if deadline is not None and not (isinstance(deadline, (int, float)) and 0 < deadline < float("inf")):
            raise ValueError(f"frame stream deadline: expected seconds > 0 or None, got {deadline!r}")
        self.name, self.engine = name, _engine(engine)
        self.lossless, self.deadline = bool(lossless), None if deadline is None else float(deadline)
        if os.path.dirname(name):
            os.makedirs(os.path.dirname(name), exist_ok=True)
        #: Frames written, or handed to the SST writer process.
        self.steps = 0
        #: Frames not written: lossless SST after a deadline, until a reader connects again;
        #: default SST, frames replaced by a newer one while the writer process was busy.
        self.dropped = 0
        self._fields: tuple | None = None
        self._offered = 0  # write() calls so far: each frame's frame_number
        self._attrs: dict[str, Any] = {}
        self._staging = _Staging()
        if self.engine == "SST":
            params = {**(LOSSLESS if lossless else SST_DEFAULTS), **sst_parameters(interface)}
            params.update({str(k): str(v) for k, v in (parameters or {}).items()})
            self._relay: _Relay | None = _Relay(name, params, self.deadline, self.lossless)
            return
        import adios2

        self._relay = None
        self._adios = adios2.Adios()
        io = self._adios.declare_io(f"insitu-frames-writer:{name}")
        io.set_engine(self.engine)
        if parameters:
            io.set_parameters({str(k): str(v) for k, v in parameters.items()})
        self._stream = adios2.Stream(io, name, "w")

    def write(self, image, *, step: int, time: float, camera=None, depth=None,
              ranges: Mapping[str, Sequence[float]] | None = None,
              stats: Mapping[str, Mapping[str, float]] | None = None, timings: Mapping[str, float] | None = None,
              attributes: Mapping[str, Any] | None = None) -> None:
        """Write one frame.

        Parameters
        ----------
        image : (H, W, 4) uint8, straight alpha, NumPy or CuPy
            A device image is copied to the host here, once (counted: the frame leaving),
            into page-locked memory the writer reuses from frame to frame; a host image
            is sent as it is. (A renderer's premultiplied float image needs
            un-premultiplying first.)
        camera : object with ``position``, ``look_at`` and ``up``, or (9,) floats, optional
        depth : (H, W) float array, NumPy or CuPy, optional
            Sent as float32 (a device depth is converted there, then copied as the image is).
        ranges : {field: (lo, hi)}, optional
            The colour ranges; the same fields every step.
        stats : {field: {"min" | "max" | "mean": number}}, optional
            This step's reductions of each field (``stats/FIELD/KEY``); any fields, any step.
        timings : {stage: seconds}, optional
            This step's stage timings (``timings/STAGE``).
        attributes : {name: str or numbers}, optional
            Stream attributes; those of the first call are kept.

        Raises
        ------
        ReaderTimeoutError
            SST: readers held the writer past `deadline`; they were dropped (see the class).
        """
        # Checked before anything leaves the device.
        scalars = _scalars(stats, timings)
        img = arrays.asarray(image, name="frame image")
        if img.ndim != 3 or img.shape[2] != 4 or img.dtype != np.uint8:
            raise ValueError(f"frame image: expected (H, W, 4) uint8, got {tuple(img.shape)} {img.dtype}")
        d = None if depth is None else arrays.asarray(depth, name="frame depth")
        if d is not None and tuple(d.shape) != tuple(img.shape[:2]):
            raise ValueError(f"frame depth: expected {tuple(img.shape[:2])}, got {tuple(d.shape)}")
        h, w = int(img.shape[0]), int(img.shape[1])
        # Rows bottom first for VTK: views here, copied in order by _put (BP5) or into the
        # writer process's slot (SST), so flipping costs no copy of its own.
        if arrays.is_device_array(img) and arrays.cupy_or_none() is not None:
            # Flipped and its luminance made on the device (on the host they took a few ms a
            # frame), crossing together in one copy.
            staged = self._staging.host("image", device_frame_bytes(img))
            host, lum = staged[:4 * h * w].reshape(h, w, 4), staged[4 * h * w:].reshape(h, w)
        else:
            host = self._staging.host("image", img)[::-1]
            lum = _luminance(host)
        out: list = [("rgba", host, [h * w, 4], [0, 0], [h * w, 4]),
                     ("luminance", lum, [1, h, w], [0, 0, 0], [1, h, w]),
                     ("step", np.array([step], np.int64)), ("time", np.array([time], np.float64)),
                     ("frame_number", np.array([self._offered], np.int64)), *scalars]
        if camera is not None:
            cam = camera if isinstance(camera, (list, tuple, np.ndarray)) else \
                [*camera.position, *camera.look_at, *camera.up]
            out.append(("camera", np.asarray(cam, np.float64).reshape(9)))
        if d is not None:
            if arrays.is_device_array(d) and d.dtype != np.float32:
                d = d.astype(np.float32)  # on the device: fewer bytes cross
            dh = np.asarray(self._staging.host("depth", d), dtype=np.float32)[::-1]
            out.append(("depth", dh, [1, h, w], [0, 0, 0], [1, h, w]))
        if ranges:
            names = tuple(ranges)
            if self._fields is None:
                self._fields = names
                self._attrs["range_fields"] = ",".join(names)
            elif names != self._fields:
                raise ValueError(f"frame ranges: fields {names} differ from the first frame's {self._fields}")
            out.append(("ranges", np.array([float(v) for k in names for v in ranges[k]], np.float64)))
        if self.steps == 0 and self.dropped == 0:
            attributes = {**frame_schemas(w, h, depth=d is not None), **(attributes or {})}
        self._offered += 1  # a frame lost from here on leaves a gap in the numbers readers see
        self.write_variables(out, attributes=attributes)

    def write_variables(self, variables: Sequence[tuple], *, attributes: Mapping[str, Any] | None = None) -> bool:
        """Write one step of any variables (what :meth:`write` does with a frame's; the
        adaptor's mesh stream writes the blocks of its global arrays so).

        Parameters
        ----------
        variables : [(name, host array), ...] or [(name, host array, shape, start, count), ...]
            A pair writes the whole array as a global array of its own shape; a 5-tuple
            writes the array's elements (in C order, any strides) as the block `start`,
            `count` of a global array of `shape`. One name may come several times (blocks).
        attributes : {name: str, strings or numbers}, optional
            Stream attributes; those of the first step are kept.

        Returns
        -------
        False when the step was dropped (lossless SST after a deadline, until a reader
        connects again; counted in ``dropped``), else True.

        Raises
        ------
        ReaderTimeoutError
            SST: readers held the writer past `deadline`; they were dropped (see the class).
        """
        # No array is referenced once this returns (BP5: Sync puts copy in ``put``; SST: the
        # relay copies into its shared slot before ``put`` returns, or drops the step), so
        # ``write`` may refill its staging buffers with the next frame at once.
        out = [_variable(v) for v in variables]
        if self.steps == 0 and self.dropped == 0:
            self._attrs.update(attributes or {})
        if self._relay is None:
            _put(self._stream, out, self._attrs if self.steps == 0 else {})
        elif not self._relay.put(out, self._attrs):
            self.dropped += 1
            return False
        else:  # frames that waited for the writer process and were replaced by this one
            self.steps, self.dropped = self.steps - self._relay.replaced, self.dropped + self._relay.replaced
            self._relay.replaced = 0
        self.steps += 1
        return True

    def close(self) -> None:
        """Close the stream. SST: waits at most `deadline` for readers to release their
        frames, then drops them (:class:`ReaderTimeoutError`)."""
        self._staging.clear()
        if self._relay is None:
            self._stream.close()
        else:
            self._relay.close()


class _Staging:
    """Page-locked host buffers that device arrays are copied into, one per variable,
    reused from frame to frame and re-allocated when its shape or dtype changes.

    A device-to-host copy into pageable memory is staged by the driver through a bounce
    buffer, at a fraction of the link's speed; into page-locked memory it goes straight.
    One buffer per variable is enough: the copy is complete when
    :func:`insitu.arrays.to_host` returns, and :meth:`FrameWriter.write_variables` keeps no
    reference to it past its return (if that changes, so must this).
    """

    def __init__(self) -> None:
        self._bufs: dict[str, np.ndarray] = {}

    def host(self, name: str, x) -> np.ndarray:
        """`x` on the host: a device array copied into `name`'s buffer (counted), a host
        array as it is (contiguous: a copy only where it is not)."""
        if not arrays.is_device_array(x):
            return np.ascontiguousarray(arrays.to_host(x))
        buf = self._bufs.get(name)
        if buf is None or buf.shape != tuple(x.shape) or buf.dtype != x.dtype:
            self._bufs.pop(name, None)  # the old one goes back before a new one is taken
            buf = self._bufs[name] = arrays.pinned_empty(tuple(x.shape), x.dtype)
        return arrays.to_host(x, out=buf)

    def clear(self) -> None:
        self._bufs.clear()


def frame_schemas(width: int, height: int, *, depth: bool = False) -> dict:
    """The VTX and Fides attributes of a `width` x `height` frame (see the module's docstring)."""
    point = ["luminance", "depth"] if depth else ["luminance"]
    variables = {"rgba": "points", **dict.fromkeys(point, "points")}
    return {"vtk.xml": vtx_image((width - 1, height - 1, 0), (0, 0, 0), (1, 1, 1), point=point),
            **fides_uniform((0, 0, 0), (1, 1, 1), dimension="luminance", variables=variables, vectors=["rgba"])}


STAT_KEYS = ("min", "max", "mean")


def _scalars(stats: Mapping[str, Mapping[str, float]] | None, timings: Mapping[str, float] | None) -> list:
    """``stats/FIELD/KEY`` and ``timings/STAGE`` as one-value float64 variables, checked."""
    out = []
    for field, kv in (stats or {}).items():
        if not isinstance(field, str) or not field or not isinstance(kv, Mapping):
            raise ValueError(f"frame stats: expected {{field name: {{min|max|mean: number}}}}, got {field!r}: {kv!r}")
        bad = sorted(set(kv) - set(STAT_KEYS))
        if bad:
            raise ValueError(f"frame stats/{field}: unknown key(s) {', '.join(map(repr, bad))}; "
                             f"known: {', '.join(STAT_KEYS)}")
        out += [(f"stats/{field}/{k}", np.array([float(kv[k])], np.float64)) for k in STAT_KEYS if k in kv]
    for stage, sec in (timings or {}).items():
        if not isinstance(stage, str) or not stage:
            raise ValueError(f"frame timings: expected {{stage name: seconds}}, got {stage!r}")
        out.append((f"timings/{stage}", np.array([float(sec)], np.float64)))
    return out


_FRAME_BYTES = r"""
const int r = i / w, c = i - r * w;
const unsigned p = src[(long long)(h - 1 - r) * w + c];  // rows bottom first, as VTK's points
rgba[i] = p;
lum[i] = (unsigned char)((77u * (p & 255u) + 150u * ((p >> 8) & 255u) + 29u * ((p >> 16) & 255u) + 128u) >> 8);
"""


@functools.cache
def _frame_bytes_kernel():
    import cupy

    compiling(_log, "the frame byte kernel (insitu_frame_bytes)", cupy_cache_dir())
    return cupy.ElementwiseKernel("raw uint32 src, int32 w, int32 h", "raw uint32 rgba, raw uint8 lum",
                                  _FRAME_BYTES, "insitu_frame_bytes")


def device_frame_bytes(image):
    """A CuPy (H, W, 4) uint8 image as the frame's bytes, in one device array of 5 H W:
    its pixels with rows bottom first (VTK's order), then their luminance (as
    :func:`_luminance`)."""
    import cupy

    h, w = int(image.shape[0]), int(image.shape[1])
    src = cupy.ascontiguousarray(image).view(cupy.uint32).reshape(h * w)
    out = cupy.empty(5 * h * w, cupy.uint8)
    _frame_bytes_kernel()(src, np.int32(w), np.int32(h), out[:4 * h * w].view(cupy.uint32), out[4 * h * w:],
                          size=h * w)
    return out


def _luminance(rgba: np.ndarray) -> np.ndarray:
    """(H, W) uint8 luma of (H, W, 4) uint8 pixels: (77 R + 150 G + 29 B + 128) >> 8 (BT.601)."""
    y = rgba[..., 0].astype(np.uint16) * 77
    y += rgba[..., 1].astype(np.uint16) * 150
    y += rgba[..., 2].astype(np.uint16) * 29
    y += 128
    y >>= 8
    return y.astype(np.uint8)


def _variable(v: tuple) -> tuple:
    """(name, array, shape, start, count) from a pair or a 5-tuple, checked."""
    if len(v) == 2:
        k, a = v
        a = np.asarray(a)
        return str(k), a, list(a.shape), [0] * a.ndim, list(a.shape)
    k, a, shape, start, count = v
    a = np.asarray(a)
    shape, start, count = [int(x) for x in shape], [int(x) for x in start], [int(x) for x in count]
    if not (len(shape) == len(start) == len(count)) or int(np.prod(count)) != a.size or any(
            s < 0 or c < 0 or s + c > n for n, s, c in zip(shape, start, count)):
        raise ValueError(f"variable {k!r}: block start {start} count {count} of {a.size} values does not fit "
                         f"shape {shape}")
    return str(k), a, shape, start, count


def _put(stream, variables: Sequence[tuple], attributes: Mapping[str, Any]) -> None:
    """One ADIOS2 step holding `variables` ((name, array, shape, start, count) blocks) and `attributes`."""
    stream.begin_step()
    try:
        for k, a, shape, start, count in variables:
            stream.write(k, np.ascontiguousarray(a).reshape(count), list(shape), list(start), list(count))
        for k, v in attributes.items():
            stream.write_attribute(k, v if isinstance(v, str) or (isinstance(v, list) and all(
                isinstance(x, str) for x in v)) else np.asarray(v))
    finally:
        stream.end_step()


_ALIGN = 64  # bytes: each array starts on a cache line
_GROW = 1 << 20  # a slot's size is a multiple of this, so that frames of varying size seldom grow it


def _layout(variables: Sequence[tuple]) -> tuple[list, int]:
    """Where each variable goes in a slot: ``[[name, dtype, count, offset, shape, start], ...]``
    and the bytes needed."""
    spec, off = [], 0
    for k, a, shape, start, count in variables:
        if a.dtype.hasobject:
            raise ValueError(f"frame variable {k!r}: dtype {a.dtype} holds Python objects, not numbers")
        spec.append([k, a.dtype.str, list(count), off, list(shape), list(start)])
        off += -(-a.nbytes // _ALIGN) * _ALIGN
    return spec, off


class _Slot:
    """A frame buffer shared with the writer process: an anonymous memory file (``memfd``)
    whose descriptor is passed over a socket, so it has no name to leak, even when both
    processes are killed."""

    def __init__(self, size: int) -> None:
        self.size = max(1, -(-size // _GROW)) * _GROW
        try:
            self.fd = os.memfd_create("insitu-frames")  # close-on-exec
        except (AttributeError, OSError):  # no memfd: a file unlinked at once
            fd, path = tempfile.mkstemp(prefix="insitu-frames-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
            os.unlink(path)
            self.fd = fd
        try:
            os.ftruncate(self.fd, self.size)
            self.map = mmap.mmap(self.fd, self.size)
        except BaseException:
            os.close(self.fd)
            raise
        self.bytes: np.ndarray | None = np.frombuffer(self.map, np.uint8)
        self.sent = False  # the current writer process has the descriptor

    def fill(self, variables: Sequence[tuple], spec: list) -> None:
        for v, (_, _, _, off, _, _) in zip(variables, spec):
            a = v[1]  # any strides: copied in C order, the one copy a frame costs here
            np.copyto(np.ndarray(a.shape, a.dtype, buffer=self.map, offset=off), a)

    def close(self) -> None:
        self.bytes = None  # the view's export must go before the map can close
        try:
            self.map.close()
        except BufferError:
            pass
        os.close(self.fd)


class _Relay:
    """The simulation's end of an SST frame writer process (:func:`serve`).

    A frame's arrays are copied into one of two shared memory slots (:class:`_Slot`); only a
    JSON header line (the slot, the arrays' names, types, shapes and offsets, with the
    slot's descriptor the first time) goes down a socket to the process, which answers each
    frame on its stdout with ``{"ack": 1}`` (or ``{"error": ...}``) once its step ended. One
    frame is in flight at a time, so the other slot is free to fill meanwhile:

    - lossless: ``put`` fills the free slot, then waits at most `deadline` for the previous
      answer before sending;
    - default: ``put`` never waits. While a frame is in flight the new one waits in the free
      slot and goes with the next ``put`` or ``close``; a newer frame replaces it (counted in
      ``replaced``), so the newest frame is the one handed to SST (whose own full queue
      then drops new frames, not old ones).
    """

    def __init__(self, name: str, params: Mapping[str, str], deadline: float | None, lossless: bool) -> None:
        self.name, self.params, self.deadline, self.lossless = name, dict(params), deadline, lossless
        self.stalled = False
        #: Frames that waited for the writer process and were replaced by a newer one (default mode).
        self.replaced = 0
        self._slots: list[_Slot | None] = [None, None]
        self.sock: socket.socket | None = None
        self._start()

    def _start(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)  # the relay imports insitu as we do
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "insitu.stream.relay", "frames", self.name,
                                          json.dumps(self.params)], stdin=theirs.fileno(), stdout=subprocess.PIPE,
                                         env=env, start_new_session=True)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.sock = ours
        os.set_blocking(self.proc.stdout.fileno(), False)
        self._since = _time.time() - 1.0  # file times may be coarser than the clock
        self.opened, self.closed = False, False
        self._inflight: collections.deque[int] = collections.deque()  # slots sent, not answered yet
        self._queued: tuple[int, dict] | None = None  # default mode: (slot, header) waiting to be sent
        self._contact: tuple[int, int] | None = None
        self._errors: list[str] = []
        self._buf = b""
        for s in self._slots:
            if s is not None:
                s.sent = False

    def _drain(self) -> None:
        try:
            chunk = self.proc.stdout.read()
        except (OSError, ValueError):
            chunk = None
        if chunk:
            self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        for line in lines:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if "open" in msg:
                self.opened, self._contact = True, tuple(msg["open"]) if msg["open"] else None
            elif "ack" in msg:
                self._inflight.popleft()
            elif "error" in msg:
                if "frame" in msg:
                    self._inflight.popleft()
                self._errors.append(str(msg["error"]))
            elif "closed" in msg:
                self.closed = True

    def _idle(self) -> bool:
        return self.opened and not self._inflight

    def _wait(self, timeout: float | None, done) -> bool:
        """Read answers until ``done()``, the process exits or `timeout` seconds pass."""
        end = None if timeout is None else _time.monotonic() + timeout
        while True:
            self._drain()
            if done():
                return True
            if self.proc.poll() is not None:
                self._drain()
                return done()
            left = 1.0 if end is None else min(1.0, end - _time.monotonic())
            if left <= 0:
                return False
            select.select([self.proc.stdout], [], [], left)

    def _raise_errors(self) -> None:
        if self._errors:
            errors, self._errors = self._errors, []
            raise RuntimeError(f"SST stream {self.name}: " + "; ".join(errors))

    def _drop(self) -> str:
        """End the writer process (its readers with it) and remove its contact file; the readers it had."""
        readers = ", ".join(peers(self.proc.pid)) or "none found"
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for f in (self.sock, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        try:  # only the file this process wrote (a lossless one writes it before a reader connects)
            st = os.lstat(self.name + ".sst")
            if (st.st_dev, st.st_ino) == self._contact or (
                    self._contact is None and st.st_uid == os.geteuid() and st.st_mtime >= self._since):
                os.unlink(self.name + ".sst")
        except OSError:
            pass
        return readers

    def _exited(self) -> None:
        """The writer process is gone: report it and start a new one."""
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self._drain()
        code, errors = self.proc.returncode, "; ".join(self._errors)
        self._drop()
        self._start()
        raise RuntimeError(f"SST stream {self.name}: the writer process exited (code {code}"
                           f"{': ' + errors if errors else ''}); frames in flight are lost, started a new one")

    def _slot(self, size: int) -> int:
        """A slot not in flight holding at least `size` bytes (a grown one replaces a small one)."""
        i = next(i for i in range(len(self._slots)) if i not in self._inflight)
        s = self._slots[i]
        if s is None or s.size < size:
            if s is not None:
                s.close()
            self._slots[i] = None
            self._slots[i] = _Slot(size)
        return i

    def _send(self, i: int, head: dict) -> bool:
        """Send slot `i`'s header; False when the process is gone."""
        s = self._slots[i]
        if not s.sent:
            head = {**head, "map": s.size}
        data = json.dumps(head).encode() + b"\n"
        try:
            if s.sent:
                self.sock.sendall(data)
            else:  # the descriptor travels with the header's first bytes
                n = socket.send_fds(self.sock, [data], [s.fd])
                self.sock.sendall(data[n:])
                s.sent = True
        except OSError:
            return False
        self._inflight.append(i)
        return True

    def put(self, variables: Sequence[tuple], attributes: Mapping[str, Any]) -> bool:
        """Send one frame; False when it was dropped (lossless, stalled: see :class:`FrameWriter`)."""
        self._drain()
        if self.proc.poll() is not None:
            self._exited()
        spec, size = _layout(variables)
        if not self.lossless:
            self._raise_errors()
            if self._queued is not None and not self._inflight:
                if not self._send(*self._queued):
                    self._exited()
                self._queued = None
            if self._queued is not None:  # still busy: the newer frame takes the waiting one's place
                self._queued, self.replaced = None, self.replaced + 1
            i = self._slot(size)
            self._slots[i].fill(variables, spec)
            head = {"slot": i, "vars": spec, "attrs": dict(attributes)}
            if self._inflight:
                self._queued = (i, head)
            elif not self._send(i, head):
                self._exited()
            return True
        if self.stalled and not self._idle():
            return False
        i = self._slot(size)
        self._slots[i].fill(variables, spec)  # while the process still writes the previous frame
        ready = self._wait(0.0 if self.stalled else self.deadline, self._idle)
        if not ready and self.proc.poll() is not None:
            self._exited()
        if not ready:
            self.stalled = True
            if not self.opened:
                raise ReaderTimeoutError(f"SST stream {self.name}: no reader connected within {self.deadline:g} s "
                                         "(lossless); frames are dropped until one connects")
            readers = self._drop()
            self._start()
            raise ReaderTimeoutError(
                f"SST stream {self.name}: reader(s) {readers} took no frame for {self.deadline:g} s (lossless); "
                "dropped them: this frame and those queued for them are lost; the stream is open again and frames "
                "are dropped until a reader connects")
        self.stalled = False
        self._raise_errors()
        if not self._send(i, {"slot": i, "vars": spec, "attrs": dict(attributes)}):
            self._exited()
        return True

    def close(self) -> None:
        """Deliver what is in flight and close, waiting at most `deadline`; the slots are freed."""
        if self.sock is None or self.sock.fileno() < 0:
            self._free()
            return
        try:
            self._close()
        finally:
            self._free()

    def _free(self) -> None:
        for i, s in enumerate(self._slots):
            if s is not None:
                s.close()
                self._slots[i] = None

    def _close(self) -> None:
        self._drain()
        if not self.opened and not self._inflight and self._queued is None:
            self._drop()  # lossless, no reader ever came: nothing to deliver
            return
        start = _time.monotonic()
        try:
            if self._queued is not None:  # its slot is no longer written to: no need to wait
                i, head = self._queued
                self._queued = None
                self._send(i, head)
            self.sock.sendall(b'{"close": true}\n')
        except OSError:  # gone: reported below
            pass
        if self._wait(self.deadline, lambda: self.closed):
            self.proc.wait(timeout=10)
            self._drop()  # gone already; closes the pipes
            self._raise_errors()
            return
        if self.proc.poll() is not None:
            code = self.proc.returncode
            self._drop()
            raise RuntimeError(f"SST stream {self.name}: the writer process exited (code {code}) while closing")
        readers = self._drop()
        raise ReaderTimeoutError(f"SST stream {self.name}: close waited {_time.monotonic() - start:.1f} s (deadline "
                                 f"{self.deadline:g} s) for reader(s) {readers} to release their frames; dropped them")


class _Inbox:
    """The writer process's end of the socket: header lines, and the descriptors sent with them."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buf, self.fds = sock, b"", collections.deque()

    def readline(self) -> bytes:
        """The next line, or b"" when the simulation is gone."""
        while b"\n" not in self.buf:
            try:
                data, fds, _, _ = socket.recv_fds(self.sock, 1 << 16, 4, getattr(socket, "MSG_CMSG_CLOEXEC", 0))
            except ConnectionError:
                return b""
            self.fds.extend(fds)
            if not data:
                return b""
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        return line


def serve(name: str, params: Mapping[str, str], inp: socket.socket | None = None, out=None) -> None:
    """The SST frame writer process: open stream `name` with `params`, then write the frames
    whose headers arrive on `inp` (the socket on stdin; arrays in the shared slots) and answer
    each on `out` (stdout), until ``{"close": true}`` or the simulation goes."""
    import adios2

    inbox = _Inbox(inp or socket.socket(fileno=sys.stdin.fileno()))
    out = out or sys.stdout.buffer

    def say(**msg) -> None:
        out.write(json.dumps(msg).encode() + b"\n")
        out.flush()

    os.umask(os.umask(0) | 0o022)  # the contact file: writable by this user only (readers refuse others)
    ad = adios2.Adios()
    io = ad.declare_io(f"insitu-frames-writer:{name}")
    io.set_engine("SST")
    io.set_parameters(dict(params))
    stream = adios2.Stream(io, name, "w")  # lossless: until a reader connects
    try:
        st = os.stat(name + ".sst")
        say(open=[st.st_dev, st.st_ino])
    except OSError:
        say(open=None)
    maps: dict[int, mmap.mmap] = {}
    first = True
    while True:
        line = inbox.readline()
        head = json.loads(line) if line.strip() else {"close": True}
        if head.get("close"):
            stream.close()  # until every reader released its frames: the simulation bounds this wait
            say(closed=True)
            return
        i = head["slot"]
        if "map" in head:  # a new slot (or a grown one): the old map goes with its last view
            fd = inbox.fds.popleft()
            try:
                maps[i] = mmap.mmap(fd, head["map"])
            finally:
                os.close(fd)
        variables = [(k, np.ndarray(count, np.dtype(dtype), buffer=maps[i], offset=off), shape, start, count)
                     for k, dtype, count, off, shape, start in head["vars"]]
        try:
            _put(stream, variables, head["attrs"] if first else {})  # Sync puts: copied out of the slot here
            first = False
            say(ack=1)
        except Exception as e:  # reported with the next frame
            say(error=str(e), frame=1)
        del variables


class FrameReader(_Stream):
    """Reads frames from a live SST stream or a BP5 file, step after step.

    Parameters
    ----------
    name : str
    engine : {"SST", "BP5"}, optional
        Default: BP5 when `name` is a directory, else SST.
    timeout : float
        Seconds to wait for the writer (SST open) and for each next frame.
    interface : str, optional
        SST: the network interface this reader advertises (see :func:`sst_parameters`).

    Raises
    ------
    ContactFileError
        SST: the stream's contact file is not the user's own (another user could have
        planted it); the message names the file and its owner.
    """

    def __init__(self, name: str, engine: str | None = None, *, timeout: float = 30.0,
                 interface: str | None = None) -> None:
        import adios2

        self.engine = _engine(engine or ("BP5" if os.path.isdir(name) else "SST"))
        self.timeout = float(timeout)
        self._adios = adios2.Adios()
        io = self._adios.declare_io(f"insitu-frames-reader:{name}")
        io.set_engine(self.engine)
        if self.engine == "SST":
            io.set_parameters({"OpenTimeoutSecs": str(max(1, int(timeout))), **sst_parameters(interface)})
            self._stream = open_contact(name, lambda copy: adios2.Stream(io, copy, "r"), timeout=self.timeout)
        else:
            self._stream = adios2.Stream(io, name, "r")
        self._fields: list[str] | None = None

    def next(self, timeout: float | None = None) -> Frame | None:
        """The next frame, or None at the end of the stream (or when none came in time)."""
        import adios2

        s = self._stream
        st = s.begin_step(timeout=self.timeout if timeout is None else timeout)
        if st != adios2.bindings.StepStatus.OK:
            return None
        try:
            names = s.available_variables()
            if "rgba" in names:  # rows bottom first on the wire (VTK's y up): top first here
                _, h, w = (int(n) for n in s.inquire_variable("luminance").shape())
                image = np.ascontiguousarray(s.read("rgba").reshape(h, w, 4)[::-1])
            else:  # streams of insitu before the VTX/Fides layout: (H, W, 4), top first
                image = s.read("image")
                h, w = image.shape[:2]
            f = Frame(int(s.read("step")[0]), float(s.read("time")[0]), image)
            if "frame_number" in names:
                f.frame_number = int(s.read("frame_number")[0])
            for k in names:
                if k.startswith("stats/") and k.count("/") >= 2:
                    field, key = k[6:].rsplit("/", 1)
                    f.stats.setdefault(field, {})[key] = float(s.read(k)[0])
                elif k.startswith("timings/"):
                    f.timings[k[8:]] = float(s.read(k)[0])
            if "camera" in names:
                f.camera = s.read("camera")
            if "depth" in names:
                d = s.read("depth")
                f.depth = np.ascontiguousarray(d.reshape(h, w)[::-1]) if "rgba" in names else d
            if "ranges" in names:
                if self._fields is None:
                    a = s.read_attribute_string("range_fields") if "range_fields" in s.available_attributes() else ""
                    # ADIOS2 gives a single string attribute as a str (2.10 on), before as a list of one
                    self._fields = (a if isinstance(a, str) else a[0] if a else "").split(",")
                r = s.read("ranges")
                f.ranges = {k: (float(r[2 * i]), float(r[2 * i + 1])) for i, k in enumerate(self._fields) if k}
        finally:
            s.end_step()
        return f

    def __iter__(self) -> Iterator[Frame]:
        while True:
            f = self.next()
            if f is None:
                return
            yield f

