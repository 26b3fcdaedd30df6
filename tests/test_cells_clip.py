"""render.cells.clip against VTK's vtkTableBasedClipDataSet and vtkClipDataSet: the same
volumes on tetrahedra, hexahedra, wedges, pyramids and mixed meshes, the same boundary
surface (no cracks), and what it carries over."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from render.cells import HEXAHEDRON, PYRAMID, QUAD, TETRA, TRIANGLE, WEDGE, cell_mesh, grid_cells
from render.cells.clip import clip, clip_box, clip_field, clip_plane, clip_sphere, isovolume
from render.cells.measure import area, cell_measures, simplices, volume

try:  # the meshes below serve tests/gpu too, where VTK may be missing
    import vtk
    from vtk.util import numpy_support as ns
except ImportError:
    vtk = None
pytestmark = pytest.mark.skipif(vtk is None, reason="needs the vtk wheel")

REL = 1e-6


# ---------------------------------------------------------------------- meshes

def hexes(n=(6, 5, 7), seed=0):
    """A rectilinear grid of hexahedra, unevenly spaced (planar faces: any split is exact)."""
    rng = np.random.default_rng(seed)
    axes = [np.cumsum(np.r_[0.0, rng.uniform(0.5, 1.5, k)]) / k for k in n]
    return grid_cells(*axes)


def jittered(n=(6, 5, 7), seed=1):
    """Hexahedra with the inner points moved (curved faces), for tetrahedra built from them."""
    m = hexes(n, seed)
    rng = np.random.default_rng(seed)
    p = m.points.copy()
    inner = np.all((p > 1e-9) & (p < p.max(axis=0) - 1e-9), axis=1)
    p[inner] += rng.uniform(-0.03, 0.03, (int(inner.sum()), 3))
    return cell_mesh(p, m.connectivity, m.types, m.offsets)


def vtk_tets(mesh):
    """Tetrahedra of `mesh` by VTK's own vtkDataSetTriangleFilter (not our split; ours
    without VTK)."""
    if vtk is None:
        return cell_mesh(mesh.points, simplices(mesh)[0].ravel(), TETRA)
    f = vtk.vtkDataSetTriangleFilter()
    f.SetInputData(to_vtk(mesh))
    f.Update()
    return from_vtk(f.GetOutput())


def wedges(n=(5, 4, 6)):
    m = hexes(n, 2)
    h = m.connectivity.reshape(-1, 8)
    w = np.concatenate([h[:, [0, 1, 2, 4, 5, 6]], h[:, [0, 2, 3, 4, 6, 7]]])
    return cell_mesh(m.points, w.ravel(), WEDGE)


def pyramids(mesh, which=None):
    """Each hexahedron (or those in `which`) as six pyramids on its faces around a new centre
    point; conforming with the hexahedra kept."""
    h = mesh.connectivity.reshape(-1, 8)
    which = np.arange(len(h)) if which is None else np.asarray(which)
    centres = mesh.points[h[which]].mean(axis=1)
    pts = np.concatenate([mesh.points, centres])
    apex = mesh.n_points + np.arange(len(which))
    faces = [(0, 3, 2, 1), (4, 5, 6, 7), (0, 1, 5, 4), (1, 2, 6, 5), (2, 3, 7, 6), (3, 0, 4, 7)]  # outward
    pyr = np.concatenate([np.c_[h[which][:, f[::-1]], apex] for f in faces])  # base facing the apex
    rest = np.setdiff1d(np.arange(len(h)), which)
    conn = np.concatenate([h[rest].ravel(), pyr.ravel()])
    types = np.r_[np.full(len(rest), HEXAHEDRON), np.full(len(pyr), PYRAMID)]
    return cell_mesh(pts, conn, types, np.r_[0, np.cumsum(np.r_[np.full(len(rest), 8), np.full(len(pyr), 5)])])


def mixed():
    """Hexahedra, some as pyramids, beside tetrahedra and wedges (a mixed shape_map mesh)."""
    m = pyramids(hexes((6, 5, 4), 3), which=np.arange(0, 120, 3))
    t = simplices(hexes((3, 5, 4), 4))[0] + m.n_points  # a second block of tets
    w = wedges((3, 5, 4))
    pts = np.concatenate([m.points, hexes((3, 5, 4), 4).points + [2, 0, 0], w.points + [0, 2, 0]])
    conn = np.concatenate([m.connectivity, t.ravel(), w.connectivity + m.n_points + 120])
    types = np.r_[m.types, np.full(len(t), TETRA), w.types]
    sizes = np.r_[np.diff(m.offsets), np.full(len(t), 4), np.full(w.n_cells, 6)]
    return cell_mesh(pts, conn, types, np.r_[0, np.cumsum(sizes)])


def quads():
    rng = np.random.default_rng(5)
    return grid_cells(*[np.cumsum(np.r_[0.0, rng.uniform(0.5, 1.5, k)]) for k in (7, 6)])


def tris():
    m = quads()
    q = m.connectivity.reshape(-1, 4)
    return cell_mesh(m.points, np.concatenate([q[:, [0, 1, 2]], q[:, [0, 2, 3]]]).ravel(), TRIANGLE)


MESHES = {"tets": lambda: vtk_tets(jittered()), "hexes": hexes, "wedges": wedges,
          "pyramids": lambda: pyramids(hexes((4, 3, 5))), "mixed": mixed}


# ---------------------------------------------------------------------- VTK

def to_vtk(mesh, point_scalars=None):
    ug = vtk.vtkUnstructuredGrid()
    pts = vtk.vtkPoints()
    pts.SetData(ns.numpy_to_vtk(np.ascontiguousarray(mesh.points, np.float64), deep=True))
    ug.SetPoints(pts)
    ca = vtk.vtkCellArray()
    ca.SetData(ns.numpy_to_vtkIdTypeArray(mesh.offsets.astype(np.int64), deep=True),
               ns.numpy_to_vtkIdTypeArray(mesh.connectivity.astype(np.int64), deep=True))
    ug.SetCells(ns.numpy_to_vtk(mesh.types.astype(np.uint8), deep=True, array_type=vtk.VTK_UNSIGNED_CHAR), ca)
    if point_scalars is not None:
        a = ns.numpy_to_vtk(np.asarray(point_scalars, np.float64), deep=True)
        a.SetName("s")
        ug.GetPointData().SetScalars(a)
    return ug


def from_vtk(ug):
    c = ug.GetCells()
    return cell_mesh(ns.vtk_to_numpy(ug.GetPoints().GetData()).astype(np.float64),
                     ns.vtk_to_numpy(c.GetConnectivityArray()).astype(np.int64),
                     ns.vtk_to_numpy(ug.GetCellTypes()).astype(np.uint8),
                     ns.vtk_to_numpy(c.GetOffsetsArray()).astype(np.int64))


def vtk_clip(mesh, *, scalars=None, value=0.0, plane=None, table=True):
    """VTK's clip keeping the part below `value` (InsideOut), by a point array or a vtkPlane."""
    f = vtk.vtkTableBasedClipDataSet() if table else vtk.vtkClipDataSet()
    f.SetInputData(to_vtk(mesh, scalars))
    if plane is not None:
        p = vtk.vtkPlane()
        p.SetOrigin(*plane[0])
        p.SetNormal(*plane[1])
        f.SetClipFunction(p)
    f.SetValue(value)
    f.InsideOutOn()
    f.Update()
    return from_vtk(f.GetOutput())


