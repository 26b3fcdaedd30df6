"""The viewer's I/O shell: a frame-reading thread, a steering thread and a local HTTP server.

Threads (all stopped by :meth:`Viewer.close`):

- *reader*: takes the frames from a reader process (:mod:`insitu.viewer._reader`, an
  :class:`insitu.stream.FrameReader` on the SST stream or BP5 file: ADIOS2 calls hold
  the GIL while they block, which would freeze this process), writes every frame it
  receives to the recorders (``--png`` / ``--mp4``) and adds what it says of its step to
  the :class:`~insitu.viewer.state.Series` the page plots. Live, it shows the newest
  frame (a :class:`~insitu.viewer.state.FrameBuffer`) and marks the buffer ended when the
  stream ends (the last frame stays served); a slow viewer does not slow a live writer:
  the pipe fills, the reader process stops taking steps and SST drops them at the writer
  (counted from the frames' numbers: ``dropped``). A replay's frames go, as fast as they
  are read, into a :class:`~insitu.viewer.record.FrameStore` for the timeline.
- *player* (BP5 replays only): shows the stored frames at ``rate`` frames per second
  from the first, or the one the page seeks to (``POST /replay``), and marks the buffer
  ended the first time it shows the last frame of a file read to its end.
- *steering* (live streams only): owns the :class:`insitu.stream.SteeringWriter` on
  ``<stream>.steer`` and sends the WHOLE steering state after every change and once
  every ``heartbeat`` seconds, so a simulation whose reader connects late (or lost an
  update) converges to the viewer's state.
- *http*: a gate that accepts connections and keeps them, without a thread, until
  their first bytes arrive (at most ``IDLE_TIMEOUT`` seconds); then a handler thread
  (at most ``MAX_HANDLERS`` at once, more are answered 503) serves the page and the
  endpoints listed in :class:`Handler`. Idle connections therefore cost a file
  descriptor, not a thread, and every socket read or write times out.

Access: every request must name the viewer in ``Host`` (and ``Origin``, when sent) and
carry the per-run token (see :mod:`insitu.viewer._access`); ``Viewer.url`` holds it.
"""

from __future__ import annotations

import base64
import hashlib
import http.cookies
import http.server
import json
import os
import re
import secrets
import selectors
import socket
import sys
import threading
import time
import urllib.parse
from importlib import resources

from ..log import get_logger
from ._access import Access, Refused, body_length
from .record import FrameStore, Mp4Writer, PngDirectory, encode_png
from .state import COLORMAPS, STEER_KEYS, FrameBuffer, Series, SteeringState, finite

__all__ = ["IDLE_TIMEOUT", "MAX_BODY", "MAX_HANDLERS", "Viewer"]

_log = get_logger(__name__)

#: Seconds a connection may stay silent: before its first request, between requests and within one.
IDLE_TIMEOUT = 10.0
#: Requests served at once (browsers open at most 6 connections to a host); more are answered 503.
MAX_HANDLERS = 32
#: Connections waiting for their first bytes; beyond this the oldest is closed.
MAX_WAITING = 512
#: Seconds a closed connection's unread bytes are still drained (see _Server.shutdown_request).
LINGER = 1.0
#: The largest steering update accepted, in bytes.
MAX_BODY = 1 << 16
#: The deepest nesting of arrays and objects accepted in a steering update (real ones nest 3 deep).
MAX_DEPTH = 16
TOKEN_HEADER = "X-Insitu-Token"


def _too_deep(obj, limit: int) -> bool:
    """Whether JSON value `obj` nests arrays/objects more than `limit` deep (iteratively: no recursion)."""
    stack = [(obj, 0)]
    while stack:
        o, d = stack.pop()
        if isinstance(o, (dict, list)):
            if d >= limit:
                return True
            stack.extend((x, d + 1) for x in (o.values() if isinstance(o, dict) else o))
    return False


