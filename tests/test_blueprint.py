"""Conduit Mesh Blueprint coverage of adaptors.mesh.parse: Conduit's own example meshes as
real conduit.Node objects (each parsed and drawn, or refused as not supported yet with its
path), the dicts adaptors.uniform builds against conduit.blueprint.mesh.verify, and the cases
that used to be read silently wrong (spacing x/y/z, unknown axes, vtkGhostType, ...).

Conduit's Python module is built by `make conduit` and found through INSITU_CONDUIT_PYTHONPATH
(`make test` sets it); without it the Conduit tests skip, saying what is missing.
"""

import os
import sys

import numpy as np
import pytest

import adaptors
from adaptors.errors import MeshError
from adaptors.mesh import CellDomain, VectorField, _tree, parse

N = 17  # braid's nodes per axis
CAMERA = {"position": [0.0, 0.0, 60.0], "look_at": [0.0, 0.0, 0.0], "fov": 40.0}


def _conduit():
    path = os.environ.get("INSITU_CONDUIT_PYTHONPATH")
    if not path:
        pytest.skip("INSITU_CONDUIT_PYTHONPATH is not set: run `make conduit` (or `make test`) to build "
                    "Conduit's Python module from ../shared/third_party/conduit-src.tar.gz")
    if not os.path.isdir(os.path.join(path, "conduit")):
        pytest.skip(f"INSITU_CONDUIT_PYTHONPATH={path} holds no conduit package: run `make conduit`")
    if path not in sys.path:
        sys.path.insert(0, path)
    try:
        import conduit
        import conduit.blueprint
    except ImportError as e:
        pytest.skip(f"conduit from INSITU_CONDUIT_PYTHONPATH={path} does not import: {e}")
    return conduit


@pytest.fixture(scope="module")
def conduit():
    return _conduit()


def braid(conduit, kind, nz=N):
    n = conduit.Node()
    conduit.blueprint.mesh.examples.braid(kind, N, N, nz, n)
    return n


# --------------------------------------------------------------------------- Conduit's examples

_SUPPORTED = "not supported yet"
_POLY = "polyhedral cells are not supported by the filters"
#: (generator args, None if it parses as a uniform grid, else (path, what) of parse()'s refusal: meshes
#: read as cells are refused by parse() without cells=True (the adaptor passes it; tests/test_blueprint_cells.py
#: reads them so); polyhedral cells are refused either way)
EXAMPLES = {
    **{f"braid-{k}": (("braid", k, N), None) for k in ("uniform", "rectilinear", "structured")},
    **{f"braid-{k}": (("braid", k, N), ("topologies/mesh", f"unstructured topology \\({s} cells\\).*: {_SUPPORTED}"))
       for k, s in (("points", "point"), ("lines", "line"), ("tets", "tet"), ("hexs", "hex"),
                    ("wedges", "wedge"), ("pyramids", "pyramid"), ("hexs_and_tets", "hex/tet"))},
    "braid-hexs_poly": (("braid", "hexs_poly", N), ("topologies/mesh/elements/shape", _POLY)),
    "braid-mixed": (("braid", "mixed", N), ("topologies/mesh/elements/shape_map/polyhedral", _POLY)),
    "braid-points_implicit": (("braid", "points_implicit", N), ("topologies/mesh", f"a points topology: {_SUPPORTED}")),
    **{f"braid2d-{k}": (("braid", k, 0), ("coordsets/coords", f"a 2-D mesh.*: {_SUPPORTED}"))
       for k in ("uniform", "rectilinear", "structured")},
    **{f"braid2d-{k}": (("braid", k, 0), ("topologies/mesh", f"unstructured topology \\({s} cells\\).*: {_SUPPORTED}"))
       for k, s in (("tris", "tri"), ("quads", "quad"), ("quads_poly", "polygonal"),
                    ("mixed_2d", "mixed quad/tri"), ("quads_and_tris", "quad/tri"),
                    ("quads_and_tris_offsets", "quad/tri"))},
    "spiral": (("spiral", 3), ("domain_000000/coordsets/coords", f"a 2-D mesh.*: {_SUPPORTED}")),
    "julia": (("julia", 20, 20, -2.0, 2.0, -2.0, 2.0, 0.285, 0.01),
              ("coordsets/coords", f"a 2-D mesh.*: {_SUPPORTED}")),
    **{f"venn-{k}": (("venn", k, 20, 20, 0.25), ("matsets", f"material sets.*: {_SUPPORTED}"))
       for k in ("full", "sparse_by_material", "sparse_by_element")},
}


