"""Colour tables and mesh plots on the GPU: the CUDA rasterizer takes any table (control
points, VTK-m presets) as an argument, uploaded once per contents, and draws the same frame
as the Numba one; the CUDA line rasterizer draws the same edges as the Numba one."""

import numpy as np
import pytest

import adaptors
import insitu
from render import colormap as cm
from render.camera import Camera
from render.cells import grid_cells
from render.cells.edges import cell_edges, grid_edges
from render.contour import marching_cubes
from render.raster import rasterize_lines
from render.surface import SurfaceRenderer

cp = pytest.importorskip("cupy")

POINTS = [[0.0, 0.1, 0.0, 0.9], [0.2, 0.9, 0.1, 0.0], [0.55, 1.0, 1.0, 0.3], [1.0, 0.0, 0.6, 0.2]]


def torus_mesh(n=64):
    x = np.linspace(-1, 1, n)
    X, Y, Z = np.meshgrid(x, x, x, indexing="ij")
    h = 2 / (n - 1)
    return marching_cubes((np.sqrt(X ** 2 + Y ** 2) - 0.55) ** 2 + Z ** 2, 0.06, spacing=(h, h, h),
                          origin=(-1, -1, -1), values=X + Z)


@pytest.mark.parametrize("name", [cm.compose(None, POINTS), cm.compose("X Ray", POINTS), "Jet", "Cool to Warm"])
def test_cuda_rasterizer_draws_any_table_as_numba_and_uploads_it_once(name):
    mesh = torus_mesh()
    cam = Camera.fit((-1, 1, -1, 1, -1, 1), azimuth=30, elevation=35)
    kw = dict(camera=cam, colormap=name, vmin=-1.5, vmax=1.5)
    ref, ref_depth = SurfaceRenderer(320, 240, "software").render(*mesh, **kw)
    soft = SurfaceRenderer(320, 240, "software")
    dmesh = [cp.asarray(a) for a in mesh]
    cm._DEVICE_TABLES.clear()
    with insitu.count_transfers() as first:
        soft.render(*dmesh, **kw)
    assert first.h2d_calls == 1 and first.h2d_bytes == cm.table(name).nbytes  # the table, once
    with insitu.no_host_transfers(allow_scalars=True):  # the mesh's range is not read: vmin, vmax given
        rgba, depth = soft.render(*dmesh, **kw)
    rgba, depth = cp.asnumpy(rgba), cp.asnumpy(depth)
    diff = np.abs(rgba - ref).max(axis=2)
    assert np.isfinite(depth).sum() > 5000
    assert (diff <= 1.01 / 255).mean() >= 0.9995, (diff > 1.01 / 255).sum()


def test_the_volume_transfer_function_shares_the_device_tables():
    from render.volume import TransferFunction

    tf = TransferFunction.from_table(np.c_[cm.table("Jet"), np.ones(len(cm.table("Jet")))], 0.0, 1.0)
    cm._DEVICE_TABLES.clear()
    with insitu.count_transfers() as c:
        a = tf.device_table(0)
        b = TransferFunction.from_table(tf.table, 2.0, 5.0).device_table(0)  # same contents, another range
    assert a is b and c.h2d_calls == 1


def lines_both(verts, segs, cam, bounds):
    cpu = rasterize_lines(verts.astype(np.float32), segs.astype(np.int32), cam, bounds, 200, 160, (0.2, 0.4, 0.9))
    dv, ds = cp.asarray(verts, cp.float32), cp.asarray(segs, cp.int32)
    with insitu.no_host_transfers():
        gpu = rasterize_lines(dv, ds, cam, bounds, 200, 160, (0.2, 0.4, 0.9))
    return cpu, tuple(cp.asnumpy(a) for a in gpu)


def test_cuda_lines_equal_numba_lines():
    nodes, segs = grid_edges((5, 4, 6))
    verts = nodes * 0.4 - 1.0
    bounds = tuple(np.ravel(np.c_[verts.min(0), verts.max(0)]))
    for az, el in ((30, 20), (-110, -35)):
        cam = Camera.fit(bounds, azimuth=az, elevation=el)
        (c_rgba, c_depth), (g_rgba, g_depth) = lines_both(verts, segs, cam, bounds)
        on = c_rgba[..., 3] > 0
        assert on.sum() > 500
        # float32 on the GPU, float64 on the CPU: a step may round to the next pixel now and then
        assert (on == (g_rgba[..., 3] > 0)).mean() > 0.995
        both = on & (g_rgba[..., 3] > 0)
        np.testing.assert_allclose(g_depth[both], c_depth[both], rtol=1e-3)
        np.testing.assert_array_equal(g_rgba[both], c_rgba[both])


def test_cell_edges_on_the_device_equal_the_host_ones():
    ax = np.linspace(-1, 1, 4)
    c = grid_cells(ax, ax, ax)
    host = cell_edges(c)
    from render.cells import CellMesh

    dev = cell_edges(CellMesh(*(cp.asarray(a) for a in (c.points, c.connectivity, c.offsets, c.types))))
    np.testing.assert_array_equal(cp.asnumpy(dev), host)
    assert len(host) == 6 * 3 * 4 * 2 - 12 * 3  # the 3 x 3 x 3 box's surface grid lines, shared ones once


def scene(prefix=None):
    render = {"image_width": 96, "image_height": 80, "camera": {"azimuth": 30.0, "elevation": 20.0}}
    if prefix:
        render["image_prefix"] = prefix
    table = {"control_points": [{"type": "rgb", "position": 0.0, "color": [0.8, 0.1, 0.1]},
                                {"type": "rgb", "position": 1.0, "color": [0.1, 0.2, 0.8]}]}
    return [{"action": "add_scenes", "scenes": {"s1": {
        "plots": {"p1": {"type": "pseudocolor", "field": "T", "color_table": table}, "p2": {"type": "mesh"}},
        "renders": {"r1": render}}}}]


def grid(xp):
    ax = np.linspace(-1, 1, 9)
    x = np.meshgrid(ax, ax, ax, indexing="ij")[0]
    return adaptors.uniform({"T": xp.asarray(2.0 + x)}, origin=(-1.0,) * 3, spacing=(0.25,) * 3)


def test_adaptor_draws_control_point_tables_and_mesh_plots_on_the_gpu_without_transfers():
    with adaptors.Adaptor(scene()) as a:
        assert a.execute(0, 0.0, grid(cp)), a.results()["errors"]  # warm-up: the table and the grid's lines go up
        with insitu.count_transfers() as c:
            assert a.execute(1, 0.0, grid(cp)), a.results()["errors"]
    assert c.calls == 0, c.stats


def test_adaptor_draws_control_point_tables_and_mesh_plots_on_the_gpu_as_on_the_cpu(tmp_path):
    from render.image import read_png

    for xp, name in ((cp, "gpu"), (np, "cpu")):
        with adaptors.Adaptor(scene(str(tmp_path / f"{name}_%d"))) as a:
            assert a.execute(0, 0.0, grid(xp)), a.results()["errors"]
    A, B = (read_png(tmp_path / f"{n}_0.png").astype(int) for n in ("gpu", "cpu"))
    lines = (B[..., :3] == 0).all(-1)  # the mesh plot's black edges on the white background
    assert lines.sum() > 100 and (A[..., 3] > 0).all()
    assert (np.abs(A - B) <= 2).all(axis=2).mean() > 0.99  # (CUDA surface vs OpenGL on the host, lines both)
