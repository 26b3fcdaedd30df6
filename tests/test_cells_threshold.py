"""render.cells.threshold against VTK's vtkThreshold: the same kept cells on tetrahedra,
hexahedra, wedges, pyramids and mixed meshes, by point values (all points or any) and by
cell values."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

vtk = pytest.importorskip("vtk")
from vtk.util import numpy_support as ns  # noqa: E402

from test_cells_clip import MESHES, quads, smooth, to_vtk  # noqa: E402  (tests/ is on sys.path)

from render.cells import POLYGON, cell_mesh  # noqa: E402
from render.cells.threshold import threshold  # noqa: E402


def vtk_threshold(mesh, values, lo, hi, *, cells=False, all_points=True):
    """The input ids of the cells vtkThreshold keeps (a cell array of ids carried through)."""
    ug = to_vtk(mesh)
    a = ns.numpy_to_vtk(np.asarray(values, np.float64), deep=True)
    a.SetName("v")
    (ug.GetCellData() if cells else ug.GetPointData()).SetScalars(a)
    ids = ns.numpy_to_vtk(np.arange(mesh.n_cells, dtype=np.int64), deep=True)
    ids.SetName("ids")
    ug.GetCellData().AddArray(ids)
    t = vtk.vtkThreshold()
    t.SetInputData(ug)
    t.SetInputArrayToProcess(0, 0, 0, 1 if cells else 0, "v")
    t.SetLowerThreshold(lo)
    t.SetUpperThreshold(hi)
    t.SetThresholdFunction(vtk.vtkThreshold.THRESHOLD_BETWEEN)
    t.SetAllScalars(all_points)
    t.Update()
    return ns.vtk_to_numpy(t.GetOutput().GetCellData().GetArray("ids")).astype(np.int64)


@pytest.mark.parametrize("name", list(MESHES))
def test_kept_cells_equal_vtk(name):
    m = MESHES[name]()
    v = smooth(m.points)
    for all_points in (True, False):
        r = threshold(m, v, -0.4, 0.3, all_points=all_points, point_fields={"v": v},
                      cell_fields={"c": np.arange(m.n_cells)})
        want = vtk_threshold(m, v, -0.4, 0.3, all_points=all_points)
        assert 0 < len(want) < m.n_cells
        np.testing.assert_array_equal(r.cells, want)
        np.testing.assert_array_equal(r.cell_fields["c"], want)
        o = r.mesh
        np.testing.assert_array_equal(o.types, m.types[want])
        # the same cells, by their points' coordinates; only the points they use
        for i in (0, len(want) // 2, len(want) - 1):
            c = want[i]
            np.testing.assert_array_equal(o.points[o.connectivity[o.offsets[i]:o.offsets[i + 1]]],
                                          m.points[m.connectivity[m.offsets[c]:m.offsets[c + 1]]])
        assert len(np.unique(o.connectivity)) == o.n_points
        np.testing.assert_array_equal(r.point_fields["v"], smooth(o.points))
        if all_points:
            assert (o.n_points == 0) or (r.point_fields["v"].min() >= -0.4 and r.point_fields["v"].max() <= 0.3)
    cv = np.arange(m.n_cells) % 7 - 3.0
    r = threshold(m, cv, -1, 2, association="element")
    np.testing.assert_array_equal(r.cells, vtk_threshold(m, cv, -1, 2, cells=True))


def test_polygons_and_2d():
    m = quads()
    v = m.points[:, 0] - m.points[:, 1]
    r = threshold(m, v, -2.0, 1.0)
    np.testing.assert_array_equal(r.cells, vtk_threshold(m, v, -2.0, 1.0))
    poly = cell_mesh(np.array([[0, 0], [1, 0], [1, 1], [0, 1], [2, 0], [2, 1]], float),
                     np.array([0, 1, 2, 3, 1, 4, 5, 2]), POLYGON, np.array([0, 4, 8]))
    r = threshold(poly, np.array([0.0, 0, 0, 0, 5, 5]), -1, 1, all_points=False)
    assert r.cells.tolist() == [0, 1]
    r = threshold(poly, np.array([0.0, 0, 0, 0, 5, 5]), -1, 1)
    assert r.cells.tolist() == [0] and r.mesh.n_points == 4 and r.mesh.offsets.tolist() == [0, 4]


def test_nothing_kept_and_bad_input():
    m = MESHES["mixed"]()
    v = m.points[:, 0]
    r = threshold(m, v, 50, 60)
    assert r.mesh.n_cells == 0 and r.mesh.n_points == 0 and r.mesh.offsets.tolist() == [0]
    with pytest.raises(ValueError, match=r"values: expected shape \(\d+,\) \(n_cells\)"):
        threshold(m, v, 0, 1, association="element")
    with pytest.raises(ValueError, match="values: contains NaN"):
        threshold(m, np.where(np.arange(m.n_points) == 5, np.nan, v), 0, 1)
    with pytest.raises(ValueError, match="association: expected"):
        threshold(m, v, 0, 1, association="face")
    with pytest.raises(ValueError, match="lo, hi: expected lo <= hi"):
        threshold(m, v, 1, 0)
    with pytest.raises(ValueError, match=r"point_fields\['p'\]"):
        threshold(m, v, 0, 1, point_fields={"p": v[:-1]})


@pytest.mark.parametrize("name", list(MESHES))
def test_numba_path_equals_whole_array_path(name, monkeypatch):
    threshold_module = importlib.import_module("render.cells.threshold")  # the package exports the function

    m = MESHES[name]()
    v = smooth(m.points)
    runs = []
    for flag in (True, False):
        monkeypatch.setattr(threshold_module, "use_numba", flag)
        runs.append([threshold(m, v, -0.4, 0.3, all_points=a) for a in (True, False)]
                    + [threshold(m, np.arange(m.n_cells) % 3.0, 1, 1, association="element")])
    for a, b in zip(*runs):
        for attr in ("points", "connectivity", "offsets", "types"):
            np.testing.assert_array_equal(getattr(a.mesh, attr), getattr(b.mesh, attr), err_msg=attr)
        np.testing.assert_array_equal(a.cells, b.cells)