def example(conduit, args):
    n = conduit.Node()
    gen = getattr(conduit.blueprint.mesh.examples, args[0])
    if args[0] == "braid":
        gen(args[1], N, N, args[2], n)
    else:
        gen(*args[1:], n)
    return n


def contour_config(tmp_path, field="braid", iso=1.0):
    return {
        "pipelines": {"pl": {"c": {"type": "contour", "params": {"field": field, "iso_values": [iso]}}}},
        "scenes": {"s": {"plots": {"p": {"type": "pseudocolor", "pipeline": "pl", "field": field}},
                         "renders": {"r": {"image_width": 96, "image_height": 72, "camera": CAMERA,
                                           "bg_color": [0, 0, 0, 0],
                                           "image_prefix": str(tmp_path / "frame_%03d")}}}},
        "exceptions": "forward",
    }


def draw(tmp_path, mesh, **kw):
    from render.image import read_png

    tmp_path.mkdir(exist_ok=True)
    with adaptors.Adaptor(contour_config(tmp_path, **kw)) as a:
        assert a.execute(0, 0.0, mesh)
        assert a.results()["errors"] == []
    return read_png(tmp_path / "frame_000.png")


def reference_uniform(node, **fields):
    """braid's own values on the uniform grid braid spans (-10..10), built with adaptors.uniform."""
    h = 20.0 / (N - 1)
    return adaptors.uniform(fields, origin=(-10.0,) * 3, spacing=(h,) * 3)


def flat(values):
    # Through tolist(): Conduit flags strided leaves C-contiguous, and reshape or copy trust the flag.
    return np.asarray(values.tolist()).reshape(N, N, N).transpose()  # Conduit's order: i fastest


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_conduit_examples_parse_and_draw_or_are_refused_with_their_path(conduit, tmp_path, name):
    args, refused = EXAMPLES[name]
    node = example(conduit, args)
    if refused is not None:
        path, what = refused
        with pytest.raises(MeshError, match=f"^{path}: .*{what}"):
            parse(node)
        # The adaptor reads cells (parse(..., cells=True)): it contours 3-D cells into surfaces
        # and 2-D cells into lines, and refuses by name what a contour cannot be made of
        # (points, lines, polygons) and what it cannot read (polyhedra, material sets).
        cells_3d = name in {f"braid-{k}" for k in ("tets", "hexs", "wedges", "pyramids", "hexs_and_tets")}
        cells_2d = name in {f"braid2d-{k}" for k in ("uniform", "rectilinear", "structured", "tris", "quads",
                                                      "mixed_2d", "quads_and_tris", "quads_and_tris_offsets")}
        with adaptors.Adaptor(contour_config(tmp_path)) as a:
            if cells_3d or cells_2d:
                assert a.execute(0, 0.0, node), a.results()["errors"]
            else:
                clear = f"{_POLY}|material sets|cannot contour cells of type|no field 'braid'|polygonal"
                with pytest.raises((MeshError, ValueError), match=clear):
                    a.execute(0, 0.0, node)
        if cells_3d or cells_2d:
            from render.image import read_png

            cover = (read_png(tmp_path / "frame_000.png")[..., 3] > 0).mean()
            assert cover > 0.05 if cells_3d else 0.003 < cover < 0.1  # a surface; one-pixel lines
        return
    (d,) = parse(node)
    h = 20.0 / (N - 1)
    assert d.dims == (N, N, N) and d.cells == ((0, 0, 0), (N - 1,) * 3)
    np.testing.assert_allclose(d.origin, -10.0)
    np.testing.assert_allclose(d.spacing, h, rtol=1e-12)
    braid_values = node.fetch_existing("fields/braid/values").value()
    assert np.shares_memory(d.fields["braid"].values, braid_values)  # a view, never a copy
    np.testing.assert_array_equal(d.fields["braid"].values, flat(braid_values))
    img = draw(tmp_path / "node", node)
    ref = draw(tmp_path / "ref", reference_uniform(node, braid=flat(braid_values)))
    assert (img[..., 3] > 0).mean() > 0.05  # the surface is there
    np.testing.assert_array_equal(img, ref)  # and where the uniform grid braid spans puts it


