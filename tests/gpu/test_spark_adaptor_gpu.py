"""``engine: spark`` through the adaptor with device fields on the GPU node: the simulation's
CuPy arrays handed to the node's GPU daemon by CUDA IPC, drawn there by the serving job's
tasks, frames equal to the embedded engine's. A module of its own: one SparkContext per
process, and this one is the adaptor's. Needs PySpark and a Java runtime
(``../shared/device/spark-stage.sh`` brings both to the GPU node)."""

import numpy as np
import pytest

pytest.importorskip("pyspark", reason="needs PySpark (stage it on the GPU node: ../shared/device/spark-stage.sh)")
cp = pytest.importorskip("cupy", reason="needs CuPy")

from spark_needs import require_java  # noqa: E402


require_java()


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
