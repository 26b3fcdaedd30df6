"""adaptors.mesh.parse(..., cells=True): every Blueprint topology that is not a 3-D uniform grid
read as a CellDomain (render.cells.CellMesh), checked against Conduit's own data.

Conduit's example meshes (braid in every variant it generates, spiral, julia, venn) are real
conduit.Node objects; each CellMesh is compared with what Conduit says independently: its points
with conduit.blueprint.mesh.flatten's vertex coordinates, its cells' centres with flatten's element
centres (the mean of each cell's points), its connectivity with the node's own, its cell types with
the node's shapes (VTK's codes taken from the vtk module), its sizes with VTK's vtkCellSizeFilter
and vtkMeshQuality. Fields must be views of the node's memory.

Node order: Blueprint's is VTK's for every shape (Conduit's face tables TOPO_*_FACES and
TOPO_*_EMBEDDING in conduit_blueprint_mesh_utils.hpp wind outward on VTK's positive reference
cells, and its Silo writer says "we are using the vtk ordering for our wedges"), so the
connectivity is taken as is. Conduit's braid generator itself winds its tets and pyramids inside
out and half its wedges (VTK's signed volumes < 0): those keep Conduit's order, and cells built
in VTK's order come out positive.

Conduit's Python module: INSITU_CONDUIT_PYTHONPATH (see tests/test_blueprint.py).
"""

import numpy as np
import pytest
from test_blueprint import _conduit, _to_node  # tests/ is on sys.path

from adaptors.errors import MeshError
from adaptors.mesh import CellDomain, MeshDomain, VectorField, parse, unstructured

vtk = pytest.importorskip("vtk")
from vtk.util import numpy_support as ns  # noqa: E402

NX, NY, NZ = 4, 5, 3  # braid's points per axis (distinct, so that no axis is mistaken for another)
#: Blueprint shape -> VTK's code, from the vtk module (not from render.cells).
VTK_CODE = {"point": vtk.VTK_VERTEX, "line": vtk.VTK_LINE, "tri": vtk.VTK_TRIANGLE, "quad": vtk.VTK_QUAD,
            "polygonal": vtk.VTK_POLYGON, "tet": vtk.VTK_TETRA, "hex": vtk.VTK_HEXAHEDRON, "wedge": vtk.VTK_WEDGE,
            "pyramid": vtk.VTK_PYRAMID}

TWO_D = ("tris", "quads", "quads_poly", "mixed_2d", "quads_and_tris", "quads_and_tris_offsets")
THREE_D = ("tets", "hexs", "wedges", "pyramids", "hexs_and_tets")
BOTH = ("points", "points_implicit", "lines")
GRIDS_2D = ("uniform", "rectilinear", "structured")
#: braid variants and their nz (2-D: 0); Conduit aborts the process on a wrong one, so none is guessed.
BRAIDS = ([(k, 0) for k in TWO_D + BOTH + GRIDS_2D] + [(k, NZ) for k in THREE_D + BOTH])
#: flatten aborts (mixed_2d) or reads the stream form's group offsets otherwise than Blueprint's docs
#: (quads_and_tris_offsets: compared with quads_and_tris instead, the same cells in counts form).
NO_FLATTEN = {"mixed_2d", "quads_and_tris_offsets"}


@pytest.fixture(scope="module")
def conduit():
    return _conduit()


def braid(conduit, kind, nz):
    n = conduit.Node()
    conduit.blueprint.mesh.examples.braid(kind, NX, NY, nz, n)
    return n


def flat_table(conduit, node):
    t = conduit.Node()
    conduit.blueprint.mesh.flatten(node, conduit.Node(), t)
    return t


def leaf(node, path):
    return node.fetch_existing(path).value()


# --------------------------------------------------------------------------- independent references


