"""Worker daemons: one worker per GPU on a node, in its own process, reached over a Unix
socket (the placement Spark tasks use; the embedded engine runs :class:`Worker` in-process).

    handle = ensure_daemon(0)                  # connect to this node's GPU 0 daemon, or start it
    worker = handle.client()                   # a DaemonWorker: run(package) -> list, round_trips
    GPUBlocks.from_arrays(worker, {0: field}).send_gpu().exec_gpu(SRC, "k").recv_gpu()

A daemon is started as a fresh process (``python -m insitu.pool.daemon``; CUDA does
not survive ``fork``), in a session of its own so that it outlives the process that
started it, with that process's ``sys.path`` on its ``PYTHONPATH`` so the functions
in packages import there. It serves every connection in a thread of its own; packages
run one at a time (the worker's lock); ``ping`` and ``stats`` are answered meanwhile.

Messages are pickles framed by length (:mod:`insitu.pool.handoff`); functions go by
reference when importable, else by value with cloudpickle where installed. Arrays are
handed over without copies: CuPy arrays by CUDA IPC, NumPy arrays made by
:func:`insitu.pool.shared.shared_empty` by shared memory; other NumPy arrays by value.
See :mod:`insitu.pool.handoff` for who synchronizes and what comes back how.

Failures: an error inside the daemon is raised again in the client with its type and
message, and a note naming the daemon. A daemon that dies (even by SIGKILL) gives
:class:`WorkerDiedError` at once; one that does not answer within the client's
``timeout`` gives :class:`WorkerTimeoutError`. A package in flight when a daemon dies
is not retried. :meth:`DaemonHandle.restart` starts a new daemon on the same socket:
the blocks cached by the old one are gone (their handles are unknown to the new one).

Lifetime: a daemon has *owners*, processes of its node whose life keeps it: the one that
started it, and each one that found it with :func:`ensure_daemon` (or gave ``owners``).
Once no owner lives, no connection is open and no request came for ``idle_timeout``
seconds (default :data:`DEFAULT_IDLE_TIMEOUT`, ``$INSITU_DAEMON_IDLE_TIMEOUT``;
``math.inf``: never), it exits, removing its socket and spilled blocks. Cached and
persisted blocks do not keep it: once its owners are gone no one holds their handles.
So a simulation killed by SIGKILL does not leave its daemon (and its GPU memory)
behind. At its start a daemon removes the spill directories of dead processes of this
user and node (:func:`insitu.pool.cache.clean_stale_spill_dirs`).

Reuse: :func:`ensure_daemon` compares the daemon's *fingerprint* (:func:`fingerprint`:
the insitu version, a hash of the package sources and their checkout, the Python, the
cache options) with its own in a handshake, and replaces a daemon started from other
code or with other options (stopping it) instead of using it.

Trust: a daemon runs whatever code its packages carry, so it only accepts connections
from processes of its own user (checked with ``SO_PEERCRED``); its default socket lives
in a per-user directory of mode 0700. A client likewise only talks to a daemon of its own
user (:class:`DaemonOwnerError`). Message headers are checked against limits before
anything is allocated (:func:`insitu.pool.handoff.recv_frames`): a forged header gets
an error reply and the connection is closed.
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import functools
import hashlib
import itertools
import math
import os
import secrets
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
from typing import Any, Iterable

import insitu
from insitu import log as insitu_log
from insitu.errors import InsituError

from . import cache as _cache
from . import handoff, node
from ._proc import pid_alive, start_time
from .cache import BlockCache
from .client import (DEFAULT_TIMEOUT, DaemonOwnerError, DaemonStats, DaemonWorker, MessageTooLargeError,
                     PackageEncodingError, WorkerDiedError, WorkerTimeoutError, check_socket_path, connect_unix,
                     peer_credentials)
from .worker import Worker

__all__ = ["DEFAULT_IDLE_TIMEOUT", "DEFAULT_TIMEOUT", "DaemonHandle", "DaemonOwnerError", "DaemonStartError",
           "DaemonStats", "DaemonWorker", "MessageTooLargeError", "PackageEncodingError", "WorkerDiedError",
           "WorkerTimeoutError", "default_socket_path", "ensure_daemon", "fingerprint", "main", "pid_alive",
           "start_daemon"]

#: Seconds :func:`start_daemon` waits for a new daemon to listen.
START_TIMEOUT = 60.0
#: Seconds a daemon without live owners and connections waits for a request before it exits.
DEFAULT_IDLE_TIMEOUT = 120.0
# What a daemon's fingerprint holds of its options (the device is in the socket's name:
# ordinals differ between processes with other CUDA_VISIBLE_DEVICES).
_FINGERPRINT_OPTIONS = ("budget_bytes", "host_budget_bytes", "spill_dir", "max_message_bytes")
# A daemon serves the processes of a node, not one rank: its log lines name its pid.
_DAEMON_LOG_FORMAT = "%(asctime)s [insitu daemon pid %(process)d] %(levelname)s %(name)s: %(message)s"

_log = insitu_log.get_logger(__name__)


class DaemonStartError(InsituError):
    """A worker daemon could not be started; the message holds its output."""


def _listening(path: str, timeout: float = 2.0) -> int | None:
    """The pid of the process listening on `path`, or None if nothing listens (stale file)."""
    try:
        s = connect_unix(path, timeout)
    except WorkerDiedError:
        return None
    except WorkerTimeoutError:
        raise DaemonStartError(f"a process listens on {path} but accepts no connection within {timeout:g} s (its "
                               "backlog is full, or it hangs): stop it, or choose another socket") from None
    try:
        return peer_credentials(s)[0]
    finally:
        s.close()


def idle_timeout_default() -> float:
    """``$INSITU_DAEMON_IDLE_TIMEOUT`` (seconds; ``inf``: never), else :data:`DEFAULT_IDLE_TIMEOUT`."""
    v = os.environ.get("INSITU_DAEMON_IDLE_TIMEOUT")
    return DEFAULT_IDLE_TIMEOUT if not v else _check_idle_timeout(v, "INSITU_DAEMON_IDLE_TIMEOUT")


def _check_idle_timeout(value: Any, name: str = "idle_timeout") -> float:
    try:
        t = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number of seconds (or inf), got {value!r}") from None
    if not t > 0:
        raise ValueError(f"{name} must be > 0 seconds (inf: never exit when idle), got {value!r}")
    return t


@functools.cache
def _code() -> tuple[str, str]:
    """``(checkout, hash)``: the directory holding the insitu package, and a SHA-256 of the
    sources there (the insitu package; in a source checkout, one with a pyproject.toml,
    the packages beside it too, whose code the daemon imports by name).
    ``$INSITU_DAEMON_CODE_HASH`` stands for the hash where set: the processes of one job
    that start later (Spark's Python workers) then agree with the daemons of its start
    even after the sources were edited meanwhile."""
    pkg = os.path.dirname(os.path.abspath(insitu.__file__))
    root = os.path.dirname(pkg)
    given = os.environ.get("INSITU_DAEMON_CODE_HASH")
    if given:  # the hash of the job's start (SparkEngine sets it for its tasks and their daemons)
        return root, given
    dirs = [pkg]
    if os.path.isfile(os.path.join(root, "pyproject.toml")):
        dirs += sorted(os.path.join(root, d) for d in os.listdir(root) if d != os.path.basename(pkg)
                       and os.path.isfile(os.path.join(root, d, "__init__.py")))
    h = hashlib.sha256()
    for d in dirs:
        for here, subdirs, files in os.walk(d):
            subdirs[:] = sorted(x for x in subdirs if x != "__pycache__" and not x.startswith("."))
            for name in sorted(files):
                if name.endswith((".py", ".cu", ".cuh", ".glsl", ".sh", ".html")):
                    path = os.path.join(here, name)
                    h.update(os.path.relpath(path, root).encode() + b"\0")
                    try:
                        with open(path, "rb") as f:
                            h.update(hashlib.sha256(f.read()).digest())
                    except OSError:
                        h.update(b"unreadable")
    return root, h.hexdigest()[:32]


def fingerprint(device: int | None = None, *, budget_bytes: int | None = None, host_budget_bytes: int | None = None,
                spill_dir: str | None = None, max_message_bytes: int | None = None) -> dict:
    """What a daemon must share with a client for :func:`ensure_daemon` to use it.

    Parameters
    ----------
    device : int, optional
        Only whether it is a GPU or a CPU worker counts (the socket names the GPU).
    budget_bytes, host_budget_bytes, spill_dir, max_message_bytes
        The daemon's options (see :func:`start_daemon`).

    Returns
    -------
    dict
        ``insitu`` (version), ``code`` (hash of the sources, see the module docstring),
        ``checkout``, ``python`` (version and ``sys.prefix``), ``worker`` (``"cpu"`` or
        ``"gpu"``) and the options, `spill_dir` made absolute and `max_message_bytes`
        resolved (:func:`insitu.pool.handoff.max_message_bytes`); ``network``: whether it
        serves its blocks to other nodes over TCP (:func:`insitu.pool.node.network_enabled`).
    """
    root, code = _code()
    return {"insitu": insitu.__version__, "code": code, "checkout": root,
            "python": f"{'.'.join(map(str, sys.version_info[:3]))} {sys.prefix}",
            "worker": "cpu" if device is None else "gpu", "budget_bytes": budget_bytes,
            "host_budget_bytes": host_budget_bytes,
            "spill_dir": os.path.abspath(spill_dir) if spill_dir is not None else None,
            "max_message_bytes": handoff.max_message_bytes() if max_message_bytes is None else int(max_message_bytes),
            "network": node.network_enabled()}


# --------------------------------------------------------------------------- the daemon


class _OwningCache(BlockCache):
    """A block cache that keeps its own copy of memory a client only lent for one package."""

    def put(self, array, *, persist: bool = False):
        return super().put(handoff.own(array), persist=persist)

    def replace(self, handle, array) -> None:
        super().replace(handle, handoff.own(array))


class _DaemonWorker(Worker):
    """The daemon's worker: a :class:`Worker` whose cache owns every block it keeps."""

    def __init__(self, device: int | None = None, *, budget_bytes: int | None = None,
                 host_budget_bytes: int | None = None, spill_dir: str | None = None) -> None:
        super().__init__(device, budget_bytes=budget_bytes, host_budget_bytes=host_budget_bytes, spill_dir=spill_dir)
        self.cache.close()
        self.cache = _OwningCache(budget_bytes, spill_dir=spill_dir, host_budget_bytes=host_budget_bytes)


class _Server:
    def __init__(self, path: str, worker: _DaemonWorker, *, fingerprint: dict | None = None,
                 owners: Iterable[int] = (), idle_timeout: float = math.inf,
                 max_message_bytes: int | None = None) -> None:
        self.path, self.worker = path, worker
        self.fingerprint = dict(fingerprint or {})
        self.idle_timeout = float(idle_timeout)
        self.max_message_bytes = max_message_bytes
        self.started = self.last_activity = time.monotonic()
        self.connections = 0
        self._owners: dict[int, int] = {}  # pid -> its start time: a reused pid is not an owner
        self.adopt(owners)
        self._lock = threading.Lock()
        self._idle = threading.Condition()  # shutdown waits until no package is in flight
        self._in_flight = 0
        self._stop = threading.Event()
        if os.path.lexists(path):
            pid = _listening(path)
            if pid is not None:
                raise DaemonStartError(f"a worker daemon (pid {pid}) already listens on {path}")
            os.unlink(path)  # stale: its daemon died without removing it
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # the socket file: rw for this user only
        try:
            self.sock.bind(path)
        finally:
            os.umask(old)
        self.inode = os.stat(path).st_ino
        self.sock.listen(128)

    def adopt(self, pids: Iterable[int]) -> list[int]:
        """Make the live processes among `pids` owners; returns the live owners."""
        for pid in pids:
            if int(pid) <= 1:
                continue  # init (an orphan's parent) lives for ever: it would keep the daemon for ever too
            t = start_time(pid)
            if t is not None and pid_alive(pid):
                self._owners[int(pid)] = t
        return self.owners()

    def owners(self) -> list[int]:
        """The owners still alive (the dead ones are forgotten)."""
        for pid, t in list(self._owners.items()):
            if start_time(pid) != t or not pid_alive(pid):
                self._owners.pop(pid, None)
        return sorted(self._owners)

    def _watch(self) -> None:
        """Stop the daemon once it has no live owner, no connection, and no request came
        for ``idle_timeout`` seconds."""
        period = min(max(self.idle_timeout / 4, 0.05), 5.0)
        while not self._stop.wait(period):
            with self._lock:
                idle = time.monotonic() - self.last_activity
                if self.connections or idle < self.idle_timeout or self.owners():
                    continue
                _log.info("insitu worker daemon pid %d: no owner process left, no connection, idle for %.1f s "
                          "(idle_timeout %g s): exiting", os.getpid(), idle, self.idle_timeout)
                self.stop()  # under the lock: serve() takes no connection after this
                return

    def serve(self) -> None:
        if math.isfinite(self.idle_timeout):
            threading.Thread(target=self._watch, name="insitu-daemon-idle", daemon=True).start()
        self.sock.settimeout(1.0)  # the shutdown below wakes accept(); this is a backstop
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._stop.is_set():
                    break
                raise
            if peer_credentials(conn)[1] not in (os.getuid(), 0):
                conn.close()  # packages are code: only this user's processes may send them
                continue
            with self._lock:  # counted here, so that the idle watch never stops under a new client
                if self._stop.is_set():
                    conn.close()
                    break
                self.connections += 1
                self.last_activity = time.monotonic()
            conn.settimeout(None)
            threading.Thread(target=self._serve_connection, args=(conn,), daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self, wait: float = 30.0) -> None:
        self.sock.close()
        with self._idle:  # let the packages in flight finish and their replies go out
            self._idle.wait_for(lambda: self._in_flight == 0, timeout=wait)
        try:
            if os.stat(self.path).st_ino == self.inode:  # not a successor's socket
                os.unlink(self.path)
        except FileNotFoundError:
            pass
        self.worker.close()

    def _serve_connection(self, conn: socket.socket) -> None:
        keep: list = []  # device arrays exported in the last reply: alive until the next request
        try:
            with conn:
                while True:
                    try:
                        frames = handoff.recv_frames(conn, max_bytes=self.max_message_bytes)
                    except MessageTooLargeError as e:
                        # Refused before anything was allocated; the rest of the message is
                        # unread, so the connection cannot go on.
                        e.add_note(f"refused by the worker daemon (pid {os.getpid()}) at {self.path}")
                        _log.warning("refused a request: %s", e)
                        try:
                            handoff.send_frames(conn, _error_reply(e))
                        except OSError:
                            pass
                        return
                    except (EOFError, OSError):
                        return
                    keep.clear()
                    with self._idle:
                        self._in_flight += 1
                    try:
                        reply, shutdown = self._handle(frames, keep)
                        handoff.send_frames(conn, reply)
                    except OSError:
                        return
                    finally:
                        with self._idle:
                            self._in_flight -= 1
                            self._idle.notify_all()
                    if shutdown:
                        self.stop()
                        return
        finally:
            with self._lock:
                self.connections -= 1
                self.last_activity = time.monotonic()

    def _handle(self, frames: list, keep: list) -> tuple[list, bool]:
        ex = handoff.DaemonExchange(keep)
        try:
            try:
                request = handoff.loads(frames, ex.load)
            except BaseException as e:  # goes back to the client
                e.add_note("while the worker daemon decoded the package: its functions must be importable in the "
                           f"daemon (its sys.path: {sys.path})")
                raise
            kind = request[0]
            if kind == "run":
                with handoff.current(ex):
                    result = self.worker.run(request[1])
                ex.synchronize(self.worker.device)
                return handoff.dumps(("ok", result), ex.export), False
            if kind == "ping":
                return handoff.dumps(("ok", os.getpid())), False
            if kind == "hello":
                same = request[1] == self.fingerprint
                with self._lock:
                    owners = self.adopt(request[2]) if same else self.owners()
                info = {"pid": os.getpid(), "fingerprint": self.fingerprint, "owners": owners,
                        "connections": self.connections, "idle_timeout": self.idle_timeout}
                return handoff.dumps(("ok", info)), False
            if kind == "stats":
                return handoff.dumps(("ok", self.stats())), False
            if kind == "shutdown":
                return handoff.dumps(("ok", os.getpid())), True
            raise ValueError(f"worker daemon: unknown request {kind!r}; expected run, ping, hello, stats or shutdown")
        except BaseException as e:  # a user function calling sys.exit must not end the connection
            _log.debug("a request failed (the error goes back to the client)", exc_info=e)
            try:
                ex.synchronize(self.worker.device)  # work launched before the error must not outlive the reply
            except Exception:  # the error being reported matters more
                pass
            return _error_reply(e), False
        finally:
            ex.close()

    def stats(self) -> DaemonStats:
        with self._lock:
            owners = tuple(self.owners())
        return DaemonStats(os.getpid(), self.worker.device, self.path, self.worker.round_trips, self.connections,
                           self.worker.cache.stats(), self.worker.kernels.stats(), time.monotonic() - self.started,
                           owners, self.idle_timeout)


def _error_reply(e: BaseException) -> list:
    tb = "".join(traceback.format_exception(e))
    try:
        blob = bytes(handoff.dumps(e)[0])  # by value; no array descriptors in errors
        handoff.loads([blob])
    except Exception:  # rebuilt from type and message on the client instead
        blob = None
    return handoff.dumps(("error", blob, type(e).__module__, type(e).__qualname__, str(e),
                          list(getattr(e, "__notes__", ())), tb))


def main(argv: list[str] | None = None) -> int:
    """``python -m insitu.pool.daemon --socket PATH [--device N] ...``: run a worker daemon."""
    ap = argparse.ArgumentParser(prog="python -m insitu.pool.daemon", description="insitu worker daemon")
    ap.add_argument("--socket", required=True, help="Unix socket path to listen on")
    ap.add_argument("--device", type=int, default=None, help="CUDA device ordinal (default: a CPU worker)")
    ap.add_argument("--budget-bytes", type=int, default=None)
    ap.add_argument("--host-budget-bytes", type=int, default=None)
    ap.add_argument("--spill-dir", default=None)
    ap.add_argument("--max-message-bytes", type=int, default=None, help="most bytes of one request")
    ap.add_argument("--owner", type=int, action="append", default=[],
                    help="pid of a process whose life keeps the daemon (repeatable)")
    ap.add_argument("--idle-timeout", default=None,
                    help="seconds without owners, connections and requests before exiting (inf: never)")
    ap.add_argument("--ready-fd", type=int, default=None, help="write 'READY <pid>' to this descriptor when listening")
    args = ap.parse_args(argv)
    insitu_log.enable("INFO", fmt=_DAEMON_LOG_FORMAT)  # to stderr: start_daemon sends it to the socket's .log
    idle = idle_timeout_default() if args.idle_timeout is None else _check_idle_timeout(args.idle_timeout)
    if args.max_message_bytes is not None and args.max_message_bytes <= 0:
        raise ValueError(f"--max-message-bytes must be > 0, got {args.max_message_bytes}")
    # Handles from a previous daemon on this socket must not name blocks of this one.
    _cache._ids = itertools.count(secrets.randbits(48) << 8)
    for d in _cache.clean_stale_spill_dirs(args.spill_dir):
        _log.info("removed the spill directory %s of a dead process", d)
    worker = _DaemonWorker(args.device, budget_bytes=args.budget_bytes, host_budget_bytes=args.host_budget_bytes,
                           spill_dir=args.spill_dir)
    fp = fingerprint(args.device, budget_bytes=args.budget_bytes, host_budget_bytes=args.host_budget_bytes,
                     spill_dir=args.spill_dir, max_message_bytes=args.max_message_bytes)
    server = _Server(check_socket_path(args.socket), worker, fingerprint=fp, owners=args.owner, idle_timeout=idle,
                     max_message_bytes=fp["max_message_bytes"])
    if fp["network"]:  # other nodes fetch its blocks (insitu.transports.tcp); the cache is thread-safe
        from insitu.transports import tcp

        ep = tcp.start_server(worker.cache, node.node_host(), handle_type=_cache.Handle)
        _log.info("serving blocks to other nodes over tcp at %s", ep.peer)
    signal.signal(signal.SIGTERM, lambda *_: server.stop())
    _log.info("insitu worker daemon pid %d device %s listening on %s; owners %s, idle_timeout %g s", os.getpid(),
              args.device, server.path, server.owners(), idle)
    if args.ready_fd is not None:
        os.write(args.ready_fd, f"READY {os.getpid()}\n".encode())
        os.close(args.ready_fd)
    try:
        server.serve()
    finally:
        server.close()
    _log.info("insitu worker daemon pid %d stopped", os.getpid())
    return 0


# --------------------------------------------------------------------------- starting


@dataclasses.dataclass
class DaemonHandle:
    """A running worker daemon: its pid and socket; :meth:`client`, :meth:`stop`, :meth:`kill`."""

    pid: int
    socket_path: str
    device: int | None = None
    log_path: str | None = None
    options: dict = dataclasses.field(default_factory=dict)
    _proc: subprocess.Popen | None = dataclasses.field(default=None, repr=False)

    def client(self, *, timeout: float = DEFAULT_TIMEOUT) -> DaemonWorker:
        """A new :class:`DaemonWorker` (its own connection) to this daemon."""
        return DaemonWorker(self.socket_path, timeout=timeout, pid=self.pid,
                            max_message_bytes=self.options.get("max_message_bytes"))

    def alive(self) -> bool:
        """Whether the daemon's process still exists."""
        if self._proc is not None:
            return self._proc.poll() is None
        return pid_alive(self.pid)

    def _wait(self, timeout: float) -> bool:
        if self._proc is not None:
            try:
                self._proc.wait(timeout)
                return True
            except subprocess.TimeoutExpired:
                return False
        deadline = time.monotonic() + timeout
        while self.alive():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def stop(self, timeout: float = 10.0) -> None:
        """Ask the daemon to shut down; after `timeout` s, SIGTERM; then SIGKILL."""
        if self.alive():
            try:
                self.client(timeout=min(timeout, 5.0)).shutdown()
            except (InsituError, OSError):
                pass  # hung or dying: the signals below
            for sig, wait in ((None, timeout), (signal.SIGTERM, 2.0), (signal.SIGKILL, 10.0)):
                if sig is not None:
                    try:
                        os.kill(self.pid, sig)
                    except ProcessLookupError:
                        break
                if self._wait(wait):
                    break
        self._wait(0)

    def kill(self) -> None:
        """SIGKILL the daemon (its socket file stays, stale, until the next start)."""
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._wait(10.0)

    def restart(self, *, timeout: float = START_TIMEOUT) -> "DaemonHandle":
        """Stop the daemon (if alive) and start a new one on the same socket with the same
        options; this handle then names the new one. Cached blocks are lost."""
        self.stop()
        new = start_daemon(self.device, self.socket_path, timeout=timeout, **self.options)
        self.pid, self.log_path, self._proc = new.pid, new.log_path, new._proc
        return self

    def __enter__(self) -> "DaemonHandle":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _node_dir(directory: str | None) -> str:
    d = directory or os.environ.get("INSITU_DAEMON_DIR")
    if not d:
        run = os.environ.get("XDG_RUNTIME_DIR")
        d = os.path.join(run, "insitu") if run and os.path.isdir(run) else \
            os.path.join(tempfile.gettempdir(), f"insitu-{os.getuid()}")
    os.makedirs(d, mode=0o700, exist_ok=True)
    st = os.stat(d)
    if st.st_uid != os.getuid():
        raise PermissionError(f"worker daemon directory {d} belongs to uid {st.st_uid}, not to this user "
                              f"({os.getuid()}); set INSITU_DAEMON_DIR")
    return d


def default_socket_path(device: int | None = None, *, directory: str | None = None, by_bus_id: bool = True) -> str:
    """This node's socket of the daemon for `device` (None: the CPU worker).

    In `directory`, else ``$INSITU_DAEMON_DIR``, else ``$XDG_RUNTIME_DIR/insitu``, else
    ``<temp dir>/insitu-<uid>`` (created with mode 0700). A GPU is named by its PCI bus id
    where CuPy can tell, so processes with other ``CUDA_VISIBLE_DEVICES`` still meet on
    the same GPU's daemon; that asks the CUDA runtime. ``by_bus_id=False`` names it by
    the ordinal and touches no CUDA (Spark tasks, whose processes must never initialise
    it, and whose GPU addresses are ordinals of one view).
    """
    name = "cpu"
    if device is not None:
        name = f"gpu{int(device)}"
        try:
            if not by_bus_id:
                raise LookupError("named by ordinal")
            cp = handoff._cupy()
            if cp is not None:
                name = "gpu-" + str(cp.cuda.Device(int(device)).pci_bus_id).replace(":", "_")
        except Exception:  # fall back on the ordinal
            pass
    host = socket.gethostname().split(".")[0][:24]
    return check_socket_path(os.path.join(_node_dir(directory), f"worker-{host}-{name}.sock"))


def _pythonpath() -> str:
    """This process's sys.path for the daemon, less the interpreter's own directories (the
    daemon's interpreter has its own; another version's standard library would break it)."""
    own = tuple({os.path.abspath(p) + os.sep for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)})
    here = [os.getcwd() if p == "" else os.path.abspath(p) for p in sys.path]
    here = [p for p in here if os.path.exists(p) and not (p + os.sep).startswith(own)]
    extra = os.environ.get("PYTHONPATH", "")
    return os.pathsep.join(dict.fromkeys(here + ([extra] if extra else [])))


