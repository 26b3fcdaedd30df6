"""The viewer's I/O shell: a frame-reading thread, a steering thread and a local HTTP server.

Threads (all stopped by :meth:`Viewer.close`):

- *reader*: takes the frames from a reader process (:mod:`insitu.viewer._reader`, an
  :class:`insitu.stream.FrameReader` on the SST stream or BP5 file: ADIOS2 calls hold
  the GIL while they block, which would freeze this process), paces a BP5 replay at
  ``rate`` frames per second, keeps the newest frame in a
  :class:`~insitu.viewer.state.FrameBuffer`, writes every frame it receives to the
  recorders (``--png`` / ``--mp4``), and marks the buffer ended when the stream ends
  (the last frame stays served). A slow viewer does not slow a live writer: the pipe
  fills, the reader process stops taking steps and SST drops them at the writer.
- *steering* (live streams only): owns the :class:`insitu.stream.SteeringWriter` on
  ``<stream>.steer`` and sends the WHOLE steering state after every change and once
  every ``heartbeat`` seconds, so a simulation whose reader connects late (or lost an
  update) converges to the viewer's state.
- *http*: :class:`http.server.ThreadingHTTPServer` serving the page and the endpoints
  listed in :class:`Handler`.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import sys
import threading
import time
import urllib.parse
from importlib import resources

from .record import Mp4Writer, PngDirectory, encode_png
from .state import STEER_KEYS, FrameBuffer, SteeringState

__all__ = ["Viewer"]

class Viewer:
    """Reads a frame stream, serves it over HTTP and forwards steering. See :func:`insitu.viewer.serve`."""

    def __init__(self, stream: str, *, engine: str | None = None, host: str = "127.0.0.1", port: int = 0,
                 png: str | None = None, mp4: str | None = None, steer: bool | None = None,
                 timeout: float = 30.0, rate: float = 10.0, heartbeat: float = 1.0) -> None:
        eng = (engine or ("BP5" if os.path.isdir(stream) else "SST")).upper()
        if eng not in ("SST", "BP5"):
            raise ValueError(f"engine: expected SST or BP5, got {engine!r}")
        if eng == "BP5" and not os.path.isdir(stream):
            raise FileNotFoundError(f"stream: BP5 file {stream!r} is not a directory")
        if not rate > 0:
            raise ValueError(f"rate: expected frames per second > 0, got {rate!r}")
        if not timeout > 0:
            raise ValueError(f"timeout: expected seconds > 0, got {timeout!r}")
        if steer and eng != "SST":
            raise ValueError("steer: steering needs a live SST stream; a BP5 file is replayed without it")
        self.stream, self.engine = stream, eng
        self.mode = "live" if eng == "SST" else "replay"
        self.steer_enabled = eng == "SST" if steer is None else bool(steer)
        self.timeout, self.rate, self.heartbeat = float(timeout), float(rate), float(heartbeat)
        self.frames = FrameBuffer()
        self.steering = SteeringState()
        self.error: str | None = None
        self.connected = False
        self.steer_sent = 0
        self.steer_error: str | None = None
        self.record_error: str | None = None
        self._png_dir = PngDirectory(png) if png else None
        self._mp4 = Mp4Writer(mp4, fps=rate) if mp4 else None
        self._stop = threading.Event()
        self._proc_lock = threading.Lock()
        self._proc = None
        self._steer_wake = threading.Event()
        self._png_lock = threading.Lock()
        self._png: tuple[int, bytes] = (0, b"")
        self._page = resources.files(__package__).joinpath("page.html").read_bytes()
        self._httpd = _Server(host, port, self)
        h, p = self._httpd.server_address[:2]
        self.host, self.port = h, p
        self.url = f"http://{'[%s]' % h if ':' in h else h}:{p}/"
        self._steer_writer = None
        if self.steer_enabled:
            # opened here, on the caller's thread: ADIOS2's first SST writer in a process installs
            # a SIGINT handler (exit(1)), and a caller that wants a clean Ctrl-C installs its own after
            from ..stream import SteeringWriter, steering_name

            try:
                if os.path.dirname(stream):  # where the contact file goes (the simulation may not be up yet)
                    os.makedirs(os.path.dirname(stream), exist_ok=True)
                self._steer_writer = SteeringWriter(steering_name(stream))
            except Exception:
                self._httpd.server_close()
                raise
        self._threads = [threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.2},
                                          name="insitu-view-http", daemon=True),
                         threading.Thread(target=self._read, name="insitu-view-reader", daemon=True)]
        if self.steer_enabled:
            self._threads.append(threading.Thread(target=self._steer_loop, name="insitu-view-steer", daemon=True))
        for t in self._threads:
            t.start()

    # -- state --------------------------------------------------------------------------

    @property
    def ended(self) -> bool:
        return self.frames.ended

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the stream to end (and the recordings to be finished); True if it did."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.frames.ended:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            self.frames.wait(self.frames.seq, left)
        return True

    def status(self) -> dict:
        seq, f = self.frames.latest()
        return {
            "stream": self.stream, "engine": self.engine, "mode": self.mode,
            "connected": self.connected, "ended": self.frames.ended, "error": self.error,
            "record_error": self.record_error,
            "frames": seq, "seq": seq, "fps": round(self.frames.fps(), 3),
            "step": None if f is None else f.step, "time": None if f is None else f.time,
            "width": None if f is None else int(f.image.shape[1]),
            "height": None if f is None else int(f.image.shape[0]),
            "camera": None if f is None or f.camera is None else [float(x) for x in f.camera],
            "ranges": {} if f is None else {k: list(v) for k, v in f.ranges.items()},
            "first_step": self.frames.first_step, "steps": list(self.frames.steps),
            "steering": {"enabled": self.steer_enabled, "state": self.steering.snapshot(),
                         "sent": self.steer_sent, "error": self.steer_error},
        }

    def png(self) -> tuple[int, int, float, bytes] | None:
        """``(seq, step, time, png bytes)`` of the newest frame, encoded once per frame."""
        seq, f = self.frames.latest()
        if f is None:
            return None
        with self._png_lock:
            if self._png[0] != seq:
                self._png = (seq, encode_png(f.image))
            return seq, f.step, f.time, self._png[1]

    def steer(self, update) -> dict:
        """Merge `update` into the steering state and send the whole state now.

        Raises
        ------
        ValueError
            A malformed update (naming the key), or steering is off.
        """
        if not self.steer_enabled:
            raise ValueError(f"steer: steering is off for {self.stream!r} "
                             f"({'a BP5 replay' if self.engine == 'BP5' else '--no-steer'})")
        state = self.steering.update(update)
        self._steer_wake.set()
        return state

    # -- threads ------------------------------------------------------------------------

    def _record(self, frame) -> None:
        # a failing recording (full disk, ffmpeg gone) stops that recording, not the viewing
        if self._png_dir is not None:
            try:
                self._png_dir.write(frame)
            except Exception as exc:
                self.record_error, self._png_dir = f"--png {self._png_dir.directory}: {exc}", None
        if self._mp4 is not None:
            try:
                self._mp4.write(frame)
            except Exception as exc:
                self.record_error = f"--mp4 {self._mp4.path}: {exc}"
                self._close_mp4()

    def _close_mp4(self) -> None:
        mp4, self._mp4 = self._mp4, None
        if mp4 is not None:
            try:
                mp4.close()
            except Exception as exc:
                self.record_error = self.record_error or f"--mp4 {mp4.path}: {exc}"

    def _read(self) -> None:
        # in a process of its own (see _reader): a blocking ADIOS2 call holds the GIL
        import subprocess

        from ._reader import read_frame

        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)  # it imports insitu as we do
        proc = None
        try:
            with self._proc_lock:
                if self._stop.is_set():
                    return
                self._proc = proc = subprocess.Popen(
                    [sys.executable, "-m", "insitu.viewer._reader", self.stream, self.engine, repr(self.timeout)],
                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, env=env, start_new_session=True)
            t0, n = time.monotonic(), 0
            while not self._stop.is_set():
                f = read_frame(proc.stdout)
                if isinstance(f, dict):
                    if f.get("connected"):
                        self.connected = True
                    if "error" in f and not self._stop.is_set():
                        self._fail(f["error"], f.get("crashed", False))
                    if "end" in f or "error" in f:
                        return
                    continue
                if self.mode == "replay":  # at `rate` frames per second
                    delay = t0 + n / self.rate - time.monotonic()
                    if delay > 0 and self._stop.wait(delay):
                        return
                    n += 1
                self._record(f)
                self.frames.put(f)
        except Exception as exc:  # the reader process died mid-frame, could not start
            if not self._stop.is_set():
                self._fail(str(exc), True)
        finally:
            self.connected = False
            self._end_reader()
            if proc is not None:
                proc.stdout.close()
            self._close_mp4()
            self.frames.end()

    def _fail(self, msg: str, crashed: bool = False) -> None:
        if self.connected or crashed:
            self.error = f"{self.engine} stream {self.stream!r}: {msg}"
        elif self.engine == "SST":
            self.error = f"no writer for SST stream {self.stream!r} within {self.timeout:g} s ({msg})"
        else:
            self.error = f"could not read BP5 file {self.stream!r}: {msg}"

    def _end_reader(self) -> None:
        with self._proc_lock:
            proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(5)
        except Exception:
            proc.kill()
            proc.wait()

    def _steer_loop(self) -> None:
        writer = self._steer_writer
        try:
            while not self._stop.is_set():
                self._steer_wake.wait(self.heartbeat)
                self._steer_wake.clear()
                if self._stop.is_set():
                    break
                try:
                    writer.send(self.steering.snapshot())  # the whole state, every time
                    self.steer_sent += 1
                except Exception as exc:
                    self.steer_error = f"steering stream: {exc}"
        finally:
            try:
                writer.close()
            except Exception:
                pass

    def close(self, timeout: float = 60.0) -> None:
        """Stop reading and steering (finishing the recordings), then stop serving."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._steer_wake.set()
        threading.Thread(target=self._end_reader, daemon=True).start()  # the reader thread may be in a read
        deadline = time.monotonic() + timeout
        for t in self._threads[1:]:
            t.join(max(0.1, deadline - time.monotonic()))
        self._httpd.shutdown()
        self._httpd.server_close()
        self._threads[0].join(5)

    def __enter__(self) -> "Viewer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, host: str, port: int, viewer: Viewer) -> None:
        if ":" in host:
            self.address_family = socket.AF_INET6
        self.viewer = viewer
        super().__init__((host, port), Handler)