def expected_types(node) -> np.ndarray:
    """Each cell's VTK code, read from the node."""
    topo = node.fetch_existing("topologies/mesh")
    ttype = topo.fetch_existing("type").value()
    if ttype == "points":
        return np.full(len(leaf(node, "coordsets/coords/values/x")), vtk.VTK_VERTEX)
    if ttype != "unstructured":
        has = node.has_path
        if ttype == "structured":
            dims = [int(leaf(topo, f"elements/dims/{a}")) for a in "ijk" if topo.has_path(f"elements/dims/{a}")]
        elif ttype == "rectilinear":
            dims = [len(leaf(node, f"coordsets/coords/values/{a}")) - 1 for a in "xyz"
                    if has(f"coordsets/coords/values/{a}")]
        else:
            dims = [int(leaf(node, f"coordsets/coords/dims/{a}")) - 1 for a in "ijk"
                    if has(f"coordsets/coords/dims/{a}")]
        return np.full(int(np.prod(dims)), vtk.VTK_QUAD if len(dims) == 2 else vtk.VTK_HEXAHEDRON)
    el = topo.fetch_existing("elements")
    if el.has_child("element_types"):
        by_id = {int(leaf(el, f"element_types/{n}/stream_id")): leaf(el, f"element_types/{n}/shape")
                 for n in el.fetch_existing("element_types").child_names()}
        ids = leaf(el, "element_index/stream_ids")
        if el.has_path("element_index/element_counts"):
            counts = leaf(el, "element_index/element_counts")
        else:
            off = leaf(el, "element_index/offsets")
            counts = np.diff(off) // np.array([{"tri": 3, "quad": 4, "tet": 4, "hex": 8}[by_id[i]] for i in ids])
        return np.repeat([VTK_CODE[by_id[i]] for i in ids], counts)
    shape = el.fetch_existing("shape").value()
    conn = leaf(el, "connectivity")
    if shape == "mixed":
        names = {int(leaf(el, f"shape_map/{n}")): n for n in el.fetch_existing("shape_map").child_names()}
        return np.array([VTK_CODE[names[int(s)]] for s in leaf(el, "shapes")])
    if el.has_child("sizes"):
        return np.full(len(leaf(el, "sizes")), VTK_CODE[shape])
    k = {"point": 1, "line": 2, "tri": 3, "quad": 4, "tet": 4, "hex": 8, "wedge": 6, "pyramid": 5}[shape]
    return np.full(len(conn) // k, VTK_CODE[shape])


def to_vtk(mesh):
    """A vtkUnstructuredGrid of a CellMesh's arrays (host), for VTK's measures."""
    ug = vtk.vtkUnstructuredGrid()
    pts = vtk.vtkPoints()
    pts.SetData(ns.numpy_to_vtk(np.ascontiguousarray(mesh.points, dtype=np.float64), deep=1))
    ug.SetPoints(pts)
    cells = vtk.vtkCellArray()
    cells.SetData(ns.numpy_to_vtkIdTypeArray(np.ascontiguousarray(mesh.offsets, dtype=np.int64), deep=1),
                  ns.numpy_to_vtkIdTypeArray(np.ascontiguousarray(mesh.connectivity, dtype=np.int64), deep=1))
    ug.SetCells(ns.numpy_to_vtk(np.ascontiguousarray(mesh.types, dtype=np.uint8), deep=1,
                                array_type=vtk.VTK_UNSIGNED_CHAR), cells)
    return ug


def vtk_sizes(mesh, what: str) -> np.ndarray:
    """VTK's unsigned cell sizes ("Area" or "Volume") of a CellMesh."""
    f = vtk.vtkCellSizeFilter()
    f.SetInputData(to_vtk(mesh))
    f.Update()
    return ns.vtk_to_numpy(f.GetOutput().GetCellData().GetArray(what))


def vtk_signed_volumes(mesh) -> np.ndarray:
    """VTK's (Verdict's) signed volumes of 3-D cells: < 0 for a cell wound inside out."""
    q = vtk.vtkMeshQuality()
    q.SetInputData(to_vtk(mesh))
    q.SetTetQualityMeasureToVolume()
    q.SetHexQualityMeasureToVolume()
    q.SetWedgeQualityMeasureToVolume()
    q.SetPyramidQualityMeasureToVolume()
    q.Update()
    return ns.vtk_to_numpy(q.GetOutput().GetCellData().GetArray("Quality"))


def signed_areas(mesh) -> np.ndarray:
    """Shoelace areas of 2-D cells (z = 0): > 0 counter-clockwise."""
    off, conn, p = mesh.offsets, mesh.connectivity, mesh.points
    nxt = np.arange(1, conn.shape[0] + 1)
    nxt[off[1:] - 1] = off[:-1]
    a, b = p[conn], p[conn[nxt]]
    return 0.5 * np.add.reduceat(a[:, 0] * b[:, 1] - a[:, 1] * b[:, 0], off[:-1])


def centres(mesh) -> np.ndarray:
    sizes = np.diff(mesh.offsets)
    return np.add.reduceat(mesh.points[mesh.connectivity], mesh.offsets[:-1]) / sizes[:, None]


# --------------------------------------------------------------------------- braid, every variant


@pytest.mark.parametrize("kind,nz", BRAIDS, ids=[f"{k}-{'3d' if z else '2d'}" for k, z in BRAIDS])
def test_braid_variants_read_as_cells_match_conduit(conduit, kind, nz):
    node = braid(conduit, kind, nz)
    (d,) = parse(node, cells=True)
    assert isinstance(d, CellDomain) and d.topology == "mesh"
    dim = 3 if nz else 2
    m = d.mesh
    assert d.dim == dim and d.ghosts is None
    # points: Conduit's own vertex coordinates (flatten expands uniform/rectilinear ones)
    if kind not in NO_FLATTEN:
        t = flat_table(conduit, node)
        verts = np.stack([leaf(t, f"vertex_data/values/coords/{a}") for a in "xyz"[:dim]], axis=1)
        np.testing.assert_array_equal(m.points[:, :dim], verts)
        cen = np.stack([leaf(t, f"element_data/values/element_centers/{a}") for a in "xyz"[:dim]], axis=1)
        assert m.n_cells == cen.shape[0]
        np.testing.assert_allclose(centres(m)[:, :dim], cen, atol=1e-5)  # Conduit's centres are float32
    assert m.points.dtype == np.float64 and not m.points[:, dim:].any()  # 2-D: z = 0
    types = expected_types(node)
    np.testing.assert_array_equal(m.types, types)
    assert np.bincount(m.types).tolist() == np.bincount(types).tolist()
    el = "topologies/mesh/elements/"
    if node.has_path(el + "connectivity"):  # Conduit's node order is VTK's: taken as is, not copied
        conn = leaf(node, el + "connectivity")
        np.testing.assert_array_equal(m.connectivity, conn)
        assert np.shares_memory(m.connectivity, conn)
        k0 = int(m.offsets[1])
        x = [leaf(node, f"coordsets/coords/values/{a}") for a in "xyz"[:dim]]
        np.testing.assert_array_equal(m.points[m.connectivity[:k0], :dim], np.stack([a[conn[:k0]] for a in x], 1))
    elif kind in GRIDS_2D:  # cell 0: points (0,0) (1,0) (1,1) (0,1), numbered i fastest
        ids = [0, 1, 1 + NX, NX]
        np.testing.assert_array_equal(m.connectivity[:4], ids)
    # sizes: every cell a real one, together the square/cube braid spans (-10..10)
    if dim == 2 and kind not in BOTH:
        area = signed_areas(m)
        np.testing.assert_allclose(np.abs(area), vtk_sizes(m, "Area"), rtol=1e-12)
        assert (np.abs(area) > 0).all()
        np.testing.assert_allclose(np.abs(area).sum(), 400.0, rtol=1e-12)
        if kind in GRIDS_2D:
            assert (area > 0).all()  # counter-clockwise, i then j
    if dim == 3 and kind in THREE_D:
        vol = vtk_signed_volumes(m)
        np.testing.assert_allclose(vol, vtk_sizes(m, "Volume"), rtol=1e-9)  # both signed
        np.testing.assert_allclose(np.abs(vol).sum(), 8000.0, rtol=1e-12)
        if kind == "hexs":
            assert (vol > 0).all()
    # fields: views of the node's memory, Blueprint's order
    assert "braid" in d.fields and d.fields["braid"].association == "vertex"
    braid_values = leaf(node, "fields/braid/values")
    assert np.shares_memory(d.fields["braid"].values, braid_values) and d.fields["braid"].values.shape == (m.n_points,)
    if node.has_path("fields/radial"):
        radial = leaf(node, "fields/radial/values")
        assert d.fields["radial"].association == "element" and d.fields["radial"].values.shape == (m.n_cells,)
        assert np.shares_memory(d.fields["radial"].values, radial)
    vel = d.fields["vel/magnitude"]
    assert isinstance(vel, VectorField) and sorted(vel.components) == ["u", "v", "w"][:dim]
    for c in vel.components:
        v = leaf(node, f"fields/vel/values/{c}")
        assert np.shares_memory(d.fields[f"vel/{c}"].values, v) and d.fields[f"vel/{c}"].values.shape == (m.n_points,)


def test_stream_offsets_form_reads_as_its_counts_form(conduit):
    na, nb = braid(conduit, "quads_and_tris", 0), braid(conduit, "quads_and_tris_offsets", 0)  # views: kept alive
    (a,) = parse(na, cells=True)
    (b,) = parse(nb, cells=True)
    for x, y in zip((a.mesh.points, a.mesh.connectivity, a.mesh.offsets, a.mesh.types),
                    (b.mesh.points, b.mesh.connectivity, b.mesh.offsets, b.mesh.types)):
        np.testing.assert_array_equal(x, y)


def test_mixed_2d_against_its_sizes_and_offsets(conduit):
    node = braid(conduit, "mixed_2d", 0)
    (d,) = parse(node, cells=True)
    el = "topologies/mesh/elements/"
    np.testing.assert_array_equal(d.mesh.offsets[:-1], leaf(node, el + "offsets"))
    np.testing.assert_array_equal(np.diff(d.mesh.offsets), leaf(node, el + "sizes"))


def test_braid_3d_grids_stay_uniform_grids(conduit):
    for kind in GRIDS_2D:
        (d,) = parse(braid(conduit, kind, NZ), cells=True)
        assert isinstance(d, MeshDomain) and d.dims == (NX, NY, NZ)


def test_polyhedral_cells_are_refused_with_their_path(conduit):
    with pytest.raises(MeshError, match=r"^topologies/mesh/elements/shape: polyhedral cells are not supported by the "
                                        "filters"):
        parse(braid(conduit, "hexs_poly", NZ), cells=True)
    with pytest.raises(MeshError, match=r"^topologies/mesh/elements/shape_map/polyhedral: polyhedral cells are not "
                                        "supported by the filters"):
        parse(braid(conduit, "mixed", NZ), cells=True)


# --------------------------------------------------------------------------- grids read as cells


def test_uneven_rectilinear_3d_is_hexes_of_the_axes_steps(conduit):
    node = braid(conduit, "rectilinear", NZ)
    x = -10.0 + 20.0 * np.linspace(0.0, 1.0, NX) ** 2
    node["coordsets/coords/values/x"] = x
    (d,) = parse(node, cells=True)
    assert isinstance(d, CellDomain) and d.dim == 3 and (d.mesh.types == vtk.VTK_HEXAHEDRON).all()
    y, z = leaf(node, "coordsets/coords/values/y"), leaf(node, "coordsets/coords/values/z")
    assert d.mesh.n_points == NX * NY * NZ and d.mesh.n_cells == (NX - 1) * (NY - 1) * (NZ - 1)
    # cell (i, j, k) is number i + (NX-1) * (j + (NY-1) * k), the box of its axes' steps
    want = np.einsum("i,j,k->kji", np.diff(x), np.diff(y), np.diff(z)).ravel()
    vol = vtk_signed_volumes(d.mesh)
    np.testing.assert_allclose(vol, want, rtol=1e-12)
    np.testing.assert_allclose(vtk_sizes(d.mesh, "Volume"), want, rtol=1e-12)
    hex0 = [(0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 1, 0), (0, 0, 1), (1, 0, 1), (1, 1, 1), (0, 1, 1)]
    np.testing.assert_array_equal(d.mesh.points[d.mesh.connectivity[:8]], [(x[i], y[j], z[k]) for i, j, k in hex0])
    assert np.shares_memory(d.fields["braid"].values, leaf(node, "fields/braid/values"))


def test_curvilinear_structured_3d_is_hexes_in_vtk_order(conduit):
    node = braid(conduit, "structured", NZ)
    x, y, z = (leaf(node, f"coordsets/coords/values/{a}").copy() for a in "xyz")
    # an affine shear (determinant 1): no longer an axis-aligned lattice, each hex keeps its volume
    node["coordsets/coords/values/x"] = x + 0.3 * y + 0.2 * z
    node["coordsets/coords/values/y"] = y + 0.1 * z
    (d,) = parse(node, cells=True)
    assert isinstance(d, CellDomain) and (d.mesh.types == vtk.VTK_HEXAHEDRON).all()
    h = 20.0 / (np.array([NX, NY, NZ]) - 1)
    vol = vtk_signed_volumes(d.mesh)
    np.testing.assert_allclose(vol, np.prod(h), rtol=1e-9)  # all positive: VTK's order
    t = flat_table(conduit, node)
    np.testing.assert_allclose(centres(d.mesh), np.stack([leaf(t, f"element_data/values/element_centers/{a}")
                                                          for a in "xyz"], 1), atol=1e-5)


@pytest.mark.parametrize("ndom", [1, 3, 5])
def test_spiral_domains_are_quads_of_their_fibonacci_squares(conduit, ndom):
    node = conduit.Node()
    conduit.blueprint.mesh.examples.spiral(ndom, node)
    ds = parse(node, cells=True)
    assert [d.domain_id for d in ds] == list(range(ndom))
    for i, d in enumerate(ds):
        dn = node.child(i)
        x, y = leaf(dn, "coordsets/coords/values/x"), leaf(dn, "coordsets/coords/values/y")
        assert d.dim == 2 and d.mesh.n_points == x.size * y.size and (d.mesh.types == vtk.VTK_QUAD).all()
        area = signed_areas(d.mesh)
        assert (area > 0).all()
        np.testing.assert_allclose(area.sum(), (x[-1] - x[0]) * (y[-1] - y[0]), rtol=1e-12)
        assert np.shares_memory(d.fields["dist"].values, leaf(dn, "fields/dist/values"))


def test_julia_is_quads_with_its_element_field(conduit):
    node = conduit.Node()
    conduit.blueprint.mesh.examples.julia(20, 15, -2.0, 2.0, -1.5, 1.5, 0.285, 0.01, node)
    (d,) = parse(node, cells=True)
    assert d.dim == 2 and d.mesh.n_cells == 20 * 15 and d.mesh.n_points == 21 * 16
    np.testing.assert_allclose(signed_areas(d.mesh), (4.0 / 20) * (3.0 / 15), rtol=1e-9)
    iters = leaf(node, "fields/iters/values")
    assert d.fields["iters"].association == "element" and np.shares_memory(d.fields["iters"].values, iters)
    t = flat_table(conduit, node)
    np.testing.assert_allclose(centres(d.mesh)[:, :2], np.stack([leaf(t, f"element_data/values/element_centers/{a}")
                                                                 for a in "xy"], 1), atol=1e-6)


@pytest.mark.parametrize("kind", ["full", "sparse_by_material", "sparse_by_element"])
def test_venn_matsets_are_refused_even_as_cells(conduit, kind):
    node = conduit.Node()
    conduit.blueprint.mesh.examples.venn(kind, 10, 10, 0.25, node)
    with pytest.raises(MeshError, match=r"^matsets: material sets"):
        parse(node, cells=True)


# --------------------------------------------------------------------------- dicts: unstructured(), verify


def cube_cells():
    """The unit cube as hexes, wedges, pyramids, tets, tris, quads: point ids in VTK's order
    (from VTK's parametric coordinates: positive cells)."""
    p = np.array([(i, j, k) for k in (0, 1) for j in (0, 1) for i in (0, 1)], np.float64)  # id i + 2j + 4k
    c = np.vstack([p, [(0.5, 0.5, 0.5)]])  # 8: the centre
    hexes = [0, 1, 3, 2, 4, 5, 7, 6]
    wedges = [0, 1, 3, 4, 5, 7, 0, 3, 2, 4, 7, 6]  # two prisms along z
    bottom, top = [0, 1, 3, 2], [4, 6, 7, 5]  # faces wound counter-clockwise seen from the centre (the apex)
    sides = [[4, 5, 1, 0], [5, 7, 3, 1], [7, 6, 2, 3], [6, 4, 0, 2]]
    pyramids = bottom + [8] + top + [8] + sum((s + [8] for s in sides), [])
    return p, c, hexes, wedges, pyramids


def test_unstructured_dicts_pass_conduit_verify_and_read_back(conduit):
    p, c, hexes, wedges, pyramids = cube_cells()
    tets = [0, 1, 3, 7, 0, 1, 7, 5, 0, 5, 7, 4, 0, 3, 2, 7, 0, 2, 6, 7, 0, 6, 4, 7]  # Kuhn's 6, positive
    sq = p[:4, :2]
    cases = [
        (p, hexes, "hex", {}), (p, wedges, "wedge", {}), (c, pyramids, "pyramid", {}), (p, tets, "tet", {}),
        (sq, [0, 1, 3, 0, 3, 2], "tri", {}), (sq, [0, 1, 3, 2], "quad", {}),
        (sq, [0, 1, 3, 2, 0, 1, 3], "polygonal", {"sizes": np.array([4, 3])}),
        (p, [0, 7, 1, 6], "line", {}), (p, np.arange(8), "point", {}),
        (c, hexes + tets[:8] + pyramids[:5], "mixed",
         {"sizes": np.array([8, 4, 4, 5]), "shapes": np.array([12, 10, 10, 14])}),
    ]
    for pts, conn, shape, kw in cases:
        conn = np.asarray(conn, np.int64)
        ncells = len(kw["sizes"]) if "sizes" in kw else len(conn) // {"hex": 8, "wedge": 6, "pyramid": 5, "tet": 4,
                                                                      "tri": 3, "quad": 4, "line": 2, "point": 1}[shape]
        T = np.arange(len(pts), dtype=np.float32)
        E = np.arange(ncells, dtype=np.float64)
        m = unstructured(pts, conn, shape, {"T": T, "E": E}, element=("E",), **kw)
        node = conduit.Node()
        _to_node(node, "", m)
        info = conduit.Node()
        assert conduit.blueprint.mesh.verify(node, info), (shape, info.to_yaml())
        (a,) = parse(m, cells=True)
        (b,) = parse(node, cells=True)
        assert a.fields["T"].values is T and a.fields["E"].values is E  # the dict's own arrays
        for x, y in zip((a.mesh.points, a.mesh.connectivity, a.mesh.offsets, a.mesh.types),
                        (b.mesh.points, b.mesh.connectivity, b.mesh.offsets, b.mesh.types)):
            np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(b.fields["E"].values, E)
        np.testing.assert_array_equal(a.mesh.connectivity, conn)
        if shape in ("hex", "wedge", "pyramid", "tet", "mixed"):
            vol = vtk_signed_volumes(a.mesh)
            assert (vol > 0).all(), (shape, vol)  # VTK's order read as given: no cell inside out
            if shape != "mixed":
                np.testing.assert_allclose(vol.sum(), 1.0, rtol=1e-12)
        if shape in ("tri", "quad", "polygonal"):
            assert (signed_areas(a.mesh) > 0).all() and a.dim == 2


