"""render.cells.contour (CPU) against VTK's vtkContourFilter and vtkCutter, and geometry checks.

Vertex sets must equal VTK's (one vertex per crossed edge, interpolated alike) for every
shape; areas agree to 1e-6 where the per-cell pieces are planar (tets; any cell on a
linear field). On curved fields hexahedra, wedges and pyramids are triangulated along
other diagonals than VTK's tables (see render/cells/_contour_tables.py), so areas there
agree to a looser bound.
"""

import itertools

import numpy as np
import pytest
from scipy.spatial import cKDTree

from render.cells import HEXAHEDRON, POLYGON, PYRAMID, QUAD, TETRA, TRIANGLE, WEDGE, CellMesh, cell_mesh
from render.cells._contour_tables import SHAPES, TABLES, case
from render.cells.contour import Contour, contour, slice_plane, three_slice

try:  # the meshes below serve tests/gpu too, where VTK may be missing
    import vtk
    from vtk.util import numpy_support as ns
except ImportError:
    vtk = ns = None

pytestmark = pytest.mark.skipif(vtk is None, reason="needs the vtk wheel (a test dependency)")

# --------------------------------------------------------------------------- meshes

# corners of a unit cube (i, j, k) in VTK's hexahedron order
_CUBE = [(0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 1, 0), (0, 0, 1), (1, 0, 1), (1, 1, 1), (0, 1, 1)]


def _kuhn_tets():
    """Six tets of the unit cube along its main diagonal (the split conforms between cubes)."""
    out = []
    for perm in itertools.permutations(range(3)):
        cur, path = [0, 0, 0], [(0, 0, 0)]
        for a in perm:
            cur = cur.copy()
            cur[a] = 1
            path.append(tuple(cur))
        out.append([_CUBE.index(p) for p in path])
    return out


# per shape: cells of one cube as lists of cube corners (8 = the cube's centre)
_SPLIT = {
    HEXAHEDRON: [list(range(8))],
    TETRA: _kuhn_tets(),
    WEDGE: [[0, 1, 2, 4, 5, 6], [0, 2, 3, 4, 6, 7]],
    PYRAMID: [[0, 3, 2, 1, 8], [4, 5, 6, 7, 8], [0, 1, 5, 4, 8], [1, 2, 6, 5, 8], [2, 3, 7, 6, 8], [3, 0, 4, 7, 8]],
}


def _orient(pts, shape, cell):
    """`cell` reordered so the cell is positively oriented as VTK defines it."""
    p = pts[cell]
    if shape == TETRA:
        neg = np.dot(np.cross(p[1] - p[0], p[2] - p[0]), p[3] - p[0]) < 0
        return [cell[0], cell[2], cell[1], cell[3]] if neg else cell
    if shape == PYRAMID:
        neg = np.dot(np.cross(p[1] - p[0], p[3] - p[0]), p[4] - p[0]) < 0
        return [cell[0], cell[3], cell[2], cell[1], cell[4]] if neg else cell
    return cell  # hexahedra and wedges are built in VTK's order


def grid_mesh(n, shapes=(TETRA,), jitter=0.0, seed=0, dtype=np.float64, conn_dtype=np.int64):
    """n^3 cubes of [0, 1]^3, each cut into cells of one of `shapes` (chosen at random per
    cube when several), points moved by up to `jitter` cells."""
    rng = np.random.default_rng(seed)
    g = np.linspace(0.0, 1.0, n + 1)
    pts = np.stack(np.meshgrid(g, g, g, indexing="ij"), -1).reshape(-1, 3)
    pts = pts + jitter / n * rng.uniform(-1, 1, pts.shape)
    centres = (np.stack(np.meshgrid(*[(g[:-1] + g[1:]) / 2] * 3, indexing="ij"), -1).reshape(-1, 3)
               + jitter / (4 * n) * rng.uniform(-1, 1, (n ** 3, 3)))
    pts = np.concatenate([pts, centres])
    idx = np.arange((n + 1) ** 3).reshape(n + 1, n + 1, n + 1)
    corners = np.stack([idx[i:n + i, j:n + j, k:n + k].ravel() for i, j, k in _CUBE]
                       + [(n + 1) ** 3 + np.arange(n ** 3)], 1)
    pick = rng.integers(len(shapes), size=n ** 3)
    conn, types = [], []
    for c in range(n ** 3):
        shape = shapes[pick[c]]
        for cell in _SPLIT[shape]:
            ids = _orient(pts, shape, list(corners[c, cell]))
            conn += ids
            types.append(shape)
    used = np.unique(conn)  # drop the centres no pyramid uses
    newid = np.full(len(pts), -1)
    newid[used] = np.arange(len(used))
    return cell_mesh(pts[used].astype(dtype), newid[np.asarray(conn)].astype(conn_dtype), np.asarray(types))


