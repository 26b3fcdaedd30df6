"""render.cells.surface.outer_surface against vtkDataSetSurfaceFilter on the same grids, and
its orientation (the divergence theorem gives the enclosed volume, positive when outward)."""

import numpy as np
import pytest

from render.cells import HEXAHEDRON, POLYGON, QUAD, TETRA, TRIANGLE, cell_mesh
from render.cells.surface import outer_surface

from test_cells_fields import KINDS, grid, plane, split, to_vtk  # tests/ is on sys.path

vtk = pytest.importorskip("vtk")
from vtk.util import numpy_support as ns  # noqa: E402


def canonical(tris):
    """Oriented triangles as a sorted array, each rotated to start at its smallest id."""
    tris = np.asarray(tris, np.int64).reshape(-1, 3)
    r = np.argmin(tris, axis=1)
    rot = np.stack([tris[np.arange(len(tris)), (r + j) % 3] for j in range(3)], 1)
    return rot[np.lexsort(rot.T[::-1])]


def unoriented(tris):
    t = np.sort(np.asarray(tris, np.int64).reshape(-1, 3), axis=1)
    return t[np.lexsort(t.T[::-1])]


def split_quad(q):
    """A quad cut as outer_surface cuts it: along the diagonal through its smallest id."""
    if np.argmin(q) % 2 == 0:
        return [(q[0], q[1], q[2]), (q[0], q[2], q[3])]
    return [(q[1], q[2], q[3]), (q[1], q[3], q[0])]


def vtk_surface(mesh, filter="vtkGeometryFilter"):
    """A VTK surface filter's polygons as triangles (cut as above) and their cell ids.

    vtkGeometryFilter orients every face outward; vtkDataSetSurfaceFilter (VTK 9.7) turns
    the triangles of wedges inward (its own face table, not vtkWedge's), so it is compared
    without orientation.
    """
    ug = to_vtk(mesh)
    f = getattr(vtk, filter)()
    f.SetInputData(ug)
    f.PassThroughCellIdsOn()
    f.Update()
    out = f.GetOutput()
    ids = ns.vtk_to_numpy(out.GetCellData().GetArray("vtkOriginalCellIds"))
    # the filter renumbers points: map back by position (the inputs have distinct points)
    pts = ns.vtk_to_numpy(out.GetPoints().GetData())
    back = {tuple(x): i for i, x in enumerate(mesh.points.tolist())}
    m = [back[tuple(x)] for x in pts.tolist()]
    tris, cells = [], []
    for i in range(out.GetNumberOfCells()):
        p = out.GetCell(i).GetPointIds()
        q = [m[p.GetId(j)] for j in range(p.GetNumberOfIds())]
        t = [tuple(q)] if len(q) == 3 else split_quad(q) if len(q) == 4 else [(q[0], q[j], q[j + 1])
                                                                                for j in range(1, len(q) - 1)]
        tris += t
        cells += [ids[i]] * len(t)
    return np.array(tris, np.int64).reshape(-1, 3), np.array(cells)


def enclosed_volume(points, faces):
    a, b, c = (points[faces[:, j]] for j in range(3))
    return np.einsum("ij,ij->i", a, np.cross(b, c)).sum() / 6


def area(points, faces):
    a, b, c = (points[faces[:, j]] for j in range(3))
    return 0.5 * np.linalg.norm(np.cross(b - a, c - a), axis=1).sum()


@pytest.mark.parametrize("kind", KINDS)
def test_outer_surface_is_vtks(kind):
    mesh = split(grid(), kind)
    s = outer_surface(mesh)
    assert s.faces.dtype == np.int32 and s.faces.shape[1] == 3 and s.cells.shape == (s.n_faces,)
    ref, ref_cells = vtk_surface(mesh)
    np.testing.assert_array_equal(canonical(s.faces), canonical(ref))  # same triangles, same winding
    other, _ = vtk_surface(mesh, "vtkDataSetSurfaceFilter")
    np.testing.assert_array_equal(unoriented(s.faces), unoriented(other))
    # each triangle names the cell VTK names for it
    key = lambda f, c: sorted(zip(map(tuple, np.sort(f, axis=1).tolist()), c.tolist()))  # noqa: E731
    assert key(s.faces, s.cells) == key(ref, ref_cells)
    vol = enclosed_volume(mesh.points, s.faces)
    assert abs(vol - 4 * 3 * 5) < 0.1 * 4 * 3 * 5  # the grid's box, its boundary points jittered
    np.testing.assert_allclose(vol, enclosed_volume(mesh.points, ref), rtol=1e-12)
    np.testing.assert_allclose(area(mesh.points, s.faces), area(mesh.points, ref), rtol=1e-12)


@pytest.mark.parametrize("kind", KINDS + ["quad", "tri"])
def test_vectorized_path_is_the_cpu_loop(kind):
    # the path CuPy runs, here on NumPy, against the Numba loop: the same arrays
    mesh = plane(kind=kind) if kind in ("quad", "tri") else split(grid(), kind)
    hidden = np.arange(mesh.n_cells) % 5 == 0
    for h in (None, hidden):
        a, b = outer_surface(mesh, hidden=h), outer_surface(mesh, hidden=h, _vectorized=True)
        np.testing.assert_array_equal(a.faces, b.faces)
        np.testing.assert_array_equal(a.cells, b.cells)
        assert a.faces.dtype == b.faces.dtype == np.int32


