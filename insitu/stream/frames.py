"""Composited frames as ADIOS2 steps (SST live, BP5 files), readable with ADIOS2 alone.

Each step holds the variables ``image`` (H, W, 4) uint8 (straight alpha, rows top
first), ``step`` (int64), ``time`` (float64), ``camera`` (9 float64: eye, look_at, up),
optionally ``depth`` (H, W) float32 (distance along the view, inf where empty) and
``ranges`` (2 float64 per field named by the attribute ``range_fields``, "T,rho").
Attributes set once: ``render`` (which render) and ``range_fields``.

In-situ defaults for SST: the writer opens without waiting for a reader
(``RendezvousReaderCount=0``) and keeps at most a few frames for slow readers,
dropping the oldest (``QueueLimit``, ``QueueFullPolicy=Discard``): a simulation never
waits for a viewer. ``lossless=True`` waits for one reader and for queue room instead,
up to a deadline.

The SST writer runs in a process of its own (``python -m insitu.stream.relay frames``):
ADIOS2's Python calls hold the GIL while SST waits, and SST's writer waits without a
limit (for queue room in lossless mode; in ``close`` for every reader to release its
frames, in any mode), so no thread of the simulation could bound the wait. The
simulation waits for that process at most ``deadline`` seconds; past it the readers are
reported (address and user) and dropped with the process, and a fresh stream is opened.
"""

from __future__ import annotations

import dataclasses
import json
import os
import select
import signal
import subprocess
import sys
import time as _time
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from .. import arrays
from ._sst import ReaderTimeoutError, open_contact, peers, sst_parameters