def vtk_volume(mesh):
    """Sum of VTK's own cell volumes (vtkCellSizeFilter), an independent measure; unsigned
    (vtkDataSetTriangleFilter turns some tetrahedra inside out)."""
    f = vtk.vtkCellSizeFilter()
    f.SetInputData(to_vtk(mesh))
    f.Update()
    return float(np.abs(ns.vtk_to_numpy(f.GetOutput().GetCellData().GetArray("Volume"))).sum())


def boundary_area(mesh):
    """Area of the faces used by one tetrahedron only, after the conforming split
    (a crack shows as faces on both sides of it)."""
    t = simplices(mesh)[0]
    f = np.sort(np.concatenate([t[:, [0, 1, 2]], t[:, [0, 1, 3]], t[:, [0, 2, 3]], t[:, [1, 2, 3]]]), axis=1)
    u, c = np.unique(f, axis=0, return_counts=True)
    b = u[c == 1]
    p = mesh.points[b]
    return 0.5 * np.linalg.norm(np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0]), axis=1).sum()


PLANE = ((0.43, 0.51, 0.47), (0.6, -0.3, 0.75))


def smooth(p):
    return np.sin(3.1 * p[:, 0]) * np.cos(2.3 * p[:, 1]) + 0.7 * p[:, 2] ** 2 - 0.3


