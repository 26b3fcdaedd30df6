"""Ascent's field filters (log/log2/log10, composite_vector, divergence, vorticity,
qcriterion) and pipeline chaining on CuPy fields: the same values as on the host, results
on the device, no array copied between host and device."""

import numpy as np
import pytest

import adaptors
from adaptors.config import load
from adaptors.context import Context
from adaptors.mesh import parse, unstructured
from adaptors.pipelines import pipeline_order, run_pipeline
from insitu import arrays
from render.cells import grid_cells

cp = pytest.importorskip("cupy", reason="needs CuPy")

N = 17
H = 2.0 / (N - 1)

PIPELINES = {
    "pl1": {"l": {"type": "log", "params": {"field": "T", "output_name": "lnT"}},
            "l2": {"type": "log2", "params": {"field": "T", "clamp_min_value": 1.5}},
            "c": {"type": "composite_vector", "params": {"field1": "T", "field2": "lnT", "output_name": "vec2"}}},
    "pl2": {"pipeline": "pl1",
            "d": {"type": "divergence", "params": {"field": "velocity", "output_name": "div"}},
            "v": {"type": "vorticity", "params": {"field": "velocity", "output_name": "vort"}},
            "q": {"type": "qcriterion", "params": {"field": "velocity", "output_name": "q"}},
            "t": {"type": "log10", "params": {"field": "lnT"}}},
}
NAMES = ["lnT", "log2(T)", "vec2/x", "vec2/y", "div", "vort/x", "vort/y", "vort/z", "q", "log10(lnT)"]


def grid(xp):
    x, y, z = np.meshgrid(*[np.linspace(-1.0, 1.0, N)] * 3, indexing="ij")
    m = adaptors.uniform({"T": xp.asarray(2.0 + x)}, origin=(-1.0,) * 3, spacing=(H,) * 3)
    m["fields"]["velocity"] = {"association": "vertex", "topology": "mesh",
                               "values": {"u": xp.asarray(np.asfortranarray(np.sin(2 * y) * z)),
                                          "v": xp.asarray(np.asfortranarray(np.cos(x) * z * z)),
                                          "w": xp.asarray(np.asfortranarray(np.exp(0.5 * x) * y))}}
    return m


def hexes(xp):
    c = grid_cells(*[np.linspace(-1.0, 1.0, N)] * 3)
    p = c.points
    x, y, z = p[:, 0], p[:, 1], p[:, 2]
    m = unstructured(xp.asarray(p), xp.asarray(c.connectivity), "hex", {"T": xp.asarray(2.0 + x)})
    m["fields"]["velocity"] = {"association": "vertex", "topology": "mesh",
                               "values": {"u": xp.asarray(np.sin(2 * y) * z), "v": xp.asarray(np.cos(x) * z * z),
                                          "w": xp.asarray(np.exp(0.5 * x) * y)}}
    return m


def run(mesh):
    cfg = load({"pipelines": PIPELINES})
    domains = parse(mesh, cells=True)
    out: dict = {}
    for p in pipeline_order(cfg["pipelines"]):
        out[p] = run_pipeline(p, cfg["pipelines"][p], domains, Context(), {}, out)
    (d,) = out["pl2"].domains
    return d


@pytest.mark.parametrize("make", [grid, hexes], ids=["grid", "hexes"])
def test_filters_on_the_device_match_the_host_without_transfers(make):
    host = run(make(np))
    dev_mesh = make(cp)
    run(dev_mesh)  # warm-up: kernels compile, tables upload
    with arrays.count_transfers() as c:
        dev = run(dev_mesh)
    assert c.calls == 0, c.stats
    for name in NAMES:
        v = dev.fields[name].values
        assert isinstance(v, cp.ndarray), name
        np.testing.assert_allclose(cp.asnumpy(v), np.asarray(host.fields[name].values), rtol=1e-9, atol=1e-12,
                                   err_msg=name)
