"""TCP between worker daemons of different nodes (host blocks), and the driver's record exchange.

Two services, both framed binary protocols (nothing from the network is unpickled by a
server):

* :class:`BlockServer`, one per worker daemon that serves the network
  (``$INSITU_DAEMON_TCP``): other nodes *get* a cached block by its handle, *take* it
  (dropped as it is sent: a halo slab, a hand-off copy; a send that fails loses it, and
  the engine reruns the stage from its sources) or *drop* it. A request
  carries the daemon's secret token (it travels only inside the records Spark carries)
  and the handle's id; the reply is a small header (status, dtype, shape, byte count)
  and the array's bytes, received with ``recv_into`` straight into the destination
  NumPy buffer (no intermediate copy on either side for contiguous arrays).
* :class:`RecordExchange`, run by the driver: the tasks of one barrier stage swap
  their small records round by round, each record going only to the partition it is
  addressed to (:func:`alltoall`); payloads are opaque bytes to it.

Backpressure: one connection per (thread, peer) carries one request at a time, or up to
``window`` pipelined requests (:func:`fetch_many`); the server sends with blocking
``sendall``, so a slow receiver stalls its sender through TCP's window, never a queue.
Failures: every socket operation has a timeout; a refused or reset connection gives
:class:`PeerUnreachableError`, a silent one :class:`~insitu.errors.PeerTimeoutError`,
each naming the peer ``host:port`` and the block. Nothing hangs.

Counters (:func:`stats`): bytes this process received and sent as payload, per
direction; a test compares them with what the veth interfaces between namespaces
counted.

Only host (NumPy) arrays travel here; device blocks across hosts are NCCL's (not built).
"""

from __future__ import annotations

import hmac
import secrets
import socket
import struct
import threading
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

import numpy as np

from .. import arrays
from ..errors import InsituError, PeerTimeoutError

__all__ = ["ALL", "BlockServer", "Endpoint", "PeerUnreachableError", "RecordExchange", "allgather", "alltoall", "drop",
           "endpoint", "fetch", "fetch_many", "recv_bytes", "reset_stats", "start_server", "stats"]

_MAGIC, _XMAGIC = b"INB1", b"INX1"
_OP_GET, _OP_TAKE, _OP_DROP = 1, 2, 3
_OPS = {_OP_GET: "get", _OP_TAKE: "take", _OP_DROP: "drop"}
_MAX_DIMS = 8
_REQ = struct.Struct("!4sB16sQ")  # magic, op, token, handle id
_REP = struct.Struct(f"!4sB16sB{_MAX_DIMS}QQ")  # magic, status, dtype, ndim, shape, payload bytes
_XREQ = struct.Struct("!4s16sQIIIdI")  # magic, token, job, round, index, nparts, timeout s, parts
_PART = struct.Struct("!IQ")  # target (or sender) partition, payload bytes
_XREP = struct.Struct("!4sBQ")  # magic, status, count (or error bytes)
_MAX_POST = 1 << 30  # bytes one partition may post per round
#: The target of a :func:`alltoall` part addressed to every partition.
ALL = 0xFFFFFFFF
_LEN = struct.Struct("!Q")
DEFAULT_TIMEOUT = 60.0

_counts = {"bytes_received": 0, "bytes_sent": 0, "fetches": 0}
_counts_lock = threading.Lock()


class PeerUnreachableError(InsituError, ConnectionError):
    """A daemon (or the record exchange) of another node refused or dropped the connection."""


def stats() -> dict:
    """Payload bytes this process received (``bytes_received``, by :func:`fetch`) and sent
    (``bytes_sent``, by its :class:`BlockServer`), and ``fetches``."""
    with _counts_lock:
        return dict(_counts)


def reset_stats() -> None:
    with _counts_lock:
        for k in _counts:
            _counts[k] = 0


def _count(**kw: int) -> None:
    with _counts_lock:
        for k, v in kw.items():
            _counts[k] += v


def _recv_exact(sock: socket.socket, view: memoryview) -> None:
    got, n = 0, len(view)
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise ConnectionResetError("the peer closed the connection")
        got += k


def recv_bytes(sock: socket.socket, n: int) -> bytes:
    """Exactly `n` bytes from `sock` (ConnectionResetError if the peer closes first)."""
    buf = bytearray(n)
    _recv_exact(sock, memoryview(buf))
    return bytes(buf)


def _token_bytes(token: str | bytes) -> bytes:
    t = bytes.fromhex(token) if isinstance(token, str) else bytes(token)
    if len(t) != 16:
        raise ValueError(f"tcp: a token is 16 bytes (32 hex digits), got {len(t)} bytes")
    return t


