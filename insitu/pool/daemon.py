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

Trust: a daemon runs whatever code its packages carry, so it only accepts connections
from processes of its own user (checked with ``SO_PEERCRED``); its default socket lives
in a per-user directory of mode 0700.
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import itertools
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
from typing import Any

from insitu.errors import InsituError

from . import cache as _cache
from . import handoff
from .cache import BlockCache
from .client import (DEFAULT_TIMEOUT, DaemonStats, DaemonWorker, PackageEncodingError, WorkerDiedError,
                     WorkerTimeoutError, check_socket_path, peer_credentials)
from .worker import Worker

__all__ = ["DEFAULT_TIMEOUT", "DaemonHandle", "DaemonStartError", "DaemonStats", "DaemonWorker",
           "PackageEncodingError", "WorkerDiedError", "WorkerTimeoutError", "default_socket_path",
           "ensure_daemon", "main", "start_daemon"]

#: Seconds :func:`start_daemon` waits for a new daemon to listen.
START_TIMEOUT = 60.0


class DaemonStartError(InsituError):
    """A worker daemon could not be started; the message holds its output."""


def _listening(path: str, timeout: float = 2.0) -> int | None:
    """The pid of the process listening on `path`, or None if nothing listens (stale file)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(path)
        return peer_credentials(s)[0]
    except (FileNotFoundError, ConnectionRefusedError):
        return None
    finally:
        s.close()


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
    def __init__(self, path: str, worker: _DaemonWorker) -> None:
        self.path, self.worker = path, worker
        self.started = time.monotonic()
        self.connections = 0
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

    def serve(self) -> None:
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
        with self._lock:
            self.connections += 1
        try:
            with conn:
                while True:
                    try:
                        frames = handoff.recv_frames(conn)
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

    def _handle(self, frames: list, keep: list) -> tuple[list, bool]:
        ex = handoff.DaemonExchange(keep)
        try:
            try:
                request = handoff.loads(frames, ex.load)
            except BaseException as e:  # noqa: BLE001 - goes back to the client
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
            if kind == "stats":
                return handoff.dumps(("ok", self.stats())), False
            if kind == "shutdown":
                return handoff.dumps(("ok", os.getpid())), True
            raise ValueError(f"worker daemon: unknown request {kind!r}; expected run, ping, stats or shutdown")
        except BaseException as e:  # noqa: BLE001 - a user function calling sys.exit must not end the connection
            try:
                ex.synchronize(self.worker.device)  # work launched before the error must not outlive the reply
            except Exception:  # noqa: BLE001, S110 - the error being reported matters more
                pass
            return _error_reply(e), False
        finally:
            ex.close()

    def stats(self) -> DaemonStats:
        return DaemonStats(os.getpid(), self.worker.device, self.path, self.worker.round_trips, self.connections,
                           self.worker.cache.stats(), self.worker.kernels.stats(), time.monotonic() - self.started)


def _error_reply(e: BaseException) -> list:
    tb = "".join(traceback.format_exception(e))
    try:
        blob = bytes(handoff.dumps(e)[0])  # by value; no array descriptors in errors
        handoff.loads([blob])
    except Exception:  # noqa: BLE001 - rebuilt from type and message on the client instead
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
    ap.add_argument("--ready-fd", type=int, default=None, help="write 'READY <pid>' to this descriptor when listening")
    args = ap.parse_args(argv)
    # Handles from a previous daemon on this socket must not name blocks of this one.
    _cache._ids = itertools.count(secrets.randbits(48) << 8)  # noqa: SLF001
    worker = _DaemonWorker(args.device, budget_bytes=args.budget_bytes, host_budget_bytes=args.host_budget_bytes,
                           spill_dir=args.spill_dir)
    server = _Server(check_socket_path(args.socket), worker)
    signal.signal(signal.SIGTERM, lambda *_: server.stop())
    print(f"insitu worker daemon pid {os.getpid()} device {args.device} listening on {server.path}", flush=True)
    if args.ready_fd is not None:
        os.write(args.ready_fd, f"READY {os.getpid()}\n".encode())
        os.close(args.ready_fd)
    try:
        server.serve()
    finally:
        server.close()
    print(f"insitu worker daemon pid {os.getpid()} stopped", flush=True)
    return 0


# --------------------------------------------------------------------------- starting


def pid_alive(pid: int) -> bool:
    """Whether process `pid` runs on this node: whether any of its threads does. A zombie
    no one reaped yet has exited and closed its sockets: not alive. The main thread alone
    is not enough: killed, it can turn zombie while other threads still hold the
    process's files (a client then reaches a socket that dies under it)."""
    try:
        tasks = os.listdir(f"/proc/{int(pid)}/task")
    except (FileNotFoundError, ProcessLookupError):
        return False
    for tid in tasks:
        try:
            with open(f"/proc/{int(pid)}/task/{tid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue  # gone meanwhile
        if state not in (b"Z", b"X"):
            return True
    return False


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
        return DaemonWorker(self.socket_path, timeout=timeout, pid=self.pid)

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
            cp = handoff._cupy()  # noqa: SLF001
            if cp is not None:
                name = "gpu-" + str(cp.cuda.Device(int(device)).pci_bus_id).replace(":", "_")
        except Exception:  # noqa: BLE001 - fall back on the ordinal
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
    options = {"budget_bytes": budget_bytes, "host_budget_bytes": host_budget_bytes, "spill_dir": spill_dir}
    cmd = [python or sys.executable, "-m", "insitu.pool.daemon", "--socket", path]
    for flag, v in (("--device", device), ("--budget-bytes", budget_bytes),
                    ("--host-budget-bytes", host_budget_bytes), ("--spill-dir", spill_dir)):
        if v is not None:
            cmd += [flag, str(v)]
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
    """The node's daemon for `device`: connect to it, or start it if none runs.

    Safe when many processes call it at once: a file lock next to the socket lets one
    start the daemon while the others wait for it.

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
        ``budget_bytes``, ``host_budget_bytes``, ``spill_dir`` for a daemon started here
        (a running daemon keeps its own).

    Raises
    ------
    WorkerTimeoutError
        A daemon holds the socket but does not answer.
    DaemonStartError
        Starting one failed.
    """
    path = default_socket_path(device, directory=directory, by_bus_id=by_bus_id)
    h = _probe(path, device)
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
            h = _probe(path, device)
            if h is None:
                h = start_daemon(device, path, timeout=max(deadline - time.monotonic(), 1.0), **options)
            return h
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _probe(path: str, device: int | None) -> DaemonHandle | None:
    """A handle on the daemon answering at `path`; None if none listens there."""
    if not os.path.lexists(path):
        return None
    try:
        pid = DaemonWorker(path, timeout=10.0).ping()
    except WorkerDiedError:
        return None
    return DaemonHandle(pid, path, device, path + ".log")


if __name__ == "__main__":
    # Run the imported module's main, not this __main__ copy: what the daemon pickles
    # (DaemonStats...) must name insitu.pool.daemon, which clients can import.
    from insitu.pool.daemon import main as _main

    sys.exit(_main())