def test_shape_map_ids_that_are_not_vtk_codes():
    p = np.array([(0, 0), (1, 0), (1, 1), (0, 1), (2, 0)], np.float64)
    el = {"shape": "mixed", "shape_map": {"quad": 0, "tri": 7, "polygonal": 3},
          "shapes": np.array([7, 0, 3, 7]), "connectivity": np.array([1, 4, 2, 0, 1, 2, 3, 0, 1, 2, 3, 4, 2]),
          "sizes": np.array([3, 4, 3, 3])}
    m = {"coordsets": {"c": {"type": "explicit", "values": {"x": p[:, 0], "y": p[:, 1]}}},
         "topologies": {"t": {"type": "unstructured", "coordset": "c", "elements": el}}, "fields": {}}
    (d,) = parse(m, cells=True)
    assert d.mesh.types.tolist() == [vtk.VTK_TRIANGLE, vtk.VTK_QUAD, vtk.VTK_POLYGON, vtk.VTK_TRIANGLE]
    assert d.mesh.offsets.tolist() == [0, 3, 7, 10, 13] and d.topology == "t"
    el["shape_map"] = {"quad": 0, "tri": 10 ** 9, "polygonal": 3}  # ids far apart: looked up otherwise
    el["shapes"] = np.array([10 ** 9, 0, 3, 10 ** 9])
    (e,) = parse(m, cells=True)
    assert e.mesh.types.tolist() == d.mesh.types.tolist()
    el["shapes"] = np.array([10 ** 9, 0, 4, 10 ** 9])
    with pytest.raises(MeshError, match=r"^topologies/t/elements/shapes: ids \[4\] are not in shape_map"):
        parse(m, cells=True)
    el["shape_map"] = {"quad": 0, "tri": 7, "polygonal": 3}
    el["shapes"] = np.array([7, 0, 3, -2])
    with pytest.raises(MeshError, match=r"^topologies/t/elements/shapes: ids \[-2\] are not in shape_map"):
        parse(m, cells=True)
    el["shapes"] = np.array([7, 0, 3, 7])
    el["sizes"] = np.array([3, 4, 2, 3])
    el["connectivity"] = np.array([1, 4, 2, 0, 1, 2, 3, 0, 1, 2, 3, 4])
    with pytest.raises(MeshError, match=r"^topologies/t: offsets: cell 2 \(type 7\) has 2 points"):
        parse(m, cells=True)