def grid_2d(n, shape, jitter=0.0, seed=0):
    """n^2 squares of [0, 1]^2 as quads or two triangles each (counter-clockwise)."""
    rng = np.random.default_rng(seed)
    g = np.linspace(0.0, 1.0, n + 1)
    pts = np.stack(np.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2)
    pts = pts + jitter / n * rng.uniform(-1, 1, pts.shape)
    idx = np.arange((n + 1) ** 2).reshape(n + 1, n + 1)
    a, b, c, d = idx[:-1, :-1].ravel(), idx[1:, :-1].ravel(), idx[1:, 1:].ravel(), idx[:-1, 1:].ravel()
    if shape == QUAD:
        return cell_mesh(pts, np.stack([a, b, c, d], 1).ravel(), QUAD)
    return cell_mesh(pts, np.stack([a, b, c, a, c, d], 1).ravel(), TRIANGLE)


def sphere_field(mesh, centre=(0.5, 0.5, 0.5)):
    return np.linalg.norm(mesh.points.astype(np.float64) - np.asarray(centre), axis=1)


def smooth_field(mesh, seed=0):
    rng = np.random.default_rng(seed)
    p = mesh.points.astype(np.float64)
    out = np.zeros(len(p))
    for _ in range(6):
        k = rng.normal(0, 6, 3)
        out += np.sin(p @ k + rng.uniform(0, 6))
    return out


# --------------------------------------------------------------------------- VTK


def vtk_grid(mesh, field):
    ug = vtk.vtkUnstructuredGrid()
    pts = vtk.vtkPoints()
    pts.SetData(ns.numpy_to_vtk(np.ascontiguousarray(mesh.points, np.float64), deep=1))
    ug.SetPoints(pts)
    cells = vtk.vtkCellArray()
    cells.SetData(ns.numpy_to_vtkIdTypeArray(np.ascontiguousarray(mesh.offsets, np.int64), deep=1),
                  ns.numpy_to_vtkIdTypeArray(np.ascontiguousarray(mesh.connectivity, np.int64), deep=1))
    ug.SetCells(ns.numpy_to_vtk(np.ascontiguousarray(mesh.types, np.uint8), deep=1,
                                array_type=vtk.VTK_UNSIGNED_CHAR), cells)
    arr = ns.numpy_to_vtk(np.ascontiguousarray(field, np.float64), deep=1)
    arr.SetName("f")
    ug.GetPointData().SetScalars(arr)
    return ug


def _polys(out, lines=False):
    """(vertices, faces) of a vtkPolyData's triangles (or lines)."""
    v = ns.vtk_to_numpy(out.GetPoints().GetData()) if out.GetNumberOfPoints() else np.zeros((0, 3))
    ca = out.GetLines() if lines else out.GetPolys()
    conn = ns.vtk_to_numpy(ca.GetConnectivityArray()) if ca.GetNumberOfCells() else np.zeros(0, int)
    off = ns.vtk_to_numpy(ca.GetOffsetsArray()) if ca.GetNumberOfCells() else np.zeros(1, int)
    k = 2 if lines else 3
    assert (np.diff(off) == k).all()
    return v, conn.reshape(-1, k)


