"""Meshes of cells through the adaptor: the Blueprint domains adaptors.mesh reads as cells,
the pipeline filters over them (and over grids read as cells), and what scenes draw of them.

References are independent of the code under test: analytic volumes, gradients and areas,
VTK's vtkThreshold on the same cells, and the same data drawn through the grid path
(marching cubes, the grid's own box faces) against the cell path (render.cells).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import adaptors
from adaptors.config import load
from adaptors.context import Context
from adaptors.mesh import CellDomain, MeshDomain, parse, unstructured
from adaptors.pipelines import run_pipeline
from render.cells import grid_cells
from render.cells.measure import volume

N = 13  # nodes per axis of the test grids
H = 2.0 / (N - 1)
CAMERA = {"position": [0.3, 0.4, 6.0], "look_at": [0.0, 0.0, 0.0], "fov": 40.0}


def grid_axes():
    return [np.linspace(-1.0, 1.0, N)] * 3


def radius(points):
    return np.sqrt((points ** 2).sum(axis=1))


def hexes(fields=None, **kw):
    """The test grid as an unstructured hex mesh (Blueprint dict) with r and linear vertex fields."""
    m = grid_cells(*grid_axes())
    pts = m.points
    f = {"r": radius(pts), "lin": 2 * pts[:, 0] - 3 * pts[:, 1] + 0.5 * pts[:, 2]}
    f.update(fields or {})
    return unstructured(pts, m.connectivity, "hex", f, **kw), m


def tets():
    """Each cube of the test grid cut into 6 tetrahedra along its main diagonal (VTK order)."""
    g = grid_cells(*grid_axes())
    c = g.connectivity.reshape(-1, 8)
    split = [(0, 1, 2, 6), (0, 2, 3, 6), (0, 3, 7, 6), (0, 7, 4, 6), (0, 4, 5, 6), (0, 5, 1, 6)]
    conn = np.concatenate([c[:, list(t)] for t in split], axis=1).reshape(-1)
    return g.points, conn


def uniform_grid(**kw):
    x, y, z = np.meshgrid(*grid_axes(), indexing="ij")
    return adaptors.uniform({"r": np.sqrt(x * x + y * y + z * z), "lin": 2 * x - 3 * y + 0.5 * z},
                            origin=(-1.0,) * 3, spacing=(H,) * 3, **kw)


def pipeline(filters: dict, mesh) -> list:
    cfg = load({"pipelines": {"p": filters}})
    return run_pipeline("p", cfg["pipelines"]["p"], parse(mesh, cells=True), Context(), {}).domains


# -- filters ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [uniform_grid, lambda: hexes()[0]], ids=["grid", "hexes"])
def test_clip_by_a_plane_keeps_the_analytic_volume(make):
    # the cube [-1, 1]^3 on the side of x + y = 0.2 the normal points to (Ascent's sense)
    (d,) = pipeline({"c": {"type": "clip", "params": {"plane": {"point": {"x": 0.1, "y": 0.1, "z": 0.0},
                                                                  "normal": {"x": 1.0, "y": 1.0, "z": 0.0}}}}},
                    make())
    assert isinstance(d, CellDomain)
    # area of {x + y >= 0.2} in the square [-1, 1]^2: (1.8)^2 / 2, times the depth 2
    assert volume(d.mesh) == pytest.approx(1.8 ** 2 / 2 * 2, rel=1e-9)
    # fields are carried: the linear field stays linear at the new points
    p = d.mesh.points
    np.testing.assert_allclose(d.fields["lin"].values, 2 * p[:, 0] - 3 * p[:, 1] + 0.5 * p[:, 2], atol=1e-12)
    (inv,) = pipeline({"c": {"type": "clip", "params": {"plane": {"point": [0.1, 0.1, 0.0],
                                                                  "normal": [1.0, 1.0, 0.0]}, "invert": True}}},
                      make())
    assert volume(inv.mesh) == pytest.approx(8 - 1.8 ** 2, rel=1e-9)


def test_clip_by_a_box_and_a_sphere_on_tets():
    pts, conn = tets()
    mesh = unstructured(pts, conn, "tet", {"r": radius(pts)})
    (box,) = pipeline({"c": {"type": "clip", "params": {"box": {"min": [-0.5, -0.5, -0.5], "max": [0.5, 0.5, 0.5]},
                                                        "invert": True}}}, mesh)
    assert volume(box.mesh) == pytest.approx(1.0, rel=1e-9)  # the inside of the box, exactly
    (out,) = pipeline({"c": {"type": "clip", "params": {"sphere": {"center": [0, 0, 0], "radius": 0.7}}}}, mesh)
    # outside the sphere (Ascent's default): the cube less a polyhedral ball inscribed in the sphere
    ball = 8 - volume(out.mesh)
    assert 0.9 * 4 / 3 * math.pi * 0.7 ** 3 < ball < 4 / 3 * math.pi * 0.7 ** 3


def test_isovolume_of_the_radius_approaches_the_shell_volume():
    pts, conn = tets()
    (d,) = pipeline({"i": {"type": "isovolume", "params": {"field": "r", "min_value": 0.4, "max_value": 0.9}}},
                    unstructured(pts, conn, "tet", {"r": radius(pts)}))
    shell = 4 / 3 * math.pi * (0.9 ** 3 - 0.4 ** 3)
    assert volume(d.mesh) == pytest.approx(shell, rel=0.05)
    r = d.vertex_array("r")
    assert r.min() >= 0.4 - 1e-12 and r.max() <= 0.9 + 1e-12


def test_threshold_keeps_the_cells_vtk_keeps():
    vtk = pytest.importorskip("vtk", reason="VTK's vtkThreshold is the reference")
    from vtk.util import numpy_support as ns

    pts, conn = tets()
    r = radius(pts)
    (d,) = pipeline({"t": {"type": "threshold", "params": {"field": "r", "min_value": 0.3, "max_value": 0.8}}},
                    unstructured(pts, conn, "tet", {"r": r}))
    ug = vtk.vtkUnstructuredGrid()
    vp = vtk.vtkPoints()
    vp.SetData(ns.numpy_to_vtk(pts, deep=True))
    ug.SetPoints(vp)
    cells = vtk.vtkCellArray()
    cells.SetData(ns.numpy_to_vtkIdTypeArray(np.arange(0, conn.size + 1, 4), deep=True),
                  ns.numpy_to_vtkIdTypeArray(conn.astype(np.int64), deep=True))
    ug.SetCells(vtk.VTK_TETRA, cells)
    arr = ns.numpy_to_vtk(r, deep=True)
    arr.SetName("r")
    ug.GetPointData().SetScalars(arr)
    ids = ns.numpy_to_vtk(np.arange(conn.size // 4), deep=True)
    ids.SetName("id")
    ug.GetCellData().AddArray(ids)
    t = vtk.vtkThreshold()
    t.SetInputData(ug)
    t.SetLowerThreshold(0.3)
    t.SetUpperThreshold(0.8)
    t.SetThresholdFunction(vtk.vtkThreshold.THRESHOLD_BETWEEN)
    t.AllScalarsOn()
    t.Update()
    want = ns.vtk_to_numpy(t.GetOutput().GetCellData().GetArray("id"))
    assert d.mesh.n_cells == want.size > 0
    np.testing.assert_array_equal(np.sort(d.fields["r"].values), np.sort(r[np.unique(conn.reshape(-1, 4)[want])]))


def test_field_filters_on_a_grid_and_on_cells():
    m, _ = hexes()
    filters = {"g": {"type": "gradient", "params": {"field": "lin"}},
               "c": {"type": "recenter", "params": {"field": "lin", "association": "element", "output_name": "lc"}}}
    for mesh in (uniform_grid(), m):
        (d,) = pipeline(filters, mesh)
        for comp, want in zip("xyz", (2.0, -3.0, 0.5)):  # a linear field's gradient is exact on both
            np.testing.assert_allclose(np.asarray(d.fields[f"lin_gradient/{comp}"].values).ravel(), want, atol=1e-9)
        lc = np.asarray(d.fields["lc"].values)
        assert d.fields["lc"].association == "element" and lc.size == (N - 1) ** 3
        # a linear field's cell mean is its value at the cell centre: inside the field's range, never outside
        assert lc.min() > -5.5 + 1e-9 and lc.max() < 5.5 - 1e-9


def test_vector_magnitude_and_component_of_an_mcarray():
    x, y, z = np.meshgrid(*grid_axes(), indexing="ij")
    mesh = adaptors.uniform({"r": x}, origin=(-1.0,) * 3, spacing=(H,) * 3)
    mesh["fields"]["vel"] = {"association": "vertex", "topology": "mesh",
                             "values": {"u": np.asfortranarray(y), "v": np.asfortranarray(-x),
                                        "w": np.asfortranarray(z)}}
    (d,) = pipeline({"m": {"type": "vector_magnitude", "params": {"field": "vel", "output_name": "speed"}},
                     "c": {"type": "vector_component", "params": {"field": "vel", "component": 2}}}, mesh)
    np.testing.assert_allclose(d.fields["speed"].values, np.sqrt(x * x + y * y + z * z), rtol=1e-12)
    np.testing.assert_array_equal(d.fields["vel_2"].values, z)


def test_slice_points_as_ascent_writes_them_and_a_bad_clip():
    cfg = load({"pipelines": {"p": {"s": {"type": "slice", "params": {"point": {"x": 0, "y": 0, "z": 0.2},
                                                                        "normal": {"x": 0, "y": 0, "z": 1}}}}}})
    assert cfg["pipelines"]["p"]["s"]["params"]["point"] == [0, 0, 0.2]
    with pytest.raises(adaptors.errors.MeshError, match="exactly one of plane, sphere or box"):
        pipeline({"c": {"type": "clip", "params": {}}}, uniform_grid())
    with pytest.raises(adaptors.errors.MeshError, match="eikonal: solves on uniform grids; domain 0 is a mesh"):
        pipeline({"e": {"type": "eikonal", "params": {"seeds": [[0, 0, 0]], "speed": "1.0"}}}, hexes()[0])


# -- what scenes draw -----------------------------------------------------------------------------------


def frame(tmp_path, name, mesh, plots, pipelines=None):
    cfg = {"pipelines": pipelines or {},
           "scenes": {"s": {"plots": plots,
                            "renders": {"r": {"image_width": 96, "image_height": 72, "camera": CAMERA,
                                              "bg_color": [0, 0, 0, 0],
                                              "image_prefix": str(tmp_path / f"{name}_%04d")}}}}}
    with adaptors.Adaptor(cfg) as a:
        assert a.execute(0, 0.0, mesh), a.results()["errors"]
    from render.image import read_png

    return read_png(tmp_path / f"{name}_0000.png").astype(np.float64)


def test_the_mesh_itself_drawn_as_a_grid_and_as_cells_looks_the_same(tmp_path):
    plot = {"p": {"type": "pseudocolor", "field": "lin", "min_value": -5.5, "max_value": 5.5}}
    a = frame(tmp_path, "grid", uniform_grid(), plot)
    b = frame(tmp_path, "cells", hexes()[0], plot)
    cover = a[..., 3] > 127
    assert 0.2 < cover.mean() < 0.9
    assert ((b[..., 3] > 127) != cover).mean() < 0.01  # the same silhouette
    both = cover & (b[..., 3] > 127)
    # the same colours (a linear field: either diagonal of a face interpolates it exactly)
    assert np.abs(a[both, :3] - b[both, :3]).mean() < 2.0


def test_a_slice_drawn_through_the_grid_path_and_the_cell_path(tmp_path):
    pipes = {"sl": {"s": {"type": "slice", "params": {"point": [0, 0, 0.1], "normal": [0.2, 0.3, 1.0]}}}}
    plot = {"p": {"type": "pseudocolor", "pipeline": "sl", "field": "r", "min_value": 0.0, "max_value": 1.8}}
    a = frame(tmp_path, "grid", uniform_grid(), plot, pipes)
    b = frame(tmp_path, "cells", hexes()[0], plot, pipes)
    cover = a[..., 3] > 127
    assert 0.1 < cover.mean() < 0.9
    assert ((b[..., 3] > 127) != cover).mean() < 0.01
    both = cover & (b[..., 3] > 127)
    assert np.abs(a[both, :3] - b[both, :3]).mean() < 3.0


def test_a_contour_of_cells_matches_the_grids_and_a_threshold_draws_kept_cells(tmp_path):
    pipes = {"c": {"f": {"type": "contour", "params": {"field": "r", "iso_values": [0.7]}}},
             "t": {"f": {"type": "threshold", "params": {"field": "r", "max_value": 0.7}}}}
    contour = {"p": {"type": "pseudocolor", "pipeline": "c", "field": "lin", "min_value": -5.5, "max_value": 5.5}}
    a = frame(tmp_path, "grid", uniform_grid(), contour, pipes)
    b = frame(tmp_path, "cells", hexes()[0], contour, pipes)
    assert ((b[..., 3] > 127) != (a[..., 3] > 127)).mean() < 0.01
    kept = frame(tmp_path, "kept", hexes()[0], {"p": {"type": "pseudocolor", "pipeline": "t"}}, pipes)
    # the kept cells (all corners within r <= 0.7) lie inside the contour's silhouette
    inside = kept[..., 3] > 127
    assert inside.mean() > 0.02 and (inside & ~(a[..., 3] > 127)).mean() < 0.005


def test_a_volume_plot_of_cells_resembles_the_grids(tmp_path):
    plot = {"v": {"type": "volume", "field": "r", "min_value": 0.0, "max_value": 1.8}}
    a = frame(tmp_path, "grid", uniform_grid(), plot)
    b = frame(tmp_path, "cells", hexes()[0], plot)
    assert a[..., 3].mean() > 10
    # the resampled grid differs from the original one: alike, not equal
    assert np.abs(a - b).mean() < 6.0


def test_an_element_field_colours_each_cell_of_the_surface(tmp_path):
    mesh, m = hexes()
    mesh["fields"]["e"] = {"association": "element", "topology": "mesh",
                           "values": np.arange(m.n_cells, dtype=np.float64) % 2}  # a checkerboard-ish pattern
    img = frame(tmp_path, "e", mesh, {"p": {"type": "pseudocolor", "field": "e", "min_value": 0, "max_value": 1,
                                            "color_table": {"name": "grayscale"}}})
    lum = img[img[..., 3] > 127, :3].mean(axis=1)
    # flat colours per cell: mostly the two ends of the map, little in between
    assert ((lum < 60) | (lum > 195)).mean() > 0.6


def test_parse_with_cells_keeps_uniform_grids_as_grids():
    (g,) = parse(uniform_grid(), cells=True)
    (c,) = parse(hexes()[0], cells=True)
    assert isinstance(g, MeshDomain) and isinstance(c, CellDomain)
    np.testing.assert_allclose(c.box, g.box)


def test_contours_and_slices_of_cells_leave_ghost_cells_out():
    """Two blocks that each hold the other's boundary layer as ghosts draw, together, the
    surface of the whole mesh once: the same area, not the overlap twice."""
    from adaptors.draw import CellSurfacePlot, _cell_meshes

    x = np.linspace(-1.0, 1.0, 9)

    def area(m):
        v, f = m[0], m[1]
        return 0.5 * np.linalg.norm(np.cross(v[f[:, 1]] - v[f[:, 0]], v[f[:, 2]] - v[f[:, 0]]), axis=1).sum()

    def drawn(xs, owned):
        mesh = grid_cells(xs, x, x)
        cx = mesh.points[mesh.connectivity.reshape(-1, 8), 0].mean(axis=1)
        hidden = None if owned is None else ~((cx > owned[0]) & (cx < owned[1]))
        fields = [mesh.points, mesh.connectivity, mesh.offsets, mesh.types, radius(mesh.points), hidden]
        out = []
        for kind, extra in (("contour", {"field": 4, "levels": (0.7,)}),
                            ("slice", {"planes": (((0.0, 0.1, 0.0), (0.3, 1.0, 0.2)),)})):
            plot = CellSurfacePlot((0, 1, 2, 3), 4, 0.0, 1.0, "viridis", kind, hidden=None if owned is None else 5,
                                   **extra)
            out.append(sum(area(m) for m in _cell_meshes(fields, None, plot)))
        return np.array(out)

    whole = drawn(x, None)
    blocks = drawn(x[:6], (-2.0, x[4])) + drawn(x[3:], (x[4], 2.0))  # cells 0..3 | 4..7, one layer of ghosts each
    assert whole.min() > 0.5
    np.testing.assert_allclose(blocks, whole, rtol=1e-12)
    overlap = drawn(x[3:6], None)  # what drawing the ghosts too would add
    assert overlap.min() > 0.05 * whole.max()


def test_a_rectilinear_grid_is_ray_cast_directly(tmp_path, monkeypatch):
    """Uneven axes: the volume plot samples the grid itself (no resampling), so a linear
    field, which trilinear interpolation reproduces on any grid, looks as on the uniform
    grid over the same box."""
    import importlib

    axes = [-1.0 + 2.0 * (np.arange(N) / (N - 1)) ** p for p in (1.5, 1.0, 0.7)]
    x, y, z = np.meshgrid(*axes, indexing="ij")
    lin = (2 * x - 3 * y + 0.5 * z).ravel(order="F")  # Blueprint's order: i fastest
    mesh = {"coordsets": {"coords": {"type": "rectilinear", "values": dict(zip("xyz", axes))}},
            "topologies": {"mesh": {"type": "rectilinear", "coordset": "coords"}},
            "fields": {"lin": {"association": "vertex", "topology": "mesh", "values": lin}}}
    d = parse(mesh, cells=True)[0]
    assert isinstance(d, CellDomain) and d.axes is not None

    def no_resampling(*a, **k):
        raise AssertionError("the rectilinear grid was resampled")

    monkeypatch.setattr(importlib.import_module("render.cells.resample"), "resample", no_resampling)
    plot = {"v": {"type": "volume", "field": "lin", "min_value": -5.5, "max_value": 5.5}}
    a = frame(tmp_path, "grid", uniform_grid(), plot)
    b = frame(tmp_path, "rect", mesh, plot)
    assert a[..., 3].mean() > 10
    # the same field on the same box; only the default step differs (half the finest gap)
    assert np.abs(a - b).mean() < 1.5


def test_a_contour_of_2d_cells_is_drawn_as_lines_in_the_colormap(tmp_path):
    """The radius on a 2-D quad mesh contoured at 0.5: one-pixel lines on the projected circle,
    each in matplotlib's viridis at the level (the contour's values all equal it)."""
    mpl = pytest.importorskip("matplotlib")
    g = grid_cells(np.linspace(-1.0, 1.0, 41), np.linspace(-1.0, 1.0, 41))
    mesh = unstructured(g.points[:, :2], g.connectivity, "quad", {"r": radius(g.points)})
    level, lo, hi, w = 0.5, 0.0, 1.5, 96
    cam = {"position": [0.0, 0.0, 4.0], "look_at": [0.0, 0.0, 0.0], "up": [0.0, 1.0, 0.0], "fov": 40.0}
    cfg = {"pipelines": {"c": {"f": {"type": "contour", "params": {"field": "r", "iso_values": [level]}}}},
           "scenes": {"s": {"plots": {"p": {"type": "pseudocolor", "pipeline": "c", "field": "r",
                                            "min_value": lo, "max_value": hi, "color_table": {"name": "viridis"}}},
                            "renders": {"r": {"image_width": w, "image_height": w, "camera": cam,
                                              "bg_color": [0, 0, 0, 0], "image_prefix": str(tmp_path / "l_%04d")}}}}}
    with adaptors.Adaptor(cfg) as a:
        assert a.execute(0, 0.0, mesh), a.results()["errors"]
    from render.image import read_png

    img = read_png(tmp_path / "l_0000.png").astype(np.float64)
    on = img[..., 3] > 127
    rows, cols = np.nonzero(on)
    # pixel centres back to the plane z = 0: the camera looks straight down at the origin
    scale = 4.0 * math.tan(math.radians(20.0))
    x = ((cols + 0.5) / w * 2 - 1) * scale
    y = (1 - (rows + 0.5) / w * 2) * scale
    px = 2 * scale / w
    assert len(rows) > 0.8 * (2 * math.pi * level / px)  # the whole circle
    assert np.abs(np.hypot(x, y) - level).max() < 1.5 * px
    want = np.asarray(mpl.colormaps["viridis"]((level - lo) / (hi - lo))[:3]) * 255
    assert np.abs(img[on, :3] - want).max() <= 3.0