__all__ = ["DEADLINE", "Frame", "FrameReader", "FrameWriter", "LOSSLESS", "SST_DEFAULTS", "serve"]

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
        self.steps = 0
        #: Frames not written: lossless SST after a deadline, until a reader connects again.
        self.dropped = 0
        self._fields: tuple | None = None
        self._attrs: dict[str, Any] = {}
        if self.engine == "SST":
            params = {**(LOSSLESS if lossless else SST_DEFAULTS), **sst_parameters(interface)}
            params.update({str(k): str(v) for k, v in (parameters or {}).items()})
            self._relay: _Relay | None = _Relay(name, params, self.deadline)
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
        attributes : {name: str or numbers}, optional
            Stream attributes; those of the first call are kept.

        Raises
        ------
        ReaderTimeoutError
            SST: readers held the writer past `deadline`; they were dropped (see the class).
        """
        img = np.ascontiguousarray(arrays.to_host(image))
        if img.ndim != 3 or img.shape[2] != 4 or img.dtype != np.uint8:
            raise ValueError(f"frame image: expected (H, W, 4) uint8, got {img.shape} {img.dtype}")
        out = [("image", img), ("step", np.array([step], np.int64)), ("time", np.array([time], np.float64))]
        if camera is not None:
            cam = camera if isinstance(camera, (list, tuple, np.ndarray)) else \
                [*camera.position, *camera.look_at, *camera.up]
            out.append(("camera", np.asarray(cam, np.float64).reshape(9)))
        if depth is not None:
            d = np.ascontiguousarray(arrays.to_host(depth), dtype=np.float32)
            if d.shape != img.shape[:2]:
                raise ValueError(f"frame depth: expected {img.shape[:2]}, got {d.shape}")
            out.append(("depth", d))
        if ranges:
            names = tuple(ranges)
            if self._fields is None:
                self._fields = names
                self._attrs["range_fields"] = ",".join(names)
            elif names != self._fields:
                raise ValueError(f"frame ranges: fields {names} differ from the first frame's {self._fields}")
            out.append(("ranges", np.array([float(v) for k in names for v in ranges[k]], np.float64)))
        self.write_variables(out, attributes=attributes)

    def write_variables(self, variables: Sequence[tuple[str, Any]], *,
                        attributes: Mapping[str, Any] | None = None) -> bool:
        """Write one step of any variables, each a whole global array (what :meth:`write`
        does with a frame's; :class:`adaptors.intransit.MeshStream` sends domains so).

        Parameters
        ----------
        variables : [(name, host array), ...]
        attributes : {name: str or numbers}, optional
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
        out = [(str(k), np.ascontiguousarray(a)) for k, a in variables]
        if self.steps == 0 and self.dropped == 0:
            self._attrs.update(attributes or {})
        if self._relay is None:
            _put(self._stream, out, self._attrs if self.steps == 0 else {})
        elif not self._relay.put(out, self._attrs):
            self.dropped += 1
            return False
        self.steps += 1
        return True

    def close(self) -> None:
        """Close the stream. SST: waits at most `deadline` for readers to release their
        frames, then drops them (:class:`ReaderTimeoutError`)."""
        if self._relay is None:
            self._stream.close()
        else:
            self._relay.close()


def _put(stream, variables: Sequence[tuple[str, np.ndarray]], attributes: Mapping[str, Any]) -> None:
    """One ADIOS2 step holding `variables` (name, contiguous array) and `attributes`."""
    stream.begin_step()
    try:
        for k, a in variables:
            stream.write(k, a, list(a.shape), [0] * a.ndim, list(a.shape))
        for k, v in attributes.items():
            stream.write_attribute(k, v if isinstance(v, str) or (isinstance(v, list) and all(
                isinstance(x, str) for x in v)) else np.asarray(v))
    finally:
        stream.end_step()


class _Relay:
    """The simulation's end of an SST frame writer process (:func:`serve`).

    Frames go down a pipe (a JSON header line, then the arrays' bytes); each is answered
    with ``{"ack": 1}`` (or ``{"error": ...}``) once its step ended. One frame is in
    flight at a time: ``put`` first waits, at most `deadline`, for the previous answer.
    """

    def __init__(self, name: str, params: Mapping[str, str], deadline: float | None) -> None:
        self.name, self.params, self.deadline = name, dict(params), deadline
        self.stalled = False
        self._start()

    def _start(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)  # the relay imports insitu as we do
        self.proc = subprocess.Popen([sys.executable, "-m", "insitu.stream.relay", "frames", self.name,
                                      json.dumps(self.params)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env=env, start_new_session=True)
        try:  # fewer wake-ups per frame (Linux; 1 MiB is the default most an unprivileged user may ask)
            import fcntl

            fcntl.fcntl(self.proc.stdin.fileno(), fcntl.F_SETPIPE_SZ, 1 << 20)
        except (ImportError, AttributeError, OSError):
            pass
        os.set_blocking(self.proc.stdout.fileno(), False)
        self._since = _time.time() - 1.0  # file times may be coarser than the clock
        self.opened, self.pending, self.closed = False, 0, False
        self._contact: tuple[int, int] | None = None
        self._errors: list[str] = []
        self._buf = b""

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
                self.pending -= 1
            elif "error" in msg:
                self.pending -= "frame" in msg
                self._errors.append(str(msg["error"]))
            elif "closed" in msg:
                self.closed = True

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
        for f in (self.proc.stdin, self.proc.stdout):
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

    def put(self, variables: Sequence[tuple[str, np.ndarray]], attributes: Mapping[str, Any]) -> bool:
        """Send one frame; False when it was dropped (stalled, see :class:`FrameWriter`)."""
        ready = self._wait(0.0 if self.stalled else self.deadline, lambda: self.opened and self.pending == 0)
        if not ready and self.proc.poll() is not None:
            code = self.proc.returncode
            errors = "; ".join(self._errors)
            self._drop()
            self._start()
            raise RuntimeError(f"SST stream {self.name}: the writer process exited (code {code}"
                               f"{': ' + errors if errors else ''}); frames in flight are lost, started a new one")
        if not ready:
            if self.stalled:
                return False
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
        head = {"vars": [[k, a.dtype.str, list(a.shape)] for k, a in variables], "attrs": dict(attributes)}
        try:
            self.proc.stdin.write(json.dumps(head).encode() + b"\n")
            for _, a in variables:
                self.proc.stdin.write(memoryview(a).cast("B"))
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            self.proc.wait(timeout=10)
            return self.put(variables, attributes)  # reported and restarted above
        self.pending += 1
        return True

    def close(self) -> None:
        if self.proc.stdin.closed:
            return
        self._drain()
        if not self.opened and self.pending == 0:  # lossless, no reader ever came: nothing to deliver
            self._drop()
            return
        start = _time.monotonic()
        try:
            self.proc.stdin.write(b'{"close": true}\n')
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
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


def serve(name: str, params: Mapping[str, str], inp=None, out=None) -> None:
    """The SST frame writer process: open stream `name` with `params`, then write the frames
    that arrive on `inp` (stdin) and answer each on `out` (stdout), until ``{"close": true}``."""
    import adios2

    inp = inp or sys.stdin.buffer
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
    first = True
    while True:
        line = inp.readline()
        if not line or json.loads(line).get("close"):
            stream.close()  # until every reader released its frames: the simulation bounds this wait
            say(closed=True)
            return
        head = json.loads(line)
        variables = []
        for k, dtype, shape in head["vars"]:
            a = np.empty(shape, np.dtype(dtype))
            view, got = memoryview(a).cast("B"), 0
            while got < view.nbytes:
                n = inp.readinto(view[got:])
                if not n:
                    raise EOFError(f"SST stream {name}: the simulation went away in the middle of a frame")
                got += n
            variables.append((k, a))
        try:
            _put(stream, variables, head["attrs"] if first else {})
            first = False
            say(ack=1)
        except Exception as e:  # reported with the next frame
            say(error=str(e), frame=1)


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