def test_braid_vel_mcarray_is_a_vector_with_component_views_and_magnitude(conduit, tmp_path):
    node = braid(conduit, "uniform")
    (d,) = parse(node)
    assert sorted(d.fields) == ["braid", "radial", "vel/magnitude", "vel/u", "vel/v", "vel/w"]
    vel = d.fields["vel/magnitude"]
    assert isinstance(vel, VectorField) and sorted(vel.components) == ["u", "v", "w"]
    assert vel.components["u"] is d.fields["vel/u"].values
    comps = {c: node.fetch_existing(f"fields/vel/values/{c}").value() for c in "uvw"}
    for c, v in comps.items():
        assert np.shares_memory(d.fields[f"vel/{c}"].values, v)
        np.testing.assert_array_equal(d.fields[f"vel/{c}"].values, flat(v))
    mag = np.sqrt(sum(flat(v).astype(np.float64) ** 2 for v in comps.values()))
    np.testing.assert_allclose(vel.values, mag, rtol=1e-12)
    iso = float(np.median(mag))
    img = draw(tmp_path / "node", node, field="vel/magnitude", iso=iso)
    ref = draw(tmp_path / "ref", reference_uniform(node, vel=mag), field="vel", iso=iso)
    assert (img[..., 3] > 0).mean() > 0.05
    np.testing.assert_array_equal(img, ref)
    img_u = draw(tmp_path / "u", node, field="vel/u", iso=2.0)
    ref_u = draw(tmp_path / "ref_u", reference_uniform(node, u=flat(comps["u"])), field="u", iso=2.0)
    np.testing.assert_array_equal(img_u, ref_u)


def test_interleaved_mcarray_node_components_are_strided_views(conduit):
    node = braid(conduit, "uniform")
    xyz = conduit.Node()
    conduit.blueprint.mcarray.examples.xyz("interleaved", N ** 3, xyz)
    node["fields/p/association"] = "vertex"
    node["fields/p/topology"] = "mesh"
    node["fields/p/values"].set_external(xyz)
    x = node.fetch_existing("fields/p/values/x").value()
    assert x.strides == (24,)  # interleaved in Conduit: offset and stride in its dtype
    (d,) = parse(node)
    for k, c in enumerate("xyz"):
        v = node.fetch_existing(f"fields/p/values/{c}").value()
        got = d.fields[f"p/{c}"].values
        assert np.shares_memory(got, v) and got.strides[0] == 24
        np.testing.assert_array_equal(got, flat(v))
        # Conduit flags such leaves C-contiguous: NumPy's contiguous fast paths must not see that flag.
        np.testing.assert_array_equal(np.ascontiguousarray(got), flat(v))
        np.testing.assert_array_equal(got.astype(np.float32), flat(v))
    leaf = _tree(xyz)["y"]  # the walker's leaves carry true flags (coordinates are read flat)
    assert not leaf.flags.c_contiguous and leaf.copy().tolist() == leaf.tolist()


def test_braid_fields_all_go_to_an_hdf5_extract(conduit, tmp_path):
    h5py = pytest.importorskip("h5py")
    from adaptors.extracts import write_hdf5

    node = braid(conduit, "uniform")
    (d,) = parse(node)
    out = write_hdf5(str(tmp_path / "x.h5"), [d], None, step=0, time=0.0, rank=0, nranks=1)
    with h5py.File(out) as f:
        g = f["domain_000000"]
        for name in d.fields:
            np.testing.assert_array_equal(g[name][()], d.fields[name].values)
        assert sorted(g["vel"]) == ["magnitude", "u", "v", "w"]


def test_uniform_dicts_pass_conduit_verify(conduit):
    rng = np.random.default_rng(0)
    T = rng.random((6, 5, 4))
    E = rng.random((5, 4, 3)).astype(np.float32)
    for m in (adaptors.uniform({"T": T}),
              adaptors.uniform({"T": T, "E": E}, origin=(1, 2, 3), spacing=(0.5, 0.25, 2), ghost=1,
                               domain_id=3, element=("E",))):
        node = conduit.Node()
        _to_node(node, "", m)
        info = conduit.Node()
        assert conduit.blueprint.mesh.verify(node, info), info.to_yaml()
        (d,) = parse(node)
        (ref,) = parse(m)
        assert d.dims == ref.dims and d.cells == ref.cells and d.domain_id == ref.domain_id
        np.testing.assert_array_equal(d.origin, ref.origin)
        np.testing.assert_array_equal(d.spacing, ref.spacing)
        for k, f in ref.fields.items():
            np.testing.assert_array_equal(d.fields[k].values, f.values)