def test_inverted_cells_still_face_outward():
    mesh = split(grid(), "tet")
    t = mesh.connectivity.reshape(-1, 4)
    bad = cell_mesh(mesh.points, t[:, [0, 2, 1, 3]].ravel(), TETRA)  # every tet inside out
    for vectorized in (False, True):
        s = outer_surface(bad, _vectorized=vectorized)
        np.testing.assert_array_equal(canonical(s.faces), canonical(outer_surface(mesh).faces))
        assert enclosed_volume(mesh.points, s.faces) > 0


@pytest.mark.parametrize("kind", ["quad", "tri"])
def test_2d_meshes_give_all_their_cells(kind):
    mesh = plane(kind=kind)
    s = outer_surface(mesh)
    ref, ref_cells = vtk_surface(mesh)
    np.testing.assert_array_equal(canonical(s.faces), canonical(ref))
    assert s.n_faces == mesh.n_cells * (2 if kind == "quad" else 1)
    np.testing.assert_allclose(area(mesh.points, s.faces), area(mesh.points, ref), rtol=1e-12)


def test_polygons_and_mixed_dimensions():
    pts = np.array([[0, 0, 0], [2, 0, 0], [3, 1, 0], [2, 2, 0], [0, 2, 0], [5, 0, 0], [5, 2, 0]], float)
    conn = np.array([0, 1, 2, 3, 4, 1, 5, 6, 2, 0, 1])
    mesh = cell_mesh(pts, conn, np.array([POLYGON, QUAD, 3], np.uint8), np.array([0, 5, 9, 11]))
    s = outer_surface(mesh)
    np.testing.assert_array_equal(canonical(s.faces), canonical([(0, 1, 2), (0, 2, 3), (0, 3, 4),
                                                                 *split_quad([1, 5, 6, 2])]))
    np.testing.assert_array_equal(np.sort(s.cells), [0, 0, 0, 1, 1])  # the line (cell 2) is not drawn


def test_hidden_cells_are_dropped_first():
    mesh = split(grid((4, 3, 3)), "hex")
    hidden = np.zeros(mesh.n_cells, bool)
    hidden[: 4 * 3] = True  # the bottom layer: ghosts
    s = outer_surface(mesh, hidden=hidden)
    kept = cell_mesh(mesh.points, mesh.connectivity.reshape(-1, 8)[~hidden].ravel(), HEXAHEDRON)
    np.testing.assert_array_equal(canonical(s.faces), canonical(outer_surface(kept).faces))
    assert not np.isin(s.cells, np.nonzero(hidden)[0]).any()
    assert enclosed_volume(mesh.points, s.faces) > 0
    # two blocks, each with the other's layer as ghosts: together they cover the whole boundary
    top = outer_surface(mesh, hidden=~hidden)
    whole = canonical(outer_surface(mesh).faces)
    both = canonical(np.concatenate([s.faces, top.faces]))
    assert set(map(tuple, whole.tolist())) <= set(map(tuple, both.tolist()))


def test_large_ids_take_the_lexsort_path():
    # more than 2**21 points (unused ones): the keys no longer pack in one int64
    mesh = split(grid((2, 2, 2)), "tet")
    far = np.zeros((2**21, 3))
    pts = np.concatenate([far, mesh.points])
    big = cell_mesh(pts, mesh.connectivity + 2**21, TETRA)
    for vectorized in (False, True):
        np.testing.assert_array_equal(canonical(outer_surface(big, _vectorized=vectorized).faces - 2**21),
                                      canonical(outer_surface(mesh).faces))


def test_faces_of_several_cells_cancel_in_pairs():
    # non-manifold: three tets on one triangle, four on another. Faces cancel in pairs as
    # in vtkGeometryFilter (the first drawn once, the second not); vtkDataSetSurfaceFilter
    # would draw neither
    pts = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0.2, 0.2, 1], [0.3, 0.2, -1], [0.2, 0.3, 2],
                    [5, 0, 0], [6, 0, 0], [5, 1, 0], [5.2, 0.2, 1], [5.3, 0.2, -1], [5.2, 0.3, 2], [5.1, 0.1, -2]])
    conn = np.array([0, 1, 2, 3, 0, 2, 1, 4, 0, 1, 2, 5, 6, 7, 8, 9, 6, 8, 7, 10, 6, 7, 8, 11, 6, 8, 7, 12])
    mesh = cell_mesh(pts, conn, TETRA)
    ref, _ = vtk_surface(mesh, "vtkGeometryFilter")
    for vectorized in (False, True):
        s = outer_surface(mesh, _vectorized=vectorized)
        np.testing.assert_array_equal(unoriented(s.faces), unoriented(ref))
        assert s.n_faces == 10 + 12


def test_empty_and_errors():
    mesh = split(grid((2, 2, 2)), "hex")
    s = outer_surface(mesh, hidden=np.ones(mesh.n_cells, bool))
    assert s.faces.shape == (0, 3) and s.cells.shape == (0,)
    with pytest.raises(ValueError, match="hidden: expected a \\(8,\\) bool array"):
        outer_surface(mesh, hidden=np.zeros(7, bool))
    empty = cell_mesh(np.zeros((0, 3)), np.zeros(0, np.int64), TETRA)
    for vectorized in (False, True):
        s = outer_surface(empty, _vectorized=vectorized)
        assert s.faces.shape == (0, 3) and s.faces.dtype == np.int32 and s.cells.shape == (0,)
    tri = cell_mesh(np.zeros((3, 3)), np.array([0, 1, 2]), TRIANGLE)
    assert outer_surface(tri).n_faces == 1
