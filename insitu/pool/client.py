"""The client of a worker daemon: :class:`DaemonWorker` runs command packages in it.

A :class:`DaemonWorker` has the interface of :class:`insitu.pool.Worker` that
:class:`insitu.pool.GPUBlocks` uses (``run(package) -> list`` and ``round_trips``), so
the paper's API works unchanged over a daemon (:mod:`insitu.pool.daemon` starts them).
Every socket operation has a timeout; a daemon that dies gives :class:`WorkerDiedError`
at once (end of file), one that does not answer (or whose listen backlog stays full)
:class:`WorkerTimeoutError`. A client talks only to a daemon of its own user (checked
with ``SO_PEERCRED``, :class:`DaemonOwnerError` otherwise): replies are pickles, which
can run code where they are loaded. Messages are capped both ways
(:func:`insitu.pool.handoff.max_message_bytes`).
"""

from __future__ import annotations

import dataclasses
import os
import socket
import struct
import threading
import time
from typing import Any

from insitu.arrays import DeviceUnavailableError
from insitu.errors import InsituError, PeerTimeoutError

from . import handoff
from .cache import CacheStats
from .handoff import MessageTooLargeError
from .commands import Package

__all__ = ["DEFAULT_TIMEOUT", "DaemonOwnerError", "DaemonStats", "DaemonWorker", "MessageTooLargeError",
           "PackageEncodingError", "WorkerDiedError", "WorkerTimeoutError"]

#: Seconds a client waits on any one socket operation (connect, send, the reply).
DEFAULT_TIMEOUT = 60.0
_SUN_PATH_MAX = 107  # sockaddr_un.sun_path holds 108 bytes with the terminating NUL
_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


class WorkerDiedError(InsituError):
    """The worker daemon is gone (killed, crashed, or not listening)."""

    def __init__(self, message: str, *, socket_path: str = "", pid: int | None = None) -> None:
        super().__init__(message)
        self.socket_path, self.pid = socket_path, pid


class WorkerTimeoutError(PeerTimeoutError):
    """The worker daemon did not answer within the client's timeout (hung, stopped, or busy)."""

    def __init__(self, message: str, *, socket_path: str = "", pid: int | None = None) -> None:
        super().__init__(message)
        self.socket_path, self.pid = socket_path, pid


class DaemonOwnerError(InsituError, PermissionError):
    """The process listening on a daemon socket belongs to another user: it is not used."""


class PackageEncodingError(InsituError, TypeError):
    """A package holds something that cannot be sent to a worker daemon (a local function...)."""


@dataclasses.dataclass(frozen=True)
class DaemonStats:
    """What :meth:`DaemonWorker.stats` reports about a daemon."""

    pid: int
    device: int | None
    socket_path: str
    round_trips: int  # packages run, all connections together
    connections: int  # open now
    cache: CacheStats
    kernels: dict
    uptime: float  # seconds
    owners: tuple = ()  # pids of the live processes that keep it (see insitu.pool.daemon)
    idle_timeout: float | None = None  # seconds idle without owners before it exits


def check_socket_path(path: str) -> str:
    """`path` made absolute; ValueError if it is too long for a Unix socket address."""
    path = os.path.abspath(os.fspath(path))
    if len(os.fsencode(path)) > _SUN_PATH_MAX:
        raise ValueError(f"socket path {path!r} is {len(os.fsencode(path))} bytes; Unix sockets allow at most "
                         f"{_SUN_PATH_MAX}: choose a shorter directory")
    return path


def peer_credentials(sock: socket.socket) -> tuple[int, int]:
    """``(pid, uid)`` of the process at the other end of Unix socket `sock`."""
    pid, uid, _ = _CRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size))
    return pid, uid