def _to_node(node, path, obj):
    for k, v in obj.items():
        p = f"{path}{k}"
        if isinstance(v, dict):
            _to_node(node, p + "/", v)
        elif isinstance(v, np.ndarray):
            node[p] = np.ascontiguousarray(v.transpose()).ravel()  # Conduit's order: i fastest
        else:
            node[p] = v


# --------------------------------------------------------------------------- dicts: silent cases


def _mesh(cs=None, fields=None, **extra):
    cs = cs or {"type": "uniform", "dims": {"i": 4, "j": 5, "k": 6}}
    fields = fields or {"T": {"association": "vertex", "topology": "mesh", "values": np.zeros((4, 5, 6))}}
    return {"coordsets": {"coords": cs}, "topologies": {"mesh": {"type": "uniform", "coordset": "coords"}},
            "fields": fields, **extra}


DIMS = {"i": 4, "j": 5, "k": 6}


@pytest.mark.parametrize("spacing", [{"dx": 0.5, "dy": 2.0, "dz": 3.0}, {"x": 0.5, "y": 2.0, "z": 3.0}])
@pytest.mark.parametrize("origin", [{"x": 1.0, "y": -2.0, "z": 4.0}, {"i": 1.0, "j": -2.0, "k": 4.0}])
def test_uniform_spacing_and_origin_in_either_naming(spacing, origin):
    (d,) = parse(_mesh({"type": "uniform", "dims": DIMS, "origin": origin, "spacing": spacing}))
    np.testing.assert_array_equal(d.spacing, [0.5, 2.0, 3.0])  # was 1, 1, 1 for x/y/z
    np.testing.assert_array_equal(d.origin, [1.0, -2.0, 4.0])
    np.testing.assert_array_equal(d.box, [1.0, 2.5, -2.0, 6.0, 4.0, 19.0])


@pytest.mark.parametrize("key,value,match", [
    ("spacing", {"dr": 1.0, "dtheta": 0.1, "dz": 1.0}, r"coords/spacing: unknown or mixed axis names dr, dtheta, dz"),
    ("spacing", {"dx": 1.0, "y": 2.0}, r"coords/spacing: unknown or mixed axis names dx, y"),
    ("origin", {"r": 1.0, "theta": 0.0, "z": 0.0}, r"coords/origin: non-Cartesian axes r, theta, z.*not supported"),
    ("origin", {"x": 1.0, "w": 0.0}, r"coords/origin: unknown or mixed axis names w, x"),
])
def test_unknown_or_non_cartesian_axes_are_errors_not_defaults(key, value, match):
    with pytest.raises(MeshError, match=match):
        parse(_mesh({"type": "uniform", "dims": DIMS, key: value}))


def test_rectilinear_even_is_read_as_uniform_uneven_and_polar_are_refused():
    x, y, z = np.linspace(-1, 1, 4), np.linspace(0, 2, 5).astype(np.float32), np.arange(6.0) * 0.5 + 3
    rect = _mesh({"type": "rectilinear", "values": {"x": x, "y": y, "z": z}})
    rect["topologies"]["mesh"]["type"] = "rectilinear"
    (d,) = parse(rect)
    np.testing.assert_allclose(d.origin, [-1, 0, 3])
    np.testing.assert_allclose(d.spacing, [2 / 3, 0.5, 0.5], rtol=1e-7)
    rect["coordsets"]["coords"]["values"]["y"] = np.array([0.0, 0.1, 0.5, 1.0, 2.0])
    with pytest.raises(MeshError, match=r"^coordsets/coords/values/y: unevenly spaced coordinates: not supported"):
        parse(rect)
    # read as hexahedra (tests/test_blueprint_cells.py): fields 1-D, so [i, j, k] ones laid out i fastest
    with pytest.raises(MeshError, match=r"fields/T/values: a 4x5x6 \[i, j, k\] array not laid out i fastest"):
        parse(rect, cells=True)
    rect["fields"]["T"]["values"] = np.asfortranarray(rect["fields"]["T"]["values"])
    (c,) = parse(rect, cells=True)
    assert isinstance(c, CellDomain) and c.mesh.n_cells == 3 * 4 * 5 and c.fields["T"].values.shape == (120,)
    rect["coordsets"]["coords"]["values"] = {"r": x, "theta": y, "z": z}
    with pytest.raises(MeshError, match=r"coordsets/coords/values: non-Cartesian axes .*not supported yet"):
        parse(rect)
    rect["topologies"]["mesh"]["type"] = "uniform"
    with pytest.raises(MeshError, match=r"coordsets/coords/type: a uniform topology .* needs a uniform coordset"):
        parse(rect)