# ---------------------------------------------------------------------- tests

def test_split_volumes_equal_vtk_cell_sizes():
    for name, make in MESHES.items():
        m = make()
        assert volume(m) == pytest.approx(vtk_volume(m), rel=1e-9), name
        assert cell_measures(m).sum() == pytest.approx(volume(m), rel=1e-12)
    t = simplices(jittered())[0]
    p = jittered().points[t]
    assert (np.linalg.det(p[:, 1:] - p[:, :1]) > 0).all()  # split tetrahedra keep the cells' orientation


@pytest.mark.parametrize("name", list(MESHES))
@pytest.mark.parametrize("keep", ["below", "above"])
def test_plane_clip_volume_equals_vtk(name, keep):
    m = MESHES[name]()
    r = clip_plane(m, *PLANE, keep=keep)
    sign = 1 if keep == "below" else -1
    ref = vtk_clip(m, plane=(PLANE[0], tuple(sign * np.asarray(PLANE[1]))))
    assert volume(r.mesh) == pytest.approx(vtk_volume(ref), rel=REL)
    assert vtk_volume(r.mesh) == pytest.approx(vtk_volume(ref), rel=REL)
    # no cracks: the boundary of what is kept is VTK's
    assert boundary_area(r.mesh) == pytest.approx(boundary_area(ref), rel=REL)
    both = volume(r.mesh) + volume(clip_plane(m, *PLANE, keep="above" if keep == "below" else "below").mesh)
    assert both == pytest.approx(volume(m), rel=1e-12)


@pytest.mark.parametrize("table", [True, False])
def test_field_clip_of_tets_equals_vtk(table):
    m = vtk_tets(jittered((7, 6, 6), 4))
    s = smooth(m.points)
    for value in (0.0, 0.35):
        r = clip(m, s, value)
        ref = vtk_clip(m, scalars=s, value=value, table=table)
        assert volume(r.mesh) == pytest.approx(vtk_volume(ref), rel=REL)
        assert boundary_area(r.mesh) == pytest.approx(boundary_area(vtk_clip(m, scalars=s, value=value)), rel=REL)


def test_field_clip_of_cells_is_the_clip_of_their_tets():
    """Hexahedra, wedges, pyramids cut by a curved field: the clip of their split, exactly
    (and VTK's clip of that split)."""
    for name in ("hexes", "wedges", "pyramids", "mixed"):
        m = MESHES[name]()
        s = smooth(m.points)
        t, parent = simplices(m)
        tm = cell_mesh(m.points, t.ravel(), TETRA)
        a, b = clip(m, s, 0.1), clip(tm, s, 0.1)
        assert volume(a.mesh) == pytest.approx(volume(b.mesh), rel=1e-12), name
        assert volume(a.mesh) == pytest.approx(vtk_volume(vtk_clip(tm, scalars=s, value=0.1)), rel=REL), name
        assert boundary_area(a.mesh) == pytest.approx(boundary_area(b.mesh), rel=1e-9), name