def _header(status: int, a: np.ndarray | None = None, nbytes: int = 0) -> bytes:
    if a is None:
        return _REP.pack(_MAGIC, status, b"", 0, *([0] * _MAX_DIMS), nbytes)
    shape = list(a.shape) + [0] * (_MAX_DIMS - a.ndim)
    return _REP.pack(_MAGIC, status, a.dtype.str.encode(), a.ndim, *shape, a.nbytes)


# --------------------------------------------------------------------------- the block server


class BlockServer:
    """Serves one cache's blocks to other nodes over TCP (a thread per connection).

    Parameters
    ----------
    cache : BlockCache-like
        ``get(handle)`` and ``drop(handle)``, thread-safe (:class:`insitu.pool.BlockCache`).
    host : str
        Address to bind (and to advertise in :attr:`address`).
    port : int
        0: any free port.
    token : bytes, optional
        The secret a request must carry (default 16 random bytes).
    handle_type : callable
        Makes a cache handle from its integer id (the pool passes ``insitu.pool.cache.Handle``;
        transports sit below the pool and do not import it).
    """

    def __init__(self, cache: Any, host: str, port: int = 0, *, handle_type: Any,
                 token: bytes | None = None) -> None:
        self.cache, self.handle_type = cache, handle_type
        self.token = token if token is not None else secrets.token_bytes(16)
        self._sock = socket.create_server((host, port), backlog=128)
        self.address = (host, self._sock.getsockname()[1])
        self._stop = threading.Event()
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve, name="insitu-tcp-blocks", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                if self._stop.is_set():
                    conn.close()
                    return
                self._conns.add(conn)
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        try:
            self._requests(conn)
        finally:
            with self._lock:
                self._conns.discard(conn)
            conn.close()

    def _requests(self, conn: socket.socket) -> None:
        head = bytearray(_REQ.size)
        while True:
            try:
                _recv_exact(conn, memoryview(head))
            except OSError:
                return
            magic, op, token, hid = _REQ.unpack(head)
            if magic != _MAGIC or not hmac.compare_digest(token, self.token) or op not in _OPS:
                self._error(conn, "bad request (wrong protocol, token or operation)")
                return  # a stranger: no further requests on this connection
            try:
                self._reply(conn, op, self.handle_type(hid))
            except OSError:
                return

    def _reply(self, conn: socket.socket, op: int, handle: Any) -> bool:
        try:
            a = None if op == _OP_DROP else self.cache.get(handle)
            if a is not None and arrays.is_device_array(a):  # a GPU daemon's block: staged through the host
                a = arrays.to_host(a)
            if a is not None and (not isinstance(a, np.ndarray) or a.dtype.hasobject or a.ndim > _MAX_DIMS
                                  or len(a.dtype.str) > 16):
                raise TypeError(f"only arrays of plain dtypes and <= {_MAX_DIMS} dimensions travel over tcp, "
                                f"the block is {type(a).__name__}")
            if op in (_OP_DROP, _OP_TAKE):  # taken: gone before the reply (a failed send loses it)
                self.cache.drop(handle)
        except Exception as e:  # goes back to the client
            return self._error(conn, f"{_OPS[op]} {handle!r}: {type(e).__name__}: {e}")
        if a is None:
            conn.sendall(_header(0))
            return True
        if not a.flags.c_contiguous:
            a = a.copy(order="C")  # (np.ascontiguousarray would make a 0-d block 1-d)
        _count(bytes_sent=a.nbytes)  # before the reply: a client that has it sees the count
        conn.sendall(_header(0, a))
        if a.nbytes:
            conn.sendall(a.reshape(-1).view(np.uint8).data)
        return True

    @staticmethod
    def _error(conn: socket.socket, text: str) -> bool:
        msg = text.encode()
        try:
            conn.sendall(_header(1, nbytes=len(msg)) + msg)
        except OSError:
            pass
        return True

    def close(self) -> None:
        """Stop serving: no new connections, and the open ones are cut."""
        with self._lock:
            self._stop.set()
            conns = list(self._conns)
        for c in [self._sock, *conns]:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._sock.close()

    def __enter__(self) -> "BlockServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Endpoint(NamedTuple):
    """A :class:`BlockServer`'s address and secret: what a record carries to reach it."""

    host: str
    port: int
    token: str  # hex

    @property
    def peer(self) -> str:
        return f"{self.host}:{self.port}"


_SERVER: BlockServer | None = None


