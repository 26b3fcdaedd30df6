"""Worker daemons on the CPU: one process per worker, reached over a Unix socket, NumPy
arrays in shared memory handed over without copies.

The functions the daemons run are module-level here: a daemon imports this module by
name (it is started with this process's sys.path).
"""

import gc
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import pytest

from insitu import arrays
from insitu.errors import InsituError, PeerTimeoutError
from insitu.pool import GPUBlocks, Worker, shared
from insitu.pool.daemon import (DaemonHandle, DaemonStartError, DaemonStats, DaemonWorker, PackageEncodingError,
                                WorkerDiedError, WorkerTimeoutError, default_socket_path, ensure_daemon, pid_alive,
                                start_daemon)
from insitu.pool.shared import segment_of, shared_empty

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# -- what the daemons run -------------------------------------------------------------------

from test_pool import scale, smooth  # noqa: E402  (module-level: the daemon imports them too)




def where(block):
    """Where the daemon sees the block: its shared segment and offset (None: a private copy)."""
    sv = segment_of(block)
    return (sv.name, sv.offset, os.getpid()) if sv is not None else (None, None, os.getpid())


def nested(block):
    return {"first": block[0], "more": [block[1:3], (np.full(2, 7.0),)], "count": block.size}


def boom(block):
    raise ArithmeticError(f"no good: {block.size} values")


class TwoArgError(Exception):
    """Cannot be rebuilt from its message alone (pickle calls it with one argument)."""

    def __init__(self, what, where):
        super().__init__(f"{what} at {where}")


def odd_failure(block):
    raise TwoArgError("odd", "here")


def sleepy(block, seconds):
    time.sleep(seconds)


def blocks_of(n=4, shape=(12, 12, 12), seed=0):
    rng = np.random.default_rng(seed)
    return {g: rng.random(shape) for g in range(n)}


# -- fixtures --------------------------------------------------------------------------------


def _short_dir(path) -> str:
    """`path`, or a short temporary directory where socket paths in `path` could pass 108 bytes."""
    if len(os.fsencode(str(path))) < 80:
        return str(path)
    return tempfile.mkdtemp(prefix="isd-", dir="/tmp")


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    """One CPU daemon shared by the tests that do not kill it."""
    h = start_daemon(socket_path=os.path.join(_short_dir(tmp_path_factory.mktemp("daemon")), "w.sock"), timeout=30)
    yield h
    h.stop(timeout=5)
    assert not h.alive()


@pytest.fixture
def spawn(tmp_path):
    """Start daemons of one test (``spawn(**options)``); all are stopped at teardown."""
    started: list[DaemonHandle] = []
    d = _short_dir(tmp_path)

    def _spawn(name="w.sock", **kw):
        h = start_daemon(socket_path=os.path.join(d, name), timeout=30, **kw)
        started.append(h)
        return h

    yield _spawn
    for h in started:
        try:
            os.kill(h.pid, signal.SIGCONT)  # a stopped one would ignore the shutdown
        except ProcessLookupError:
            pass
        h.stop(timeout=5)
        assert not h.alive()


# -- packages and results ---------------------------------------------------------------------


def test_three_operations_cost_one_round_trip_and_match_the_in_process_worker(daemon, tmp_path):
    data = blocks_of(4)

    def pipeline(worker):
        return (GPUBlocks.from_arrays(worker, data).send_gpu().exec_gpu(smooth).exec_gpu(scale, None, 2.0)
                .exec_gpu_seq([(smooth, None, ()), (scale, None, (0.5,))]).recv_gpu())

    with Worker(spill_dir=str(tmp_path)) as local:
        want = pipeline(local)
    before = daemon.client().stats().round_trips
    with daemon.client() as w:
        got = pipeline(w)
        assert w.round_trips == 1
        assert w.stats().round_trips == before + 1  # one package on the daemon's side too
    assert got.keys() == want.keys()
    for g in data:
        np.testing.assert_array_equal(got[g], want[g])
        np.testing.assert_array_equal(data[g], blocks_of(4)[g])  # sent by value: untouched