def test_offsets_sizes_and_gathered_cells():
    p = np.array([(0, 0), (1, 0), (1, 1), (0, 1), (2, 0), (2, 1)], np.float64)
    conn = np.array([0, 1, 2, 3, 1, 4, 5, 2, 0, 0])  # two quads, then two unused ids
    base = {"coordsets": {"c": {"type": "explicit", "values": {"x": p[:, 0], "y": p[:, 1]}}}, "fields": {}}

    def read(**el):
        m = dict(base, topologies={"t": {"type": "unstructured", "coordset": "c",
                                         "elements": {"shape": "polygonal", **el}}})
        (d,) = parse(m, cells=True)
        return d.mesh

    a = read(connectivity=conn[:8], sizes=np.array([4, 4]))
    b = read(connectivity=conn[:8], offsets=np.array([0, 4]))
    assert a.offsets.tolist() == b.offsets.tolist() == [0, 4, 8]
    assert a.connectivity.tolist() == b.connectivity.tolist() == conn[:8].tolist()
    # offsets that visit the cells in another order: the cells are gathered, in the topology's order
    c = read(connectivity=conn, sizes=np.array([4, 4]), offsets=np.array([4, 0]))
    assert c.connectivity.tolist() == [1, 4, 5, 2, 0, 1, 2, 3] and c.offsets.tolist() == [0, 4, 8]
    with pytest.raises(MeshError, match=r"elements/sizes: the cells hold 8 indices, the connectivity 10"):
        read(connectivity=conn, sizes=np.array([4, 4]))
    with pytest.raises(MeshError, match=r"elements/offsets: cells reach past the connectivity"):
        read(connectivity=conn, sizes=np.array([4, 4]), offsets=np.array([0, 8]))
    with pytest.raises(MeshError, match=r"elements/sizes: missing"):
        read(connectivity=conn[:8])


