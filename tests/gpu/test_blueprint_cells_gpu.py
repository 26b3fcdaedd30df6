"""adaptors.mesh.parse(..., cells=True) with CuPy fields: the CellDomain's arrays on the device,
the topology (host arrays, as a conduit.Node hands them) uploaded once per array, as
adaptors/mesh.py documents: 1 transfer for grids and points topologies (the coordinates), 2 for
one fixed-size shape (points, connectivity), 3 for polygons (and their offsets), 4 for mixed
shapes (and their types); none when the topology is on the device already. The mesh equals the
one the CPU reads from the same dict with NumPy fields.
"""

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")

from adaptors.mesh import CellDomain, parse, unstructured  # noqa: E402
from insitu import arrays  # noqa: E402

CUBE = np.array([(i, j, k) for k in (0, 1) for j in (0, 1) for i in (0, 1)], np.float64)  # id i + 2j + 4k
HEX = [0, 1, 3, 2, 4, 5, 7, 6]
TETS = [0, 1, 3, 7, 0, 1, 7, 5, 0, 5, 7, 4, 0, 3, 2, 7, 0, 2, 6, 7, 0, 6, 4, 7]
SQUARE = CUBE[:4, :2]


def grid(cs, topo, n_points, n_cells, xp):
    f = fields(xp, n_points, n_cells)
    return {"coordsets": {"c": cs}, "topologies": {"t": {"coordset": "c", **topo}},
            "fields": {"T": {"association": "vertex", "topology": "t", "values": f["T"]},
                       "E": {"association": "element", "topology": "t", "values": f["E"]}}}


def fields(xp, n_points, n_cells):
    return {"T": xp.arange(n_points, dtype=xp.float32), "E": xp.arange(n_cells, dtype=xp.float64)}


#: name -> (dict builder taking the fields' array module, host->device transfers documented)
CASES = {
    "hex": (lambda xp: unstructured(CUBE, np.array(HEX), "hex", fields(xp, 8, 1), element=("E",)), 2),
    "tets-int32": (lambda xp: unstructured(CUBE, np.array(TETS, np.int32), "tet", fields(xp, 8, 6), element=("E",)),
                   2),
    "polygons": (lambda xp: unstructured(SQUARE, np.array([0, 1, 3, 2, 0, 1, 3]), "polygonal", fields(xp, 4, 2),
                                         sizes=np.array([4, 3]), element=("E",)), 3),
    "mixed": (lambda xp: unstructured(CUBE, np.array(HEX + TETS[:8]), "mixed", fields(xp, 8, 3), element=("E",),
                                      sizes=np.array([8, 4, 4]), shapes=np.array([12, 10, 10])), 4),
    "uniform-2d": (lambda xp: grid({"type": "uniform", "dims": {"i": 4, "j": 3}}, {"type": "uniform"}, 12, 6, xp), 1),
    "rectilinear-uneven-3d": (lambda xp: grid({"type": "rectilinear", "values": {
        "x": np.array([0.0, 1.0, 3.0]), "y": np.array([0.0, 2.0]), "z": np.array([-1.0, 0.0, 0.5, 2.0])}},
        {"type": "rectilinear"}, 24, 6, xp), 1),
    "structured-2d": (lambda xp: grid({"type": "explicit", "values": {
        "x": np.array([0.0, 1.0, 2.5, 0.2, 1.1, 2.4]), "y": np.array([0.0, 0.1, 0.0, 1.0, 1.2, 1.1])}},
        {"type": "structured", "elements": {"dims": {"i": 2, "j": 1}}}, 6, 2, xp), 1),
    "points": (lambda xp: grid({"type": "explicit", "values": {"x": np.arange(5.0), "y": np.zeros(5),
                                                                 "z": np.ones(5)}}, {"type": "points"}, 5, 5, xp), 1),
}


@pytest.mark.parametrize("name", list(CASES))
def test_device_fields_give_a_device_mesh_uploaded_once_per_array(name):
    build, uploads = CASES[name]
    (cpu,) = parse(build(np), cells=True)
    parse(build(cupy), cells=True)  # cell_mesh's two type tables go to the device once, on first use
    m = build(cupy)
    with arrays.count_transfers() as c:
        (gpu,) = parse(m, cells=True)
    assert c.h2d_calls == uploads and c.d2h_calls == 0, c.stats
    assert isinstance(gpu, CellDomain) and gpu.dim == cpu.dim
    for g, h in zip((gpu.mesh.points, gpu.mesh.connectivity, gpu.mesh.offsets, gpu.mesh.types),
                    (cpu.mesh.points, cpu.mesh.connectivity, cpu.mesh.offsets, cpu.mesh.types)):
        assert isinstance(g, cupy.ndarray)
        assert g.dtype == h.dtype and g.shape == h.shape
        np.testing.assert_array_equal(cupy.asnumpy(g), h)
    for k in ("T", "E"):
        given = m["fields"][k]["values"]
        assert gpu.fields[k].values is given  # the device array itself


def test_topology_on_the_device_needs_no_transfer():
    pts = cupy.asarray(CUBE)
    m = {"coordsets": {"c": {"type": "explicit", "values": {x: pts[:, i] for i, x in enumerate("xyz")}}},
         "topologies": {"t": {"type": "unstructured", "coordset": "c",
                              "elements": {"shape": "tet", "connectivity": cupy.asarray(TETS)}}},
         "fields": {"T": {"association": "vertex", "topology": "t", "values": cupy.arange(8.0)},
                    "ascent_ghosts": {"association": "element", "topology": "t",
                                      "values": cupy.asarray([0, 1, 0, 0, 1, 0], cupy.int32)}}}
    with arrays.count_transfers() as c:
        (d,) = parse(m, cells=True)
    assert c.calls == 0, c.stats
    assert isinstance(d.mesh.points, cupy.ndarray) and isinstance(d.ghosts, cupy.ndarray)
    assert cupy.asnumpy(d.ghosts).tolist() == [False, True, False, False, True, False]
    np.testing.assert_array_equal(cupy.asnumpy(d.mesh.points), CUBE)
    np.testing.assert_array_equal(cupy.asnumpy(d.mesh.connectivity), TETS)


def test_host_fields_with_device_coordinates_are_refused():
    from adaptors.errors import MeshError

    m = unstructured(cupy.asarray(CUBE), cupy.asarray(HEX), "hex", {"T": np.arange(8.0)})
    with pytest.raises(MeshError, match=r"mix host and device arrays"):
        parse(m, cells=True)


def test_xarray_dataarrays_on_host_and_device():
    xr = pytest.importorskip("xarray")
    for xp in (np, cupy):
        T = xp.arange(12.0).reshape(3, 4)  # [y, x]: Blueprint's order is x fastest
        m = grid({"type": "uniform", "dims": {"i": 4, "j": 3}}, {"type": "uniform"}, 12, 6, xp)
        m["fields"]["T"]["values"] = xr.DataArray(T, dims=("y", "x"))
        (d,) = parse(m, cells=True)
        got = d.fields["T"].values
        assert type(got) is type(T) and got.shape == (12,)
        assert arrays.data_pointer(got) == arrays.data_pointer(T)  # a view
        np.testing.assert_array_equal(arrays.to_host(got), arrays.to_host(T).ravel())