class Handler(http.server.BaseHTTPRequestHandler):
    """Endpoints.

    ``GET /``            the page (HTML with inline JS).
    ``GET /status``      JSON: stream, engine, mode (live|replay), connected, ended, error,
                         frames/seq (frames received), step, time, width, height, fps,
                         camera, ranges, first_step, steps (the last 100), record_error,
                         steering {enabled, state, sent, error}.
    ``GET /frame.png``   the newest frame (any query string, e.g. ``?n=SEQ``, is ignored);
                         headers ``X-Insitu-Seq``, ``X-Insitu-Step``, ``X-Insitu-Time``;
                         503 before the first frame.
    ``GET /steer``       JSON: the steering state, whether steering is on, the accepted keys.
    ``POST /steer``      a JSON object of steering keys (``Content-Type: application/json``),
                         merged into the state and sent; answers ``{"state": ..., "sent": n}``,
                         400 ``{"error": ...}`` for a malformed update, 409 when steering is
                         off, 415 for another content type.
    """

    server: _Server
    protocol_version = "HTTP/1.1"
    server_version = "insitu-view"

    def log_message(self, format, *args) -> None:  # quiet: the terminal shows the URL only
        pass

    def _send(self, code: int, body: bytes, ctype: str, headers: dict | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, code: int, obj) -> None:
        self._send(code, json.dumps(obj).encode(), "application/json")

    def do_GET(self) -> None:
        v = self.server.viewer
        path = urllib.parse.urlsplit(self.path).path
        if path in ("/", "/index.html"):
            self._send(200, v._page, "text/html; charset=utf-8")
        elif path == "/status":
            self._json(200, v.status())
        elif path == "/frame.png":
            p = v.png()
            if p is None:
                self._json(503, {"error": "no frame yet", "ended": v.ended})
            else:
                seq, step, t, data = p
                self._send(200, data, "image/png",
                           {"X-Insitu-Seq": str(seq), "X-Insitu-Step": str(step), "X-Insitu-Time": repr(t)})
        elif path == "/steer":
            self._json(200, {"state": v.steering.snapshot(), "enabled": v.steer_enabled, "keys": STEER_KEYS})
        else:
            self._json(404, {"error": f"no such page {path!r}; pages: /, /status, /frame.png, /steer"})

    do_HEAD = do_GET

    def do_POST(self) -> None:
        v = self.server.viewer
        path = urllib.parse.urlsplit(self.path).path
        if path != "/steer":
            self._json(404, {"error": f"cannot POST to {path!r}; POST steering updates to /steer"})
            return
        if self.headers.get_content_type() != "application/json":
            # also keeps other web sites out: a cross-origin JSON POST needs a CORS preflight we never grant
            self._json(415, {"error": "steer: send a JSON object with Content-Type: application/json"})
            return
        n = int(self.headers.get("Content-Length") or 0)
        if n > 1 << 16:
            self._json(413, {"error": f"steering update of {n} bytes; at most 65536"})
            return
        try:
            update = json.loads(self.rfile.read(n) or b"null")
        except ValueError as exc:
            self._json(400, {"error": f"steer: the body is not JSON: {exc}"})
            return
        if not v.steer_enabled:
            self._json(409, {"error": f"steering is off for this stream ({v.mode})"})
            return
        try:
            state = v.steer(update)
        except ValueError as exc:
            self._json(400, {"error": str(exc)})
            return
        self._json(200, {"state": state, "sent": v.steer_sent})