def test_whole_cells_pass_and_new_points_are_shared():
    m = hexes()
    r = clip_plane(m, *PLANE, point_fields={"x": m.points[:, 0], "id": np.arange(m.n_points)},
                   cell_fields={"c": np.arange(m.n_cells) * 2.0})
    o = r.mesh
    s = (m.points - PLANE[0]) @ np.asarray(PLANE[1])
    inside = s <= 0
    whole = inside[m.connectivity.reshape(-1, 8)].all(axis=1)
    hexes_out = o.types == HEXAHEDRON
    assert hexes_out.sum() == whole.sum()
    np.testing.assert_array_equal(r.cells[hexes_out], np.flatnonzero(whole))
    assert set(np.unique(o.types)) == {HEXAHEDRON, TETRA}
    np.testing.assert_array_equal(r.cell_fields["c"], r.cells * 2.0)
    # the kept input points, then one point per cut edge, on the plane
    nk = int(inside.sum())
    np.testing.assert_array_equal(r.point_fields["id"][:nk], np.flatnonzero(inside))
    new = o.points[nk:]
    assert len(new) and np.abs((new - PLANE[0]) @ np.asarray(PLANE[1])).max() < 1e-12
    assert len(np.unique(new, axis=0)) == len(new)
    np.testing.assert_allclose(r.point_fields["x"], o.points[:, 0], atol=1e-12)  # a linear field interpolates exactly
    # tetrahedra positive, every point used
    t = o.connectivity[o.offsets[int(hexes_out.sum())]:].reshape(-1, 4)
    p = o.points[t]
    assert (np.linalg.det(p[:, 1:] - p[:, :1]) >= -1e-15).all()
    assert len(np.unique(o.connectivity)) == o.n_points


def test_2d_clip_equals_vtk():
    for m in (quads(), tris()):
        s = np.sin(0.5 * m.points[:, 0]) + 0.3 * m.points[:, 1] - 1.0
        r = clip(m, s, 0.2, keep="above")
        f = vtk.vtkTableBasedClipDataSet()
        f.SetInputData(to_vtk(m, s))
        f.SetValue(0.2)
        f.Update()
        ref = from_vtk(f.GetOutput())
        t = simplices(m, 2)[0]  # VTK cuts quads its own way: compare on our triangles
        ref_t = from_vtk(_clip_scalars(cell_mesh(m.points, t.ravel(), TRIANGLE), s, 0.2))
        assert area(r.mesh) == pytest.approx(area(ref_t), rel=REL)
        if m.single_type() == TRIANGLE:
            assert area(r.mesh) == pytest.approx(area(ref), rel=REL)
        assert set(np.unique(r.mesh.types)) <= {QUAD, TRIANGLE, m.single_type()}
        q = r.mesh.points[r.mesh.connectivity[r.mesh.offsets[:-1][r.mesh.types == TRIANGLE][:, None] + np.arange(3)]]
        assert (np.cross(q[:, 1] - q[:, 0], q[:, 2] - q[:, 0])[:, 2] > -1e-15).all()  # counter-clockwise as the input


def _clip_scalars(m, s, value):
    f = vtk.vtkTableBasedClipDataSet()
    f.SetInputData(to_vtk(m, s))
    f.SetValue(value)
    f.Update()
    return f.GetOutput()