def _csp(page: bytes) -> str:
    """The page's Content-Security-Policy: its own inline script and style (by hash), nothing from elsewhere."""
    def hashes(tag: bytes) -> str:
        found = re.findall(rb"<%s>(.*?)</%s>" % (tag, tag), page, re.S)
        return " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(x).digest()).decode()}'"
                        for x in found) or "'none'"

    # frames are shown through blob: URLs made from fetched PNGs
    return (f"default-src 'self'; img-src 'self' blob:; script-src {hashes(b'script')}; "
            f"style-src {hashes(b'style')}; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")

class Viewer:
    """Reads a frame stream, serves it over HTTP and forwards steering. See :func:`insitu.viewer.serve`.

    ``url`` is the page's address with the per-run ``token`` (``http://127.0.0.1:PORT/?token=...``);
    ``host`` and ``port`` are where it is bound.
    """

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
        self.series = Series()
        self.steering = SteeringState()
        # a replay's timeline: the player shows store[_pos], moving on while _playing or to _seek
        self._store = FrameStore() if self.mode == "replay" else None
        self._replay = threading.Condition()
        self._pos, self._playing, self._seek, self._complete = -1, True, None, False
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
        self.token = secrets.token_urlsafe(32)
        self._httpd = _Server(host, port, self)
        h, p = self._httpd.server_address[:2]
        self.host, self.port = h, p
        self._access = Access(self.token, h, p, names=[host])
        self.url = f"http://{'[%s]' % h if ':' in h else h}:{p}/?token={self.token}"
        self._headers = {"Cache-Control": "no-store", "X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff",
                         "Referrer-Policy": "no-referrer", "Cross-Origin-Resource-Policy": "same-origin",
                         "Content-Security-Policy": _csp(self._page)}
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
        self._threads = [threading.Thread(target=self._httpd.gate, name="insitu-view-http", daemon=True),
                         threading.Thread(target=self._read, name="insitu-view-reader", daemon=True)]
        if self.steer_enabled:
            self._threads.append(threading.Thread(target=self._steer_loop, name="insitu-view-steer", daemon=True))
        if self._store is not None:
            self._threads.append(threading.Thread(target=self._play, name="insitu-view-player", daemon=True))
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
            "ranges": {} if f is None else finite({k: list(v) for k, v in f.ranges.items()}),
            "stats": {} if f is None else finite(f.stats), "timings": {} if f is None else finite(f.timings),
            "first_step": self.frames.first_step, "steps": list(self.frames.steps),
            "received": self.series.count, "dropped": self.series.dropped, "replay": self.replay_status(),
            "steering": {"enabled": self.steer_enabled, "state": self.steering.snapshot(),
                         "sent": self.steer_sent, "error": self.steer_error},
            "colormaps": list(COLORMAPS),
        }

    def replay_status(self) -> dict | None:
        """A replay's timeline: ``position`` (of the frame shown, -1 before the first),
        ``count`` (frames read), ``playing``, ``complete`` (the file was read to its end),
        ``rate``; None for a live stream."""
        if self._store is None:
            return None
        with self._replay:
            return {"position": self._pos, "count": len(self._store), "playing": self._playing,
                    "complete": self._complete, "rate": self.rate}

    def replay(self, command) -> dict:
        """Move a replay's timeline: ``{"play": bool}``, ``{"position": i}`` (0-based, in
        reading order), ``{"step": s}`` (the first frame of step `s`, else the nearest before
        it) or ``{"delta": n}`` (frames forward, or back when negative; seeking pauses).
        Returns :meth:`replay_status` as it will be.

        Raises
        ------
        ValueError
            Not a replay, no frame yet, or a malformed command (naming the key and what is accepted).
        """
        if self._store is None:
            raise ValueError(f"replay: {self.stream!r} is a live stream; only BP5 replays have a timeline")
        keys = ("play", "position", "step", "delta")
        if not isinstance(command, dict) or len(command) != 1 or next(iter(command)) not in keys:
            raise ValueError(f"replay: expected one of {{\"play\": true|false}}, {{\"position\": i}}, "
                             f"{{\"step\": s}}, {{\"delta\": n}}; got {command!r}")
        (k, v), = command.items()
        if k == "play" and not isinstance(v, bool):
            raise ValueError(f"replay: play: expected true or false, got {v!r}")
        if k != "play" and (not isinstance(v, int) or isinstance(v, bool)):
            raise ValueError(f"replay: {k}: expected an integer, got {v!r}")
        n = len(self._store)
        if k != "play" and n == 0:
            raise ValueError("replay: no frame yet")
        with self._replay:
            if k == "play":
                if v and self._complete and self._pos >= n - 1:
                    self._seek = 0  # play at the end: from the start again
                self._playing = v
            else:
                at = self._pos if self._seek is None else self._seek
                target = v if k == "position" else self._store.find(v) if k == "step" else at + v
                if k == "position" and not 0 <= v < n:
                    raise ValueError(f"replay: position: expected 0 .. {n - 1}, got {v}")
                self._seek, self._playing = min(max(target, 0), n - 1), False
            status = {"position": self._pos if self._seek is None else self._seek, "count": len(self._store),
                      "playing": self._playing, "complete": self._complete, "rate": self.rate}
            self._replay.notify_all()
        return status

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
                _log.warning("recording stopped: %s", self.record_error)
        if self._mp4 is not None:
            try:
                self._mp4.write(frame)
            except Exception as exc:
                self.record_error = f"--mp4 {self._mp4.path}: {exc}"
                _log.warning("recording stopped: %s", self.record_error)
                self._close_mp4()

    def _close_mp4(self) -> None:
        mp4, self._mp4 = self._mp4, None
        if mp4 is not None:
            try:
                mp4.close()
            except Exception as exc:
                self.record_error = self.record_error or f"--mp4 {mp4.path}: {exc}"
                _log.warning("closing the recording --mp4 %s: %s", mp4.path, exc)

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
                self._record(f)
                self.series.add(f)
                if self._store is None:
                    self.frames.put(f)
                else:  # the player shows it
                    self._store.add(f)
                    with self._replay:
                        self._replay.notify_all()
        except Exception as exc:  # the reader process died mid-frame, could not start
            if not self._stop.is_set():
                self._fail(str(exc), True)
        finally:
            self.connected = False
            self._end_reader()
            if proc is not None:
                proc.stdout.close()
            self._close_mp4()
            if self._store is None:
                self.frames.end()
            else:  # the player ends the buffer once it has shown the last frame
                with self._replay:
                    self._complete = True
                    self._replay.notify_all()

    def _play(self) -> None:
        """Show the replay's frames: the next one every 1/rate s while playing, or the one sought."""
        store, interval, due = self._store, 1.0 / self.rate, time.monotonic()
        assert store is not None
        while True:
            with self._replay:
                while True:
                    if self._stop.is_set():
                        return
                    n, target = len(store), None
                    if self._seek is not None:
                        target, self._seek = self._seek, None
                        break
                    if self._playing and self._pos + 1 < n:
                        wait = due - time.monotonic()
                        if wait <= 0:
                            target = self._pos + 1
                            break
                        self._replay.wait(wait)
                        continue
                    if self._playing and self._complete:  # at the last frame
                        self._playing = False
                    if self._complete and self._pos >= n - 1 and not self.frames.ended:
                        break  # the file's last frame is shown: the buffer ends (once)
                    self._replay.wait(0.5)
            if target is None:
                self.frames.end()
                continue
            f = store.get(target)
            with self._replay:
                self._pos = target
            self.frames.put(f)
            now = time.monotonic()
            due = (due if due > now - interval else now) + interval  # on schedule, without catching up bursts

    def _fail(self, msg: str, crashed: bool = False) -> None:
        if self.connected or crashed:
            self.error = f"{self.engine} stream {self.stream!r}: {msg}"
        elif self.engine == "SST":
            self.error = f"no writer for SST stream {self.stream!r} within {self.timeout:g} s ({msg})"
        else:
            self.error = f"could not read BP5 file {self.stream!r}: {msg}"
        _log.warning("%s", self.error)

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
                    error = f"steering stream: {exc}"
                    if error != self.steer_error:  # once, not every heartbeat
                        _log.warning("%s", error)
                    self.steer_error = error
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
        with self._replay:
            self._replay.notify_all()
        threading.Thread(target=self._end_reader, daemon=True).start()  # the reader thread may be in a read
        deadline = time.monotonic() + timeout
        for t in self._threads[1:]:
            t.join(max(0.1, deadline - time.monotonic()))
        self._httpd.stop()
        self._threads[0].join(5)
        self._httpd.server_close()
        if self._store is not None:
            self._store.close()

    def __enter__(self) -> "Viewer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _Server(http.server.HTTPServer):
    """An HTTP server whose threads go to requests, not to connections (see the module docstring)."""

    request_queue_size = 128  # the listen backlog: the gate accepts quickly, but bursts of connections come

    def __init__(self, host: str, port: int, viewer: Viewer) -> None:
        if ":" in host:
            self.address_family = socket.AF_INET6
        self.viewer = viewer
        super().__init__((host, port), Handler)
        self.socket.setblocking(False)
        self._lock = threading.Lock()
        self._active = 0
        self._waiting: dict[socket.socket, tuple] = {}  # in arrival order: (address, deadline)
        self._sel = selectors.DefaultSelector()
        self._sel.register(self.socket, selectors.EVENT_READ)
        self._stopping = threading.Event()

    def crowded(self) -> bool:
        """Whether half the handler threads are busy (then connections are not kept alive)."""
        return self._active >= MAX_HANDLERS // 2

    def gate(self) -> None:
        """Accept connections and hand those with bytes to read to handler threads, until :meth:`stop`."""
        try:
            while not self._stopping.is_set():
                for key, _ in self._sel.select(0.2):
                    if key.fileobj is self.socket:
                        self._accept()
                    else:
                        self._dispatch(key.fileobj)
                now = time.monotonic()
                while self._waiting:  # the oldest first: every connection waits IDLE_TIMEOUT at most
                    conn, (_, deadline) = next(iter(self._waiting.items()))
                    if deadline > now:
                        break
                    self._drop(conn)
        finally:
            for conn in list(self._waiting):
                self._drop(conn)

    def stop(self) -> None:
        self._stopping.set()

    def server_close(self) -> None:
        super().server_close()
        self._sel.close()

    def shutdown_request(self, request: socket.socket) -> None:
        # a lingering close: what the client still sends (a refused body) is read and dropped for
        # a moment, since closing with unread data resets the connection and the client may lose the answer
        try:
            request.shutdown(socket.SHUT_WR)
            deadline, left = time.monotonic() + LINGER, 1 << 20
            while left > 0 and (t := deadline - time.monotonic()) > 0:
                request.settimeout(t)
                chunk = request.recv(min(left, 1 << 16))
                if not chunk:
                    break
                left -= len(chunk)
        except OSError:
            pass
        self.close_request(request)

    def _accept(self) -> None:
        for _ in range(64):  # then let the waiting connections have their turn
            try:
                conn, addr = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of file descriptors: the backlog keeps them until some close
                self._stopping.wait(0.05)
                return
            if len(self._waiting) >= MAX_WAITING:
                self._drop(next(iter(self._waiting)))
            conn.settimeout(IDLE_TIMEOUT)
            self._waiting[conn] = (addr, time.monotonic() + IDLE_TIMEOUT)
            self._sel.register(conn, selectors.EVENT_READ)

    def _drop(self, conn: socket.socket) -> None:
        self._waiting.pop(conn, None)
        try:
            self._sel.unregister(conn)
        except (KeyError, ValueError):
            pass
        conn.close()

    def _dispatch(self, conn: socket.socket) -> None:
        addr, _ = self._waiting.pop(conn)
        self._sel.unregister(conn)
        with self._lock:
            full = self._active >= MAX_HANDLERS
            if not full:
                self._active += 1
        if full:
            body = b'{"error": "the viewer is busy; try again"}'
            head = "".join(f"{k}: {v}\r\n" for k, v in self.viewer._headers.items())
            try:
                conn.setblocking(False)  # a fresh socket's send buffer takes this whole; never wait for it
                conn.recv(1 << 16)  # what the request sent so far: closing with it unread would reset the answer
                conn.send(f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                          f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n{head}\r\n"
                          .encode() + body)
            except OSError:
                pass
            conn.close()
            return
        threading.Thread(target=self._work, args=(conn, addr), name="insitu-view-request", daemon=True).start()

    def handle_error(self, request, client_address) -> None:
        # socketserver's prints the traceback on stderr; a library logs it
        _log.error("a request from %s failed", client_address, exc_info=True)

    def _work(self, conn: socket.socket, addr) -> None:
        try:
            self.finish_request(conn, addr)
        except OSError:  # the client went away, or was silent for IDLE_TIMEOUT
            pass
        except Exception:
            self.handle_error(conn, addr)
        finally:
            self.shutdown_request(conn)
            with self._lock:
                self._active -= 1