def test_a_shared_array_is_changed_in_place_without_a_copy_and_a_plain_one_is_not(daemon):
    rng = np.random.default_rng(1)
    orig = rng.random((6, 7, 8))
    field = shared_empty(orig.shape)
    field[...] = orig
    plain = orig.copy()
    with daemon.client() as w:
        seen = GPUBlocks.from_arrays(w, {"s": field, "p": plain}).send_gpu().exec_gpu(where).recv_gpu()
        out = GPUBlocks.from_arrays(w, {"s": field, "p": plain}).send_gpu().exec_gpu(scale, None, 2.0).recv_gpu()
    # The daemon mapped the owner's very segment (at the same offset); the plain array was a copy.
    sv = segment_of(field)
    assert seen["s"] == (sv.name, sv.offset, daemon.pid)
    assert seen["p"] == (None, None, daemon.pid)
    np.testing.assert_array_equal(field, 2 * orig)  # written by the daemon, seen here
    np.testing.assert_array_equal(plain, orig)  # by value: the daemon changed its own copy
    np.testing.assert_array_equal(out["p"], 2 * orig)
    # The in-place result comes back as the owner's own memory, as from an in-process worker.
    assert np.shares_memory(out["s"], field) and arrays.data_pointer(out["s"]) == arrays.data_pointer(field)


def test_views_at_an_offset_and_strided_views_are_handed_over(daemon):
    field = shared_empty((10, 12), np.float32)
    field[...] = 1
    view = field[3:7, 2::3]  # offset, non-contiguous
    with daemon.client() as w:
        seen = GPUBlocks.from_arrays(w, {0: view}).send_gpu().exec_gpu(where).recv_gpu()[0]
        GPUBlocks.from_arrays(w, {0: view}).send_gpu().exec_gpu(scale, None, np.float32(5)).recv_gpu()
    assert seen[:2] == (segment_of(field).name, 3 * 12 * 4 + 2 * 4)
    want = np.ones((10, 12), np.float32)
    want[3:7, 2::3] = 5
    np.testing.assert_array_equal(field, want)


def test_arrays_nested_in_results_come_back(daemon):
    field = shared_empty((4, 5))
    field[...] = np.arange(20).reshape(4, 5)
    with daemon.client() as w:
        out = GPUBlocks.from_arrays(w, {0: field}).send_gpu().exec_gpu(nested).recv_gpu()[0]
    assert out["count"] == 20
    np.testing.assert_array_equal(out["first"], field[0])
    np.testing.assert_array_equal(out["more"][0], field[1:3])
    np.testing.assert_array_equal(out["more"][1][0], [7.0, 7.0])
    assert np.shares_memory(out["first"], field) and np.shares_memory(out["more"][0], field)


def test_a_cached_borrowed_array_is_the_daemons_own_copy(daemon):
    field = shared_empty((5, 5, 5))
    field[...] = 3.0
    with daemon.client() as w:
        cached = GPUBlocks.from_arrays(w, {0: field}).send_gpu().cache_gpu()
        pinned = GPUBlocks.from_arrays(w, {0: field}).send_gpu().exec_gpu(scale, None, 2.0).persist_gpu()
        field[...] = -1.0  # the owner reuses its memory after the packages
        np.testing.assert_array_equal(cached.recv_gpu()[0], np.full((5, 5, 5), 3.0))
        np.testing.assert_array_equal(pinned.recv_gpu()[0], np.full((5, 5, 5), 6.0))
        back = cached.recv_gpu()[0]
        assert not np.shares_memory(back, field)
        pinned.unpersist_gpu()


def test_functions_by_value_with_cloudpickle(daemon):
    from insitu.pool import handoff

    if handoff.pickler_name() == "pickle":
        pytest.skip("no cloudpickle here: local functions cannot be sent")
    offset = 10.0
    with daemon.client() as w:
        out = GPUBlocks.from_arrays(w, {0: np.zeros(3)}).send_gpu().exec_gpu(lambda b: b + offset).recv_gpu()
    np.testing.assert_array_equal(out[0], [10.0, 10.0, 10.0])


# -- errors ----------------------------------------------------------------------------------


