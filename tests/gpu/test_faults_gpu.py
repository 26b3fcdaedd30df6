"""Fault injection on a GPU: a simulation killed by SIGKILL does not leave its worker
daemon holding device memory.

The daemon is started by a separate "simulation" process (as the Spark engine's tasks
do), caches a block of 1 GiB on GPU 0, and is orphaned by ``kill -9`` of that process.
It must exit within its idle timeout, and the device memory it held must come back.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from insitu.pool._proc import pid_alive

cp = pytest.importorskip("cupy", reason="needs CuPy")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BLOCK = 1 << 30  # bytes cached on the daemon: far above what context noise moves

SIMULATION = """
import sys, time
import cupy as cp
from insitu.pool import GPUBlocks
from insitu.pool.daemon import ensure_daemon
h = ensure_daemon(0, directory=sys.argv[1], idle_timeout=float(sys.argv[2]), timeout=120)
with h.client(timeout=120) as w:
    x = cp.ones(int(sys.argv[3]) // 4, cp.float32)
    GPUBlocks.from_arrays(w, {0: x}).send_gpu().cache_gpu()  # the daemon keeps its own copy
    del x
    cp.get_default_memory_pool().free_all_blocks()
print(h.pid, flush=True)
time.sleep(600)
"""


def _free_bytes() -> int:
    return cp.cuda.runtime.memGetInfo()[0]


def _wait(pred, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return pred()


def test_a_killed_simulation_leaves_no_daemon_holding_gpu_memory():
    idle = 3.0
    sockdir = tempfile.mkdtemp(prefix="isg-", dir="/tmp")  # Unix socket paths: at most 107 bytes
    _free_bytes()  # this process's own context first, so that it is not counted below
    before = _free_bytes()
    sim = subprocess.Popen([sys.executable, "-c", SIMULATION, sockdir, str(idle), str(BLOCK)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")))
    daemon_pid = None
    try:
        line = sim.stdout.readline()
        assert line.strip().isdigit(), sim.stderr.read() if sim.poll() is not None else line
        daemon_pid = int(line)
        held = before - _free_bytes()
        assert held >= BLOCK, f"the daemon and the simulation hold {held} bytes, expected >= {BLOCK}"
        sim.send_signal(signal.SIGKILL)
        sim.wait(10)
        t0 = time.monotonic()
        assert _wait(lambda: not pid_alive(daemon_pid), idle + 30), "the orphaned GPU daemon did not exit"
        waited = time.monotonic() - t0
        assert waited < idle + 30
        # Its device memory comes back (the driver frees a dead process's context).
        assert _wait(lambda: before - _free_bytes() < BLOCK // 4, 20), \
            f"{before - _free_bytes()} bytes of GPU 0 still held after the daemon exited"
    finally:
        if sim.poll() is None:
            sim.kill()
            sim.wait(10)
        if daemon_pid is not None and pid_alive(daemon_pid):
            os.kill(daemon_pid, signal.SIGKILL)
        shutil.rmtree(sockdir, ignore_errors=True)
