"""Composited frames as ADIOS2 steps (SST live, BP5 files), readable with ADIOS2 alone.

Each step holds the variables ``image`` (H, W, 4) uint8 (straight alpha, rows top
first), ``step`` (int64), ``time`` (float64), ``camera`` (9 float64: eye, look_at, up),
optionally ``depth`` (H, W) float32 (distance along the view, inf where empty) and
``ranges`` (2 float64 per field named by the attribute ``range_fields``, "T,rho").
Attributes set once: ``render`` (which render) and ``range_fields``.

In-situ defaults for SST: the writer opens without waiting for a reader
(``RendezvousReaderCount=0``) and keeps at most a few frames for slow readers,
dropping the oldest (``QueueLimit``, ``QueueFullPolicy=Discard``): a simulation never
waits for a viewer. ``lossless=True`` waits for one reader and for queue room instead.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from .. import arrays

__all__ = ["Frame", "FrameReader", "FrameWriter", "LOSSLESS", "SST_DEFAULTS"]

#: SST writer parameters for in-situ use: never wait for a reader.
SST_DEFAULTS = {"RendezvousReaderCount": "0", "QueueLimit": "3", "QueueFullPolicy": "Discard"}
#: SST writer parameters when nothing may be lost: wait for a reader, block when its queue is full.
LOSSLESS = {"RendezvousReaderCount": "1", "QueueLimit": "4", "QueueFullPolicy": "Block"}
ENGINES = ("SST", "BP5")


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


class FrameWriter(_Stream):
    """Writes frames, one ADIOS2 step each (on one rank: the one holding the composited image).

    Parameters
    ----------
    name : str
        Stream name (SST: readers open the same name; a contact file ``name.sst`` appears
        beside it) or BP5 directory.
    engine : {"SST", "BP5"}
    lossless : bool
        SST: wait for a reader and block when its queue is full (default: never wait).
    parameters : mapping, optional
        More ADIOS2 engine parameters (they win over the defaults).
    """

    def __init__(self, name: str, engine: str = "SST", *, lossless: bool = False,
                 parameters: Mapping[str, str] | None = None) -> None:
        import adios2

        self.name, self.engine = name, _engine(engine)
        if os.path.dirname(name):
            os.makedirs(os.path.dirname(name), exist_ok=True)
        self._adios = adios2.Adios()
        io = self._adios.declare_io(f"insitu-frames-writer:{name}")
        io.set_engine(self.engine)
        params = dict(LOSSLESS if lossless else SST_DEFAULTS) if self.engine == "SST" else {}
        params.update({str(k): str(v) for k, v in (parameters or {}).items()})
        if params:
            io.set_parameters(params)
        self._stream = adios2.Stream(io, name, "w")
        self.steps = 0
        self._fields: tuple | None = None

    def write(self, image, *, step: int, time: float, camera=None, depth=None,
              ranges: Mapping[str, Sequence[float]] | None = None, attributes: Mapping[str, Any] | None = None) -> None:
        """Write one frame.

        Parameters
        ----------
        image : (H, W, 4) uint8, straight alpha, NumPy or CuPy
            A device image is copied to the host here (counted: the frame leaving).
            ``render.image.to_uint8`` makes one from a premultiplied float render.
        camera : render.camera.Camera or (9,) floats, optional
        depth : (H, W) float array, optional
        ranges : {field: (lo, hi)}, optional
            The same fields every step.
        """
        img = np.ascontiguousarray(arrays.to_host(image))
        if img.ndim != 3 or img.shape[2] != 4 or img.dtype != np.uint8:
            raise ValueError(f"frame image: expected (H, W, 4) uint8, got {img.shape} {img.dtype}")
        s = self._stream
        s.begin_step()
        s.write("image", img, list(img.shape), [0, 0, 0], list(img.shape))
        s.write("step", np.array([step], np.int64), [1], [0], [1])
        s.write("time", np.array([time], np.float64), [1], [0], [1])
        if camera is not None:
            cam = camera if isinstance(camera, (list, tuple, np.ndarray)) else \
                [*camera.position, *camera.look_at, *camera.up]
            cam = np.asarray(cam, np.float64).reshape(9)
            s.write("camera", cam, [9], [0], [9])
        if depth is not None:
            d = np.ascontiguousarray(arrays.to_host(depth), dtype=np.float32)
            if d.shape != img.shape[:2]:
                raise ValueError(f"frame depth: expected {img.shape[:2]}, got {d.shape}")
            s.write("depth", d, list(d.shape), [0, 0], list(d.shape))
        if ranges:
            names = tuple(ranges)
            if self._fields is None:
                self._fields = names
                s.write_attribute("range_fields", ",".join(names))
            elif names != self._fields:
                raise ValueError(f"frame ranges: fields {names} differ from the first frame's {self._fields}")
            r = np.array([float(v) for k in names for v in ranges[k]], np.float64)
            s.write("ranges", r, [len(r)], [0], [len(r)])
        if self.steps == 0:
            for k, v in (attributes or {}).items():
                s.write_attribute(k, v)
        s.end_step()
        self.steps += 1



class FrameReader(_Stream):
    """Reads frames from a live SST stream or a BP5 file, step after step.

    Parameters
    ----------
    name : str
    engine : {"SST", "BP5"}, optional
        Default: BP5 when `name` is a directory, else SST.
    timeout : float
        Seconds to wait for the writer (SST open) and for each next frame.
    """

    def __init__(self, name: str, engine: str | None = None, *, timeout: float = 30.0) -> None:
        import adios2

        self.engine = _engine(engine or ("BP5" if os.path.isdir(name) else "SST"))
        self.timeout = float(timeout)
        self._adios = adios2.Adios()
        io = self._adios.declare_io(f"insitu-frames-reader:{name}")
        io.set_engine(self.engine)
        if self.engine == "SST":
            io.set_parameters({"OpenTimeoutSecs": str(max(1, int(timeout)))})
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
            f = Frame(int(s.read("step")[0]), float(s.read("time")[0]), s.read("image"))
            if "camera" in names:
                f.camera = s.read("camera")
            if "depth" in names:
                f.depth = s.read("depth")
            if "ranges" in names:
                if self._fields is None:
                    a = s.read_attribute_string("range_fields") if "range_fields" in s.available_attributes() else []
                    self._fields = (a[0] if a else "").split(",")
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