def test_ghosts_from_either_field_are_one_bool_mask():
    p, _, hexes, wedges, _ = cube_cells()
    m = unstructured(p, np.array(wedges * 3), "wedge", {"E": np.arange(6.0)}, element=("E",),
                     ghosts=np.array([0, 1, 0, 0, 0, 0], np.int32))
    m["fields"]["vtkGhostType"] = {"association": "element", "topology": "mesh",
                                   "values": np.array([0, 0, 16, 32, 1, 0], np.uint8)}  # 16: not a ghost
    (d,) = parse(m, cells=True)
    assert set(d.fields) == {"E"} and d.ghosts.dtype == bool
    assert d.ghosts.tolist() == [False, True, False, True, True, False]
    m["fields"]["ascent_ghosts"]["association"] = "vertex"
    m["fields"]["ascent_ghosts"]["values"] = np.zeros(8, np.int32)
    with pytest.raises(MeshError, match=r"fields/ascent_ghosts/association: the ghost field must be an element"):
        parse(m, cells=True)


def test_points_topology_over_every_coordset():
    xs, ys = np.array([0.0, 1.0, 3.0]), np.array([-1.0, 2.0])
    for cs in ({"type": "explicit", "values": {"x": np.array([0.0, 1, 3, 0, 1, 3]), "y": np.repeat(ys, 3)}},
               {"type": "rectilinear", "values": {"x": xs, "y": ys}},
               {"type": "uniform", "dims": {"i": 3, "j": 2}, "origin": {"x": 0.0, "y": -1.0},
                "spacing": {"dx": 1.5, "dy": 3.0}}):
        m = {"coordsets": {"c": cs}, "topologies": {"p": {"type": "points", "coordset": "c"}},
             "fields": {"v": {"association": "element", "topology": "p", "values": np.arange(6.0)}}}
        (d,) = parse(m, cells=True)
        assert (d.mesh.types == vtk.VTK_VERTEX).all() and d.mesh.connectivity.tolist() == list(range(6))
        want_x = [0, 1, 3] * 2 if cs["type"] != "uniform" else [0, 1.5, 3] * 2
        np.testing.assert_array_equal(d.mesh.points[:, 0], want_x)  # i fastest
        np.testing.assert_array_equal(d.mesh.points[:, 1], np.repeat(ys, 3))


