"""render.cells.resample against vtkResampleToImage on the same grids, and analytic answers.

VTK accepts a point a little outside a cell (its tolerance, about 1e-3 in parametric units)
and then extrapolates that cell's interpolant, so values are compared where the point is
clearly inside the cell we sampled (VTK's own EvaluatePosition of that cell says so, by a
margin); the valid masks are compared everywhere (the grids avoid the mesh's boundary).
"""

import numpy as np
import pytest

from render.cells import TETRA, WEDGE, cell_mesh
from render.cells.resample import resample, sample_grid

from test_cells_fields import KINDS, add_array, field, grid, plane, split, to_vtk  # tests/ is on sys.path

try:  # the meshes below serve tests/gpu too, where VTK may be missing
    import vtk
    from vtk.util import numpy_support as ns
except ImportError:
    vtk = ns = None  # type: ignore[assignment]
pytestmark = pytest.mark.skipif(vtk is None, reason="VTK (the vtk wheel) is the reference these tests compare with")

DIMS = (23, 19, 27)
BOUNDS = (-0.31, 4.27, -0.23, 3.21, -0.17, 5.41)  # beyond the box [0, 4] x [0, 3] x [0, 5], no point on it


def box_grid(n=(4, 3, 5), jitter=0.2, seed=0):
    """A jittered hex grid whose boundary points stay on the box (flat outer faces)."""
    m = grid(n, jitter, seed)
    p = m.points.copy()
    r = np.rint(p)
    on = np.zeros(len(p), bool)
    for a in range(3):
        on |= (r[:, a] == 0) | (r[:, a] == n[a])
    p[on] = r[on]
    return cell_mesh(p, m.connectivity, m.types)


def vtk_resample(mesh, vals, assoc, dims=DIMS, bounds=BOUNDS):
    ug = to_vtk(mesh)
    add_array(ug.GetPointData() if assoc == "vertex" else ug.GetCellData(), "v", vals)
    f = vtk.vtkResampleToImage()
    f.SetInputDataObject(ug)
    f.SetSamplingDimensions(*dims)
    f.SetUseInputBounds(False)
    f.SetSamplingBounds(*bounds)
    f.Update()
    o = f.GetOutput()
    v = ns.vtk_to_numpy(o.GetPointData().GetArray("v"))
    mask = ns.vtk_to_numpy(o.GetPointData().GetArray("vtkValidPointMask")).astype(bool)
    # VTK's x is the fastest axis; ours is indexed [i, j, k]
    return v.reshape(dims[::-1]).transpose(2, 1, 0), mask.reshape(dims[::-1]).transpose(2, 1, 0)


def margin(t, pc):
    r, s, u = pc
    if t == TETRA:
        return min(r, s, u, 1 - r - s - u)
    if t == WEDGE:
        return min(r, s, 1 - r - s, u, 1 - u)
    return min(r, s, u, 1 - r, 1 - s, 1 - u)


def clearly_inside(mesh, cells, dims=DIMS, bounds=BOUNDS):
    """Mask of the grid points that VTK's EvaluatePosition puts inside the cell `cells`
    names (our choice), by a margin of 2e-3 in parametric units."""
    ug = to_vtk(mesh)
    origin, spacing = sample_grid(mesh, dims, bounds)
    out = np.zeros(dims, bool)
    for idx in np.argwhere(~np.isnan(cells)):
        c = int(cells[tuple(idx)])
        p = np.asarray(origin) + idx * np.asarray(spacing)
        cell = ug.GetCell(c)
        pc, w = [0.0] * 3, [0.0] * cell.GetNumberOfPoints()
        inside = cell.EvaluatePosition(p, [0.0] * 3, vtk.reference(0), pc, vtk.reference(0.0), w)
        out[tuple(idx)] = inside == 1 and margin(mesh.types[c], pc) > 2e-3
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_resample_is_vtks(kind):
    mesh = split(box_grid(), kind)
    vals = field(mesh.points)
    ours = resample(mesh, vals, DIMS, BOUNDS)
    assert ours.shape == DIMS and ours.dtype == np.float64
    ref, mask = vtk_resample(mesh, vals, "vertex")
    np.testing.assert_array_equal(~np.isnan(ours), mask)
    cells = resample(mesh, np.arange(mesh.n_cells, dtype=float), DIMS, BOUNDS, association="element")
    np.testing.assert_array_equal(~np.isnan(cells), mask)
    sure = clearly_inside(mesh, cells)
    assert sure.sum() > 0.8 * mask.sum()  # VTK's pyramid Newton fails at some points ours finds
    np.testing.assert_allclose(ours[sure], ref[sure], rtol=0, atol=1e-7)  # VTK's Newton stops at 1e-3 steps
    cref, _ = vtk_resample(mesh, np.arange(mesh.n_cells, dtype=float), "element")
    np.testing.assert_array_equal(cells[sure], cref[sure])


