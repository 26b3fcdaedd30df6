"""The adaptor with a CuPy simulation: device fields in, no host copies before the frame."""

import numpy as np
import pytest

import adaptors
import insitu

cp = pytest.importorskip("cupy", reason="needs CuPy")

N = 65
X = np.linspace(-1.2, 1.2, N)
R = np.sqrt(X[:, None, None] ** 2 + X[None, :, None] ** 2 + X[None, None, :] ** 2)


def config(prefix=None):
    render = {"image_width": 256, "image_height": 192, "camera": {"azimuth": 30, "elevation": 20}}
    if prefix:
        render["image_prefix"] = prefix
    return {"pipelines": {"pl": {"c": {"type": "contour", "params": {"field": "r", "iso_values": [0.8]}}}},
            "scenes": {"s": {"plots": {"p": {"type": "pseudocolor", "pipeline": "pl", "field": "r",
                                             "min_value": 0.7, "max_value": 0.9},
                                       "v": {"type": "volume", "field": "r", "min_value": 0.0, "max_value": 2.1,
                                             "color_table": {"name": "inferno", "opacity": [[0, 0.8], [1.2, 0.0]]}}},
                             "renders": {"r": render}}}}


def mesh(field):
    return adaptors.uniform({"r": field}, origin=(-1.2,) * 3, spacing=(X[1] - X[0],) * 3)


def test_device_fields_make_no_host_transfers_until_the_frame(tmp_path):
    field = cp.asarray(R)  # the simulation's own device array
    with adaptors.Adaptor(config()) as a:
        assert a.execute(0, 0.0, mesh(field)), a.results()["errors"]  # warm-up: tables, GL buffers
        with insitu.count_transfers() as c:
            assert a.execute(1, 0.1, mesh(field)), a.results()["errors"]
    assert c.calls == 0, c.stats  # scalar reads (global ranges, mesh sizes) are counted apart
    assert a.results()["frames"] == []


def test_device_and_host_simulations_draw_the_same_frame(tmp_path):
    from render.image import read_png

    with adaptors.Adaptor(config(str(tmp_path / "gpu_%d"))) as a:
        assert a.execute(0, 0.0, mesh(cp.asarray(R))), a.results()["errors"]
    with adaptors.Adaptor(config(str(tmp_path / "cpu_%d"))) as a:
        assert a.execute(0, 0.0, mesh(R)), a.results()["errors"]
    A = read_png(tmp_path / "gpu_0.png").astype(int)
    B = read_png(tmp_path / "cpu_0.png").astype(int)
    assert (A[..., 3] > 0).mean() > 0.05
    assert (np.abs(A - B) <= 2).all(axis=2).mean() > 0.999