def test_cells_without_the_flag_are_refused_not_yet_supported():
    p, *_ = cube_cells()
    m = unstructured(p, np.arange(8), "hex")
    with pytest.raises(MeshError, match=r"^topologies/mesh: an unstructured topology \(hex cells\): not supported yet "
                                        r".*parse\(\.\.\., cells=True\)"):
        parse(m)


# --------------------------------------------------------------------------- fields


def grid2d(values, assoc="vertex"):
    return {"coordsets": {"c": {"type": "uniform", "dims": {"i": 4, "j": 3}}},
            "topologies": {"g": {"type": "uniform", "coordset": "c"}},
            "fields": {"f": {"association": assoc, "topology": "g", "values": values}}}


def test_grid_fields_flat_or_fortran_ordered_are_views_c_ordered_are_refused():
    flat = np.arange(12.0)
    (d,) = parse(grid2d(flat), cells=True)
    assert d.fields["f"].values is flat
    ij = np.asfortranarray(flat.reshape(3, 4).T)  # [i, j], i fastest in memory
    (d,) = parse(grid2d(ij), cells=True)
    got = d.fields["f"].values
    assert got.shape == (12,) and np.shares_memory(got, ij)
    np.testing.assert_array_equal(got, flat)
    (d,) = parse(grid2d(np.arange(6.0).reshape(3, 2, order="F"), "element"), cells=True)
    np.testing.assert_array_equal(d.fields["f"].values, np.arange(6.0))
    with pytest.raises(MeshError, match=r"fields/f/values: a 4x3 \[i, j, k\] array not laid out i fastest"):
        parse(grid2d(np.zeros((4, 3))), cells=True)
    with pytest.raises(MeshError, match=r"fields/f/values: expected 6 \(or 3x2 \[i, j, k\]\) float or integer values "
                                        r"for a element field, got 12 float64"):
        parse(grid2d(flat, "element"), cells=True)
    m = grid2d(flat)
    m["fields"]["f"]["tile_ranges"] = {"span": [2, 2], "values": np.zeros((2, 2, 2))}
    with pytest.raises(MeshError, match=r"fields/f/tile_ranges: only fields of 3-D uniform grids"):
        parse(m, cells=True)