def test_vtk_ghost_type_is_the_ghost_field_not_data():
    g = np.zeros((3, 4, 5), np.uint8)
    g[0] = 1  # DUPLICATECELL
    g[:, -1] = 32  # HIDDENCELL
    g[:, :, 2] |= 16  # EXTERIORCELL: informational, not a ghost (as VTK's filters read it)
    fields = {"T": {"association": "vertex", "topology": "mesh", "values": np.zeros((4, 5, 6))},
              "vtkGhostType": {"association": "element", "topology": "mesh", "values": g}}
    (d,) = parse(_mesh(fields=fields))
    assert "vtkGhostType" not in d.fields and d.cells == ((1, 0, 0), (3, 3, 5))
    asc = np.zeros((3, 4, 5), np.int32)
    asc[:, :, 4] = 1
    fields["ascent_ghosts"] = {"association": "element", "topology": "mesh", "values": asc}
    (d,) = parse(_mesh(fields=fields))  # both: a cell is a ghost if either says so
    assert set(d.fields) == {"T"} and d.cells == ((1, 0, 0), (3, 3, 4))
    fields["vtkGhostType"] = {"association": "vertex", "topology": "mesh", "values": np.zeros((4, 5, 6), np.uint8)}
    with pytest.raises(MeshError, match=r"fields/vtkGhostType/association: .*ghost points are not supported yet"):
        parse(_mesh(fields=fields))


@pytest.mark.parametrize("key", ["matsets", "specsets", "nestsets"])
def test_matsets_specsets_nestsets_are_refused_not_ignored(key):
    with pytest.raises(MeshError, match=f"^{key}: .*not supported yet"):
        parse(_mesh(**{key: {"mat": {"topology": "mesh"}}}))


def test_adjsets_are_checked_and_accepted():
    adj = {"a": {"association": "vertex", "topology": "mesh",
                 "groups": {"g0": {"neighbors": np.array([1]), "values": np.array([0, 1, 2])}}}}
    assert len(parse(_mesh(adjsets=adj))) == 1
    adj["a"]["topology"] = "nope"
    with pytest.raises(MeshError, match=r"adjsets/a/topology: names 'nope'"):
        parse(_mesh(adjsets=adj))


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
                                   "float16", "float32", "float64"])
def test_every_integer_and_float_dtype_is_kept_as_given(dtype):
    v = (np.arange(120) % 7).astype(dtype)
    (d,) = parse(_mesh(fields={"T": {"association": "vertex", "topology": "mesh", "values": v}}))
    got = d.fields["T"].values
    assert got.dtype == dtype and np.shares_memory(got, v) and got.shape == (4, 5, 6)
    assert got[1, 2, 3] == v[1 + 4 * (2 + 5 * 3)]


def test_masked_and_non_real_arrays_are_refused():
    m = np.ma.masked_less(np.arange(120.0).reshape(4, 5, 6), 3)
    with pytest.raises(MeshError, match=r"fields/T/values: a masked array \(numpy.ma\)"):
        parse(_mesh(fields={"T": {"association": "vertex", "topology": "mesh", "values": m}}))
    with pytest.raises(MeshError, match=r"fields/T/values/x: a masked array"):
        parse(_mesh(fields={"T": {"association": "vertex", "topology": "mesh", "values": {"x": m}}}))
    with pytest.raises(MeshError, match=r"fields/T/values: expected 4x5x6 .* got 4x5x6 complex128"):
        parse(_mesh(fields={"T": {"association": "vertex", "topology": "mesh",
                                  "values": np.zeros((4, 5, 6), complex)}}))