class DaemonWorker:
    """A worker daemon seen as a worker: ``run(package) -> list`` over a Unix socket.

    Parameters
    ----------
    socket_path : str
        Where the daemon listens.
    timeout : float
        Seconds any one socket operation may take (connecting, sending, waiting for the
        reply): a package that runs longer needs a larger one.
    pid : int, optional
        The daemon's pid, for messages (learnt from the socket when connecting).
    max_message_bytes : int, optional
        Most bytes of one request or reply (default
        :func:`insitu.pool.handoff.max_message_bytes`).

    Notes
    -----
    One connection, opened on first use and again after a failure; one request at a
    time (thread-safe). Other processes and threads use their own :class:`DaemonWorker`
    (own connection). Picklable (the socket path and timeout travel, not the
    connection), so Spark tasks can carry one.
    """

    def __init__(self, socket_path: str, *, timeout: float = DEFAULT_TIMEOUT, pid: int | None = None,
                 max_message_bytes: int | None = None) -> None:
        self.socket_path = check_socket_path(socket_path)
        if not timeout > 0:
            raise ValueError(f"DaemonWorker: timeout must be > 0 seconds, got {timeout!r}")
        if max_message_bytes is not None and not (isinstance(max_message_bytes, int) and max_message_bytes > 0):
            raise ValueError(f"DaemonWorker: max_message_bytes must be an int > 0, got {max_message_bytes!r}")
        self.timeout = float(timeout)
        self.max_message_bytes = max_message_bytes
        self.pid = pid
        self.round_trips = 0
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        return {"socket_path": self.socket_path, "timeout": self.timeout, "pid": self.pid,
                "max_message_bytes": self.max_message_bytes}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["socket_path"], timeout=state["timeout"], pid=state["pid"],
                      max_message_bytes=state.get("max_message_bytes"))

    def __repr__(self) -> str:
        return f"DaemonWorker({self.socket_path!r}, pid={self.pid})"

    # -- requests ------------------------------------------------------------------------

    def run(self, package: Package) -> list:
        """Carry out `package` in the daemon (one round trip); returns the results of its
        output operations in order, as :meth:`insitu.pool.Worker.run` does.

        Raises
        ------
        PackageEncodingError
            Something in the package cannot be pickled (a local function, a lock...).
        MessageTooLargeError
            The package (arrays sent by value) or its reply exceeds ``max_message_bytes``.
        WorkerDiedError, WorkerTimeoutError
            The daemon is gone, or did not answer in time. Nothing is retried: the package
            may have run in part. After a timeout it may still be running, and may still
            write into the arrays sent with it.
        Exception
            What the package raised in the daemon, with its type and message.
        """
        ex = handoff.ClientExchange()
        try:
            frames = handoff.dumps(("run", package), ex.export)
        except DeviceUnavailableError:
            raise  # the client's own array problem, not a pickling one
        except Exception as e:  # diagnosed below
            raise _encoding_error(package, e, self.socket_path) from e
        handoff.check_size(frames, self.max_message_bytes)
        ex.synchronize()  # the daemon reads the arrays as soon as it has the message
        try:
            with self._lock:
                self.round_trips += 1
                return self._request(frames, f"a package of {len(package)} operations", ex.load)
        finally:
            ex.finish()

    def ping(self) -> int:
        """The daemon's pid, if it answers."""
        with self._lock:
            return self._request(handoff.dumps(("ping",)), "ping")

    def stats(self) -> DaemonStats:
        """The daemon's pid, device, packages run, cache and kernel-cache statistics."""
        with self._lock:
            return self._request(handoff.dumps(("stats",)), "stats")

    def hello(self, fingerprint: dict, owners: tuple = ()) -> dict:
        """The handshake of :func:`insitu.pool.ensure_daemon`: the daemon's ``pid``,
        ``fingerprint`` (its code and options) and ``owners``. When `fingerprint` equals
        the daemon's, the pids in `owners` (processes of this node) become owners of the
        daemon too: it stays while one of them lives (see :mod:`insitu.pool.daemon`)."""
        with self._lock:
            return self._request(handoff.dumps(("hello", dict(fingerprint), tuple(int(p) for p in owners))), "hello")

    def shutdown(self) -> None:
        """Ask the daemon to stop (it finishes the package it is running first)."""
        with self._lock:
            self._request(handoff.dumps(("shutdown",)), "shutdown")
            self._drop()

    def close(self) -> None:
        """Close the connection (the daemon goes on)."""
        with self._lock:
            self._drop()

    def __enter__(self) -> "DaemonWorker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- plumbing ------------------------------------------------------------------------

    def _name(self) -> str:
        return f"worker daemon (pid {self.pid if self.pid is not None else '?'}) at {self.socket_path}"

    def _drop(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _connect(self) -> socket.socket:
        if self._sock is None:
            try:
                s = connect_unix(self.socket_path, self.timeout, self._name())
            except (WorkerDiedError, WorkerTimeoutError) as e:
                e.pid = self.pid
                raise
            pid, uid = peer_credentials(s)
            if uid != os.getuid():
                s.close()
                raise DaemonOwnerError(f"the process listening on {self.socket_path} (pid {pid}) belongs to uid "
                                       f"{uid}, not to this user ({os.getuid()}): its replies are not loaded here. "
                                       "Use a socket in a directory of your own (INSITU_DAEMON_DIR)")
            self.pid = pid
            self._sock = s
        return self._sock

    def _request(self, frames: list, what: str, load=None):
        sock = self._connect()
        try:
            try:
                handoff.send_frames(sock, frames)
            except (BrokenPipeError, ConnectionResetError):
                # The daemon of this connection is gone and never read the request (a restart
                # since the last one, say): one new connection, to whoever listens now.
                self._drop()
                sock = self._connect()
                handoff.send_frames(sock, frames)
            reply = handoff.recv_frames(sock, max_bytes=self.max_message_bytes)
        except MessageTooLargeError as e:
            self._drop()  # the rest of the reply is unread: the connection is out of step
            e.add_note(f"in the reply of the {self._name()} to {what}")
            raise
        except TimeoutError:
            self._drop()  # a late reply must not be taken for the next request's
            raise WorkerTimeoutError(
                f"the {self._name()} did not answer {what} within {self.timeout:g} s (hung, stopped, or the "
                "package runs longer: raise DaemonWorker.timeout)",
                socket_path=self.socket_path, pid=self.pid) from None
        except (EOFError, ConnectionError) as e:
            self._drop()
            raise WorkerDiedError(f"the {self._name()} closed the connection during {what} "
                                  f"({type(e).__name__}): it died; the package's effects are unknown",
                                  socket_path=self.socket_path, pid=self.pid) from None
        try:
            msg = handoff.loads(reply, load)
        except Exception as e:
            e.add_note(f"while decoding the reply of the {self._name()} to {what}: what it returns must be "
                       "importable here")
            raise
        if msg[0] == "ok":
            return msg[1]
        raise _rebuild_error(msg, self._name())


def connect_unix(path: str, timeout: float, name: str = "") -> socket.socket:
    """A stream socket connected to `path` within `timeout` seconds.

    A listener whose backlog is full makes ``connect`` fail at once with EAGAIN
    (``BlockingIOError``) on Unix sockets with a timeout: that is retried until the
    deadline, as a slow ``accept`` would be waited for.

    Raises
    ------
    WorkerDiedError
        Nothing listens at `path`.
    WorkerTimeoutError
        No connection within `timeout` (the listener hangs, or its backlog stays full).
    """
    name = name or f"worker daemon at {path}"
    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(max(deadline - time.monotonic(), 0.001))
        try:
            s.connect(path)
            s.settimeout(timeout)
            return s
        except (FileNotFoundError, ConnectionRefusedError) as e:
            s.close()
            raise WorkerDiedError(f"no worker daemon listens at {path} ({e.strerror}); it died or "
                                  "was stopped: start one with ensure_daemon / start_daemon, or restart() it",
                                  socket_path=path) from None
        except TimeoutError:
            s.close()
            raise WorkerTimeoutError(f"connecting to the {name} took over {timeout:g} s",
                                     socket_path=path) from None
        except BlockingIOError:
            s.close()
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerTimeoutError(f"connecting to the {name} took over {timeout:g} s: its listen backlog "
                                         f"stayed full (socket {path}; the daemon accepts no connections)",
                                         socket_path=path) from None
            time.sleep(min(delay, left))
            delay = min(delay * 2, 0.1)


def _rebuild_error(msg: tuple, name: str) -> BaseException:
    _, blob, module, qualname, text, notes, tb = msg
    exc = None
    if blob is not None:
        try:
            exc = handoff.loads([blob])
        except Exception:  # the type is not importable here
            exc = None
    if not isinstance(exc, BaseException):
        try:
            t: Any = __import__(module, fromlist=["_"])
            for part in qualname.split("."):
                t = getattr(t, part)
            exc = t(text)
        except Exception:
            exc = InsituError(f"{module}.{qualname}: {text}")
        for n in notes:
            exc.add_note(n)
    exc.add_note(f"raised in the {name}")
    exc.add_note("daemon traceback:\n" + tb.rstrip())
    return exc


def _leaves(x, depth: int = 0):
    """`x`'s items (lists and tuples opened, three levels deep), innermost first, then `x`."""
    if isinstance(x, (list, tuple)) and depth < 3:
        for v in x:
            yield from _leaves(v, depth + 1)
    yield x


def _encoding_error(package: Package, error: Exception, path: str) -> PackageEncodingError:
    """Name the part of `package` that cannot be pickled."""

    def probe(obj):  # arrays are not the problem here: no IPC handles, no segments looked up
        return ("array",) if handoff._is_device(obj) else None

    for i, op in enumerate(package.ops):
        for x in _leaves([*op.args, *op.kwargs.values()]):
            try:
                handoff.dumps(x, probe)
            except Exception as e:  # this is the culprit
                what = (f"function {getattr(x, '__module__', '?')}.{getattr(x, '__qualname__', x)!s}" if callable(x)
                        else f"a {type(x).__name__} argument")
                return PackageEncodingError(
                    f"operation {i} ({op.kind}) of the package cannot be sent to the worker daemon at {path}: {what} "
                    f"cannot be pickled with {handoff.pickler_name()} ({type(e).__name__}: {e}). Use a module-level "
                    "function the daemon can import, CUDA source as a string, or a registered kernel name")
    return PackageEncodingError(f"the package cannot be sent to the worker daemon at {path} "
                                f"({type(error).__name__}: {error})")
