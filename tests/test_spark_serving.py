"""StepServer (insitu.engine.serving): one long-lived Spark job whose tasks run each step's
operations on cached blocks; checked against the per-step Spark job it replaces."""

import os
import signal
import sys
import time

import numpy as np
import pytest

pytest.importorskip("pyspark", reason="PySpark is a dependency of insitu (pip install pyspark)")

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)  # the functions below go to the daemons by reference


@pytest.fixture(scope="module")
def engine():
    from insitu.engine.spark import SparkEngine

    e = SparkEngine("local[2]", app_name="insitu-test-serving", timeout=60)
    try:
        yield e
    finally:
        e.stop()


@pytest.fixture(scope="module")
def cached(engine):
    blocks = engine.blocks({g: np.arange(6.0) + 10 * g for g in range(5)}, 2).cache_gpu()
    yield blocks, [src[2] for src in blocks.rdd.collect()]
    blocks.drop_gpu()


def affine(block, key, a, b):
    return block * a + b + key


def fails_on(block, key, bad):
    if key == bad:
        raise ArithmeticError(f"block {key} refused")
    return block


def serving_pids(directory: str, token: str) -> list[int]:
    """Pids of the processes listening on the serving job's sockets (its tasks' Python workers)."""
    inodes = set()
    with open("/proc/net/unix") as f:
        for line in f.readlines()[1:]:
            parts = line.split()
            if len(parts) >= 8 and os.path.basename(parts[7]).startswith(token) and parts[7].startswith(directory):
                inodes.add(parts[6])
    pids = set()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            for fd in os.listdir(f"/proc/{d}/fd"):
                link = os.readlink(f"/proc/{d}/fd/{fd}")
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    pids.add(int(d))
        except OSError:
            continue
    return sorted(pids)


def test_a_step_returns_what_the_per_step_job_returns(engine, cached):
    from insitu.engine.serving import StepServer

    blocks, records = cached
    expected = blocks.exec_gpu(affine, None, 2.0, 0.5, with_key=True).recv_gpu()
    with StepServer(engine) as server:
        for step in range(3):  # the same job serves every step
            got = server.run(records, affine, None, 2.0, 0.5 + step, with_key=True)
            assert sorted(got) == sorted(expected)
            for k in expected:
                np.testing.assert_array_equal(got[k], expected[k] + step)
        assert server.restarts == 0
    # closed: its task slots are free again for ordinary jobs
    again = blocks.exec_gpu(affine, None, 1.0, 0.0, with_key=True).recv_gpu()
    np.testing.assert_array_equal(again[3], np.arange(6.0) + 33)


def test_a_failing_kernel_is_raised_on_the_driver_and_the_server_goes_on(engine, cached):
    from insitu.engine.serving import StepServer

    _, records = cached
    with StepServer(engine) as server:
        with pytest.raises(ArithmeticError, match="block 2 refused"):
            server.run(records, fails_on, None, 2, with_key=True)
        got = server.run(records, fails_on, None, -1, with_key=True)
        assert sorted(got) == list(range(5)) and server.restarts == 0


def test_a_killed_task_is_replaced_and_the_step_answered(engine, cached):
    from insitu.engine.serving import StepServer

    _, records = cached
    with StepServer(engine) as server:
        first = server.run(records, affine, None, 1.0, 0.0, with_key=True)
        pids = serving_pids(server.directory, server._token)
        assert pids, "no process listens on the serving job's sockets"
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        t0 = time.monotonic()
        got = server.run(records, affine, None, 1.0, 0.0, with_key=True)
        assert server.restarts == 1 and time.monotonic() - t0 < 60
        for k in first:
            np.testing.assert_array_equal(got[k], first[k])


def test_settings_are_checked(engine):
    from insitu.engine.serving import StepServer

    with pytest.raises(ValueError, match="npartitions must be an int in \\[1, 2\\]"):
        StepServer(engine, 3)