def vtk_contour(mesh, field, levels, lines=False):
    f = vtk.vtkContourFilter()
    f.SetInputData(vtk_grid(mesh, field))
    for n, lev in enumerate(np.atleast_1d(levels)):
        f.SetValue(n, float(lev))
    f.Update()
    return _polys(f.GetOutput(), lines)


def vtk_cut(mesh, origin, normal):
    plane = vtk.vtkPlane()
    plane.SetOrigin(*origin)
    plane.SetNormal(*normal)
    c = vtk.vtkCutter()
    c.SetCutFunction(plane)
    c.SetInputData(vtk_grid(mesh, np.zeros(mesh.n_points)))
    c.Update()
    return _polys(c.GetOutput())


def area(v, f):
    p = np.asarray(v, np.float64)[f]
    if f.shape[1] == 2:
        return np.linalg.norm(p[:, 1] - p[:, 0], axis=1).sum()
    return 0.5 * np.linalg.norm(np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0]), axis=1).sum()


def same_points(a, b, tol=1e-9):
    """Equal point sets (each a set: duplicates in b merged as VTK's locator would)."""
    b = np.unique(np.round(np.asarray(b, np.float64), 12), axis=0)
    if len(a) != len(b):
        return False
    return bool(len(a) == 0 or max(cKDTree(b).query(a)[0].max(), cKDTree(a).query(b)[0].max()) < tol)


def directed_edges_pair_up(faces):
    """Every edge of the triangles is used by exactly two of them, once each way (a closed,
    consistently oriented surface)."""
    e = np.concatenate([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]]).astype(np.int64)
    n = int(faces.max()) + 1
    fwd = e[:, 0] * n + e[:, 1]
    rev = e[:, 1] * n + e[:, 0]
    return len(np.unique(fwd)) == len(fwd) and np.array_equal(np.sort(fwd), np.sort(rev))


# --------------------------------------------------------------------------- tables


@pytest.mark.parametrize("shape", SHAPES)
def test_every_case_is_closed_loops_on_faces(shape):
    """Single cells, every case: the pieces' boundary edges join crossings of one face,
    and a crossed edge is a vertex of every case that crosses it."""
    from render.cells._contour_tables import _FACES, REFERENCE

    ncorners = len(REFERENCE[shape])
    for mask in range(1 << ncorners):
        slots, faces = case(shape, mask)
        above = [mask >> i & 1 for i in range(ncorners)]
        assert slots == [e for e in sorted(slots) if above[e[0]] != above[e[1]]]
        if len(faces) == 0:
            assert mask in (0, (1 << ncorners) - 1)
            continue
        if shape in (TRIANGLE, QUAD):
            assert sorted(s for f in faces for s in f) == list(range(len(slots)))  # each crossing once
            continue
        und = [tuple(sorted((f[i], f[(i + 1) % 3]))) for f in faces for i in range(3)]
        boundary = [e for e in set(und) if und.count(e) == 1]
        for a, b in boundary:
            corners = set(slots[a]) | set(slots[b])
            assert any(corners <= set(fc) for fc in _FACES[shape]), (shape, mask, a, b)
    base, nv = TABLES["base"], TABLES["nvert"]
    assert nv[base[shape]] == 0 and nv[base[shape] + (1 << ncorners) - 1] == 0


# --------------------------------------------------------------------------- against VTK


def test_tets_match_vtk_vertices_faces_and_area():
    mesh = grid_mesh(10, (TETRA,), jitter=0.3, seed=1)
    f = sphere_field(mesh)
    levels = [0.22, 0.37]
    c = contour(mesh, f, levels)
    vv, vf = vtk_contour(mesh, f, levels)
    assert isinstance(c, Contour) and c.values is None
    assert c.vertices.dtype == np.float64 and c.faces.dtype == np.int32 and c.cells.dtype == np.int64
    assert same_points(c.vertices, vv)
    assert len(c.faces) == len(vf)
    assert area(c.vertices, c.faces) == pytest.approx(area(vv, vf), rel=1e-6)
    # closed, consistently oriented, normals towards higher values (outwards)
    assert directed_edges_pair_up(c.faces)
    p = c.vertices[c.faces]
    n = np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0])
    assert (np.einsum("ij,ij->i", n, p.mean(1) - 0.5) > 0).all()
    # each face lies in the cell it names: its centroid inside that tet
    cells = mesh.connectivity.reshape(-1, 4)[c.cells]
    T = mesh.points[cells]
    bary = np.linalg.solve(np.transpose(T[:, 1:] - T[:, :1], (0, 2, 1)), (p.mean(1) - T[:, 0])[..., None])[..., 0]
    assert (bary > -1e-9).all() and (bary.sum(1) < 1 + 1e-9).all()