class Handler(http.server.BaseHTTPRequestHandler):
    """Endpoints.

    Every request needs a ``Host`` naming the viewer (127.0.0.1:PORT, localhost:PORT,
    [::1]:PORT or the address it is bound to), an ``Origin`` (if any) naming it too, and
    the viewer's token: ``?token=TOKEN``, the ``X-Insitu-Token`` header, or the cookie that
    ``GET /?token=TOKEN`` sets (HttpOnly, SameSite=Strict). Refused: 403 ``{"error": ...}``.

    ``GET /``            the page (HTML with inline JS).
    ``GET /status``      JSON: stream, engine, mode (live|replay), connected, ended, error,
                         frames/seq (frames received), step, time, width, height, fps,
                         camera, ranges, first_step, steps (the last 100), record_error,
                         steering {enabled, state, sent, error}, colormaps (the names
                         the installed renderers know; empty: any name is passed on),
                         stats and timings (of the frame shown), received (frames read),
                         dropped (frames lost between the writer and the viewer), replay
                         (the timeline of a BP5 replay: position, count, playing, complete,
                         rate; null for a live stream).
    ``GET /series?since=N`` JSON ``{"start", "points", "count"}``: what the frames received
                         from number N on say of their steps (:class:`~insitu.viewer.state.Series`),
                         at most 2,000 points an answer.
    ``GET /frame.png``   the newest frame (any other query parameter, e.g. ``?n=SEQ``, is ignored);
                         headers ``X-Insitu-Seq``, ``X-Insitu-Step``, ``X-Insitu-Time``;
                         503 before the first frame.
    ``GET /steer``       JSON: the steering state, whether steering is on, the accepted keys.
    ``POST /steer``      a JSON object of steering keys (``Content-Type: application/json``,
                         ``Content-Length`` at most 64 KiB), merged into the state and sent;
                         answers ``{"state": ..., "sent": n}``, 400 ``{"error": ...}`` for a
                         malformed update or length, 409 when steering is off, 411 without a
                         length, 413 above 64 KiB, 415 for another content type.
    ``POST /replay``     a BP5 replay's timeline, as ``/steer`` takes updates: ``{"play": bool}``,
                         ``{"position": i}``, ``{"step": s}`` or ``{"delta": n}``
                         (:meth:`Viewer.replay`); answers the timeline, 400 for a malformed
                         command, 409 for a live stream.

    Every answer of 400 or above closes the connection.
    """

    server: _Server
    protocol_version = "HTTP/1.1"
    server_version = "insitu-view"
    timeout = IDLE_TIMEOUT  # set on the socket by StreamRequestHandler.setup: every read and write

    def log_message(self, format, *args) -> None:  # quiet: the terminal shows the URL only
        pass

    def end_headers(self) -> None:  # every answer, send_error's included
        for k, v in self.server.viewer._headers.items():
            self.send_header(k, v)
        if not self.close_connection and self.server.crowded():
            self.send_header("Connection", "close")
        super().end_headers()

    def _send(self, code: int, body: bytes, ctype: str, headers: dict | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        if code >= 400:  # also: a refused POST's body was not read and must not be taken for a request
            self.send_header("Connection", "close")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, code: int, obj) -> None:
        self._send(code, json.dumps(obj).encode(), "application/json")

    @property
    def _cookie_name(self) -> str:  # cookies do not tell ports apart: one name per viewer
        return f"insitu_view_{self.server.viewer.port}"

    def _admitted(self, query: dict) -> bool:
        """Check Host, Origin and token; answer 403 and return False when one fails."""
        access = self.server.viewer._access
        why = access.host_error(self.headers.get_all("Host") or []) or access.origin_error(
            self.headers.get_all("Origin") or [])
        if why is None:
            tokens = [*query.get("token", []), *(self.headers.get_all(TOKEN_HEADER) or [])]
            for c in self.headers.get_all("Cookie") or []:
                try:
                    morsel = http.cookies.SimpleCookie(c).get(self._cookie_name)
                except http.cookies.CookieError:
                    continue
                if morsel is not None:
                    tokens.append(morsel.value)
            if not access.token_ok(tokens):
                why = "missing or wrong token; use the URL 'insitu view' printed (http://HOST:PORT/?token=...)"
        if why is not None:
            self._json(403, {"error": f"insitu view: forbidden: {why}"})
            return False
        return True

    def do_GET(self) -> None:
        v = self.server.viewer
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        if not self._admitted(query):
            return
        path = url.path
        if path in ("/", "/index.html"):
            headers = {}
            if query.get("token"):  # the page's later requests (and a reload without ?token) carry it
                headers["Set-Cookie"] = f"{self._cookie_name}={v.token}; Path=/; HttpOnly; SameSite=Strict"
            self._send(200, v._page, "text/html; charset=utf-8", headers)
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
        elif path == "/series":
            since = (query.get("since") or ["0"])[0]
            if not since.isdigit():
                self._json(400, {"error": f"series: since: expected a point number >= 0, got {since!r}"})
                return
            self._json(200, v.series.since(int(since[:12])))
        else:
            self._json(404, {"error": f"no such page {path!r}; pages: /, /status, /frame.png, /steer, /series"})

    do_HEAD = do_GET

    def do_POST(self) -> None:
        v = self.server.viewer
        url = urllib.parse.urlsplit(self.path)
        if not self._admitted(urllib.parse.parse_qs(url.query)):
            return
        what = url.path.strip("/")
        if what not in ("steer", "replay"):
            self._json(404, {"error": f"cannot POST to {url.path!r}; POST steering updates to /steer, "
                                      "a replay's timeline commands to /replay"})
            return
        if self.headers.get_content_type() != "application/json":
            # also keeps other web sites out: a cross-origin JSON POST needs a CORS preflight we never grant
            self._json(415, {"error": f"{what}: send a JSON object with Content-Type: application/json"})
            return
        try:
            n = body_length(self.headers.get_all("Content-Length") or [],
                            "Transfer-Encoding" in self.headers, MAX_BODY)
        except Refused as r:
            self._json(r.code, {"error": f"{what}: {r.message}"})
            return
        body = self.rfile.read(n)
        if len(body) != n:
            self._json(400, {"error": f"{what}: the body ended after {len(body)} of {n} bytes"})
            return
        try:
            update = json.loads(body or b"null")
            deep = _too_deep(update, MAX_DEPTH)
        except RecursionError:  # deeper than the decoder goes
            deep = True
        except ValueError as exc:  # UnicodeDecodeError included
            self._json(400, {"error": f"{what}: the body is not JSON: {exc}"})
            return
        if deep:
            self._json(400, {"error": f"{what}: the body is nested too deeply (more than {MAX_DEPTH} levels "
                                      "of arrays and objects) to be a steering update"})
            return
        if what == "replay":
            if v.mode != "replay":
                self._json(409, {"error": "replay: a live stream has no timeline"})
                return
            try:
                self._json(200, v.replay(update))
            except ValueError as exc:
                self._json(400, {"error": str(exc)})
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