@pytest.mark.parametrize("kind", KINDS)
def test_vectorized_path_is_the_cpu_loop(kind):
    # the path CuPy runs, here on NumPy, against the Numba loop
    mesh = split(box_grid(), kind)
    vals = np.stack([field(mesh.points), mesh.points[:, 2]], 1)
    a = resample(mesh, vals, DIMS, BOUNDS)
    b = resample(mesh, vals, DIMS, BOUNDS, _vectorized=True)
    assert a.shape == b.shape == DIMS + (2,)
    np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("vectorized", [False, True])
def test_linear_fields_are_exact(kind, vectorized):
    mesh = split(box_grid(jitter=0.3), kind)
    grad = np.array([0.5, -1.25, 2.0])
    origin, spacing = sample_grid(mesh, DIMS, BOUNDS)
    out = resample(mesh, mesh.points @ grad + 1.0, DIMS, BOUNDS, _vectorized=vectorized)
    ijk = np.stack(np.meshgrid(*[np.arange(n) for n in DIMS], indexing="ij"), -1)
    x = np.asarray(origin) + ijk * np.asarray(spacing)
    inside = np.all((x > 1e-9) & (x < np.array([4, 3, 5]) - 1e-9), axis=-1)
    outside = np.any((x < -1e-9) | (x > np.array([4, 3, 5]) + 1e-9), axis=-1)
    np.testing.assert_allclose(out[inside], x[inside] @ grad + 1.0, atol=1e-11)
    assert np.isnan(out[outside]).all()


def test_default_bounds_dtypes_and_slices():
    mesh = split(box_grid(), "tet")
    v32 = field(mesh.points).astype(np.float32)
    out = resample(mesh, v32, (9, 7, 11))
    assert out.dtype == np.float32
    assert sample_grid(mesh, (9, 7, 11)) == ((0.0, 0.0, 0.0), (0.5, 0.5, 0.5))
    assert not np.isnan(out).any()  # the mesh's own box: every point in a cell
    # a slice: one point along z
    sl = resample(mesh, field(mesh.points), (9, 7, 1), (0, 4, 0, 3, 2.5, 2.5))
    np.testing.assert_allclose(sl[..., 0], resample(mesh, field(mesh.points), (9, 7, 11))[..., 5], atol=1e-12)
    ints = resample(mesh, np.arange(mesh.n_cells, dtype=np.int64), (9, 7, 11), association="element")
    assert ints.dtype == np.float64


@pytest.mark.parametrize("vectorized", [False, True])
def test_hidden_cells_are_not_sampled(vectorized):
    mesh = split(box_grid(), "mixed")
    hidden = mesh.points[mesh.connectivity[mesh.offsets[:-1]], 2] < 2.5  # the cells of the lower half, roughly
    kept = cell_mesh(mesh.points, np.concatenate([mesh.connectivity[mesh.offsets[c]:mesh.offsets[c + 1]]
                                                  for c in np.nonzero(~hidden)[0]]), mesh.types[~hidden])
    vals = field(mesh.points)
    out = resample(mesh, vals, DIMS, BOUNDS, hidden=hidden, _vectorized=vectorized)
    ref = resample(kept, vals, DIMS, BOUNDS, _vectorized=vectorized)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
    np.testing.assert_allclose(out, ref, atol=1e-12)
    assert np.isnan(out).sum() > np.isnan(resample(mesh, vals, DIMS, BOUNDS)).sum()


def test_errors():
    mesh = split(box_grid((2, 2, 2)), "hex")
    with pytest.raises(ValueError, match="association: expected 'vertex' or 'element'"):
        resample(mesh, np.zeros(27), (4, 4, 4), association="cell")
    with pytest.raises(ValueError, match="values: expected \\(8,\\)"):
        resample(mesh, np.zeros(27), (4, 4, 4), association="element")
    with pytest.raises(ValueError, match="dims: expected 3 positive"):
        resample(mesh, np.zeros(27), (4, 0, 4))
    with pytest.raises(ValueError, match="bounds: expected finite"):
        resample(mesh, np.zeros(27), (4, 4, 4), (0, 1, 0, 1, 1, 0))
    with pytest.raises(ValueError, match="mesh: resample samples 3-D cells .* type \\[9\\] only"):
        resample(plane(), np.zeros(30), (4, 4, 1))
    empty = cell_mesh(np.zeros((0, 3)), np.zeros(0, np.int64), TETRA)
    assert np.isnan(resample(empty, np.zeros(0), (2, 2, 2), (0, 1, 0, 1, 0, 1))).all()
    with pytest.raises(ValueError, match="hidden: expected a \\(8,\\) bool array"):
        resample(mesh, np.zeros(27), (4, 4, 4), hidden=np.zeros(8, int))