@pytest.mark.parametrize("shapes", [(HEXAHEDRON,), (WEDGE,), (PYRAMID,), (TETRA, HEXAHEDRON, WEDGE, PYRAMID)],
                         ids=["hex", "wedge", "pyramid", "mixed"])
def test_shapes_match_vtk(shapes):
    # A linear field on convex cells: every piece is a convex planar polygon, so any
    # triangulation has VTK's area (a jittered cell can be cut into a non-convex one).
    mesh = grid_mesh(8, shapes, jitter=0.0, seed=2)
    lin = mesh.points @ np.array([0.3, -0.5, 0.8])
    c = contour(mesh, lin, 0.1234)
    vv, vf = vtk_contour(mesh, lin, 0.1234)
    assert same_points(c.vertices, vv)
    assert area(c.vertices, c.faces) == pytest.approx(area(vv, vf), rel=1e-6)
    mesh = grid_mesh(8, shapes, jitter=0.3, seed=2)
    # a sphere: same vertices; areas as close as the other triangulation of curved pieces allows
    f = sphere_field(mesh)
    c = contour(mesh, f, 0.3)
    vv, vf = vtk_contour(mesh, f, 0.3)
    assert same_points(c.vertices, vv)
    assert area(c.vertices, c.faces) == pytest.approx(area(vv, vf), rel=2e-3)
    assert area(c.vertices, c.faces) == pytest.approx(4 * np.pi * 0.3 ** 2, rel=0.1)
    if len(shapes) == 1:  # a conforming mesh: the surface is closed and oriented
        assert directed_edges_pair_up(c.faces)
        p = c.vertices[c.faces]
        n = np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0])
        assert (np.einsum("ij,ij->i", n, p.mean(1) - 0.5) > 0).mean() > 0.99


@pytest.mark.parametrize("shape", [HEXAHEDRON, WEDGE, PYRAMID, TETRA])
def test_smooth_random_fields_give_closed_oriented_surfaces(shape):
    """Many cases, ambiguous faces included: still watertight and consistently oriented,
    and the same vertices as VTK."""
    mesh = grid_mesh(7, (shape,), jitter=0.25, seed=3)
    f = smooth_field(mesh, seed=4)
    pad = mesh.points.min(1) < 0.5 / 7  # keep the surface off the mesh's boundary: then it is closed
    pad |= mesh.points.max(1) > 1 - 0.5 / 7
    f[pad] = 10.0
    c = contour(mesh, f, 0.5)
    assert len(c.faces) > 100
    assert directed_edges_pair_up(c.faces)
    assert same_points(c.vertices, vtk_contour(mesh, f, 0.5)[0])


@pytest.mark.parametrize("shape", [TRIANGLE, QUAD])
def test_2d_cells_give_segments_like_vtk(shape):
    mesh = grid_2d(20, shape, jitter=0.3, seed=5)
    f = np.linalg.norm(mesh.points[:, :2] - 0.5, axis=1)
    c = contour(mesh, f, [0.2, 0.4])
    vv, vf = vtk_contour(mesh, f, [0.2, 0.4], lines=True)
    assert c.faces.shape[1] == 2 and c.faces.dtype == np.int32
    assert same_points(c.vertices, vv)
    assert area(c.vertices, c.faces) == pytest.approx(area(vv, vf), rel=1e-6)
    # closed curves: each vertex starts one segment and ends one; higher values on the left
    assert np.array_equal(np.sort(c.faces[:, 0]), np.arange(len(c.vertices)))
    assert np.array_equal(np.sort(c.faces[:, 1]), np.arange(len(c.vertices)))
    d = c.vertices[c.faces[:, 1]] - c.vertices[c.faces[:, 0]]
    left = np.stack([-d[:, 1], d[:, 0]], 1)
    outward = c.vertices[c.faces].mean(1)[:, :2] - 0.5
    assert (np.einsum("ij,ij->i", left, outward) > 0).all()