def start_server(cache: Any, host: str, port: int = 0, *, handle_type: Any) -> Endpoint:
    """Start this process's block server on `cache` (once; a worker daemon calls it)."""
    global _SERVER
    if _SERVER is None:
        _SERVER = BlockServer(cache, host, port, handle_type=handle_type)
    return endpoint()  # type: ignore[return-value]


def endpoint() -> Endpoint | None:
    """This process's block server (None if it has none): run in a daemon by a task."""
    if _SERVER is None:
        return None
    return Endpoint(*_SERVER.address, _SERVER.token.hex())


# --------------------------------------------------------------------------- the client side

_CONNS = threading.local()  # per thread: (host, port) -> socket


def _conn(ep: Endpoint, timeout: float, what: str) -> socket.socket:
    conns = getattr(_CONNS, "d", None)
    if conns is None:
        conns = _CONNS.d = {}
    s = conns.get((ep[0], ep[1]))
    if s is not None:
        s.settimeout(timeout)
        return s
    try:
        s = socket.create_connection((ep[0], ep[1]), timeout=timeout)
    except TimeoutError:
        raise PeerTimeoutError(f"tcp: connecting to the worker daemon at {ep.peer} for {what} took over "
                               f"{timeout:g} s (host down, or a firewall drops packets)") from None
    except OSError as e:
        raise PeerUnreachableError(f"tcp: cannot reach the worker daemon at {ep.peer} for {what}: {e.strerror or e} "
                                   "(it died, or its node is gone)") from None
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conns[(ep[0], ep[1])] = s
    return s


def _forget(ep: Endpoint) -> None:
    s = getattr(_CONNS, "d", {}).pop((ep[0], ep[1]), None)
    if s is not None:
        s.close()


def _as_endpoint(addr) -> Endpoint:
    if isinstance(addr, Endpoint):
        return addr
    try:
        host, port, token = addr
    except (TypeError, ValueError):
        raise ValueError(f"tcp: a daemon address is (host, port, token), got {addr!r}") from None
    return Endpoint(str(host), int(port), str(token))


def _read_reply(s: socket.socket, ep: Endpoint, what: str, out: np.ndarray | None) -> np.ndarray | None:
    head = bytearray(_REP.size)
    _recv_exact(s, memoryview(head))
    magic, status, dtype, ndim, *rest = _REP.unpack(head)
    shape, nbytes = tuple(rest[:ndim]), rest[_MAX_DIMS]
    if magic != _MAGIC:
        raise PeerUnreachableError(f"tcp: the process at {ep.peer} does not speak insitu's block protocol ({what})")
    if status:
        raise InsituError(f"tcp: the worker daemon at {ep.peer} refused {what}: {recv_bytes(s, nbytes).decode()}")
    if not dtype.rstrip(b"\0"):
        return None
    dt = np.dtype(dtype.rstrip(b"\0").decode())
    if nbytes != dt.itemsize * int(np.prod(shape, dtype=np.int64)):
        raise PeerUnreachableError(f"tcp: the worker daemon at {ep.peer} sent a header for {what} whose byte count "
                                   f"({nbytes}) does not match its dtype {dt} and shape {shape}")
    if out is None:
        out = np.empty(shape, dt)
    elif out.shape != shape or out.dtype != dt or not out.flags.c_contiguous:
        raise ValueError(f"tcp: out= must be a C-contiguous {dt} array of shape {shape} for {what}, got "
                         f"{out.dtype} {out.shape}")
    if nbytes:
        _recv_exact(s, out.reshape(-1).view(np.uint8).data)  # straight into the destination
    _count(bytes_received=nbytes, fetches=1)
    return out