def test_every_dtype_and_interleaved_mcarray_as_views():
    p, _, hexes, *_ = cube_cells()
    buf = np.arange(24.0).reshape(8, 3)  # interleaved x, y, z per point
    for dtype in ("int8", "uint64", "float16", "float32"):
        v = np.arange(8).astype(dtype)
        w = {c: buf[:, i] for i, c in enumerate("xyz")}
        (d,) = parse(unstructured(p, np.array(hexes), "hex", {"v": v, "w": w}), cells=True)
        assert d.fields["v"].values is v
        for i, c in enumerate("xyz"):
            got = d.fields[f"w/{c}"].values
            assert np.shares_memory(got, buf) and got.strides == (24,)
        np.testing.assert_allclose(d.fields["w/magnitude"].values, np.linalg.norm(buf, axis=1))


class FakeDataArray:
    """What parse reads of an xarray.DataArray: dims, data (and values, which it must not use)."""

    def __init__(self, data, dims):
        self.data, self.dims = data, dims

    @property
    def values(self):
        raise AssertionError("read .values (may copy): parse must take .data")


def test_dataarray_like_values_are_taken_without_copy():
    v = np.arange(8.0)
    p, _, hexes, *_ = cube_cells()
    (d,) = parse(unstructured(p, np.array(hexes), "hex", {"T": FakeDataArray(v, ("node",))}), cells=True)
    assert d.fields["T"].values is v
    # named axes in another order are put in i, j, k order (a view): here a 3-D uniform grid
    T = np.arange(4 * 5 * 6.0).reshape(6, 5, 4)  # [z, y, x]
    m = {"coordsets": {"c": {"type": "uniform", "dims": {"i": 4, "j": 5, "k": 6}}},
         "topologies": {"g": {"type": "uniform", "coordset": "c"}},
         "fields": {"T": {"association": "vertex", "topology": "g", "values": FakeDataArray(T, ("z", "y", "x"))}}}
    (g,) = parse(m)
    assert g.fields["T"].values.shape == (4, 5, 6) and np.shares_memory(g.fields["T"].values, T)
    assert g.fields["T"].values[1, 2, 3] == T[3, 2, 1]
    m["fields"]["T"]["values"] = FakeDataArray([1, 2], ("x",))
    with pytest.raises(MeshError, match=r"fields/T/values: a DataArray holding builtins.list, not an array"):
        parse(m)


def test_xarray_dataarray():
    xr = pytest.importorskip("xarray", reason="xarray is not installed (the duck-typed stand-in is tested above)")
    T = np.arange(12.0).reshape(3, 4)  # [y, x]
    (d,) = parse(grid2d(xr.DataArray(T, dims=("y", "x"))), cells=True)
    assert np.shares_memory(d.fields["f"].values, T)
    np.testing.assert_array_equal(d.fields["f"].values, T.ravel())  # x fastest: Blueprint's order


