"""render.cells.fields against VTK (vtkCellDataToPointData, vtkPointDataToCellData,
vtkGradientFilter) on the same unstructured grids, and against analytic answers.

The mesh builders here are shared by the other tests of render.cells (surface, resample).
"""

import numpy as np
import pytest

from render.cells import HEXAHEDRON, PYRAMID, QUAD, TETRA, TRIANGLE, WEDGE, cell_mesh, grid_cells
from render.cells.fields import (PCOORDS, cell_to_point, component, gradient, magnitude, point_to_cell,
                                 shape_functions)

try:  # the meshes below serve tests/gpu too, where VTK may be missing
    import vtk
    from vtk.util import numpy_support as ns
except ImportError:
    vtk = ns = None  # type: ignore[assignment]
pytestmark = pytest.mark.skipif(vtk is None, reason="VTK (the vtk wheel) is the reference these tests compare with")

# --------------------------------------------------------------------------- meshes

# a hex (VTK order) as 6 tets around its 0-6 diagonal: conforming between neighbours of a grid
HEX_TO_TETS = np.array([[0, 1, 2, 6], [0, 2, 3, 6], [0, 3, 7, 6], [0, 7, 4, 6], [0, 4, 5, 6], [0, 5, 1, 6]])
# a hex as 2 wedges split by the 0-2 / 4-6 diagonal plane (VTK wedge order: 0,1,2 below 3,4,5)
HEX_TO_WEDGES = np.array([[0, 1, 2, 4, 5, 6], [0, 2, 3, 4, 6, 7]])
# the 6 faces of a hex as pyramid bases (the apex, point 8, is the hex's centre)
HEX_FACES_IN = np.array([[0, 1, 2, 3], [4, 7, 6, 5], [0, 4, 5, 1], [1, 5, 6, 2], [2, 6, 7, 3], [3, 7, 4, 0]])


def grid(n=(4, 3, 5), jitter=0.15, seed=0):
    """Hexes of a jittered (n+1)^3-point grid over [0, n] (cells of varied shape)."""
    rng = np.random.default_rng(seed)
    axes = [np.arange(k + 1, dtype=float) for k in n]
    x, y, z = np.meshgrid(*axes, indexing="ij")
    pts = np.stack([x, y, z], -1) + rng.uniform(-jitter, jitter, x.shape + (3,))
    return grid_cells(pts[..., 0], pts[..., 1], pts[..., 2])


def split(mesh, kind):
    """The hex mesh's cells split into tets, wedges or pyramids (or left: 'hex')."""
    hexes = mesh.connectivity.reshape(-1, 8)
    if kind == "hex":
        return mesh
    if kind == "tet":
        return cell_mesh(mesh.points, hexes[:, HEX_TO_TETS].ravel(), TETRA)
    if kind == "wedge":
        return cell_mesh(mesh.points, hexes[:, HEX_TO_WEDGES].ravel(), WEDGE)
    if kind == "pyramid":
        centres = mesh.points[hexes].mean(axis=1)
        cid = mesh.n_points + np.arange(len(hexes))
        # pyramids point their apex up from the base in VTK's order (0,1,2,3 seen from outside is clockwise)
        pyr = np.concatenate([hexes[:, HEX_FACES_IN], np.repeat(cid[:, None, None], 6, 1)], axis=2)
        return cell_mesh(np.concatenate([mesh.points, centres]), pyr.reshape(-1), PYRAMID)
    if kind == "mixed":
        # odd hexes stay, even hexes become 6 pyramids: conforming (bases match hex faces)
        pm = split(mesh, "pyramid")
        keep = np.arange(len(hexes)) % 2 == 1
        pyr = pm.connectivity.reshape(len(hexes), 6 * 5)[~keep].ravel()
        conn = np.concatenate([hexes[keep].ravel(), pyr])
        types = np.concatenate([np.full(int(keep.sum()), HEXAHEDRON), np.full(6 * int((~keep).sum()), PYRAMID)])
        return cell_mesh(pm.points, conn, types.astype(np.uint8))
    raise ValueError(kind)