def test_sphere_box_isovolume():
    m = vtk_tets(jittered((8, 8, 8), 6))
    c, r = (0.5, 0.45, 0.55), 0.33
    p = m.points - c
    s = (p * p).sum(axis=1) - r * r
    got = clip_sphere(m, c, r)
    assert volume(got.mesh) == pytest.approx(vtk_volume(vtk_clip(m, scalars=s)), rel=REL)
    out = clip_sphere(m, c, r, inside=False)
    assert volume(got.mesh) + volume(out.mesh) == pytest.approx(volume(m), rel=1e-12)
    # box: six plane clips, exact on any mesh
    h = hexes()
    lo, hi = (0.21, 0.17, 0.33), (0.74, 0.9, 2.0)
    b = clip_box(h, lo, hi, cell_fields={"c": np.arange(h.n_cells)})
    ext = np.minimum(hi, h.points.max(axis=0)) - lo
    assert volume(b.mesh) == pytest.approx(np.prod(ext), rel=1e-12)
    np.testing.assert_array_equal(b.cell_fields["c"], b.cells)
    assert (cell_measures(b.mesh) >= 0).all()
    # outside: by the signed distance to the box, as VTK's vtkBox (exact on tetrahedra)
    lo, hi = (0.21, 0.17, 0.33), (0.74, 0.6, 0.8)
    f = vtk.vtkTableBasedClipDataSet()
    f.SetInputData(to_vtk(m))
    box = vtk.vtkBox()
    box.SetBounds(lo[0], hi[0], lo[1], hi[1], lo[2], hi[2])
    f.SetClipFunction(box)
    f.Update()
    outside = clip_box(m, lo, hi, inside=False)
    assert volume(outside.mesh) == pytest.approx(vtk_volume(from_vtk(f.GetOutput())), rel=REL)
    # near the box's edges the interpolated distance rounds them off: roughly the complement
    assert volume(outside.mesh) + volume(clip_box(m, lo, hi).mesh) == pytest.approx(volume(m), rel=0.05)
    # isovolume: two clips, as VTK's two clips
    v = smooth(m.points)
    iso = isovolume(m, v, -0.2, 0.3, point_fields={"v": v})
    first = from_vtk(_clip_scalars(m, v, -0.2))  # keeps >= -0.2
    second = vtk.vtkTableBasedClipDataSet()
    second.SetInputData(_clip_scalars(m, v, -0.2))
    second.SetValue(0.3)
    second.InsideOutOn()
    second.Update()
    assert first.n_cells
    assert volume(iso.mesh) == pytest.approx(vtk_volume(from_vtk(second.GetOutput())), rel=REL)
    assert iso.point_fields["v"].min() >= -0.2 - 1e-12 and iso.point_fields["v"].max() <= 0.3 + 1e-12
    assert list(iso.point_fields) == ["v"]
    np.testing.assert_array_equal(clip_field(m, v, 0.1).mesh.connectivity, clip(m, v, 0.1).mesh.connectivity)


def test_nothing_or_everything_kept():
    m = mixed()
    s = m.points[:, 0]
    none = clip(m, s, -1.0)
    assert none.mesh.n_cells == 0 and none.mesh.n_points == 0 and none.mesh.offsets.tolist() == [0]
    allc = clip(m, s, 10.0, point_fields={"s": s})
    np.testing.assert_array_equal(allc.mesh.connectivity, m.connectivity)
    np.testing.assert_array_equal(allc.mesh.types, m.types)
    np.testing.assert_array_equal(allc.point_fields["s"], s)
    empty = cell_mesh(np.zeros((0, 3)), np.zeros(0, np.int64), TETRA)
    assert clip(empty, np.zeros(0), 0.0).mesh.n_cells == 0


def test_bad_input():
    m = hexes((2, 2, 2))
    s = m.points[:, 0]
    with pytest.raises(ValueError, match="scalar: expected shape"):
        clip(m, s[:-1])
    with pytest.raises(ValueError, match="scalar: contains NaN"):
        clip(m, np.where(np.arange(m.n_points) == 3, np.nan, s))
    with pytest.raises(ValueError, match="keep: expected"):
        clip(m, s, keep="inside")
    with pytest.raises(ValueError, match="value: expected a finite"):
        clip(m, s, float("nan"))
    with pytest.raises(ValueError, match=r"point_fields\['a'\]: expected 27 rows"):
        clip(m, s, 0.5, point_fields={"a": s[:3]})
    with pytest.raises(ValueError, match=r"cell_fields\['c'\]: expected 8 rows"):
        clip(m, s, 0.5, cell_fields={"c": s})
    with pytest.raises(ValueError, match="normal: must not be zero"):
        clip_plane(m, (0, 0, 0), (0, 0, 0))
    with pytest.raises(ValueError, match="radius"):
        clip_sphere(m, (0, 0, 0), -1)
    with pytest.raises(ValueError, match="lo, hi"):
        isovolume(m, s, 1.0, 0.0)
    with pytest.raises(TypeError, match="mesh: expected a CellMesh"):
        clip(m.points, s)
    poly = cell_mesh(np.eye(3), np.arange(3), 7, np.array([0, 3]))
    with pytest.raises(ValueError, match="cannot split"):
        clip(poly, np.array([0.0, 1.0, 2.0]), 0.5)
    assert clip(poly, np.array([0.0, 1.0, 2.0]), 5.0).mesh.n_cells == 1  # whole: passed through


