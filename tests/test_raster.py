"""The software rasterizer (render/raster, Numba here) against OpenGL (Mesa llvmpipe) and
geometry: the same image, no cracks between triangles, near-plane clipping, large
triangles."""

import numpy as np
import pytest

from render.camera import Camera
from render.contour import marching_cubes
from render.surface import SurfaceRenderer, render_mesh
from test_surface import uv_sphere


def torus(n=48):
    x = np.linspace(-1, 1, n)
    X, Y, Z = np.meshgrid(x, x, x, indexing="ij")
    vol = (np.sqrt(X ** 2 + Y ** 2) - 0.55) ** 2 + Z ** 2
    h = 2 / (n - 1)
    return marching_cubes(vol, 0.06, spacing=(h, h, h), origin=(-1, -1, -1), values=X + Z)


def both(*mesh, **kw):
    return [render_mesh(*mesh, rasterizer=r, **kw) for r in ("gl", "software")]


def assert_same_image(a, b, frac=0.999):
    diff = np.abs(a[0] - b[0]).max(axis=2)
    assert (diff <= 1.01 / 255).mean() >= frac, f"{(diff > 1.01 / 255).sum()} pixels differ"
    hit = np.isfinite(a[1]) & np.isfinite(b[1])
    # Where two surfaces meet at a silhouette the two may pick different triangles.
    close = np.abs(b[1][hit] - a[1][hit]) <= 1e-4 * np.abs(a[1][hit])
    assert close.mean() >= frac, f"{(~close).sum()} depths differ"


@pytest.mark.parametrize("azimuth,elevation,cmap", [(30, 35, "viridis"), (-70, 10, "plasma"), (150, -60, "coolwarm")])
def test_software_image_equals_opengl(azimuth, elevation, cmap):
    cam = Camera.fit((-1, 1, -1, 1, -1, 1), azimuth=azimuth, elevation=elevation)
    gl, sw = both(*torus(), width=320, height=240, camera=cam, colormap=cmap, vmin=-1.5, vmax=1.5)
    assert (gl[0][..., 3] > 0).sum() > 5000
    assert_same_image(gl, sw)


def test_no_cracks_between_triangles():
    # A square cut into many triangles with jittered inner vertices covers exactly the
    # pixels of the same square drawn as two triangles: shared edges neither drop nor
    # add a pixel, whatever the rounding.
    rng = np.random.default_rng(3)
    m = 40
    u = np.linspace(-1, 1, m + 1)
    X, Y = np.meshgrid(u, u, indexing="ij")
    jit = rng.uniform(-0.4, 0.4, (2, m + 1, m + 1)) * (2 / m)
    inner = np.zeros((m + 1, m + 1), bool)
    inner[1:-1, 1:-1] = True
    X, Y = X + jit[0] * inner, Y + jit[1] * inner
    verts = np.stack([X.ravel(), Y.ravel(), np.zeros(X.size)], 1).astype(np.float32)
    i, j = np.meshgrid(np.arange(m), np.arange(m), indexing="ij")
    a = i * (m + 1) + j
    b, c, d = a + 1, a + m + 1, a + m + 2
    faces = np.concatenate([np.stack([a, b, d], -1).reshape(-1, 3), np.stack([a, d, c], -1).reshape(-1, 3)])
    normals = np.tile(np.float32([0, 0, 1]), (len(verts), 1))
    quad = np.float32([[-1, -1, 0], [1, -1, 0], [1, 1, 0], [-1, 1, 0]])
    cam = Camera((0.3, -0.2, 3.0), (0.05, 0.02, 0.0), fov=40)
    kw = dict(width=257, height=191, camera=cam, rasterizer="software")
    fine, _ = render_mesh(verts, faces.astype(np.int32), normals, **kw)
    coarse, _ = render_mesh(quad, np.int32([[0, 1, 2], [0, 2, 3]]), normals[:4], **kw)
    assert (coarse[..., 3] > 0).sum() > 10000
    np.testing.assert_array_equal(fine[..., 3] > 0, coarse[..., 3] > 0)


def test_near_plane_cuts_the_mesh_as_opengl_does():
    # The near plane slices the front of the sphere: both rasterizers show its inside.
    v, f, n = uv_sphere()
    cam = Camera((0, 0, 4), (0, 0, 0), fov=40, near=3.5, far=10.0)
    gl, sw = both(v, f, n, width=200, height=150, camera=cam)
    assert np.nanmin(np.where(np.isfinite(sw[1]), sw[1], np.nan)) >= 3.5
    assert (np.isfinite(sw[1]) & (sw[1] > 4.0)).sum() > 1000  # the far half, seen through the cut
    assert_same_image(gl, sw, frac=0.995)


def test_camera_inside_the_mesh():
    # Vertices behind the eye: triangles are clipped at the near plane, not wrapped round.
    v, f, n = uv_sphere(r=3.0)
    cam = Camera((0, 0, 0.5), (0, 0, -1), fov=60, near=0.1, far=10.0)
    gl, sw = both(v, f, n, width=160, height=120, camera=cam)
    assert np.isfinite(sw[1]).all()  # the sphere surrounds the eye: every pixel is covered
    assert_same_image(gl, sw, frac=0.995)


