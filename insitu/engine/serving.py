"""A long-lived Spark job that serves many steps: :class:`StepServer`.

A Spark job has to be scheduled, and its tasks' Python workers,
daemon connections and the closures they unpickle are set up again for each. A
simulation that draws a frame every step would pay that every step. The server runs one
barrier stage instead, one task per partition, that lives until it is closed: each task
listens on a Unix socket in the engine's daemon directory, and the driver sends it one
request per step (the block records of the step and the operations to run on them); the
task runs them as one command package on the daemon holding the blocks, exactly as an
action's task would (:func:`insitu.engine._spark_tasks._action_task`), and answers with
the results. Spark still places the tasks and restarts them: a task that dies (its
executor killed) fails the barrier stage, Spark runs the stage again, and the driver
sends the step's request once more to the new task (a request has no side effects: it
reads cached blocks and returns values).

Without ``network=True`` the tasks must run on the driver's node (``local[N]``,
``local-cluster``): they listen on sockets that are files of the node's daemon directory.
With it (tasks on several hosts) each task connects to the driver instead, over TCP, and
says which task it is with the server's secret; the driver sends its requests on that
connection, and a task whose blocks live on another host fetches them from that host's
daemon (:mod:`insitu.transports.tcp`).
"""

from __future__ import annotations

import contextlib
import functools
import hmac
import logging
import os
import secrets
import socket
import struct
import threading
import time
import uuid
from typing import Any, Sequence

from insitu.errors import InsituError, PeerTimeoutError
from insitu.pool import handoff
from insitu.transports.tcp import recv_bytes
from insitu.pool.client import peer_credentials

from ._spark_tasks import BlockRecord, _action_task, _Ctx

__all__ = ["ServerError", "StepServer"]

log = logging.getLogger(__name__)

_STOP = "stop"
#: A task's first bytes on its connection to the driver (network mode): the server's
#: secret, the job's token, the task's index; then its node id (a length byte, UTF-8).
_HELLO = struct.Struct("!16s10sI")


class ServerError(InsituError):
    """The serving job failed, or one of its steps did (the task's error is the cause)."""


# --------------------------------------------------------------------------- in the tasks


def _serve_task(index: int, it, *, ctx: _Ctx, directory: str, token: str, driver: tuple | None = None) -> list:
    """One partition of the serving job: answer the driver's requests until told to stop
    (`driver`: ``(host, port, secret)`` to connect to, in network mode)."""
    list(it)
    if driver is not None:
        return _serve_driver(index, ctx, token, driver)
    path = os.path.join(directory, f"{token}-{index}.sock")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # an earlier attempt of this stage left it
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        srv.bind(path + ".tmp")
        os.chmod(path + ".tmp", 0o600)
        srv.listen(4)
        os.replace(path + ".tmp", path)  # the driver connects only to a socket that listens
        # Checked once a second: the driver's stop file ends a task the driver could not reach,
        # and a task whose Python worker lost its parent (the executor died) ends too.
        srv.settimeout(1.0)
        stop_file, parent = os.path.join(directory, f"{token}.stop"), os.getppid()
        while not os.path.exists(stop_file) and os.getppid() == parent:
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            if peer_credentials(conn)[1] not in (os.getuid(), 0):
                conn.close()  # requests are code: only this user's processes may send them (as to daemons)
                continue
            with conn:
                conn.settimeout(None)
                if not _serve_connection(conn, index, ctx):
                    break
    finally:
        srv.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    return []


def _serve_driver(index: int, ctx: _Ctx, token: str, driver: tuple) -> list:
    """Network mode: connect to the driver, answer on that connection; connect again when
    the driver drops it, end when told to stop or when the driver no longer listens."""
    host, port, secret = driver
    parent = os.getppid()
    while os.getppid() == parent:
        try:
            conn = socket.create_connection((host, port), timeout=ctx.timeout)
        except OSError:  # the server closed (or the driver is gone): nothing to serve
            break
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            node = ctx.node.encode()[:255]
            conn.sendall(_HELLO.pack(bytes.fromhex(secret), token.encode(), index) + bytes([len(node)]) + node)
            conn.settimeout(None)
            if not _serve_connection(conn, index, ctx):
                break
        time.sleep(0.01)  # dropped (or refused: a restarted job's token): not a busy loop
    return []


