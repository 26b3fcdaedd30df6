"""Colour tables (render/colormap.py): VTK-m's presets against VTK's own colour transfer
function (an independent implementation of the same colour spaces), tables from control
points drawn by the software rasterizer against numpy.interp of the points, names as
Ascent resolves them."""

import numpy as np
import pytest

from render import colormap as cm
from render.camera import Camera
from render.surface import Material, render_mesh


def vtk_colors(points, x, space):
    """VTK's vtkColorTransferFunction (VTK-m's ColorTable was ported from it) at `x`."""
    core = pytest.importorskip("vtkmodules.vtkRenderingCore", reason="needs VTK (pip install vtk) as the reference")
    f = core.vtkColorTransferFunction()
    {"rgb": f.SetColorSpaceToRGB, "lab": f.SetColorSpaceToLab, "diverging": f.SetColorSpaceToDiverging}[space]()
    for p in points:
        f.AddRGBPoint(*map(float, p))
    return np.array([f.GetColor(float(v)) for v in x])


def test_vtkm_presets_equal_vtk_interpolation_in_their_colour_space():
    x = np.linspace(0, 1, 1024)  # the table's own sample positions
    spaces = set()
    for name in cm.PRESETS:
        pts, space = cm._preset(name)
        spaces.add(space)
        assert pts[0, 0] == 0 and pts[-1, 0] == 1 and (np.diff(pts[:, 0]) >= 0).all()
        ref = np.clip(vtk_colors(pts, x, space), 0, 1)
        np.testing.assert_allclose(cm.table(name), ref, atol=2e-4, err_msg=name)
    assert spaces == {"rgb", "lab", "diverging"}
    # Published values: Cool to Warm's grey middle, and Moreland's map as matplotlib samples it.
    np.testing.assert_allclose(cm.colormap("Cool to Warm", np.array([0.5]), 0, 1)[0, :3], 0.865, atol=5e-4)
    assert np.abs(cm.table("Cool to Warm")[::4][:256] - cm.table("coolwarm")).max() < 10 / 255


@pytest.mark.parametrize("space", ["lab", "diverging"])
def test_colour_spaces_equal_vtk(space):
    pts = np.array([[0, 1, 0, 0], [0.3, 0.1, 0.8, 0.2], [0.6, 0.9, 0.9, 0.9], [1, 0, 0, 1]])
    x = np.linspace(0, 1, 301)
    np.testing.assert_allclose(cm.evaluate(pts, x, space), vtk_colors(pts, x, space), atol=1e-3)


def test_names_resolve_as_ascent_and_unknown_ones_list_close_matches():
    assert cm.resolve("cool to warm") == cm.resolve("CoolToWarm") == "Cool to Warm"
    assert cm.resolve("black-bodyradiation") == "Black-Body Radiation"  # Ascent's docs, spaces dropped
    assert cm.resolve("Viridis") == "Viridis" and cm.resolve("viridis") == "viridis"  # VTK-m's and insitu's
    assert cm.resolve("Default") == "Viridis" and cm.resolve("gray") == "grayscale"
    assert set(cm.PRESETS) <= set(cm.NAMES)
    with pytest.raises(ValueError, match=r"unknown 'Cool to Wram'; close: 'Cool to Warm'"):
        cm.table("Cool to Wram")
    with pytest.raises(ValueError, match="expected a string"):
        cm.resolve(3)
    with pytest.raises(ValueError, match="not a table compose"):
        cm.table("table:{nonsense")


