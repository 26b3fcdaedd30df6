"""Surface rendering on the GPU: through CUDA-GL interop (the same image as the upload
path) and with the CUDA software rasterizer (the same image as Numba's and OpenGL's);
no host transfers until the final frame."""

import os
import sys

import numpy as np
import pytest

import insitu
from render.camera import Camera
from render.contour import marching_cubes
from render.surface import SurfaceRenderer

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/: shared meshes
from test_surface import uv_sphere

cp = pytest.importorskip("cupy", reason="needs CuPy")


def field(n=64):
    x = np.linspace(-1, 1, n)
    X, Y, Z = np.meshgrid(x, x, x, indexing="ij")
    return (np.sqrt(X ** 2 + Y ** 2) - 0.55) ** 2 + Z ** 2, X + Z


# The torus of field() at level 0.06 in world coordinates, and how the tests colour and frame it.
TORUS = dict(spacing=(2 / 63,) * 3, origin=(-1, -1, -1))
KW = dict(vmin=-2.0, vmax=2.0, bounds=(-1, 1, -1, 1, -1, 1))


@pytest.fixture
def renderer():
    r = SurfaceRenderer(320, 240, "gl")
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
    mesh = marching_cubes(vol, 0.06, **TORUS, values=val)
    cam = Camera.fit((-1, 1, -1, 1, -1, 1), azimuth=30, elevation=35)
    kw = dict(camera=cam, **KW)
    host_rgba, host_depth = renderer.render(*mesh, **kw)
    dmesh = [cp.asarray(a) for a in mesh]
    with insitu.no_host_transfers():
        rgba, depth = renderer.render(*dmesh, **kw)
    assert isinstance(rgba, cp.ndarray) and isinstance(depth, cp.ndarray)
    np.testing.assert_allclose(cp.asnumpy(rgba), host_rgba, atol=1 / 255)
    np.testing.assert_array_equal(cp.asnumpy(depth), host_depth)


def test_marching_cubes_writes_into_the_gl_buffers(renderer):
    vol, val = field()
    dvol, dval = cp.asarray(vol), cp.asarray(val)
    ref = marching_cubes(dvol, 0.06, **TORUS, values=dval)
    nv, nf = len(ref[0]), len(ref[1])
    cam = Camera.fit((-1, 1, -1, 1, -1, 1), azimuth=30, elevation=35)
    kw = dict(camera=cam, **KW)
    want, _ = renderer.render(*ref, **kw)
    with insitu.count_transfers() as counted:
        with renderer.mesh_buffers(nv, nf, values=True) as (bv, bf, bn, bs):
            marching_cubes(dvol, 0.06, **TORUS, values=dval, out=(bv, bf, bn, bs))
        rgba, depth = renderer.draw(nf, values=True, device=True, **kw)
    assert counted.bytes == 0  # only the mesh's counts were read back, as scalars
    cp.testing.assert_array_equal(rgba, want)


def torus_mesh():
    vol, val = field()
    return marching_cubes(vol, 0.06, **TORUS, values=val)


@pytest.mark.parametrize("azimuth,elevation", [(30, 35), (-120, -20)])
def test_cuda_rasterizer_equals_numba_and_opengl(renderer, azimuth, elevation):
    mesh = torus_mesh()
    cam = Camera.fit((-1, 1, -1, 1, -1, 1), azimuth=azimuth, elevation=elevation)
    numba_rgba, numba_depth = SurfaceRenderer(320, 240, "software").render(*mesh, camera=cam, **KW)
    gl_rgba, gl_depth = renderer.render(*mesh, camera=cam, **KW)
    soft = SurfaceRenderer(320, 240, "software")
    dmesh = [cp.asarray(a) for a in mesh]
    soft.render(*dmesh, camera=cam, **KW)  # the colour table goes up once per contents (3 KB), here
    with insitu.no_host_transfers():
        rgba, depth = soft.render(*dmesh, camera=cam, **KW)
    assert isinstance(rgba, cp.ndarray) and isinstance(depth, cp.ndarray)
    rgba, depth = cp.asnumpy(rgba), cp.asnumpy(depth)
    assert (np.isfinite(depth)).sum() > 5000
    for ref_rgba, ref_depth, frac in ((numba_rgba, numba_depth, 0.9995), (gl_rgba, gl_depth, 0.999)):
        diff = np.abs(rgba - ref_rgba).max(axis=2)
        assert (diff <= 1.01 / 255).mean() >= frac, (diff > 1.01 / 255).sum()
        hit = np.isfinite(depth) & np.isfinite(ref_depth)
        # Where two surfaces meet at a silhouette the rasterizers may pick different triangles.
        close = np.abs(depth[hit] - ref_depth[hit]) <= 1e-4 * ref_depth[hit]
        assert close.mean() >= frac, (~close).sum()


