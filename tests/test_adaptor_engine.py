"""The adaptor runs through its engine: the embedded engine's in-process worker draws each
render's domains in one command package (the step the Spark daemons run:
tests/test_adaptor_spark.py), by reference and without host copies; an idle execute
sends it nothing; finalize closes it."""

import numpy as np
import pytest

import adaptors
from adaptors import draw
from insitu import arrays
from insitu.engine import EmbeddedEngine
from insitu.pool import Worker

N = 33
X = np.linspace(-1.0, 1.0, N)
H = float(X[1] - X[0])
R = np.sqrt(X[:, None, None] ** 2 + X[None, :, None] ** 2 + X[None, None, :] ** 2)


def two_domains(field=R):
    """The field in two domains along x with one shared ghost layer (Blueprint ghosts)."""
    m = N // 2
    return [adaptors.uniform({"r": field[:m + 2]}, origin=(-1.0,) * 3, spacing=(H,) * 3,
                             ghost=((0, 1), (0, 0), (0, 0)), domain_id=0),
            adaptors.uniform({"r": field[m - 1:]}, origin=(float(X[m - 1]), -1.0, -1.0), spacing=(H,) * 3,
                             ghost=((1, 0), (0, 0), (0, 0)), domain_id=1)]


def config(tmp_path, renders=("r",), **extra):
    return {"pipelines": {"pl": {"c": {"type": "contour", "params": {"field": "r", "iso_values": [0.6]}}}},
            "scenes": {"s": {"plots": {"p": {"type": "pseudocolor", "pipeline": "pl"},
                                       "v": {"type": "volume", "field": "r", "min_value": 0.0, "max_value": 1.7}},
                             "renders": {r: {"image_width": 40, "image_height": 30,
                                             "image_prefix": str(tmp_path / f"{r}_%d")} for r in renders}}},
            **extra}


@pytest.fixture
def packages(monkeypatch):
    """Every package a worker runs in this process, as ``[(worker, package)]``."""
    seen = []
    run = Worker.run

    def spy(self, package):
        seen.append((self, package))
        return run(self, package)

    monkeypatch.setattr(Worker, "run", spy)
    return seen


def test_each_render_is_one_package_on_the_engines_worker(tmp_path, packages):
    with adaptors.Adaptor(config(tmp_path, renders=("a", "b"))) as a:
        engine = a.engine
        assert isinstance(engine, EmbeddedEngine) and engine.device is None
        assert a.execute(0, 0.0, two_domains()), a.results()["errors"]
        assert engine.worker.round_trips == 2  # one per render, both domains in it
        assert a.execute(1, 0.1, two_domains()), a.results()["errors"]
        assert engine.worker.round_trips == 4
    assert len(packages) == 4 and all(w is engine.worker for w, _ in packages)
    for _, pkg in packages:
        # per domain: its fields sent as one block, draw_block on it, the image back as it is
        assert [op.kind for op in pkg.ops] == ["send", "exec", "recv"] * 2
        execs = [op for op in pkg.ops if op.kind == "exec"]
        assert [op.args[0] for op in execs] == [draw.draw_block] * 2
        assert [op.args[2][1] for op in execs] == [0, 1]  # the domains' keys
        assert all(op.kwargs == {"host": False} for op in pkg.ops if op.kind == "recv")
    assert a.engine is None  # finalize closed it


def test_the_worker_draws_the_simulations_arrays_by_reference(tmp_path, monkeypatch):
    seen = []
    original = draw.draw_domain

    def spy(fields, spec, view, **kw):
        seen.append(fields)
        return original(fields, spec, view, **kw)

    monkeypatch.setattr(draw, "draw_domain", spy)
    field = R.copy()
    doms = two_domains(field)
    with adaptors.Adaptor(config(tmp_path)) as a:
        with arrays.count_transfers() as c:
            assert a.execute(0, 0.0, doms), a.results()["errors"]
    assert c.calls == 0 and c.bytes == 0, c.stats
    assert len(seen) == 2
    for fields, dom in zip(seen, doms):
        # the contour's field and the volume's (one per dataset): the simulation's memory
        assert len(fields) == 2 and all(np.shares_memory(f, field) for f in fields)
        assert all(f.shape == dom["fields"]["r"]["values"].shape for f in fields)


def test_an_idle_execute_sends_the_engine_nothing(tmp_path, packages):
    cfg = config(tmp_path, triggers={"t": {"every": 5, "actions": ["s"]}})
    with adaptors.Adaptor(cfg) as a:
        for step in range(1, 5):
            assert a.execute(step, 0.0, two_domains())
        a.steer({"pause": True})
        assert a.execute(5, 0.0, two_domains())
        assert packages == [] and a.engine.worker.round_trips == 0
        a.steer({"pause": False})
        assert a.execute(10, 0.0, two_domains()), a.results()["errors"]
        assert a.engine.worker.round_trips == 1


def test_a_drawing_failure_names_the_worker_step_and_the_next_step_runs(tmp_path):
    bad = R.copy()
    bad[3, 4, 5] = np.nan  # marching cubes refuses non-finite input, inside the package
    with adaptors.Adaptor(config(tmp_path)) as a:
        assert a.execute(0, 0.0, two_domains(bad)) is False
        err = a.results()["errors"][-1]
        assert "step 0" in err and "NaN" in err and "in worker operation 1 (exec)" in err, err
        assert a.execute(1, 0.1, two_domains()), a.results()["errors"]
        assert a.engine.worker.cache.stats().resident_entries == 0  # nothing kept between steps


def test_finalize_closes_the_engine_once(tmp_path, monkeypatch):
    closed = []
    close = EmbeddedEngine.close
    monkeypatch.setattr(EmbeddedEngine, "close", lambda self: (closed.append(self), close(self)))
    a = adaptors.Adaptor(config(tmp_path))
    engine = a.engine
    a.finalize()
    a.finalize()
    assert closed == [engine]