def _serve_connection(conn: socket.socket, index: int, ctx: _Ctx) -> bool:
    """Answer requests on `conn` until the driver closes it (True) or says stop (False)."""
    while True:
        try:
            request = handoff.loads(handoff.recv_frames(conn))
        except (ConnectionError, EOFError, OSError):
            return True
        if request == _STOP:
            return False
        groups, steps = request
        t0 = time.perf_counter()
        try:
            out = [r for srcs in groups for r in _action_task(index, iter(srcs), ctx=ctx, steps=steps, final="recv",
                                                              drop_sources=False)]
            reply = ("ok", out, time.perf_counter() - t0)
        except Exception as e:  # the driver raises it; the task goes on serving
            reply = ("error", _portable(e), time.perf_counter() - t0)
        handoff.send_frames(conn, handoff.dumps(reply))


def _portable(e: BaseException) -> BaseException:
    """`e` if it pickles (and loads on the driver), else a :class:`ServerError` with its text."""
    try:
        handoff.loads(handoff.dumps(e))
        return e
    except Exception:  # an exception type the driver may not have
        return ServerError(f"{type(e).__module__}.{type(e).__qualname__}: {e}")


# --------------------------------------------------------------------------- on the driver


class StepServer:
    """One long-lived Spark job whose tasks run each step's operations on cached blocks.

    ``server.run(records, kernel, None, *args, with_key=True)`` returns what
    ``engine.adopt(records).exec_gpu(kernel, None, *args, with_key=True).recv_gpu()``
    returns, without a Spark job per call.

    Parameters
    ----------
    engine : insitu.engine.spark.SparkEngine
        Its SparkContext runs the job; its daemon directory holds the tasks' sockets.
    npartitions : int, optional
        Tasks of the job (default and at most: Spark's default parallelism; a barrier
        stage runs all its tasks at once).
    timeout : float, optional
        Seconds to wait for a task's socket and for each step's answers (default: the
        engine's timeout).
    """

    def __init__(self, engine, npartitions: int | None = None, *, timeout: float | None = None) -> None:
        slots = engine.sc.defaultParallelism
        n = slots if npartitions is None else npartitions
        if not isinstance(n, int) or not 1 <= n <= slots:
            raise ValueError(f"StepServer: npartitions must be an int in [1, {slots}] (Spark's task slots: a barrier "
                             f"stage runs all its tasks at once), got {npartitions!r}")
        self.engine, self.npartitions = engine, n
        self.timeout = float(engine._ctx.timeout if timeout is None else timeout)
        self.directory = os.path.join(engine.daemon_dir, "serve")
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        self._listener: socket.socket | None = None
        self._arrived = threading.Condition()
        self._nodes: dict[int, str] = {}  # network mode: the node each task said it runs on
        if engine._ctx.network:  # tasks on other hosts connect back to the driver
            self._secret = secrets.token_bytes(16)
            self._listener = socket.create_server(("0.0.0.0", 0), backlog=64)
            host = engine.sc.getConf().get("spark.driver.host", None) or "127.0.0.1"
            self._address = (host, self._listener.getsockname()[1])
            threading.Thread(target=self._accept, name="insitu-serve-accept", daemon=True).start()
        self.restarts = 0
        #: Seconds the slowest task of the last step spent running it on its daemons
        #: (the rest of a step's time is the requests' and answers' way).
        self.task_seconds = 0.0
        self._conns: dict[int, socket.socket] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._start()

    def __repr__(self) -> str:
        return f"<StepServer {self.npartitions} tasks, job {self._token}, restarts {self.restarts}>"

    def _start(self) -> None:
        self._token = uuid.uuid4().hex[:10]
        self._error: BaseException | None = None
        sc = self.engine.sc
        driver = None if self._listener is None else (*self._address, self._secret.hex())
        rdd = sc.parallelize(range(self.npartitions), self.npartitions).barrier().mapPartitionsWithIndex(
            functools.partial(_serve_task, ctx=self.engine._ctx, directory=self.directory, token=self._token,
                              driver=driver))
        token = self._token

        def job() -> None:
            sc.setJobGroup(f"insitu-serve-{token}", "insitu: StepServer", interruptOnCancel=True)
            try:
                rdd.collect()
            except BaseException as e:  # read by the driver's next wait
                self._error = e

        self._thread = threading.Thread(target=job, name=f"insitu-serve-{token}", daemon=True)
        self._thread.start()

    def _socket(self, index: int) -> str:
        return os.path.join(self.directory, f"{self._token}-{index}.sock")

    def _accept(self) -> None:
        """Network mode: take the tasks' connections (those with the secret and the job's
        token), each under its task's index."""
        while True:
            try:
                conn, _ = self._listener.accept()  # type: ignore[union-attr]
            except OSError:  # closed
                return
            threading.Thread(target=self._hello, args=(conn,), name="insitu-serve-hello", daemon=True).start()

    def _hello(self, conn: socket.socket) -> None:
        """A task's connection: kept under its index if it has the secret and the job's token."""
        try:
            conn.settimeout(self.timeout)
            secret, token, index = _HELLO.unpack(recv_bytes(conn, _HELLO.size))
            if (not hmac.compare_digest(secret, self._secret) or token.decode() != self._token
                    or index >= self.npartitions):
                conn.close()  # requests are code: only the job's own tasks get them
                return
            node = recv_bytes(conn, recv_bytes(conn, 1)[0]).decode()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.settimeout(self.timeout)
        except (OSError, UnicodeDecodeError):
            conn.close()
            return
        with self._arrived:
            old = self._conns.pop(index, None)
            self._conns[index] = conn
            self._nodes[index] = node
            self._arrived.notify_all()
        if old is not None:
            old.close()

    def _connect(self, index: int, deadline: float) -> socket.socket:
        """A connection to task `index`, waiting for it to listen (its job may be starting)."""
        if self._listener is not None:
            with self._arrived:
                while index not in self._conns:
                    if not self._thread.is_alive():
                        raise ServerError(f"StepServer: the serving job ended ({_describe(self._error)})") \
                            from self._error
                    if time.monotonic() > deadline:
                        raise PeerTimeoutError(f"StepServer: task {index} of the serving job did not connect "
                                               f"within {self.timeout:g} s (are {self.npartitions} task slots "
                                               "free?)")
                    self._arrived.wait(0.05)
                return self._conns[index]
        conn = self._conns.get(index)
        if conn is not None:
            return conn
        path = self._socket(index)
        while True:
            if os.path.exists(path):
                try:
                    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    s.settimeout(self.timeout)
                    s.connect(path)
                    self._conns[index] = s
                    return s
                except (FileNotFoundError, ConnectionRefusedError):  # a task of a failed attempt: wait for the next
                    s.close()
            if not self._thread.is_alive():
                raise ServerError(f"StepServer: the serving job ended ({_describe(self._error)})") from self._error
            if time.monotonic() > deadline:
                raise PeerTimeoutError(f"StepServer: task {index} of the serving job did not listen within "
                                       f"{self.timeout:g} s (are {self.npartitions} task slots free?)")
            time.sleep(0.001)

    def _drop(self, index: int) -> None:
        with self._arrived:
            conn = self._conns.pop(index, None)
        if conn is not None:
            conn.close()

    def run(self, records: Sequence[BlockRecord], kernel: Any, function_name: str | None = None, *args: Any,
            **launch: Any) -> dict:
        """``kernel(block, [key,] *args, **launch)`` on each record's block, on the daemon
        holding it; returns ``{key: result}`` (host arrays).

        Raises
        ------
        ServerError
            The serving job failed twice in this call (the error names Spark's or the
            task's reason), or the server is closed.
        Exception
            What `kernel` raised, as the task saw it.
        """
        if self._closed:
            raise ServerError("StepServer: closed")
        steps = (("exec", (kernel, function_name, tuple(args)), dict(launch)),)
        with self._lock:
            for attempt in (0, 1):
                try:
                    return self._step(self._groups(records), steps)
                except (ConnectionError, EOFError, OSError, ServerError) as e:
                    if attempt or self._closed:
                        raise ServerError(f"StepServer: a step failed after a restart of the serving job: "
                                          f"{_describe(e)}") from e
                    log.warning("StepServer: the serving job lost a task (%s); restarting it", _describe(e))
                    self._restart()
        raise AssertionError("unreachable")  # pragma: no cover

    def _groups(self, records: Sequence[BlockRecord]) -> dict[int, list]:
        """Each daemon's blocks to one task: ``{task index: [[source, ...] per daemon]}``. In
        network mode a daemon's blocks go to a task on its node where one runs (the tasks
        say their node when they connect), else to any (which fetches them over TCP)."""
        daemons = sorted({(r.node or "", r.socket) for r in records})
        on_node: dict[str, list[int]] = {}
        if self._listener is not None:
            deadline = time.monotonic() + self.timeout
            for i in range(self.npartitions):
                self._connect(i, deadline)
            for i in range(self.npartitions):
                on_node.setdefault(self._nodes.get(i, ""), []).append(i)
        groups: dict[int, list] = {}
        taken: dict[str, int] = {}
        for n, (node, sock) in enumerate(daemons):
            near = on_node.get(node)
            if near:
                index = near[taken.get(node, 0) % len(near)]
                taken[node] = taken.get(node, 0) + 1
            else:
                index = n % self.npartitions
            groups.setdefault(index, []).append(
                [(r.key, "handle", r) for r in records if r.socket == sock and (r.node or "") == node])
        return groups

    def _step(self, groups: dict, steps: tuple) -> dict:
        deadline = time.monotonic() + self.timeout
        for index, g in groups.items():
            frames = handoff.dumps((g, steps))
            try:
                handoff.send_frames(self._connect(index, deadline), frames)
            except OSError:
                self._drop(index)
                raise
        out, error, self.task_seconds = {}, None, 0.0
        for index in groups:
            try:
                status, value, seconds = handoff.loads(handoff.recv_frames(self._conns[index]))
            except (OSError, EOFError):
                self._drop(index)
                raise
            self.task_seconds = max(self.task_seconds, seconds)
            if status == "ok":
                out.update(value)
            elif error is None:
                error = value
        if error is not None:
            raise error
        return out

    def _restart(self) -> None:
        for index in list(self._conns):
            self._drop(index)
        if self._thread.is_alive():  # a task died but Spark keeps the stage: start anew
            self._cancel()
        self.restarts += 1
        self._start()

    def _cancel(self) -> None:
        with contextlib.suppress(OSError):
            open(os.path.join(self.directory, f"{self._token}.stop"), "w").close()
        with contextlib.suppress(Exception):
            self.engine.sc.cancelJobGroup(f"insitu-serve-{self._token}")
        self._thread.join(self.timeout)

    def close(self) -> None:
        """Stop the serving job's tasks and wait for the job to end."""
        if self._closed:
            return
        self._closed = True
        for index, conn in list(self._conns.items()):
            with contextlib.suppress(OSError):
                handoff.send_frames(conn, handoff.dumps(_STOP))
            self._drop(index)
        with contextlib.suppress(OSError):
            open(os.path.join(self.directory, f"{self._token}.stop"), "w").close()
        if self._listener is not None:  # a task that would connect again finds no server: it ends
            self._listener.close()
        self._thread.join(self.timeout)
        if self._thread.is_alive():
            with contextlib.suppress(Exception):
                self.engine.sc.cancelJobGroup(f"insitu-serve-{self._token}")
            self._thread.join(self.timeout)

    def __enter__(self) -> "StepServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _describe(e: BaseException | None) -> str:
    if e is None:
        return "no error"
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ("Error:" in ln or "Exception:" in ln) and not ln.startswith(("at ", "org.apache", "py4j")):
            return ln
    return f"{type(e).__name__}: {lines[0] if lines else ''}"
