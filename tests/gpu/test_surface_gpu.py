"""Surface rendering through CUDA-GL interop: the same image as the upload path, and no
host transfers until the final frame."""

import numpy as np
import pytest

import insitu
from render.camera import Camera
from render.contour import marching_cubes
from render.surface import SurfaceRenderer

cp = pytest.importorskip("cupy", reason="needs CuPy")


def field(n=64):
    x = np.linspace(-1, 1, n)
    X, Y, Z = np.meshgrid(x, x, x, indexing="ij")
    return (np.sqrt(X ** 2 + Y ** 2) - 0.55) ** 2 + Z ** 2, X + Z


@pytest.fixture
def renderer():
    r = SurfaceRenderer(320, 240)
    if not r.interop:
        r.close()
        pytest.skip(f"needs CUDA-GL interop (context: {r.ctx.renderer}, {r.ctx.platform})")
    yield r
    r.close()


def test_context_is_on_the_cuda_device(renderer):
    assert "NVIDIA" in renderer.ctx.renderer
    assert renderer.ctx.platform == f"EGL device of CUDA device {cp.cuda.runtime.getDevice()}"


def test_interop_image_equals_upload_image(renderer):
    vol, val = field()
    h = 2 / 63
    mesh = marching_cubes(vol, 0.06, spacing=(h, h, h), origin=(-1, -1, -1), values=val)
    cam = Camera.fit((-1, 1, -1, 1, -1, 1), azimuth=30, elevation=35)
    kw = dict(camera=cam, vmin=-2.0, vmax=2.0, bounds=(-1, 1, -1, 1, -1, 1))
    host_rgba, host_depth = renderer.render(*mesh, **kw)
    dmesh = [cp.asarray(a) for a in mesh]
    with insitu.no_host_transfers():
        rgba, depth = renderer.render(*dmesh, **kw)
    assert isinstance(rgba, cp.ndarray) and isinstance(depth, cp.ndarray)
    np.testing.assert_allclose(cp.asnumpy(rgba), host_rgba, atol=1 / 255)
    np.testing.assert_array_equal(cp.asnumpy(depth), host_depth)


def test_marching_cubes_writes_into_the_gl_buffers(renderer):
    vol, val = field()
    h = 2 / 63
    dvol, dval = cp.asarray(vol), cp.asarray(val)
    ref = marching_cubes(dvol, 0.06, spacing=(h, h, h), origin=(-1, -1, -1), values=dval)
    nv, nf = len(ref[0]), len(ref[1])
    cam = Camera.fit((-1, 1, -1, 1, -1, 1), azimuth=30, elevation=35)
    kw = dict(camera=cam, vmin=-2.0, vmax=2.0, bounds=(-1, 1, -1, 1, -1, 1))
    want, _ = renderer.render(*ref, **kw)
    with insitu.count_transfers() as counted:
        with renderer.mesh_buffers(nv, nf, values=True) as (bv, bf, bn, bs):
            marching_cubes(dvol, 0.06, spacing=(h, h, h), origin=(-1, -1, -1), values=dval, out=(bv, bf, bn, bs))
        rgba, depth = renderer.draw(nf, values=True, device=True, **kw)
    assert counted.bytes == 0  # only the mesh's counts were read back, as scalars
    cp.testing.assert_array_equal(rgba, want)