def test_quad_saddle_separates_the_above_corners():
    mesh = cell_mesh(np.array([[0, 0], [1, 0], [1, 1], [0, 1]], float), np.arange(4), QUAD)
    c = contour(mesh, np.array([1.0, -1.0, 1.0, -1.0]), 0.0)
    v = c.vertices[c.faces]  # each segment cuts off one above corner
    assert len(c.faces) == 2
    for seg in v:
        mid = seg.mean(0)[:2]
        assert min(np.linalg.norm(mid - [0, 0]), np.linalg.norm(mid - [1, 1])) < 0.5


# --------------------------------------------------------------------------- slices


@pytest.mark.parametrize("shapes", [(TETRA,), (HEXAHEDRON,), (TETRA, HEXAHEDRON, WEDGE, PYRAMID)],
                         ids=["tet", "hex", "mixed"])
def test_slice_plane_matches_vtk_cutter(shapes):
    mesh = grid_mesh(8, shapes, jitter=0.3, seed=6)
    origin, normal = (0.45, 0.52, 0.49), (0.2, -0.4, 1.0)
    c = slice_plane(mesh, origin, normal, color=mesh.points[:, 0].copy())
    vv, vf = vtk_cut(mesh, origin, normal)
    assert same_points(c.vertices, vv)
    assert area(c.vertices, c.faces) == pytest.approx(area(vv, vf), rel=1e-6)
    assert np.allclose((c.vertices - origin) @ normal, 0, atol=1e-12)
    assert np.allclose(c.values, c.vertices[:, 0], atol=1e-12)  # x interpolated linearly is x
    p = c.vertices[c.faces]  # normals along the plane's
    assert (np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0]) @ normal > 0).all()


def test_three_slice_matches_vtk_cutter_through_grid_points():
    """The centre planes pass through a layer of points (cases with values exactly 0)."""
    mesh = grid_mesh(6, (TETRA, HEXAHEDRON), seed=7)
    c = three_slice(mesh)
    want = 0.0
    for a in range(3):
        vv, vf = vtk_cut(mesh, (0.5, 0.5, 0.5), np.eye(3)[a])
        want += area(vv, vf)
    assert area(c.vertices, c.faces) == pytest.approx(want, rel=1e-6)
    assert area(c.vertices, c.faces) == pytest.approx(3.0, rel=1e-9)
    c2 = three_slice(mesh, (0.3, 0.6, 0.7))
    assert area(c2.vertices, c2.faces) == pytest.approx(3.0, rel=1e-9)
    assert c2.faces.max() < len(c2.vertices)


# --------------------------------------------------------------------------- dtypes, colour, errors


def test_int32_connectivity_and_float32_give_the_same_surface():
    ref_mesh = grid_mesh(6, (TETRA, HEXAHEDRON, WEDGE, PYRAMID), jitter=0.3, seed=8)
    f = sphere_field(ref_mesh)
    ref = contour(ref_mesh, f, 0.3)
    m32 = CellMesh(ref_mesh.points.astype(np.float32), ref_mesh.connectivity.astype(np.int32), ref_mesh.offsets,
                   ref_mesh.types)
    c = contour(m32, f.astype(np.float32), 0.3, color=f.astype(np.float32))
    assert c.vertices.dtype == np.float32 and c.values.dtype == np.float32
    assert np.array_equal(c.faces, ref.faces) and np.array_equal(c.cells, ref.cells)
    assert np.allclose(c.vertices, ref.vertices, atol=1e-5)
    assert np.allclose(c.values, 0.3, atol=1e-6)
    # strided values (a column of a bigger array) are read in place
    both = np.stack([f, f + 1], 1)
    s = contour(ref_mesh, both[:, 0], 0.3)
    assert np.array_equal(s.faces, ref.faces) and np.array_equal(s.vertices, ref.vertices)
    # integer values are contoured as float64
    ci = contour(ref_mesh, np.round(f * 100).astype(np.int16), 30.5)
    assert len(ci.faces) > 0 and ci.vertices.dtype == np.float64