def start_daemon(device: int | None = None, socket_path: str | None = None, *, budget_bytes: int | None = None,
                 host_budget_bytes: int | None = None, spill_dir: str | None = None,
                 idle_timeout: float | None = None, owners: Iterable[int] = (), max_message_bytes: int | None = None,
                 timeout: float = START_TIMEOUT, python: str | None = None) -> DaemonHandle:
    """Start a worker daemon and wait until it listens.

    Parameters
    ----------
    device : int, optional
        CUDA device of the worker; None: a CPU worker.
    socket_path : str, optional
        Default :func:`default_socket_path` (`device`). A stale socket file (its daemon
        died) is replaced; a live daemon there is an error.
    budget_bytes, host_budget_bytes, spill_dir
        The daemon's block cache (see :class:`insitu.pool.cache.BlockCache`).
    idle_timeout : float, optional
        Seconds the daemon waits, once no owner lives and no connection is open, for a
        request before it exits (see the module docstring); default
        ``$INSITU_DAEMON_IDLE_TIMEOUT`` or :data:`DEFAULT_IDLE_TIMEOUT`; ``math.inf``:
        never.
    owners : iterable of int
        Pids of processes of this node that keep the daemon, besides this process.
    max_message_bytes : int, optional
        Most bytes of one request the daemon reads (default
        :func:`insitu.pool.handoff.max_message_bytes`).
    timeout : float
        Seconds to wait for it to listen.
    python : str, optional
        Interpreter; default this one (``sys.executable``).

    Returns
    -------
    DaemonHandle
        Its output is appended to ``<socket_path>.log``.

    Raises
    ------
    DaemonStartError
        It exited or did not listen in time; the message holds its output.
    """
    path = default_socket_path(device) if socket_path is None else check_socket_path(socket_path)
    spill_dir = os.path.abspath(spill_dir) if spill_dir is not None else None
    idle = idle_timeout_default() if idle_timeout is None else _check_idle_timeout(idle_timeout)
    owners = tuple(dict.fromkeys(int(p) for p in owners))
    options = {"budget_bytes": budget_bytes, "host_budget_bytes": host_budget_bytes, "spill_dir": spill_dir,
               "idle_timeout": idle_timeout, "owners": owners, "max_message_bytes": max_message_bytes}
    cmd = [python or sys.executable, "-m", "insitu.pool.daemon", "--socket", path, "--idle-timeout", repr(idle)]
    for flag, v in (("--device", device), ("--budget-bytes", budget_bytes),
                    ("--host-budget-bytes", host_budget_bytes), ("--spill-dir", spill_dir),
                    ("--max-message-bytes", max_message_bytes)):
        if v is not None:
            cmd += [flag, str(v)]
    for pid in dict.fromkeys((os.getpid(), *owners)):
        cmd += ["--owner", str(pid)]
    live = _listening(path) if os.path.lexists(path) else None
    if live is not None:  # checked here too, so that its log is left alone
        raise DaemonStartError(f"a worker daemon (pid {live}) already listens on {path}")
    log_path = path + ".log"
    r, w = os.pipe()
    cmd += ["--ready-fd", str(w)]
    env = dict(os.environ, PYTHONPATH=_pythonpath(), PYTHONUNBUFFERED="1")
    try:
        # Appended: the log of a daemon that died stays there when the next one starts.
        with open(log_path, "ab") as log:
            log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(cmd)}\n".encode())
            log.flush()
            start = log.tell()
            # A session of its own: the daemon outlives its starter (Spark's Python workers
            # come and go) and no terminal's signals reach it. cwd "/": it pins no directory.
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                    pass_fds=(w,), start_new_session=True, cwd="/")
    except OSError as e:
        os.close(r)
        raise DaemonStartError(f"cannot start a worker daemon with {cmd[0]!r}: {e}") from e
    finally:
        os.close(w)
    try:
        line = _read_ready(r, timeout)
    finally:
        os.close(r)
    if not line.startswith(b"READY "):
        if proc.poll() is None:
            proc.kill()
        code = proc.wait()
        with open(log_path, "rb") as f:
            f.seek(start)
            out = f.read().decode(errors="replace").strip()
        why = f"exited with status {code}" if line != b"TIMEOUT" else f"did not listen within {timeout:g} s"
        raise DaemonStartError(f"worker daemon for {path} {why}; command {' '.join(cmd)}; its output:\n{out}")
    return DaemonHandle(proc.pid, path, device, log_path, options, proc)