def fetch_many(addr, handles: Sequence[Any], *, take: bool = False, what: Sequence[Any] | None = None,
               outs: Sequence[np.ndarray | None] | None = None, window: int = 4,
               timeout: float = DEFAULT_TIMEOUT) -> list[np.ndarray]:
    """Blocks `handles` from the daemon at `addr`, at most `window` requests in flight.

    Parameters
    ----------
    addr : (host, port, token)
        The holding daemon's :class:`Endpoint` (from its block records).
    handles : sequence of Handle or int
        Cache handles there.
    take : bool
        Drop each block there once it was sent.
    what : sequence, optional
        The blocks' keys, for error messages.
    outs : sequence of arrays, optional
        Where to receive each block (C-contiguous, the block's dtype and shape); default new arrays.

    Raises
    ------
    PeerUnreachableError
        The connection was refused or reset (the daemon or its node died).
    PeerTimeoutError
        No answer within `timeout` seconds.
    InsituError
        The daemon refused (unknown handle, a block that is not a NumPy array).
    """
    if not (isinstance(window, int) and window >= 1):
        raise ValueError(f"fetch_many: window must be an int >= 1, got {window!r}")
    ep = _as_endpoint(addr)
    token = _token_bytes(ep[2])
    ids = [int(getattr(h, "id", h)) for h in handles]
    names = [f"block {w!r}" for w in what] if what is not None else [f"handle {i}" for i in ids]
    outs = list(outs) if outs is not None else [None] * len(ids)
    op = _OP_TAKE if take else _OP_GET
    result: list = []
    s = _conn(ep, timeout, names[0] if names else "a block")
    sent = 0
    try:
        while len(result) < len(ids):
            while sent < len(ids) and sent - len(result) < window:  # backpressure: a bounded window
                s.sendall(_REQ.pack(_MAGIC, op, token, ids[sent]))
                sent += 1
            i = len(result)
            result.append(_read_reply(s, ep, names[i], outs[i]))
    except TimeoutError:
        _forget(ep)
        raise PeerTimeoutError(f"tcp: the worker daemon at {ep.peer} did not send {names[len(result)]} within "
                               f"{timeout:g} s") from None
    except OSError as e:
        _forget(ep)
        raise PeerUnreachableError(f"tcp: the connection to the worker daemon at {ep.peer} broke while fetching "
                                   f"{names[min(len(result), len(names) - 1)]}: {e} (it died, or its node is "
                                   "gone)") from None
    except Exception:
        _forget(ep)  # the replies still in flight would be read as the next request's
        raise
    return result


def fetch(addr, handle: Any, *, key: Any = None, take: bool = False, out: np.ndarray | None = None,
          timeout: float = DEFAULT_TIMEOUT) -> np.ndarray:
    """One block from the daemon at `addr` (see :func:`fetch_many`)."""
    return fetch_many(addr, [handle], take=take, what=None if key is None else [key], outs=[out],
                      timeout=timeout)[0]


def drop(addr, handles: Iterable[Any], *, timeout: float = DEFAULT_TIMEOUT) -> None:
    """Free `handles` on the daemon at `addr`."""
    ep = _as_endpoint(addr)
    token = _token_bytes(ep[2])
    hs = [int(getattr(h, "id", h)) for h in handles]
    if not hs:
        return
    s = _conn(ep, timeout, f"dropping handle {hs[0]}")
    try:
        s.sendall(b"".join(_REQ.pack(_MAGIC, _OP_DROP, token, h) for h in hs))
        for h in hs:
            _read_reply(s, ep, f"dropping handle {h}", None)
    except TimeoutError:
        _forget(ep)
        raise PeerTimeoutError(f"tcp: the worker daemon at {ep.peer} did not answer a drop within {timeout:g} s") \
            from None
    except OSError as e:
        _forget(ep)
        raise PeerUnreachableError(f"tcp: the connection to the worker daemon at {ep.peer} broke during a drop: "
                                   f"{e}") from None
    except Exception:
        _forget(ep)
        raise


# --------------------------------------------------------------------------- the record exchange