def test_empty_and_outside_levels():
    mesh = grid_mesh(3, (TETRA,))
    c = contour(mesh, sphere_field(mesh), 5.0, color=np.zeros(mesh.n_points))
    assert c.vertices.shape == (0, 3) and c.faces.shape == (0, 3) and c.cells.shape == (0,)
    assert c.values.shape == (0,)
    m2 = grid_2d(3, QUAD)
    assert contour(m2, m2.points[:, 0], 7.0).faces.shape == (0, 2)


def test_errors_name_the_argument():
    mesh = grid_mesh(3, (TETRA,))
    f = sphere_field(mesh)
    bad = f.copy()
    bad[5] = np.nan
    with pytest.raises(ValueError, match="values: NaN"):
        contour(mesh, bad, 0.3)
    mesh = grid_mesh(6, (TETRA,))
    f = sphere_field(mesh)
    col = np.zeros(mesh.n_points)
    col[np.argmax(f)] = np.nan  # a corner of the box: an end of edges crossed at 0.8
    with pytest.raises(ValueError, match="color: NaN"):
        contour(mesh, f, 0.8, color=col)
    contour(mesh, f, 0.3, color=col)  # not read there
    with pytest.raises(ValueError, match="values: expected one value per point"):
        contour(mesh, f[:-1], 0.3)
    with pytest.raises(ValueError, match="levels"):
        contour(mesh, f, [0.3, np.nan])
    with pytest.raises(ValueError, match="values: expected a real"):
        contour(mesh, f.astype(complex), 0.3)
    with pytest.raises(TypeError, match="mesh"):
        contour(None, f, 0.3)
    poly = cell_mesh(np.array([[0, 0], [1, 0], [1, 1], [0.5, 1.5], [0, 1]], float), np.arange(5), POLYGON,
                     offsets=np.array([0, 5]))
    with pytest.raises(ValueError, match=r"polygonal \(7\)"):
        contour(poly, np.arange(5.0), 1.5)
    mixed = cell_mesh(np.eye(4)[:, :3], np.array([0, 1, 2, 3, 0, 1, 2]), np.array([TETRA, TRIANGLE]))
    with pytest.raises(ValueError, match="mixes 2-D"):
        contour(mixed, np.arange(4.0), 0.5)
    with pytest.raises(ValueError, match="normal"):
        slice_plane(mesh, (0, 0, 0), (0, 0, 0))
    with pytest.raises(ValueError, match="center"):
        three_slice(mesh, (0, 0))


def test_hexahedra_of_a_grid_cross_the_edges_marching_cubes_crosses():
    """grid_cells' hexahedra of a uniform grid: one vertex per crossed grid edge, the
    vertices render.contour.marching_cubes finds on the same samples."""
    from render.cells import grid_cells
    from render.contour import marching_cubes

    n = 14
    x = np.linspace(0.0, 1.0, n)
    X, Y, Z = np.meshgrid(x, x, x, indexing="ij")
    vol = np.sin(5 * X) + np.cos(4 * Y) * Z + 0.3 * Y
    mesh = grid_cells(x, x, x)
    c = contour(mesh, vol.ravel(order="F"), 0.4)  # points numbered i fastest
    v, f, _ = marching_cubes(vol, 0.4, spacing=(x[1],) * 3)
    assert len(c.vertices) == len(v)
    assert max(cKDTree(v).query(c.vertices)[0].max(), cKDTree(c.vertices).query(v)[0].max()) < 1e-5