def test_an_error_in_the_daemon_is_raised_with_its_type_and_message(daemon):
    with daemon.client() as w:
        with pytest.raises(ArithmeticError, match="no good: 27 values") as err:
            GPUBlocks.from_arrays(w, {0: np.zeros((3, 3, 3))}).send_gpu().exec_gpu(boom).recv_gpu()
        notes = "\n".join(err.value.__notes__)
        assert "operation 1 (exec)" in notes
        assert f"worker daemon (pid {daemon.pid}) at {daemon.socket_path}" in notes
        assert "in boom" in notes  # the daemon's traceback
        # A type that cannot be rebuilt from its message still names itself.
        with pytest.raises(InsituError, match="TwoArgError: odd at here"):
            GPUBlocks.from_arrays(w, {0: np.zeros(3)}).send_gpu().exec_gpu(odd_failure).recv_gpu()
        with pytest.raises(KeyError, match="not in this BlockCache"):
            from insitu.pool.cache import Handle

            GPUBlocks(w, {0: ("handle", Handle(12345))}).recv_gpu()
        assert w.ping() == daemon.pid  # the connection survives errors


def test_an_unpicklable_function_is_named(daemon):
    lock = threading.Lock()

    def locked_scale(block):
        with lock:  # a lock cannot be pickled, by reference or by value
            block *= 2

    with daemon.client() as w:
        with pytest.raises(PackageEncodingError, match=r"operation 1 \(exec\).*locked_scale.*module-level function"
                           r".*CUDA source.*registered kernel name"):
            GPUBlocks.from_arrays(w, {0: np.zeros(3)}).send_gpu().exec_gpu(locked_scale).recv_gpu()
        assert w.round_trips == 0  # nothing was sent
        assert isinstance(PackageEncodingError("x"), TypeError)


@pytest.mark.skipif(arrays.cuda_available(), reason="CuPy and a GPU are here: the fake would be a device array")
def test_a_device_array_without_cupy_is_refused_before_sending(daemon):
    from fakes import FakeCudaArray

    with daemon.client() as w:
        with pytest.raises(arrays.DeviceUnavailableError, match="CUDA device array"):
            GPUBlocks.from_arrays(w, {0: FakeCudaArray(np.zeros(4))}).send_gpu().recv_gpu()


# -- liveness --------------------------------------------------------------------------------


def test_a_killed_daemon_is_reported_at_once(spawn):
    h = spawn()
    w = h.client(timeout=30)
    assert w.ping() == h.pid
    threading.Timer(0.5, os.kill, (h.pid, signal.SIGKILL)).start()
    t0 = time.monotonic()
    with pytest.raises(WorkerDiedError, match=rf"pid {h.pid}.*{h.socket_path}.*died") as err:
        GPUBlocks.from_arrays(w, {0: np.zeros(3)}).send_gpu().exec_gpu(sleepy, None, 20.0).recv_gpu()
    assert time.monotonic() - t0 < 5  # EOF, not the 30 s timeout
    assert err.value.pid == h.pid and err.value.socket_path == h.socket_path
    assert os.path.exists(h.socket_path)  # stale: nobody removed it
    t0 = time.monotonic()
    # The client notices on sending (nobody listens) or on reading (reset): either is quick and named.
    with pytest.raises(WorkerDiedError, match="no worker daemon listens|closed the connection"):
        w.ping()
    assert time.monotonic() - t0 < 1