class RecordExchange:
    """Swaps small payloads among the tasks of one stage, round by round; run by the driver.

    Each task posts, per round, payloads addressed to partitions (or to all of them) and
    gets back, once every partition posted, those addressed to it in sender order: the
    driver moves each record once in and once out per round (O(records), not O(P^2) as an
    all-gather would). Spark's own barrier ``allGather`` polls in one-second steps
    (measured: 1.0 s for any task but the last), which would cost a second per halo
    round; this answers as soon as the last partition posted. Payloads are opaque bytes
    (never unpickled here); a request must carry :attr:`token`.

    Parameters
    ----------
    host : str
        Address to bind ("0.0.0.0": all).
    advertise : str, optional
        The address tasks connect to (default `host`).
    """

    def __init__(self, host: str = "0.0.0.0", *, advertise: str | None = None, port: int = 0) -> None:
        self.token = secrets.token_bytes(16)
        self._sock = socket.create_server((host, port), backlog=256)
        self.address = (advertise or host, self._sock.getsockname()[1])
        self._cond = threading.Condition()
        self._posted: dict[tuple[int, int], dict[int, list]] = {}
        self._served: dict[tuple[int, int], set] = {}
        self._thread = threading.Thread(target=self._serve, name="insitu-record-exchange", daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(self.address[0], self.address[1], self.token.hex())

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        head = bytearray(_XREQ.size)
        with conn:
            while True:
                try:
                    _recv_exact(conn, memoryview(head))
                    magic, token, job, rnd, index, nparts, timeout, count = _XREQ.unpack(head)
                    parts, size = [], 0
                    ok = magic == _XMAGIC and hmac.compare_digest(token, self.token) and index < nparts
                    for _ in range(count if ok else 0):
                        target, n = _PART.unpack(recv_bytes(conn, _PART.size))
                        size += n
                        if size > _MAX_POST or (target >= nparts and target != ALL):
                            ok = False
                            break
                        parts.append((target, recv_bytes(conn, n)))
                    if not ok:
                        msg = b"bad request (wrong protocol, token, partition or size)"
                        conn.sendall(_XREP.pack(_XMAGIC, 1, len(msg)) + msg)
                        return
                    conn.sendall(self._swap((job, rnd), index, nparts, parts, timeout))
                except OSError:
                    return

    def _swap(self, key: tuple[int, int], index: int, nparts: int, parts: list, timeout: float) -> bytes:
        with self._cond:
            posted = self._posted.setdefault(key, {})
            posted[index] = parts
            self._cond.notify_all()
            done = self._cond.wait_for(lambda: len(self._posted.get(key, posted)) >= nparts, timeout)
            got = self._posted.get(key, posted)
            if not done:
                missing = sorted(set(range(nparts)) - set(got))
                msg = (f"partition(s) {missing} did not reach round {key[1]} within {timeout:g} s (a task died, "
                       "or the stage's tasks do not all run at once)").encode()
                return _XREP.pack(_XMAGIC, 1, len(msg)) + msg
            mine = [(sender, b) for sender in range(nparts) for target, b in got[sender]
                    if target == index or target == ALL]
            served = self._served.setdefault(key, set())
            served.add(index)
            if len(served) >= nparts:  # everyone has theirs: forget the round
                self._posted.pop(key, None)
                self._served.pop(key, None)
        return _XREP.pack(_XMAGIC, 0, len(mine)) + b"".join(_PART.pack(sender, len(b)) + b for sender, b in mine)

    def close(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()


def alltoall(addr, job: int, rnd: int, index: int, nparts: int, parts: Mapping[int, bytes] | Sequence[tuple], *,
             timeout: float = DEFAULT_TIMEOUT) -> list[tuple[int, bytes]]:
    """Round `rnd` of `job` through the :class:`RecordExchange` at `addr`: post `parts`
    (``{target partition or ALL: payload}``, or such pairs) from partition `index` of
    `nparts`; returns ``[(sender, payload)]`` addressed to this partition, in sender
    order, once every partition posted (every one must post each round, if only ``{}``)."""
    ep = _as_endpoint(addr)
    items = list(parts.items()) if isinstance(parts, Mapping) else list(parts)
    s = _conn(ep, timeout + 10.0, f"the record exchange of round {rnd}")
    try:
        s.sendall(_XREQ.pack(_XMAGIC, _token_bytes(ep[2]), job, rnd, index, nparts, float(timeout), len(items))
                  + b"".join(_PART.pack(t, len(b)) + bytes(b) for t, b in items))
        magic, status, count = _XREP.unpack(recv_bytes(s, _XREP.size))
        if magic != _XMAGIC:
            raise PeerUnreachableError(f"tcp: the process at {ep.peer} is not insitu's record exchange")
        if status:
            raise InsituError(f"halo_iterate: {recv_bytes(s, count).decode()}")
        out = []
        for _ in range(count):
            sender, n = _PART.unpack(recv_bytes(s, _PART.size))
            out.append((sender, recv_bytes(s, n)))
        return out
    except TimeoutError:
        _forget(ep)
        raise PeerTimeoutError(f"tcp: the record exchange at {ep.peer} did not answer round {rnd} within "
                               f"{timeout + 10.0:g} s") from None
    except OSError as e:
        _forget(ep)
        raise PeerUnreachableError(f"tcp: the connection to the record exchange at {ep.peer} broke in round "
                                   f"{rnd}: {e} (the driver is gone?)") from None
    except Exception:
        _forget(ep)
        raise


def allgather(addr, job: int, rnd: int, index: int, nparts: int, payload: bytes, *,
              timeout: float = DEFAULT_TIMEOUT) -> list[bytes]:
    """Every partition's `payload` of round `rnd` of `job`, in partition order (an
    :func:`alltoall` whose payloads go to all)."""
    return [b for _, b in alltoall(addr, job, rnd, index, nparts, [(ALL, payload)], timeout=timeout)]