def plane(n=(5, 4), jitter=0.15, seed=0, kind="quad"):
    """A jittered 2-D grid of quads (or each quad as two triangles) in z = 0."""
    rng = np.random.default_rng(seed)
    x, y = np.meshgrid(np.arange(n[0] + 1.0), np.arange(n[1] + 1.0), indexing="ij")
    x = x + rng.uniform(-jitter, jitter, x.shape)
    y = y + rng.uniform(-jitter, jitter, y.shape)
    m = grid_cells(x, y)
    if kind == "tri":
        q = m.connectivity.reshape(-1, 4)
        return cell_mesh(m.points, q[:, [0, 1, 2, 0, 2, 3]].ravel(), TRIANGLE)
    return m


def to_vtk(mesh):
    """The same mesh as a vtkUnstructuredGrid."""
    ug = vtk.vtkUnstructuredGrid()
    p = vtk.vtkPoints()
    p.SetData(ns.numpy_to_vtk(np.ascontiguousarray(mesh.points, dtype=np.float64), deep=True))
    ug.SetPoints(p)
    ca = vtk.vtkCellArray()
    ca.SetData(ns.numpy_to_vtkIdTypeArray(mesh.offsets.astype(np.int64), deep=True),
               ns.numpy_to_vtkIdTypeArray(mesh.connectivity.astype(np.int64), deep=True))
    ug.SetCells(ns.numpy_to_vtk(mesh.types.astype(np.uint8), deep=True, array_type=vtk.VTK_UNSIGNED_CHAR), ca)
    return ug


def add_array(data, name, values):
    a = ns.numpy_to_vtk(np.ascontiguousarray(values, dtype=np.float64), deep=True)
    a.SetName(name)
    data.AddArray(a)


KINDS = ["tet", "hex", "wedge", "pyramid", "mixed"]


def field(pts):
    x, y, z = pts.T
    return np.sin(x) * np.cos(0.7 * y) + 0.3 * z * z + x * y


# --------------------------------------------------------------------------- shape functions


@pytest.mark.parametrize("t, name", [(TRIANGLE, "vtkTriangle"), (QUAD, "vtkQuad"), (TETRA, "vtkTetra"),
                                     (HEXAHEDRON, "vtkHexahedron"), (WEDGE, "vtkWedge"), (PYRAMID, "vtkPyramid")])
def test_shape_functions_are_vtks(t, name):
    cls = getattr(vtk, name)
    k = len(PCOORDS[t])
    np.testing.assert_array_equal(PCOORDS[t].ravel(), [cls().GetParametricCoords()[i] for i in range(3 * k)])
    for p in np.random.default_rng(1).uniform(0.05, 0.6, (5, 3)):
        if t in (TRIANGLE, QUAD):
            p[2] = 0.0
        dim = 2 if t in (TRIANGLE, QUAD) else 3
        w, d = [0.0] * k, [0.0] * (dim * k)
        cls.InterpolationFunctions(p, w)
        cls.InterpolationDerivs(p, d)
        n, dn = shape_functions(t, *p)
        np.testing.assert_allclose(n, w, atol=1e-14)
        np.testing.assert_allclose(np.array(dn, float)[:dim].ravel(), d[:dim * k], atol=1e-14)


# --------------------------------------------------------------------------- recentring


