"""The adaptor with ``engine: spark`` in one process: frames equal the embedded engine's,
a failure inside a Spark task is reported and the simulation goes on, a killed worker
daemon is replaced at the next step. (Decomposed runs under mpiexec: test_adaptor_mpi.)"""

import os

import numpy as np
import pytest

import adaptors
from adaptors import draw
from adaptors.config import load
from insitu.pool import DaemonWorker
from insitu.pool.daemon import DaemonHandle, default_socket_path
from render.image import read_png

N = 41
X = np.linspace(-1.2, 1.2, N)
H = X[1] - X[0]
R = np.sqrt(X[:, None, None] ** 2 + X[None, :, None] ** 2 + X[None, None, :] ** 2)
SPARK = {"type": "spark", "params": {"master": "local[2]", "timeout": 30}}


def two_domains(field=R):
    """The field in two domains along x with one shared ghost layer (Blueprint ghosts)."""
    m = N // 2
    lo = adaptors.uniform({"r": field[:m + 2]}, origin=(-1.2,) * 3, spacing=(H,) * 3, ghost=((0, 1), (0, 0), (0, 0)),
                          domain_id=0)
    hi = adaptors.uniform({"r": field[m - 1:]}, origin=(-1.2 + (m - 1) * H, -1.2, -1.2), spacing=(H,) * 3,
                          ghost=((1, 0), (0, 0), (0, 0)), domain_id=1)
    return [lo, hi]


def config(prefix, engine):
    return {"engine": engine,
            "pipelines": {"pl": {"c": {"type": "contour", "params": {"field": "r", "iso_values": [0.7, 1.0]}}}},
            "scenes": {"s": {"plots": {"p": {"type": "pseudocolor", "pipeline": "pl"},
                                       "v": {"type": "volume", "field": "r",
                                             "color_table": {"name": "plasma", "opacity": [[0.0, 0.6], [1.2, 0.0]]}}},
                             "renders": {"r": {"image_width": 96, "image_height": 80, "image_prefix": prefix,
                                               "camera": {"azimuth": 35, "elevation": 25}}}}}}


def close_fraction(a, b) -> float:
    A, B = read_png(a).astype(int), read_png(b).astype(int)
    return float((np.abs(A - B) <= 1).all(axis=2).mean())


@pytest.fixture(scope="module")
def spark_adaptor(tmp_path_factory):
    out = tmp_path_factory.mktemp("spark")
    a = adaptors.Adaptor(config(str(out / "spark_%d"), SPARK))
    yield a, out
    a.finalize()


def test_frames_equal_the_embedded_engine(spark_adaptor):
    a, out = spark_adaptor
    with adaptors.Adaptor(config(str(out / "embedded_%d"), "embedded")) as e:
        assert e.execute(0, 0.0, two_domains()), e.results()["errors"]
    assert a.execute(0, 0.0, two_domains()), a.results()["errors"]
    assert a.about()["engine"] == "spark"
    assert (read_png(out / "spark_0.png")[..., 3] > 0).mean() > 0.1  # something drawn
    assert close_fraction(out / "spark_0.png", out / "embedded_0.png") >= 0.999
    # The ranks freed what they handed over: the daemon keeps nothing between steps.
    st = DaemonWorker(default_socket_path(None, directory=a._scenes.daemon_dir), timeout=5).stats().cache
    assert (st.resident_entries, st.host_entries, st.disk_entries) == (0, 0, 0)


def test_a_failing_task_is_reported_and_the_next_step_runs(spark_adaptor):
    a, out = spark_adaptor
    bad = R.copy()
    bad[3, 4, 5] = np.nan  # marching cubes refuses non-finite input, inside the Spark task
    assert a.execute(1, 0.1, two_domains(bad)) is False
    err = a.results()["errors"][-1]
    assert "step 1" in err and "Spark job" in err and "NaN" in err, err
    assert a.execute(2, 0.2, two_domains()), a.results()["errors"]
    assert os.path.exists(out / "spark_2.png")
    st = DaemonWorker(default_socket_path(None, directory=a._scenes.daemon_dir), timeout=5).stats().cache
    assert st.resident_entries == 0  # the failed step's blocks were freed too


