"""Worker daemons on a GPU: CuPy arrays handed over by CUDA IPC, changed in place by the
daemon's kernels and seen by their owner, with no host transfer in the owner's process.

The functions the daemons run are module-level here: a daemon imports this module by
name (it is started with this process's sys.path).
"""

import os
import signal
import tempfile
import threading
import time

import numpy as np
import pytest

import insitu
from insitu.pool import GPUBlocks
from insitu.pool.daemon import WorkerDiedError, start_daemon

cp = pytest.importorskip("cupy", reason="needs CuPy")

SCALE = r"""
extern "C" __global__ void scale(float* x, const float factor, const long long n) {
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) x[i] *= factor;
}
"""


def scale_in_place(block, factor):
    block *= factor  # a CuPy elementwise kernel: honours the view's strides


def twice(block):
    return block * 2  # a new array, owned by the daemon


def where(block):
    """The daemon's view of the block: device, and whether its memory is mapped from a client."""
    mem = block.data.mem
    return int(block.device.id), type(mem).__name__, os.getpid()


def sleepy(block, seconds):
    time.sleep(seconds)


def _short_dir() -> str:
    return tempfile.mkdtemp(prefix="isd-", dir="/tmp")  # Unix socket paths: at most 107 bytes


@pytest.fixture(scope="module")
def daemon():
    h = start_daemon(0, os.path.join(_short_dir(), "gpu0.sock"), timeout=120)
    yield h
    h.stop(timeout=10)
    assert not h.alive()


@pytest.fixture
def spawn():
    started = []

    def _spawn():
        h = start_daemon(0, os.path.join(_short_dir(), "gpu0.sock"), timeout=120)
        started.append(h)
        return h

    yield _spawn
    for h in started:
        h.stop(timeout=10)
        assert not h.alive()


def test_a_cupy_array_is_changed_in_place_by_a_cuda_kernel_in_the_daemon(daemon):
    n = 100_000
    x = cp.arange(n, dtype=cp.float32)
    with daemon.client() as w:
        assert w.stats().device == 0
        with insitu.count_transfers() as t:
            seen = GPUBlocks.from_arrays(w, {0: x}).send_gpu().exec_gpu(where).recv_gpu()[0]
            out = (GPUBlocks.from_arrays(w, {0: x}).send_gpu()
                   .exec_gpu(SCALE, "scale", np.float32(3), np.int64(n)).recv_gpu(host=False))
        assert w.round_trips == 2
    assert t.calls == 0 and t.bytes == 0  # nothing crossed to the host in the owner's process
    assert seen == (0, "UnownedMemory", daemon.pid)  # the daemon worked on a mapping, not a copy
    cp.testing.assert_array_equal(x, 3 * cp.arange(n, dtype=cp.float32))  # the owner sees the write
    # The in-place result comes back as the owner's own memory (no copy either way).
    assert isinstance(out[0], cp.ndarray) and out[0].data.ptr == x.data.ptr


def test_a_view_at_an_offset_inside_a_larger_allocation(daemon):
    big = cp.ones(1 << 20, cp.float32)
    view = big[1000:3000]  # its data pointer lies inside the allocation: the offset must be found
    grid = cp.ones((64, 48), cp.float64)
    strided = grid[5::2, 3:40:3]  # and a non-contiguous view, for a strides-aware kernel
    with daemon.client() as w, insitu.count_transfers() as t:
        (GPUBlocks.from_arrays(w, {0: view}).send_gpu().exec_gpu(SCALE, "scale", np.float32(7), np.int64(2000))
         .recv_gpu(host=False))
        (GPUBlocks.from_arrays(w, {0: strided}).send_gpu().exec_gpu(scale_in_place, None, 5.0)
         .exec_gpu(scale_in_place, None, 2.0).recv_gpu(host=False))
    assert t.calls == 0
    want = np.ones(1 << 20, np.float32)
    want[1000:3000] = 7
    cp.testing.assert_array_equal(big, cp.asarray(want))
    g = np.ones((64, 48))
    g[5::2, 3:40:3] = 10
    cp.testing.assert_array_equal(grid, cp.asarray(g))


def test_device_results_come_back_without_host_transfers(daemon):
    x = cp.random.random(50_000).astype(cp.float32)
    want = x.copy()
    with daemon.client() as w:
        with insitu.count_transfers() as t:
            cached = GPUBlocks.from_arrays(w, {0: x}).send_gpu().cache_gpu()  # the daemon keeps its own copy
            x[...] = -1  # the owner reuses its memory
            back = cached.recv_gpu(host=False)[0]  # daemon-owned: exported by IPC, copied here on the device
            doubled = cached.exec_gpu(twice).recv_gpu(host=False)[0]
        assert t.calls == 0
        assert isinstance(back, cp.ndarray) and back.device.id == 0 and back.data.ptr != x.data.ptr
        cp.testing.assert_array_equal(back, want)
        cp.testing.assert_array_equal(doubled, 2 * want)
        with insitu.count_transfers() as t:
            host = cached.recv_gpu()[0]  # host=True: the daemon makes the device->host copy
        assert t.calls == 0 and isinstance(host, np.ndarray)
        np.testing.assert_array_equal(host, want.get())
        assert w.stats().cache.resident_entries >= 1
        empty = GPUBlocks.from_arrays(w, {0: cp.empty((0, 3), cp.float32)}).send_gpu().recv_gpu(host=False)[0]
        assert isinstance(empty, cp.ndarray) and empty.shape == (0, 3) and empty.dtype == cp.float32


def test_a_killed_daemon_and_a_restart(spawn):
    h = spawn()
    w = h.client(timeout=60)
    x = cp.ones(1000, cp.float32)
    GPUBlocks.from_arrays(w, {0: x}).send_gpu().exec_gpu(SCALE, "scale", np.float32(2), np.int64(1000)).recv_gpu(
        host=False)
    threading.Timer(0.5, os.kill, (h.pid, signal.SIGKILL)).start()
    t0 = time.monotonic()
    with pytest.raises(WorkerDiedError, match=f"pid {h.pid}"):
        GPUBlocks.from_arrays(w, {0: x}).send_gpu().exec_gpu(sleepy, None, 30.0).recv_gpu()
    assert time.monotonic() - t0 < 10
    cp.testing.assert_array_equal(x, cp.full(1000, 2, cp.float32))  # the owner's memory survives the daemon
    h.restart(timeout=120)
    GPUBlocks.from_arrays(w, {0: x}).send_gpu().exec_gpu(SCALE, "scale", np.float32(3), np.int64(1000)).recv_gpu(
        host=False)
    cp.testing.assert_array_equal(x, cp.full(1000, 6, cp.float32))


def test_ensure_daemon_names_the_gpu_by_its_pci_bus_id():
    from insitu.pool.daemon import default_socket_path, ensure_daemon

    d = _short_dir()
    path = default_socket_path(0, directory=d)
    bus = cp.cuda.Device(0).pci_bus_id.replace(":", "_")
    assert path.endswith(f"-gpu-{bus}.sock")
    h = ensure_daemon(0, directory=d, timeout=120)
    try:
        assert h.socket_path == path and ensure_daemon(0, directory=d).pid == h.pid
        with h.client() as w:
            assert w.stats().device == 0
    finally:
        h.stop(timeout=10)
    assert not h.alive()