@pytest.mark.parametrize("kind", KINDS)
def test_cell_to_point_is_vtks(kind):
    mesh = split(grid(), kind)
    rng = np.random.default_rng(2)
    vals = rng.standard_normal((mesh.n_cells, 3))
    ug = to_vtk(mesh)
    add_array(ug.GetCellData(), "v", vals)
    f = vtk.vtkCellDataToPointData()
    f.SetInputData(ug)
    f.Update()
    ref = ns.vtk_to_numpy(f.GetOutput().GetPointData().GetArray("v"))
    np.testing.assert_allclose(cell_to_point(mesh, vals), ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(cell_to_point(mesh, vals[:, 1]), ref[:, 1], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(cell_to_point(mesh, vals, _vectorized=True), ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", KINDS + ["quad", "tri"])
def test_point_to_cell_is_vtks(kind):
    mesh = plane(kind=kind) if kind in ("quad", "tri") else split(grid(), kind)
    vals = field(mesh.points)
    ug = to_vtk(mesh)
    add_array(ug.GetPointData(), "v", vals)
    f = vtk.vtkPointDataToCellData()
    f.SetInputData(ug)
    f.Update()
    ref = ns.vtk_to_numpy(f.GetOutput().GetCellData().GetArray("v"))
    np.testing.assert_allclose(point_to_cell(mesh, vals), ref, rtol=1e-12, atol=1e-12)
    two = point_to_cell(mesh, np.stack([vals, 2 * vals], 1))
    np.testing.assert_allclose(two[:, 1], 2 * ref, rtol=1e-12, atol=1e-12)
    # the path CuPy runs, here on NumPy
    np.testing.assert_allclose(point_to_cell(mesh, vals, _vectorized=True), ref, rtol=1e-12, atol=1e-12)


def test_unused_points_and_polygons():
    pts = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [2, 0, 0], [5, 5, 5.0]])
    mesh = cell_mesh(pts, np.array([0, 1, 2, 3, 1, 4, 2]), np.array([7, 5], np.uint8), np.array([0, 4, 7]))
    np.testing.assert_allclose(cell_to_point(mesh, np.array([1.0, 3.0])), [1, 2, 2, 1, 3, 0])  # as VTK: 0 unused
    ug = to_vtk(mesh)
    add_array(ug.GetCellData(), "v", np.array([1.0, 3.0]))
    f = vtk.vtkCellDataToPointData()
    f.SetInputData(ug)
    f.Update()
    np.testing.assert_allclose(ns.vtk_to_numpy(f.GetOutput().GetPointData().GetArray("v")), [1, 2, 2, 1, 3, 0])
    np.testing.assert_allclose(point_to_cell(mesh, np.arange(6.0)), [1.5, 7 / 3])
    np.testing.assert_allclose(point_to_cell(mesh, np.arange(6.0), _vectorized=True), [1.5, 7 / 3])
    assert cell_to_point(mesh, np.array([1.0, 3.0], np.float32)).dtype == np.float32


def test_empty_meshes():
    empty = cell_mesh(np.zeros((0, 3)), np.zeros(0, np.int64), TETRA)
    assert cell_to_point(empty, np.zeros(0)).shape == (0,)
    assert point_to_cell(empty, np.zeros((0, 2))).shape == (0, 2)
    assert gradient(empty, np.zeros(0)).shape == (0, 3)
    assert gradient(empty, np.zeros(0), _vectorized=True).shape == (0, 3)


def test_recentre_errors():
    mesh = grid((2, 2, 2))
    with pytest.raises(ValueError, match="values: expected \\(8,\\)"):
        cell_to_point(mesh, np.zeros(9))
    with pytest.raises(ValueError, match="values: expected \\(27,\\)"):
        point_to_cell(mesh, np.zeros((27, 2, 2)))
    with pytest.raises(TypeError, match="values: expected real"):
        point_to_cell(mesh, np.zeros(27, complex))


# --------------------------------------------------------------------------- magnitude, component


def test_magnitude_and_component():
    v = np.array([[3.0, 4.0, 0.0], [1.0, 2.0, 2.0]])
    np.testing.assert_allclose(magnitude(v), [5, 3])
    np.testing.assert_allclose(magnitude((v[:, 0], v[:, 1], v[:, 2])), [5, 3])
    np.testing.assert_allclose(magnitude(v.astype(np.int16)), [5, 3])
    assert magnitude(v.astype(np.float32)).dtype == np.float32
    np.testing.assert_array_equal(component(v, 1), [4, 2])
    np.testing.assert_array_equal(component((v[:, 0], v[:, 1]), -1), [4, 2])
    with pytest.raises(ValueError, match="i: component 3 out of range"):
        component(v, 3)
    with pytest.raises(ValueError, match="components: components must be 1-D of one length"):
        magnitude((v[:, 0], v[:1, 1]))
    with pytest.raises(ValueError, match="vectors: expected an \\(n, k\\) array"):
        component(v[:, 0], 0)


# --------------------------------------------------------------------------- gradient


def vtk_gradient(mesh, vals):
    ug = to_vtk(mesh)
    add_array(ug.GetPointData(), "v", vals)
    g = vtk.vtkGradientFilter()
    g.SetInputData(ug)
    g.SetInputArrayToProcess(0, 0, 0, vtk.vtkDataObject.FIELD_ASSOCIATION_POINTS, "v")
    g.SetResultArrayName("g")
    g.Update()
    return ns.vtk_to_numpy(g.GetOutput().GetPointData().GetArray("g"))


@pytest.mark.parametrize("kind", KINDS + ["quad", "tri"])
def test_gradient_is_vtks(kind):
    mesh = plane(kind=kind) if kind in ("quad", "tri") else split(grid(), kind)
    vals = field(mesh.points)
    ref = vtk_gradient(mesh, vals)
    np.testing.assert_allclose(gradient(mesh, vals), ref, rtol=1e-9, atol=1e-9)
    # the path CuPy runs, here on NumPy
    np.testing.assert_allclose(gradient(mesh, vals, _vectorized=True), ref, rtol=1e-9, atol=1e-9)


def test_gradient_of_vectors_is_vtks():
    mesh = split(grid((3, 3, 3)), "mixed")
    vals = np.stack([field(mesh.points), mesh.points[:, 0] ** 2, mesh.points[:, 1]], 1)
    ref = vtk_gradient(mesh, vals).reshape(-1, 3, 3)  # VTK: du/dx, du/dy, du/dz, dv/dx, ...
    np.testing.assert_allclose(gradient(mesh, vals), ref, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(gradient(mesh, vals, _vectorized=True), ref, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("kind", KINDS + ["quad", "tri"])
def test_gradient_of_a_linear_field_is_exact(kind):
    mesh = plane(kind=kind) if kind in ("quad", "tri") else split(grid(jitter=0.3), kind)
    grad = np.array([1.5, -2.0, 0.0 if kind in ("quad", "tri") else 0.25])
    used = np.unique(mesh.connectivity)  # the mixed mesh has centres of hexes left whole
    for vectorized in (False, True):
        g = gradient(mesh, mesh.points @ grad + 4.0, _vectorized=vectorized)[used]
        np.testing.assert_allclose(g, np.broadcast_to(grad, g.shape), atol=1e-11)
    g32 = gradient(cell_mesh(mesh.points.astype(np.float32), mesh.connectivity, mesh.types, mesh.offsets),
                   (mesh.points @ grad).astype(np.float32))
    assert g32.dtype == np.float32
    np.testing.assert_allclose(g32[used], np.broadcast_to(grad, g.shape), atol=2e-4)
    g32v = gradient(cell_mesh(mesh.points.astype(np.float32), mesh.connectivity, mesh.types, mesh.offsets),
                    (mesh.points @ grad).astype(np.float32), _vectorized=True)
    assert g32v.dtype == np.float32
    np.testing.assert_allclose(g32v[used], np.broadcast_to(grad, g.shape), atol=2e-4)


def test_gradient_in_a_tilted_plane():
    # triangles in the plane x + y + z = 1: the gradient of x is its projection on the plane
    m = plane(kind="tri")
    p = m.points.copy()
    p[:, 2] = 1 - p[:, 0] - p[:, 1]
    mesh = cell_mesh(p, m.connectivity, TRIANGLE)
    n = np.ones(3) / np.sqrt(3)
    want = np.array([1.0, 0, 0]) - n * n[0]
    g = gradient(mesh, p[:, 0])
    np.testing.assert_allclose(g, np.broadcast_to(want, g.shape), atol=1e-12)
    np.testing.assert_allclose(g, vtk_gradient(mesh, p[:, 0]), atol=1e-12)


def test_gradient_rejects_polygons_and_unused_points_are_zero():
    pts = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [9, 9, 9.0]])
    mesh = cell_mesh(pts, np.array([0, 1, 2, 3]), 7, np.array([0, 4]))
    with pytest.raises(ValueError, match="mesh: gradient needs .* type \\[7\\]"):
        gradient(mesh, np.zeros(5))
    quad = cell_mesh(pts, np.array([0, 1, 2, 3]), QUAD)
    g = gradient(quad, pts[:, 0] * 2)
    np.testing.assert_allclose(g[:4], [[2, 0, 0]] * 4, atol=1e-14)
    np.testing.assert_array_equal(g[4], 0)
    np.testing.assert_allclose(g, vtk_gradient(quad, pts[:, 0] * 2), atol=1e-14)