def test_a_stopped_daemon_times_out(spawn):
    h = spawn()
    w = h.client(timeout=1.0)
    assert w.ping() == h.pid
    os.kill(h.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        with pytest.raises(WorkerTimeoutError, match=rf"pid {h.pid}.*did not answer.*within 1 s") as err:
            GPUBlocks.from_arrays(w, {0: np.zeros(3)}).send_gpu().exec_gpu(scale, None, 2.0).recv_gpu()
        elapsed = time.monotonic() - t0
        assert 0.9 <= elapsed < 2.5
        assert isinstance(err.value, PeerTimeoutError) and isinstance(err.value, TimeoutError)
    finally:
        os.kill(h.pid, signal.SIGCONT)
    assert w.ping() == h.pid  # a new connection once it runs again


def test_restart_serves_again_on_the_same_socket_and_forgets_the_cache(spawn):
    h = spawn()
    w = h.client(timeout=10)
    cached = GPUBlocks.from_arrays(w, {0: np.arange(4.0)}).send_gpu().cache_gpu()
    old = h.pid
    h.kill()
    assert os.path.exists(h.socket_path)  # a stale socket file must not block the restart
    h.restart()
    assert h.pid != old and h.alive()
    assert w.ping() == h.pid  # the same client reconnects
    out = GPUBlocks.from_arrays(w, {0: np.arange(4.0)}).send_gpu().exec_gpu(scale, None, 3.0).recv_gpu()
    np.testing.assert_array_equal(out[0], 3 * np.arange(4.0))
    with pytest.raises(KeyError, match="not in this BlockCache"):
        cached.recv_gpu()


def test_stop_lets_the_package_in_flight_finish(spawn):
    h = spawn()
    field = shared_empty(8)
    field[...] = 1.0
    done = []

    def run():
        with h.client(timeout=30) as w:
            GPUBlocks.from_arrays(w, {0: field}).send_gpu().exec_gpu(sleepy, None, 1.0).exec_gpu(
                scale, None, 3.0).recv_gpu()
            done.append(True)

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.3)
    h.stop(timeout=10)  # shutdown request: answered at once, the daemon exits after the package
    t.join(30)
    assert done == [True] and not h.alive()
    np.testing.assert_array_equal(field, np.full(8, 3.0))
    assert not os.path.exists(h.socket_path)  # a clean exit removes its socket


def test_a_daemon_that_cannot_start_reports_its_output(tmp_path):
    path = os.path.join(_short_dir(tmp_path), "bad.sock")
    t0 = time.monotonic()
    with pytest.raises(DaemonStartError, match=r"(?s)exited with status 1.*budget_bytes must be >= 0 bytes"):
        start_daemon(socket_path=path, budget_bytes=-5, timeout=30)
    assert time.monotonic() - t0 < 20


def test_one_daemon_per_socket(daemon):
    with open(daemon.log_path) as f:
        log = f.read()
    with pytest.raises(DaemonStartError, match=rf"pid {daemon.pid}\) already listens on"):
        start_daemon(socket_path=daemon.socket_path, timeout=30)
    assert daemon.client().ping() == daemon.pid
    with open(daemon.log_path) as f:
        assert f.read().startswith(log) and f"pid {daemon.pid} device None listening" in log  # its log is intact


def test_socket_paths_longer_than_unix_allows_are_refused(tmp_path):
    with pytest.raises(ValueError, match="Unix sockets allow at most 107"):
        DaemonWorker("/tmp/" + "x" * 120)


# -- several clients ---------------------------------------------------------------------------