def test_mcarray_dicts_separate_and_interleaved():
    rng = np.random.default_rng(1)
    buf = rng.random((6, 5, 4, 3))  # [k, j, i, component]: interleaved, i fastest
    inter = {c: buf[..., n].reshape(-1) for n, c in enumerate("xyz")}  # strided flat views
    cells = {c: rng.random((3, 4, 5)).astype(np.float32) for c in "uv"}
    fields = {"v": {"association": "vertex", "topology": "mesh", "values": inter},
              "c": {"association": "element", "topology": "mesh", "values": cells}}
    (d,) = parse(_mesh(fields=fields))
    for n, c in enumerate("xyz"):
        got = d.fields[f"v/{c}"].values
        assert np.shares_memory(got, buf) and got.shape == (4, 5, 6)
        np.testing.assert_array_equal(got, buf[..., n].transpose())
    np.testing.assert_allclose(d.fields["v/magnitude"].values, np.linalg.norm(buf, axis=-1).transpose(), rtol=1e-12)
    assert d.fields["c/magnitude"].values.dtype == np.float32 and d.fields["c/u"].values is cells["u"]
    np.testing.assert_allclose(d.fields["c/magnitude"].values, np.hypot(cells["u"], cells["v"]), rtol=1e-6)
    np.testing.assert_allclose(d.vertex_values("v/y"), buf[..., 1].transpose())
    fields["v"]["tile_ranges"] = {"span": [2, 2, 2], "values": np.zeros((2, 3, 3, 2))}
    with pytest.raises(MeshError, match=r"fields/v/tile_ranges: only scalar vertex fields"):
        parse(_mesh(fields=fields))


def test_several_topologies_the_fields_pick_one():
    m = _mesh()
    m["coordsets"]["pts"] = {"type": "explicit", "values": {"x": np.zeros(3), "y": np.zeros(3), "z": np.zeros(3)}}
    m["topologies"]["cloud"] = {"type": "points", "coordset": "pts"}
    (d,) = parse(m)
    assert d.dims == (4, 5, 6) and set(d.fields) == {"T"}
    m["fields"]["p"] = {"association": "vertex", "topology": "cloud", "values": np.zeros(3)}
    with pytest.raises(MeshError, match=r"^fields: fields on several topologies \(mesh, cloud\).*not supported yet"):
        parse(m)
    del m["fields"]["T"]
    with pytest.raises(MeshError, match=r"^topologies/cloud: a points topology: not supported yet"):
        parse(m)
    (c,) = parse(m, cells=True)
    assert isinstance(c, CellDomain) and c.topology == "cloud" and c.mesh.n_cells == 3


def test_unstructured_is_validated_before_it_is_refused():
    pts = {"type": "explicit", "values": {"x": np.arange(4.0), "y": np.zeros(4), "z": np.zeros(4)}}
    m = {"coordsets": {"c": pts}, "fields": {},
         "topologies": {"t": {"type": "unstructured", "coordset": "c",
                              "elements": {"shape": "tet", "connectivity": np.array([0, 1, 2, 4])}}}}
    with pytest.raises(MeshError, match=r"topologies/t/elements/connectivity: indices must lie in \[0, 4\)"):
        parse(m)
    m["topologies"]["t"]["elements"]["connectivity"] = np.array([0, 1, 2, 3, 0, 1])
    with pytest.raises(MeshError, match=r"connectivity: 6 indices is not a whole number of tets"):
        parse(m)
    m["topologies"]["t"]["elements"] = {"shape": "octagon", "connectivity": np.array([0])}
    with pytest.raises(MeshError, match=r"elements/shape: expected one of point, .* or mixed, got 'octagon'"):
        parse(m)
    m["topologies"]["t"]["elements"] = {"shape": "tet", "connectivity": np.array([0, 1, 2, 3])}
    with pytest.raises(MeshError, match=r"^topologies/t: an unstructured topology \(tet cells\): not supported yet"):
        parse(m)
    (c,) = parse(m, cells=True)
    assert isinstance(c, CellDomain) and c.mesh.connectivity.tolist() == [0, 1, 2, 3]