def test_compose_follows_ascent():
    rgb = [[0.0, 1, 0, 0], [1.0, 0, 0, 1]]
    a = cm.compose(None, rgb)
    assert a.startswith("table:") and a == cm.compose(None, [[1.0, 0, 0, 1], [0.0, 1, 0, 0]])  # one name per table
    # Without a name the points replace the default table's colours, in its (diverging) space:
    # red to blue passes through white, as VTK-m's Cool to Warm cleared does.
    np.testing.assert_allclose(cm.table(a)[[0, -1]], [[1, 0, 0], [0, 0, 1]], atol=1e-3)
    np.testing.assert_allclose(cm.table(a), np.clip(vtk_colors(np.array(rgb), np.linspace(0, 1, 1024),
                                                               "diverging"), 0, 1), atol=5e-4)
    # With a name they are added to its points (an equal position replaces), in its space.
    jet = cm.compose("jet", [[0.5, 1, 1, 1]])
    pts, _ = cm._preset("Jet")
    merged = np.concatenate([pts, [[0.5, 1, 1, 1]]])
    merged = merged[np.argsort(merged[:, 0])]
    for c in (1, 2, 3):
        ref = np.interp(np.linspace(0, 1, 1024), merged[:, 0], merged[:, c])
        np.testing.assert_allclose(cm.table(jet)[:, c - 1], ref, atol=1e-6)
    # Reversed colours; alphas added to the table's (1 at both ends), untouched by reverse.
    r = cm.compose("X Ray", alpha=[[0.5, 0.2]], reverse=True)
    np.testing.assert_allclose(cm.table(r)[[0, -1]], [[0, 0, 0], [1, 1, 1]])
    np.testing.assert_allclose(cm.alpha_points(r), [[0, 1], [0.5, 0.2], [1, 1]])
    assert cm.alpha_points("viridis") is None and cm.compose("JET") == "Jet"
    # reverse alone, without a name: Ascent's default table reversed
    np.testing.assert_allclose(cm.table(cm.compose(None, reverse=True)), cm.table("Cool to Warm")[::-1], atol=1e-5)
    with pytest.raises(ValueError, match=r"positions must lie in \[0, 1\]"):
        cm.compose(None, [[1.5, 0, 0, 0]])
    with pytest.raises(ValueError, match="rows of 4 numbers"):
        cm.compose(None, [[0.5, 0, 0]])


def test_rendered_colours_are_the_table_at_the_field_values():
    """A row of separate squares, each of one field value, drawn flat (ambient light only) by
    the software rasterizer: the pixel at each square's projected centre has the table's
    colour at that value, the table evaluated independently (numpy.interp of the points)."""
    pts = np.array([[0.0, 0.1, 0.0, 0.9], [0.2, 0.9, 0.1, 0.0], [0.55, 1.0, 1.0, 0.3], [1.0, 0.0, 0.6, 0.2]])
    name = cm.compose("X Ray", pts)  # X Ray: an RGB-space table; the points replace its two ends
    n, lo, hi = 24, -3.0, 5.0
    values = np.linspace(lo - 1, hi + 1, n)  # beyond both ends too: clamped
    quad = np.array([[0, 0, 0], [0.8, 0, 0], [0.8, 1, 0], [0, 1, 0]], np.float32)
    verts = np.concatenate([quad + [i, 0, 0] for i in range(n)]).astype(np.float32)
    faces = np.concatenate([np.array([[0, 1, 2], [0, 2, 3]]) + 4 * i for i in range(n)]).astype(np.int32)
    normals = np.tile([0, 0, 1], (len(verts), 1)).astype(np.float32)
    vals = np.repeat(values, 4).astype(np.float32)
    w, h = 480, 64
    cam = Camera((n / 2, 0.5, 30.0), (n / 2, 0.5, 0.0), fov=45.0)
    rgba, _ = render_mesh(verts, faces, normals, vals, width=w, height=h, rasterizer="software", camera=cam,
                          colormap=name, vmin=lo, vmax=hi, material=Material(1.0, 0.0, 0.0))
    centres = np.c_[np.arange(n) + 0.4, np.full(n, 0.5), np.zeros(n), np.ones(n)]
    near, far = cam.clip_range((0, n, 0, 1, 0, 0))
    clip = centres @ (cam.projection_matrix(w, h, near, far) @ cam.view_matrix()).T
    col = ((clip[:, 0] / clip[:, 3] + 1) * w / 2).astype(int)
    row = ((1 - clip[:, 1] / clip[:, 3]) * h / 2).astype(int)
    t = np.clip((values - lo) / (hi - lo), 0, 1)
    want = np.stack([np.interp(t, pts[:, 0], pts[:, c]) for c in (1, 2, 3)], axis=1)
    np.testing.assert_allclose(rgba[row, col, :3], want, atol=1 / 255)