def _read_ready(fd: int, timeout: float) -> bytes:
    deadline = time.monotonic() + timeout
    buf = b""
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return b"TIMEOUT"
        chunk = os.read(fd, 256)
        if not chunk:
            break  # the daemon closed its end: it exited
        buf += chunk
    return buf


def ensure_daemon(device: int | None = None, *, directory: str | None = None, timeout: float = START_TIMEOUT,
                  by_bus_id: bool = True, **options: Any) -> DaemonHandle:
    """The node's daemon for `device`: connect to it, or start it if none runs, or replace
    it if it runs other code or has other options.

    Safe when many processes call it at once: a file lock next to the socket lets one
    start the daemon while the others wait for it. The calling process (and ``owners``)
    become owners of the daemon found (see the module docstring).

    Parameters
    ----------
    device : int, optional
        CUDA device; None: the CPU worker.
    directory : str, optional
        Where the socket lives (see :func:`default_socket_path`).
    timeout : float
        Seconds to wait for the lock and for a new daemon.
    by_bus_id : bool
        Name a GPU's socket by its PCI bus id (see :func:`default_socket_path`).
    **options
        Those of :func:`start_daemon`: ``budget_bytes``, ``host_budget_bytes``,
        ``spill_dir``, ``max_message_bytes`` (part of the :func:`fingerprint`: a
        running daemon with other values, or other code, is stopped and replaced, with
        a ``RuntimeWarning``, if no client is connected to it), ``idle_timeout`` (for a
        daemon started here) and ``owners``.

    Raises
    ------
    WorkerTimeoutError
        A daemon holds the socket but does not answer.
    DaemonOwnerError
        The process on the socket belongs to another user (it is neither used nor stopped).
    DaemonStartError
        Starting one failed; or the daemon to replace has clients connected (it serves
        another job), or did not stop.
    """
    unknown = sorted(set(options) - {*_FINGERPRINT_OPTIONS, "idle_timeout", "owners"})
    if unknown:
        raise TypeError(f"ensure_daemon: unknown options {unknown}; expected {sorted(_FINGERPRINT_OPTIONS)}, "
                        "idle_timeout or owners")
    path = default_socket_path(device, directory=directory, by_bus_id=by_bus_id)
    want = fingerprint(device, **{k: options.get(k) for k in _FINGERPRINT_OPTIONS})
    owners = (os.getpid(), *(int(p) for p in options.get("owners", ())))
    h, differs = _probe(path, device, want, owners, options)
    if h is not None:
        return h
    deadline = time.monotonic() + timeout
    with open(path + ".lock", "a") as lock:
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise DaemonStartError(f"waited {timeout:g} s for another process starting the daemon at "
                                           f"{path} (lock {path}.lock)") from None
                time.sleep(0.02)
        try:
            h, differs = _probe(path, device, want, owners, options)
            grace = time.monotonic() + 2.0
            while h is None and differs is not None and differs["connections"] > 0 and time.monotonic() < grace:
                # A connection closed just now (the probe's before this one, a starter's
                # readiness check) is still counted until the daemon's thread sees it end.
                time.sleep(0.05)
                h, differs = _probe(path, device, want, owners, options)
            if h is None:
                if differs is not None:
                    _replace(path, device, differs, timeout=max(deadline - time.monotonic(), 10.0))
                h = start_daemon(device, path, timeout=max(deadline - time.monotonic(), 1.0), **options)
            return h
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _probe(path: str, device: int | None, want: dict, owners: tuple,
           options: dict) -> tuple[DaemonHandle | None, dict | None]:
    """``(handle, None)`` on the daemon answering at `path` if its fingerprint is `want`
    (`owners` then own it too); ``(None, {pid, diff, connections, owners})`` if it
    differs; ``(None, None)`` if none listens there."""
    if not os.path.lexists(path):
        return None, None
    w = DaemonWorker(path, timeout=10.0)
    try:
        info = w.hello(want, owners)
    except WorkerDiedError:
        return None, None
    except (WorkerTimeoutError, DaemonOwnerError):
        raise
    except Exception as e:  # a daemon that does not know the handshake: older code
        return None, {"pid": w.pid, "diff": f"it does not know the handshake ({type(e).__name__}: {e}): older code",
                      "connections": 0, "owners": []}
    finally:
        w.close()
    have = info.get("fingerprint") or {}
    if have == want:
        return DaemonHandle(info["pid"], path, device, path + ".log", dict(options)), None
    diff = "; ".join(f"{k}: {have.get(k)!r} there, {want.get(k)!r} here" for k in sorted({*have, *want})
                     if have.get(k) != want.get(k))
    # Less the handshake's own connection.
    return None, {"pid": info["pid"], "diff": diff, "connections": info.get("connections", 1) - 1,
                  "owners": info.get("owners", [])}


