"""render.cells fields, surface and resample on CuPy arrays: the CPU results of the same
input, with no host<->device array transfer inside the calls (a few scalar reads only)."""

import numpy as np
import pytest

import insitu
from render.cells import TETRA, cell_mesh
from render.cells.fields import cell_to_point, component, gradient, magnitude, point_to_cell
from render.cells.resample import resample
from render.cells.surface import outer_surface

from test_cells_fields import KINDS, field, grid, plane, split  # tests/ is on sys.path (tests/conftest.py)
from test_cells_resample import BOUNDS, DIMS, box_grid

cp = pytest.importorskip("cupy", reason="needs CuPy")


def on_device(mesh):
    return cell_mesh(cp.asarray(mesh.points), cp.asarray(mesh.connectivity), cp.asarray(mesh.types),
                     cp.asarray(mesh.offsets))


def mesh_of(kind):
    return plane(kind=kind) if kind in ("quad", "tri") else split(grid(), kind)


@pytest.mark.parametrize("kind", KINDS + ["quad", "tri"])
def test_fields_on_the_gpu_are_the_cpus(kind):
    mesh = mesh_of(kind)
    dmesh = on_device(mesh)
    pv = np.stack([field(mesh.points), mesh.points[:, 0] ** 2], 1)
    cv = np.random.default_rng(3).standard_normal((mesh.n_cells, 3))
    dpv, dcv = cp.asarray(pv), cp.asarray(cv)
    gradient(dmesh, dpv[:, 0])  # the first call uploads the shape-function tables
    with insitu.arrays.count_transfers() as counted:
        g = gradient(dmesh, dpv[:, 0])
        gv = gradient(dmesh, dpv)
        c2p = cell_to_point(dmesh, dcv)
        p2c = point_to_cell(dmesh, dpv)
        mag = magnitude(dcv)
        mag_uvw = magnitude((dcv[:, 0], dcv[:, 1], dcv[:, 2]))
        comp = component(dcv, 2)
    assert counted.calls == 0
    for a in (g, gv, c2p, p2c, mag, mag_uvw, comp):
        assert isinstance(a, cp.ndarray)
    np.testing.assert_allclose(cp.asnumpy(g), gradient(mesh, pv[:, 0]), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(cp.asnumpy(gv), gradient(mesh, pv), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(cp.asnumpy(c2p), cell_to_point(mesh, cv), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(cp.asnumpy(p2c), point_to_cell(mesh, pv), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(cp.asnumpy(mag), magnitude(cv), rtol=1e-12)
    np.testing.assert_allclose(cp.asnumpy(mag_uvw), magnitude(cv), rtol=1e-12)
    np.testing.assert_array_equal(cp.asnumpy(comp), cv[:, 2])


@pytest.mark.parametrize("kind", KINDS + ["quad", "tri"])
def test_outer_surface_on_the_gpu_is_the_cpus(kind):
    mesh = mesh_of(kind)
    dmesh = on_device(mesh)
    hidden = np.arange(mesh.n_cells) % 5 == 0
    dhidden = cp.asarray(hidden)
    outer_surface(dmesh)  # the first call uploads the face tables
    with insitu.arrays.count_transfers() as counted:
        whole = outer_surface(dmesh)
        part = outer_surface(dmesh, hidden=dhidden)
    assert counted.calls == 0
    for gpu, cpu in ((whole, outer_surface(mesh)), (part, outer_surface(mesh, hidden=hidden))):
        assert isinstance(gpu.faces, cp.ndarray) and gpu.faces.dtype == np.int32
        np.testing.assert_array_equal(cp.asnumpy(gpu.faces), cpu.faces)  # the same triangles in the same order
        np.testing.assert_array_equal(cp.asnumpy(gpu.cells), cpu.cells)


def test_outer_surface_on_the_gpu_with_many_points():
    # past 2**21 points the face keys no longer pack in one int64: CuPy's lexsort path
    mesh = split(grid((2, 2, 2)), "tet")
    pts = np.concatenate([np.zeros((2**21, 3)), mesh.points])
    big = cell_mesh(pts, mesh.connectivity + 2**21, TETRA)
    gpu = outer_surface(on_device(big))
    np.testing.assert_array_equal(cp.asnumpy(gpu.faces), outer_surface(big).faces)


@pytest.mark.parametrize("kind", KINDS)
def test_resample_on_the_gpu_is_the_cpus(kind):
    mesh = split(box_grid(), kind)
    dmesh = on_device(mesh)
    pv = field(mesh.points)
    cv = np.arange(mesh.n_cells, dtype=np.float64)
    dpv, dcv = cp.asarray(pv), cp.asarray(cv)
    hidden = np.arange(mesh.n_cells) % 3 == 0
    dhidden = cp.asarray(hidden)
    with insitu.arrays.count_transfers() as counted:
        vol = resample(dmesh, dpv, DIMS, BOUNDS)
        cells = resample(dmesh, dcv, DIMS, BOUNDS, association="element")
        whole = resample(dmesh, dpv, (9, 7, 11))  # bounds from the mesh: three scalar reads
        part = resample(dmesh, dpv, DIMS, BOUNDS, hidden=dhidden)
    assert counted.calls == 0
    assert isinstance(vol, cp.ndarray) and vol.shape == DIMS
    ref = resample(mesh, pv, DIMS, BOUNDS)
    np.testing.assert_array_equal(cp.isnan(vol).get(), np.isnan(ref))
    np.testing.assert_allclose(cp.asnumpy(vol), ref, rtol=0, atol=1e-10)
    np.testing.assert_array_equal(cp.isnan(cells).get(), np.isnan(ref))
    np.testing.assert_allclose(cp.asnumpy(whole), resample(mesh, pv, (9, 7, 11)), rtol=0, atol=1e-10)
    pref = resample(mesh, pv, DIMS, BOUNDS, hidden=hidden)
    np.testing.assert_array_equal(cp.isnan(part).get(), np.isnan(pref))
    np.testing.assert_allclose(cp.asnumpy(part), pref, rtol=0, atol=1e-10)
