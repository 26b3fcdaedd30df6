"""Meshes of cells from a CuPy simulation through the adaptor: topology and fields on the
device, every filter and plot of them drawn there, no array copied to the host before the
frame; the frames look like those of the same mesh on the host."""

import numpy as np
import pytest

import adaptors
import insitu
from adaptors.mesh import unstructured
from render.cells import grid_cells

cp = pytest.importorskip("cupy", reason="needs CuPy")

N = 17


def mesh(xp):
    """Tetrahedra (6 per cube) of a grid on [-1, 1]^3, a radius point field, a cell field."""
    g = grid_cells(*[np.linspace(-1.0, 1.0, N)] * 3)
    c = g.connectivity.reshape(-1, 8)
    split = [(0, 1, 2, 6), (0, 2, 3, 6), (0, 3, 7, 6), (0, 7, 4, 6), (0, 4, 5, 6), (0, 5, 1, 6)]
    conn = np.concatenate([c[:, list(t)] for t in split], axis=1).reshape(-1)
    pts = g.points
    r = np.sqrt((pts ** 2).sum(axis=1))
    e = np.arange(conn.size // 4, dtype=np.float64) % 7
    return unstructured(xp.asarray(pts), xp.asarray(conn), "tet", {"r": xp.asarray(r), "e": xp.asarray(e)},
                        element=("e",))


def config():
    render = {"image_width": 128, "image_height": 96, "camera": {"azimuth": 30, "elevation": 20},
              "bg_color": [0, 0, 0, 0]}
    return {"pipelines": {"iso": {"c": {"type": "contour", "params": {"field": "r", "iso_values": [0.6]}}},
                          "cut": {"c": {"type": "clip", "params": {"plane": {"point": [0, 0, 0],
                                                                             "normal": [1, 0, 0]}}}},
                          "kept": {"t": {"type": "threshold", "params": {"field": "r", "max_value": 0.8}}},
                          "sl": {"s": {"type": "slice", "params": {"point": [0, 0, 0.1], "normal": [0, 0, 1]}}}},
            "scenes": {"iso": {"plots": {"p": {"type": "pseudocolor", "pipeline": "iso", "field": "r"}},
                               "renders": {"r": render}},
                       "mesh": {"plots": {"p": {"type": "pseudocolor", "field": "e"}}, "renders": {"r": render}},
                       "cut": {"plots": {"p": {"type": "pseudocolor", "pipeline": "cut", "field": "r"}},
                               "renders": {"r": render}},
                       "kept": {"plots": {"p": {"type": "pseudocolor", "pipeline": "kept"}}, "renders": {"r": render}},
                       "sl": {"plots": {"p": {"type": "pseudocolor", "pipeline": "sl", "field": "r"}},
                              "renders": {"r": render}},
                       "vol": {"plots": {"v": {"type": "volume", "field": "r", "min_value": 0.0, "max_value": 1.8}},
                               "renders": {"r": render}}}}


def test_cells_on_the_device_make_no_array_transfers_before_the_frame():
    m = mesh(cp)
    with adaptors.Adaptor(config()) as a:
        assert a.execute(0, 0.0, m), a.results()["errors"]  # warm-up: tables go to the device once
        with insitu.count_transfers() as c:
            assert a.execute(1, 0.1, m), a.results()["errors"]
    assert c.calls == 0, c.stats  # counts and ranges are scalar reads, counted apart


@pytest.mark.parametrize("scene", ["iso", "mesh", "cut", "kept", "sl", "vol"])
def test_device_frames_look_like_host_frames(tmp_path, scene):
    from render.image import read_png

    imgs = []
    for xp in (np, cp):
        cfg = config()
        cfg["scenes"] = {scene: cfg["scenes"][scene]}
        cfg["scenes"][scene]["renders"]["r"]["image_prefix"] = str(tmp_path / f"{xp.__name__}_%04d")
        with adaptors.Adaptor(cfg) as a:
            assert a.execute(0, 0.0, mesh(xp)), a.results()["errors"]
        imgs.append(read_png(tmp_path / f"{xp.__name__}_0000.png").astype(np.float64))
    host, dev = imgs
    assert host[..., 3].mean() > 5
    # the device rasterizer and OpenGL differ at pixel edges, not in what they draw
    assert ((host[..., 3] > 127) != (dev[..., 3] > 127)).mean() < 0.02
    assert np.abs(host - dev).mean() < 4.0


def test_a_contour_of_2d_cells_draws_the_same_lines_on_the_device(tmp_path):
    from render.image import read_png

    g = grid_cells(np.linspace(-1.0, 1.0, 41), np.linspace(-1.0, 1.0, 41))
    r = np.sqrt((g.points ** 2).sum(axis=1))
    cam = {"position": [0.0, 0.0, 4.0], "look_at": [0.0, 0.0, 0.0], "fov": 40.0}
    imgs = []
    for xp in (np, cp):
        cfg = {"pipelines": {"c": {"f": {"type": "contour", "params": {"field": "r", "iso_values": [0.3, 0.7]}}}},
               "scenes": {"s": {"plots": {"p": {"type": "pseudocolor", "pipeline": "c", "field": "r",
                                                "min_value": 0.0, "max_value": 1.5}},
                                "renders": {"r": {"image_width": 96, "image_height": 96, "camera": cam,
                                                  "bg_color": [0, 0, 0, 0],
                                                  "image_prefix": str(tmp_path / f"{xp.__name__}_%04d")}}}}}
        m = unstructured(xp.asarray(g.points[:, :2]), xp.asarray(g.connectivity), "quad", {"r": xp.asarray(r)})
        with adaptors.Adaptor(cfg) as a:
            assert a.execute(0, 0.0, m), a.results()["errors"]
            if xp is cp:
                with insitu.count_transfers() as c:
                    assert a.execute(1, 0.1, m), a.results()["errors"]
                # only the frame leaves the device (read back to write its PNG)
                assert (c.h2d_calls, c.d2h_calls, c.d2h_bytes) == (0, 1, 96 * 96 * 4), c.stats
        imgs.append(read_png(tmp_path / f"{xp.__name__}_0000.png").astype(np.float64))
    host, dev = imgs
    assert (host[..., 3] > 127).mean() > 0.005
    on_h, on_d = host[..., 3] > 127, dev[..., 3] > 127
    assert (on_h != on_d).mean() < 0.002  # the line rasterizers' rounding may move a pixel
    assert np.abs(host[on_h & on_d] - dev[on_h & on_d]).max() <= 3.0