def test_several_topologies_the_fields_pick_the_one_read():
    T = np.zeros((4, 5, 6))
    pts = {"x": np.arange(3.0), "y": np.zeros(3), "z": np.ones(3)}
    m = {"coordsets": {"coords": {"type": "uniform", "dims": {"i": 4, "j": 5, "k": 6}},
                       "pts": {"type": "explicit", "values": pts}},
         "topologies": {"mesh": {"type": "uniform", "coordset": "coords"},
                        "cloud": {"type": "points", "coordset": "pts"}},
         "fields": {"T": {"association": "vertex", "topology": "mesh", "values": T}}}
    (d,) = parse(m, cells=True)
    assert isinstance(d, MeshDomain) and d.dims == (4, 5, 6)
    m["fields"] = {"p": {"association": "vertex", "topology": "cloud", "values": np.arange(3.0)}}
    (d,) = parse(m, cells=True)
    assert isinstance(d, CellDomain) and d.topology == "cloud" and d.mesh.n_cells == 3
    np.testing.assert_array_equal(d.mesh.points, np.stack([pts["x"], pts["y"], pts["z"]], 1))
    m["fields"]["T"] = {"association": "vertex", "topology": "mesh", "values": T}
    with pytest.raises(MeshError, match=r"^fields: fields on several topologies \(cloud, mesh\)"):
        parse(m, cells=True)


def test_strided_structured_and_1d_meshes_are_clear_errors(conduit):
    node = conduit.Node()
    conduit.blueprint.mesh.examples.strided_structured(conduit.Node(), 3, 2, 0, node)
    with pytest.raises(MeshError, match=r"^topologies/mesh/elements/dims: a strided structured window"):
        parse(node, cells=True)
    node = conduit.Node()
    conduit.blueprint.mesh.examples.braid("uniform", NX, 0, 0, node)
    with pytest.raises(MeshError, match=r"^coordsets/coords/dims: expected i, j \(2-D\) or i, j, k \(3-D\)"):
        parse(node, cells=True)


def test_connectivity_out_of_range_is_an_error_naming_the_topology():
    p, _, hexes, *_ = cube_cells()
    for conn in (np.array(hexes[:7] + [8]), np.array(hexes[:7] + [-1])):
        with pytest.raises(MeshError, match=r"^topologies/mesh: connectivity: ids must lie in \[0, 8\)"):
            parse(unstructured(p, conn, "hex"), cells=True)
        with pytest.raises(MeshError, match=r"^topologies/mesh/elements/connectivity: indices must lie in \[0, 8\)"):
            parse(unstructured(p, conn, "hex"))  # checked before it is refused


# --------------------------------------------------------------------------- Conduit's meshes drawn by execute


def _frame(tmp_path, node, plots, pipelines=None):
    import adaptors
    from render.image import read_png

    cfg = {"pipelines": pipelines or {},
           "scenes": {"s": {"plots": plots, "renders": {"r": {"image_width": 64, "image_height": 48,
                                                                "bg_color": [0, 0, 0, 0],
                                                                "image_prefix": str(tmp_path / "f_%04d")}}}}}
    with adaptors.Adaptor(cfg) as a:
        assert a.execute(0, 0.0, node), a.results()["errors"]
    return read_png(tmp_path / "f_0000.png")


@pytest.mark.parametrize("kind", THREE_D)
def test_braid_3d_cells_are_drawn_by_execute(conduit, tmp_path, kind):
    node = braid(conduit, kind, NZ)
    mesh = _frame(tmp_path, node, {"p": {"type": "pseudocolor", "field": "braid"}})
    assert (mesh[..., 3] > 127).mean() > 0.05  # the mesh's outer surface fills part of the image
    iso = _frame(tmp_path, node, {"p": {"type": "pseudocolor", "pipeline": "c", "field": "braid"},
                                  "v": {"type": "volume", "field": "vel/magnitude"}},
                 {"c": {"f": {"type": "contour", "params": {"field": "braid", "levels": 2}}}})
    assert iso[..., 3].mean() > 1  # a contour of the braid field and a volume of its velocity's magnitude


@pytest.mark.parametrize("kind", TWO_D + GRIDS_2D)
def test_braid_2d_meshes_are_drawn_by_execute(conduit, tmp_path, kind):
    node = braid(conduit, kind, 0)
    img = _frame(tmp_path, node, {"p": {"type": "pseudocolor", "field": "braid"}})
    assert (img[..., 3] > 127).mean() > 0.05


def test_spiral_and_julia_are_drawn_by_execute(conduit, tmp_path):
    node = conduit.Node()
    conduit.blueprint.mesh.examples.spiral(5, node)
    assert (_frame(tmp_path, node, {"p": {"type": "pseudocolor", "field": "dist"}})[..., 3] > 127).mean() > 0.05
    node = conduit.Node()
    conduit.blueprint.mesh.examples.julia(40, 30, -2.0, 2.0, -1.5, 1.5, 0.285, 0.01, node)
    img = _frame(tmp_path, node, {"p": {"type": "pseudocolor", "field": "iters"}})
    assert (img[..., 3] > 127).mean() > 0.05 and len(np.unique(img[img[..., 3] > 127][:, 0])) > 3
