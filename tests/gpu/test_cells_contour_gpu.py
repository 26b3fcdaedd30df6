"""render.cells.contour on CuPy arrays: the same vertices, faces, cells and colours as the
CPU path for the same mesh, and nothing but the documented counts read to the host."""

import os
import sys

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")

from insitu import arrays  # noqa: E402
from render.cells import HEXAHEDRON, POLYGON, PYRAMID, QUAD, TETRA, TRIANGLE, WEDGE, CellMesh, cell_mesh  # noqa: E402
from render.cells.contour import contour, slice_plane, three_slice  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from test_cells_contour import grid_2d, grid_mesh, smooth_field, sphere_field  # noqa: E402

ALL = (TETRA, HEXAHEDRON, WEDGE, PYRAMID)


def on_gpu(mesh):
    return CellMesh(*(cupy.asarray(a) for a in (mesh.points, mesh.connectivity, mesh.offsets, mesh.types)))


def reads(nlev):
    """Scalar reads of one contour call: the flags and each level's slot and face ends;
    then each level's vertex count and the colour's NaN flag."""
    return (1 + 2 * nlev) + (nlev + 1)


def same(cpu, gpu):
    assert gpu.faces.dtype == cpu.faces.dtype and gpu.faces.shape == cpu.faces.shape
    assert gpu.vertices.dtype == cpu.vertices.dtype
    np.testing.assert_array_equal(cupy.asnumpy(gpu.faces), cpu.faces)
    np.testing.assert_array_equal(cupy.asnumpy(gpu.cells), cpu.cells)
    np.testing.assert_array_equal(cupy.asnumpy(gpu.vertices), cpu.vertices)  # no FMA on either side
    if cpu.values is None:
        assert gpu.values is None
    else:
        np.testing.assert_array_equal(cupy.asnumpy(gpu.values), cpu.values)


@pytest.mark.parametrize("shapes", [(TETRA,), (HEXAHEDRON,), (WEDGE,), (PYRAMID,), ALL],
                         ids=["tet", "hex", "wedge", "pyramid", "mixed"])
@pytest.mark.parametrize("ids,dtype", [(np.int64, np.float64), (np.int32, np.float32)], ids=["i64f64", "i32f32"])
def test_same_as_cpu_without_transfers(shapes, ids, dtype):
    mesh = grid_mesh(7, shapes, jitter=0.3, seed=11, dtype=dtype, conn_dtype=ids)
    f = sphere_field(mesh).astype(dtype)
    col = mesh.points[:, 0].copy()
    levels = [0.22, 0.37]
    cpu = contour(mesh, f, levels, color=col)
    g, fg, cg = on_gpu(mesh), cupy.asarray(f), cupy.asarray(col)
    contour(g, fg, levels, color=cg)  # compiles, uploads the tables once
    with arrays.count_transfers() as c:
        gpu = contour(g, fg, levels, color=cg)
    assert c.calls == 0
    assert c.scalar_reads == reads(2)
    assert len(cpu.faces) > 100
    same(cpu, gpu)


@pytest.mark.parametrize("shape", [TRIANGLE, QUAD])
def test_2d_cells_same_as_cpu(shape):
    mesh = grid_2d(15, shape, jitter=0.3, seed=12)
    f = np.linalg.norm(mesh.points[:, :2] - 0.5, axis=1)
    cpu = contour(mesh, f, 0.3)
    g = on_gpu(mesh)
    contour(g, cupy.asarray(f), 0.3)
    with arrays.count_transfers() as c:
        gpu = contour(g, cupy.asarray(f), 0.3)
    assert c.calls == 0 and c.scalar_reads == reads(1)
    assert cpu.faces.shape[1] == 2
    same(cpu, gpu)


def test_smooth_field_and_strided_values_same_as_cpu():
    mesh = grid_mesh(8, ALL, jitter=0.25, seed=13)
    f = smooth_field(mesh, seed=14)
    cpu = contour(mesh, f, 0.3)
    both = cupy.asarray(np.stack([f, -f], 1))  # a column: read in place, strided
    gpu = contour(on_gpu(mesh), both[:, 0], 0.3)
    same(cpu, gpu)


def test_slices_same_as_cpu_without_transfers():
    mesh = grid_mesh(6, ALL, jitter=0.2, seed=15)
    g = on_gpu(mesh)
    cpu = slice_plane(mesh, (0.45, 0.5, 0.55), (0.3, -0.2, 1.0))
    slice_plane(g, (0.45, 0.5, 0.55), (0.3, -0.2, 1.0))
    with arrays.count_transfers() as c:
        gpu = slice_plane(g, (0.45, 0.5, 0.55), (0.3, -0.2, 1.0))
        three = three_slice(g)
    assert c.calls == 0 and c.scalar_reads == 4 * reads(1)
    same(cpu, gpu)
    same(three_slice(mesh), three)


def test_errors_on_the_gpu():
    mesh = grid_mesh(4, (TETRA,))
    g = on_gpu(mesh)
    f = sphere_field(mesh)
    bad = f.copy()
    bad[3] = np.nan
    with pytest.raises(ValueError, match="values: NaN"):
        contour(g, cupy.asarray(bad), 0.3)
    col = np.zeros(mesh.n_points)
    col[np.argmax(f)] = np.nan
    with pytest.raises(ValueError, match="color: NaN"):
        contour(g, cupy.asarray(f), 0.8, color=cupy.asarray(col))
    with pytest.raises(ValueError, match="values: on numpy"):
        contour(g, f, 0.3)
    poly = cell_mesh(cupy.asarray(np.array([[0, 0], [1, 0], [1, 1], [0, 1]], float)), cupy.arange(4), POLYGON,
                     offsets=cupy.asarray(np.array([0, 4])))
    with pytest.raises(ValueError, match=r"polygonal \(7\)"):
        contour(poly, cupy.arange(4.0), 1.5)
    empty = contour(g, cupy.asarray(f), 9.0)
    assert empty.vertices.shape == (0, 3) and empty.faces.shape == (0, 3) and empty.cells.shape == (0,)
