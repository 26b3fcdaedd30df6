"""The adaptor's embedded engine with device fields: its in-process worker draws the
simulation's CuPy arrays where they are (same memory, same device), the images come
back on the device, nothing crosses to the host, and no OpenGL context is made (device
meshes take the CUDA rasterizer)."""

import threading

import numpy as np
import pytest

import adaptors
import insitu
from adaptors import draw
from insitu.pool import Worker

cp = pytest.importorskip("cupy", reason="needs CuPy")

N = 65
X = np.linspace(-1.2, 1.2, N)
H = float(X[1] - X[0])
R = np.sqrt(X[:, None, None] ** 2 + X[None, :, None] ** 2 + X[None, None, :] ** 2)


def two_domains(field):
    m = N // 2
    return [adaptors.uniform({"r": field[:m + 2]}, origin=(-1.2,) * 3, spacing=(H,) * 3,
                             ghost=((0, 1), (0, 0), (0, 0)), domain_id=0),
            adaptors.uniform({"r": field[m - 1:]}, origin=(-1.2 + (m - 1) * H, -1.2, -1.2), spacing=(H,) * 3,
                             ghost=((1, 0), (0, 0), (0, 0)), domain_id=1)]


CONFIG = {"pipelines": {"pl": {"c": {"type": "contour", "params": {"field": "r", "iso_values": [0.8]}}}},
          "scenes": {"s": {"plots": {"p": {"type": "pseudocolor", "pipeline": "pl", "min_value": 0.7, "max_value": 0.9},
                                     "v": {"type": "volume", "field": "r", "min_value": 0.0, "max_value": 2.1}},
                           "renders": {"r": {"image_width": 256, "image_height": 192}}}}}


def test_the_engines_worker_draws_device_fields_in_place(monkeypatch):
    field = cp.asarray(R)
    seen, images = [], []
    original, run = draw.draw_domain, Worker.run

    def spy(fields, spec, view, **kw):
        seen.append([(f.data.ptr, f.device.id) for f in fields])
        return original(fields, spec, view, **kw)

    def package(self, pkg):
        out = run(self, pkg)
        images.extend(out)
        return out

    monkeypatch.setattr(draw, "draw_domain", spy)
    monkeypatch.setattr(Worker, "run", package)
    result = {}

    def simulate():  # a thread of its own: any OpenGL context made would be this thread's
        from render.gl import context

        device = cp.cuda.runtime.getDevice()
        with adaptors.Adaptor(CONFIG) as a:
            assert a.execute(0, 0.0, two_domains(field)), a.results()["errors"]  # warm-up
            with insitu.count_transfers() as c:
                assert a.execute(1, 0.1, two_domains(field)), a.results()["errors"]
            result.update(transfers=c.stats, device=(device, cp.cuda.runtime.getDevice()),
                          gl=threading.get_ident() in context._contexts, worker=a.engine.worker.device)

    t = threading.Thread(target=simulate)
    t.start()
    t.join()
    assert result, "the simulation thread failed"
    assert result["transfers"].calls == 0, result["transfers"]
    assert result["device"][0] == result["device"][1] and result["worker"] is None
    assert not result["gl"]  # device meshes: the CUDA rasterizer, no EGL context in the simulation
    base, end = field.data.ptr, field.data.ptr + field.nbytes
    assert len(seen) == 4 and all(base <= p < end and d == field.device.id for s in seen for p, d in s)
    assert len(images) == 4 and all(isinstance(im.volume, cp.ndarray) and isinstance(im.surface[0], cp.ndarray)
                                    for im in images)