def orphans():
    """The mixed mesh with points no cell uses, among its own."""
    m = mixed()
    rng = np.random.default_rng(9)
    pts = np.concatenate([m.points, rng.uniform(0, 1, (40, 3))])
    order = rng.permutation(len(pts))
    where = np.empty_like(order)
    where[order] = np.arange(len(pts))
    return cell_mesh(pts[order], where[m.connectivity], m.types, m.offsets)


@pytest.mark.parametrize("name", [*MESHES, "quads", "tris", "orphans"])
def test_numba_path_equals_whole_array_path(name, monkeypatch):
    """The host's Numba kernels give the mesh the whole-array path (the one CuPy runs) gives:
    same cells in the same order, same points."""
    clip_module = importlib.import_module("render.cells.clip")  # the package exports the function

    m = {**MESHES, "quads": quads, "tris": tris, "orphans": orphans}[name]()
    s = smooth(m.points)
    pf, cf = {"s": s}, {"c": np.arange(m.n_cells)}
    runs = []
    for flag in (True, False):
        monkeypatch.setattr(clip_module, "use_numba", flag)
        runs.append([clip(m, s, v, keep=k, point_fields=pf, cell_fields=cf)
                     for v, k in ((0.1, "below"), (-0.3, "above"), (-5.0, "below"), (5.0, "below"))])
    for a, b in zip(*runs):
        for attr in ("connectivity", "offsets", "types"):
            np.testing.assert_array_equal(getattr(a.mesh, attr), getattr(b.mesh, attr), err_msg=attr)
        np.testing.assert_array_equal(a.cells, b.cells)
        np.testing.assert_array_equal(a.mesh.points, b.mesh.points)
        np.testing.assert_array_equal(a.point_fields["s"], b.point_fields["s"])
        np.testing.assert_array_equal(a.cell_fields["c"], b.cell_fields["c"])
        assert len(np.unique(a.mesh.connectivity)) == a.mesh.n_points  # points no cell uses are left out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_numba_plane_equals_whole_array_plane(dtype, monkeypatch):
    """clip_plane's one-pass scalar (Numba) is the whole-array expression to the bit: the
    same cells and points, on float32 and float64 points, the plane through points."""
    clip_module = importlib.import_module("render.cells.clip")
    m = jittered()
    m = cell_mesh(m.points.astype(dtype), m.connectivity, m.types, m.offsets)
    runs = []
    for flag in (True, False):
        monkeypatch.setattr(clip_module, "use_numba", flag)
        runs.append([clip_plane(m, o, nrm, keep=k) for o, nrm, k in
                     (((0.5, 0.5, 0.5), (0.3, -0.5, 0.8), "below"), (m.points[7], (0, 0, 1), "above"),
                      ((0.4, 0.6, 0.5), (1e-3, 2.0, -0.7), "below"))])
    for a, b in zip(*runs):
        assert a.mesh.n_cells > 0
        for attr in ("connectivity", "offsets", "types", "points"):
            np.testing.assert_array_equal(getattr(a.mesh, attr), getattr(b.mesh, attr), err_msg=attr)
        np.testing.assert_array_equal(a.cells, b.cells)