def test_clients_on_separate_connections_share_one_daemon(daemon):
    field = shared_empty((4, 16))
    field[...] = 1.0
    errors = []

    def client(row):
        try:
            with daemon.client() as w:
                for _ in range(5):
                    GPUBlocks.from_arrays(w, {row: field[row]}).send_gpu().exec_gpu(scale, None, 2.0).recv_gpu()
                assert w.round_trips == 5
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=client, args=(r,)) for r in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    np.testing.assert_array_equal(field, np.full((4, 16), 32.0))
    script = ("import sys, numpy as np; from insitu.pool import GPUBlocks; from insitu.pool.daemon import DaemonWorker;"
              "import test_pool_daemon as t; w = DaemonWorker(sys.argv[1]);"
              "print(GPUBlocks.from_arrays(w, {0: np.ones(3)}).send_gpu().exec_gpu(t.scale, None, 4.0)"
              ".recv_gpu()[0].sum(), w.stats().connections >= 1)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "tests")]))
    p = subprocess.run([sys.executable, "-c", script, daemon.socket_path], env=env, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["12.0", "True"]


def _daemon_processes(socket_path: str) -> list[int]:
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
            with open(f"/proc/{d}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if b"insitu.pool.daemon" in cmd and os.fsencode(socket_path) in cmd and state != b"Z":
            pids.append(int(d))
    return pids


def test_ensure_daemon_from_two_processes_starts_one(tmp_path):
    d = _short_dir(tmp_path)
    path = default_socket_path(None, directory=d)
    script = ("import sys; from insitu.pool.daemon import ensure_daemon;"
              "h = ensure_daemon(None, directory=sys.argv[1], timeout=60); print(h.pid, h.client().ping())")
    env = dict(os.environ, PYTHONPATH=ROOT)
    procs = [subprocess.Popen([sys.executable, "-c", script, d], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=90) for p in procs]
    handle = None
    try:
        assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
        pids = {tuple(map(int, o.split())) for o, _ in outs}
        assert len(pids) == 1, pids  # both got the same daemon, which answered
        pid = next(iter(pids))[0]
        handle = DaemonHandle(pid, path)
        assert _daemon_processes(path) == [pid]
        assert handle.alive()  # it outlived the process that started it
        again = ensure_daemon(None, directory=d)  # and is found from here too
        assert again.pid == pid
    finally:
        for pid in _daemon_processes(path):
            DaemonHandle(pid, path).stop(timeout=5)
    assert not _daemon_processes(path)


# -- shared memory -----------------------------------------------------------------------------


def test_segments_outlive_a_daemon_and_go_with_their_last_array(spawn):
    h = spawn()
    field = shared_empty(1000)
    field[...] = 5.0
    name = segment_of(field).name
    with h.client() as w:
        GPUBlocks.from_arrays(w, {0: field[10:]}).send_gpu().exec_gpu(scale, None, 2.0).recv_gpu()
    h.stop()
    # The daemon mapped the segment; its exit must not unlink the owner's segment.
    assert os.path.exists(f"/dev/shm/{name}")
    assert field[:10].sum() == 50.0 and field[10:].sum() == 990 * 10.0
    view = field[500:]
    del field
    gc.collect()
    assert os.path.exists(f"/dev/shm/{name}")  # a view still uses it
    del view
    gc.collect()
    assert not os.path.exists(f"/dev/shm/{name}")


def test_shared_arrays_take_any_shape_dtype_and_order():
    f = shared.shared_empty((3, 4), np.int16, order="F")
    assert f.flags.f_contiguous and f.dtype == np.int16 and shared.is_shared(f.T)
    z = shared.shared_zeros(0)
    assert z.shape == (0,) and shared.is_shared(z)
    c = shared.shared_copy(np.arange(6).reshape(2, 3))
    np.testing.assert_array_equal(c, np.arange(6).reshape(2, 3))
    assert not shared.is_shared(np.zeros(3)) and segment_of(np.zeros(3)) is None
    with pytest.raises(TypeError, match="Python objects"):
        shared.shared_empty(3, object)
    again = shared.attach(segment_of(c[1]))
    assert np.shares_memory(again, c)


def test_stats_and_pickled_clients(daemon):
    with daemon.client() as w:
        s = w.stats()
        assert isinstance(s, DaemonStats)
        assert (s.pid, s.device, s.socket_path) == (daemon.pid, None, daemon.socket_path)
        assert s.connections >= 1 and s.uptime > 0 and s.cache.budget_bytes is None
        w2 = pickle.loads(pickle.dumps(w))  # a Spark task can carry one
        assert w2.ping() == daemon.pid and w2.round_trips == 0
        w2.close()


def test_gpu_socket_named_by_ordinal_without_asking_cuda(tmp_path, monkeypatch):
    # Spark tasks name a GPU's daemon by the ordinal Spark gave them: no CUDA call.
    from insitu.pool import handoff

    asked = []
    monkeypatch.setattr(handoff, "_cupy", lambda: asked.append(1))
    p = default_socket_path(3, directory=str(tmp_path), by_bus_id=False)
    assert p.startswith(str(tmp_path)) and p.endswith("-gpu3.sock") and asked == []
    default_socket_path(3, directory=str(tmp_path))  # the default asks CuPy for the bus id
    assert asked == [1]


def test_a_process_is_alive_while_any_of_its_threads_is():
    # The main thread exits first (it turns zombie) while another thread sleeps on: the
    # process still holds its files (a daemon's sockets), so it is alive until that ends.
    code = ("import ctypes, threading, time\n"
            "threading.Thread(target=time.sleep, args=(1.5,)).start()\n"
            "ctypes.CDLL(None).pthread_exit(None)\n")
    p = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + 10
    state = b""
    while state != b"Z" and time.monotonic() < deadline:
        time.sleep(0.01)
        with open(f"/proc/{p.pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    assert state == b"Z"  # the main thread is a zombie ...
    assert pid_alive(p.pid)  # ... while the process lives on
    assert p.wait(10) == 0
    assert not pid_alive(p.pid)