def test_a_killed_daemon_is_replaced_at_the_next_step(spark_adaptor):
    a, out = spark_adaptor
    sock = default_socket_path(None, directory=a._scenes.daemon_dir)
    pid = DaemonWorker(sock, timeout=5).ping()
    handle = DaemonHandle(pid, sock)
    handle.kill()  # SIGKILL, and wait until it is gone
    assert not handle.alive()
    assert a.execute(3, 0.3, two_domains()), a.results()["errors"]
    assert DaemonWorker(sock, timeout=5).ping() != pid
    assert close_fraction(out / "spark_3.png", out / "spark_0.png") >= 0.999


def test_both_engines_draw_each_domain_through_draw_domain(spark_adaptor, tmp_path, monkeypatch):
    from test_draw import Spy  # importable in the daemon too: its sys.path is this process's

    a, out = spark_adaptor
    spy = Spy(str(tmp_path / "calls"))
    monkeypatch.setattr(draw, "draw_domain", spy)
    with adaptors.Adaptor(config(str(tmp_path / "embedded_%d"), "embedded")) as e:
        assert e.execute(4, 0.4, two_domains()), e.results()["errors"]
    here = spy.calls()
    assert len(here) == 2 and {(p, k) for p, k, _ in here} == {(os.getpid(), "DomainSpec")}
    assert a.execute(4, 0.4, two_domains()), a.results()["errors"]
    there = spy.calls()[2:]
    daemon = DaemonWorker(default_socket_path(None, directory=a._scenes.daemon_dir), timeout=5).ping()
    assert len(there) == 2 and {(p, k) for p, k, _ in there} == {(daemon, "DomainSpec")}
    assert sorted(x for *_, x in there) == sorted(x for *_, x in here)  # the same domains
    assert close_fraction(out / "spark_4.png", tmp_path / "embedded_4.png") >= 0.999


def test_the_spark_tasks_run_the_embedded_workers_package_step(spark_adaptor, tmp_path, monkeypatch):
    from insitu.engine.serving import StepServer
    from insitu.engine.spark import SparkEngine
    from insitu.pool import Worker

    a, out = spark_adaptor
    assert isinstance(a.engine, SparkEngine) and a._scenes.engine is a.engine  # the adaptor holds the driver
    steps, packages = [], []
    serve, run = StepServer.run, Worker.run

    def spark_step(self, records, *args, **kwargs):
        steps.append((args, kwargs))
        return serve(self, records, *args, **kwargs)

    def embedded_package(self, pkg):
        packages.append(pkg)
        return run(self, pkg)

    monkeypatch.setattr(StepServer, "run", spark_step)
    monkeypatch.setattr(Worker, "run", embedded_package)
    with adaptors.Adaptor(config(str(tmp_path / "embedded_%d"), "embedded")) as e:
        assert e.execute(5, 0.5, two_domains()), e.results()["errors"]
    assert a.execute(5, 0.5, two_domains()), a.results()["errors"]
    embedded = [op.args for p in packages for op in p.ops if op.kind == "exec"]
    assert [x[0] for x in embedded] == [draw.draw_block] * 2
    (spark_args, spark_kw), = steps
    assert spark_args[0] is draw.draw_block and spark_kw == {"with_key": True}
    # the same step: drawn by the same draw_domain, in the same view; Spark packs the image to move it
    assert spark_args[4] is embedded[0][2][4] is draw.draw_domain and spark_args[3] == embedded[0][2][3]
    assert spark_args[7] is True and embedded[0][2][7:] == ()


def test_spark_settings_are_checked():
    with pytest.raises(adaptors.ConfigError) as e:
        load({"engine": {"type": "spark", "params": {"master": 2, "cpu_daemons": 0, "timeout": -1,
                                                     "conf": {"a": [1]}}}})
    text = str(e.value)
    for path in ("engine/params/master", "engine/params/cpu_daemons", "engine/params/timeout",
                 "engine/params/conf/a"):
        assert path in text, text
    with pytest.raises(adaptors.ConfigError, match="engine/type: unknown engine 'sparkly'; known: embedded, spark"):
        load({"engine": "sparkly"})