def test_screen_filling_triangles_and_plane_depth():
    # Two triangles larger than the view: every pixel, depth of the plane z = 0 from z = 2.
    quad = np.float32([[-50, -50, 0], [50, -50, 0], [50, 50, 0], [-50, 50, 0]])
    normals = np.tile(np.float32([0, 0, 1]), (4, 1))
    cam = Camera((0, 0, 2), (0, 0, 0), fov=50, near=0.5, far=5.0)
    rgba, depth = render_mesh(quad, np.int32([[0, 1, 2], [0, 2, 3]]), normals, width=300, height=200, camera=cam,
                              rasterizer="software")
    assert (rgba[..., 3] == 1).all()
    np.testing.assert_allclose(depth, 2.0, rtol=1e-6)


def test_rasterizer_name_is_checked():
    with pytest.raises(ValueError, match="rasterizer: expected one of auto, gl, software, got 'vulkan'"):
        SurfaceRenderer(8, 8, "vulkan")
    with pytest.raises(ValueError, match=r"faces: indices must lie in \[0, 3\), got 0..3"):
        render_mesh(np.zeros((3, 3), np.float32), np.int32([[0, 1, 3]]), np.zeros((3, 3), np.float32),
                    rasterizer="software")
    with pytest.raises(ValueError, match="colormap name"):
        render_mesh(*uv_sphere(8, 4), np.zeros(8 * 5, np.float32), width=8, height=8, colormap="nope",
                    rasterizer="software")


# -- lines (mesh plots) ---------------------------------------------------------------------------------


def test_lines_cover_their_projection_and_pass_the_depth_test_of_their_own_surface():
    from render.cells.edges import grid_edges
    from render.raster import rasterize_lines

    nodes, segs = grid_edges((4, 3, 1))  # a flat 3 x 2 grid in z = 0
    verts = (nodes * 0.5).astype(np.float32)
    bounds = (0, 1.5, 0, 1, 0, 0.1)  # the depth range: the plane and one nearer (below)
    cam = Camera((0.75, 0.5, 3.0), (0.75, 0.5, 0.0))
    w, h = 90, 70
    rgba, depth = rasterize_lines(verts, segs, cam, bounds, w, h, (1.0, 0.5, 0.0))
    assert len(segs) == 17  # 3 rows of 3 segments, 4 columns of 2
    near, far = cam.clip_range(bounds)
    m = cam.projection_matrix(w, h, near, far) @ cam.view_matrix()
    s = np.linspace(0.05, 0.95, 50)[:, None]
    pts = np.concatenate([verts[a] + s * (verts[b] - verts[a]) for a, b in segs])
    clip = np.c_[pts, np.ones(len(pts))] @ m.T
    col = np.floor((clip[:, 0] / clip[:, 3] + 1) * w / 2).astype(int)
    row = np.floor((1 - clip[:, 1] / clip[:, 3]) * h / 2).astype(int)
    on = rgba[..., 3] > 0
    assert on[row, col].all()
    np.testing.assert_array_equal(rgba[on], np.float32([[1.0, 128 / 255, 0.0, 1.0]] * on.sum()))
    np.testing.assert_allclose(depth[on], 3.0 * (1 - 2e-3), rtol=1e-6)  # the plane's depth, pulled nearer
    assert np.isinf(depth[~on]).all() and not rgba[~on].any()
    # the surface of the same plane: its edges pass its depth test, a plane nearer hides them
    quad = np.array([[0, 0, 0], [1.5, 0, 0], [1.5, 1, 0], [0, 1, 0]], np.float32)
    faces = np.array([[0, 1, 2], [0, 2, 3]], np.int32)
    normals = np.tile(np.float32([0, 0, 1]), (4, 1))
    for dz, shown in ((0.0, True), (0.05, False)):
        _, sd = render_mesh(quad + [0, 0, dz], faces, normals, width=w, height=h, camera=cam, bounds=bounds,
                            rasterizer="software")
        assert ((depth < sd)[on]).all() == shown


def test_cell_edges_are_the_cells_edges_on_the_outer_surface():
    from render.cells import cell_mesh, grid_cells
    from render.cells.edges import cell_edges, grid_edges

    ax = np.linspace(0, 1, 3)
    hexes = grid_cells(ax, ax, ax)
    got = {tuple(e) for e in cell_edges(hexes).tolist()}
    nodes, segs = grid_edges((3, 3, 3))
    ids = nodes @ [9, 3, 1]  # grid_cells numbers points i-major, as the grid's nodes
    want = {tuple(sorted(p)) for p in ids[segs].tolist()}
    assert got == want and len(got) == 48
    pts = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0], [1, 0, 1]], float)
    tet = cell_mesh(pts[:4], np.arange(4), 10)
    assert len(cell_edges(tet)) == 6
    assert len(cell_edges(cell_mesh(np.r_[pts[:3], pts[:3] + [0, 0, 1]], np.arange(6), 13))) == 9  # a wedge
    # 2-D cells: two quads and a pentagon side by side, no triangulation diagonals
    p2 = np.array([[0, 0], [1, 0], [2, 0], [0, 1], [1, 1], [2, 1], [3, 0.5], [2.5, 1.5]], float)
    mixed = cell_mesh(p2, np.array([0, 1, 4, 3, 1, 2, 5, 4, 2, 6, 7, 5]), np.array([9, 9, 7]),
                      np.array([0, 4, 8, 12]))
    e = {tuple(x) for x in cell_edges(mixed).tolist()}
    assert e == {(0, 1), (1, 4), (3, 4), (0, 3), (1, 2), (2, 5), (4, 5), (2, 6), (6, 7), (5, 7)}