def _replace(path: str, device: int | None, differs: dict, *, timeout: float) -> None:
    """Stop the daemon at `path` (this user's: the handshake checked) that differs from
    what is wanted, unless clients are connected to it."""
    pid, diff = differs["pid"], differs["diff"]
    if differs["connections"] > 0:
        # Stopping it would break a running job, whose next ensure_daemon would stop ours.
        raise DaemonStartError(
            f"the worker daemon (pid {pid}) at {path} was started from other code or with other options ({diff}) "
            f"and is in use ({differs['connections']} connections; owners {differs['owners']}): stop that job or "
            "its daemon, or give this one another directory (directory=, INSITU_DAEMON_DIR)")
    warnings.warn(f"ensure_daemon: the worker daemon (pid {pid}) at {path} was started from other code or with "
                  f"other options ({diff}); stopping it and starting a new one (its cached blocks are lost)",
                  RuntimeWarning, stacklevel=3)
    if pid is None:
        return
    h = DaemonHandle(pid, path, device)
    h.stop(timeout=min(timeout, 30.0))
    if h.alive():
        raise DaemonStartError(f"the worker daemon (pid {pid}) at {path}, to be replaced ({diff}), did not stop")


if __name__ == "__main__":
    # Run the imported module's main, not this __main__ copy: what the daemon pickles
    # (DaemonStats...) must name insitu.pool.daemon, which clients can import.
    from insitu.pool.daemon import main as _main

    sys.exit(_main())