def test_cuda_rasterizer_draws_what_marching_cubes_wrote():
    vol, val = field()
    dvol, dval = cp.asarray(vol), cp.asarray(val)
    ref = marching_cubes(dvol, 0.06, **TORUS, values=dval)
    nv, nf = len(ref[0]), len(ref[1])
    cam = Camera.fit((-1, 1, -1, 1, -1, 1), azimuth=30, elevation=35)
    r = SurfaceRenderer(320, 240)  # auto: device meshes take the software path
    want, want_depth = r.render(*ref, camera=cam, **KW)
    with insitu.count_transfers() as counted:
        with r.mesh_buffers(nv, nf, values=True) as (bv, bf, bn, bs):
            assert isinstance(bv, cp.ndarray)
            marching_cubes(dvol, 0.06, **TORUS, values=dval, out=(bv, bf, bn, bs))
        rgba, depth = r.draw(nf, values=True, camera=cam, device=True, **KW)
    assert counted.bytes == 0
    cp.testing.assert_array_equal(rgba, want)
    cp.testing.assert_array_equal(depth, want_depth)


def test_cuda_rasterizer_big_triangles_and_near_clipping():
    # Screen-filling triangles go to the warp-wide path; a camera inside a sphere clips
    # triangles at the near plane. Both against the Numba rasterizer.
    quad = np.float32([[-50, -50, 0], [50, -50, 0], [50, 50, 0], [-50, 50, 0]])
    quad_f, quad_n = np.int32([[0, 1, 2], [0, 2, 3]]), np.tile(np.float32([0, 0, 1]), (4, 1))
    cases = [((quad, quad_f, quad_n), Camera((0, 0, 2), (0, 0, 0), fov=50, near=0.5, far=5.0)),
             (uv_sphere(r=3.0), Camera((0, 0, 0.5), (0, 0, -1), fov=60, near=0.1, far=10.0))]
    for mesh, cam in cases:
        want = SurfaceRenderer(300, 200, "software").render(*mesh, camera=cam)
        got = SurfaceRenderer(300, 200, "software").render(*[cp.asarray(a) for a in mesh], camera=cam)
        assert np.isfinite(want[1]).all()
        diff = np.abs(cp.asnumpy(got[0]) - want[0]).max(axis=2)
        assert (diff <= 1.01 / 255).mean() >= 0.999
        np.testing.assert_allclose(cp.asnumpy(got[1]), want[1], rtol=1e-4)  # float32 on the GPU, float64 in Numba


def test_cuda_rasterizer_skips_triangles_with_foreign_indices():
    # A device mesh is not read back to check its indices; a triangle pointing past the
    # vertices draws nothing instead of reading foreign memory.
    quad = cp.asarray(np.float32([[-1, -1, 0], [1, -1, 0], [1, 1, 0], [-1, 1, 0]]))
    normals = cp.asarray(np.tile(np.float32([0, 0, 1]), (4, 1)))
    cam = Camera((0, 0, 3), (0, 0, 0), fov=40)
    good = cp.asarray(np.int32([[0, 1, 2], [0, 2, 3]]))
    bad = cp.asarray(np.int32([[0, 1, 2], [0, 2, 3], [0, 1, 1 << 30], [-5, 1, 2]]))
    r = SurfaceRenderer(64, 48, "software")
    want = r.render(quad, good, normals, camera=cam)
    got = r.render(quad, bad, normals, camera=cam)
    cp.testing.assert_array_equal(got[0], want[0])
    cp.testing.assert_array_equal(got[1], want[1])
