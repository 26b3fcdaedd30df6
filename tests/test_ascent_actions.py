"""Ascent's actions files, written as Ascent's documentation writes them (YAML list form),
loaded and run through adaptors.Adaptor on small uniform meshes.

References: analytic fields (a bilinear velocity's divergence, curl and Q-criterion are
exact under central and one-sided differences alike), NumPy's log on the same values,
file names as Ascent's documentation gives them.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import yaml

import adaptors
from adaptors.config import load
from adaptors.context import Context
from adaptors.errors import ConfigError
from adaptors.mesh import parse, unstructured
from adaptors.pipelines import run_pipeline
from render.cells import grid_cells
from render.image import read_png

N = 9
H = 2.0 / (N - 1)


def axes():
    return [np.linspace(-1.0, 1.0, N)] * 3


def grid(**extra):
    """A uniform grid over [-1, 1]^3 with T = 2 + x (positive), r, and a bilinear velocity
    (u, v, w) = (x y, y z, z x) as an mcarray."""
    x, y, z = np.meshgrid(*axes(), indexing="ij")
    m = adaptors.uniform({"T": 2.0 + x, "r": np.sqrt(x * x + y * y + z * z), **extra}, origin=(-1.0,) * 3,
                         spacing=(H,) * 3)
    m["fields"]["velocity"] = {"association": "vertex", "topology": "mesh",
                               "values": {"u": np.asfortranarray(x * y), "v": np.asfortranarray(y * z),
                                          "w": np.asfortranarray(z * x)}}
    return m, (x, y, z)


def hexes():
    """The same grid as unstructured hexahedra, with the same fields."""
    c = grid_cells(*axes())
    p = c.points
    x, y, z = p[:, 0], p[:, 1], p[:, 2]
    m = unstructured(p, c.connectivity, "hex", {"T": 2.0 + x, "r": np.sqrt((p ** 2).sum(axis=1))})
    m["fields"]["velocity"] = {"association": "vertex", "topology": "mesh",
                               "values": {"u": x * y, "v": y * z, "w": z * x}}
    return m, (x, y, z)


def run_all(text: str, mesh) -> dict:
    """Every pipeline of an actions file, in dependency order: {name: Dataset}."""
    from adaptors.pipelines import pipeline_order

    cfg = load(text)
    outputs: dict = {}
    for p in pipeline_order(cfg["pipelines"]):
        outputs[p] = run_pipeline(p, cfg["pipelines"][p], parse(mesh, cells=True), Context(), {}, outputs)
    return outputs


def run_yaml(text: str, mesh, name: str = "pl1"):
    return run_all(text, mesh)[name].domains


def values(d, name):
    return np.asarray(d.fields[name].values).ravel()


# -- actions ---------------------------------------------------------------------------------------


ACTIONS = """
-
  action: "add_pipelines"
  pipelines:
    pl1:
      f1:
        type: "contour"
        params:
          field: "r"
          iso_values: 0.5
-
  action: "add_scenes"
  scenes:
    s1:
      plots:
        p1:
          type: "pseudocolor"
          pipeline: "pl1"
          field: "T"
      image_prefix: "{prefix}"
-
  action: "execute"
-
  action: "reset"
"""


def test_execute_and_reset_are_accepted_and_the_scene_runs(tmp_path):
    # Ascent deprecated both: they change nothing (the scene added before reset still runs).
    cfg = load(ACTIONS.format(prefix=tmp_path / "contour_%04d"))
    assert list(cfg["scenes"]) == ["s1"] and list(cfg["pipelines"]) == ["pl1"]
    with adaptors.Adaptor(cfg) as a:
        assert a.execute(3, 0.0, grid()[0]), a.results()["errors"]
    img = read_png(tmp_path / "contour_0003.png")
    assert (img[..., 3] > 0).any() and os.path.getsize(tmp_path / "contour_0003.png") > 0


def test_save_info_writes_ascents_default_name_and_an_explicit_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = ACTIONS.format(prefix=tmp_path / "img_%04d") + '-\n  action: "save_info"\n'
    with adaptors.Adaptor(text) as a:
        assert a.execute(100, 1.5, grid()[0]), a.results()["errors"]
    # Ascent: out_ascent_info_{cycle:06d}.yaml in the working directory
    info = yaml.safe_load((tmp_path / "out_ascent_info_000100.yaml").read_text())
    assert info["state"] == {"cycle": 100, "time": 1.5}
    assert info["images"] == [{"image_name": str(tmp_path / "img_0100.png")}]
    assert "s1" in info["actions"]["scenes"]
    named = [{"action": "save_info", "file_name": str(tmp_path / "mine.yaml")}]
    with adaptors.Adaptor(named) as a:
        assert a.execute(1, 0.0, grid()[0])
    assert yaml.safe_load((tmp_path / "mine.yaml").read_text())["state"]["cycle"] == 1


def test_unsupported_actions_and_filters_are_named():
    with pytest.raises(ConfigError) as e:
        load([{"action": "save_session"}, {"action": "add_bananas"},
              {"action": "add_pipelines", "pipelines": {"pl1": {"f1": {"type": "exaslice", "params": {}}}}}])
    text = str(e.value)
    assert "actions[0]: action 'save_session' is not supported by insitu" in text
    assert "actions[1]: unknown action 'add_bananas'; known: add_pipelines" in text and "save_info" in text
    assert "pipelines/pl1/f1/type: filter 'exaslice' is not supported by insitu" in text


# -- pipeline chaining ------------------------------------------------------------------------------


def test_a_pipeline_starts_from_another_pipelines_output(tmp_path):
    text = f"""
-
  action: "add_pipelines"
  pipelines:
    pl2:
      pipeline: "pl1"
      f1:
        type: "contour"
        params:
          field: "log(T)"
          iso_values: {float(np.log(2.0))}
    pl1:
      f1:
        type: "log"
        params:
          field: "T"
-
  action: "add_scenes"
  scenes:
    s1:
      plots:
        p1:
          type: "pseudocolor"
          pipeline: "pl2"
          field: "T"
      image_prefix: "{tmp_path / 'chain_%04d'}"
"""
    cfg = load(text)
    assert cfg["pipelines"]["pl2"]["f1"]["input"] == "pl1"
    mesh = grid()[0]
    with adaptors.Adaptor(cfg) as a:
        assert a.execute(0, 0.0, mesh), a.results()["errors"]
    assert (read_png(tmp_path / "chain_0000.png")[..., 3] > 0).any()
    # the contour of log(T) at log 2 is the plane x = 0: its surface carries pl1's field
    ds = run_all(text, mesh)["pl2"]
    (d,) = ds.domains
    np.testing.assert_allclose(d.fields["log(T)"].values, np.log(d.fields["T"].values))
    assert ds.surface.field == "log(T)" and ds.surface.levels == [pytest.approx(np.log(2.0))]


def test_a_filter_names_its_input_pipeline_and_cycles_are_refused():
    cfg = load({"pipelines": {"a": {"f": {"type": "log10", "params": {"field": "T"}}},
                              "b": {"f": {"type": "log2", "pipeline": "a", "params": {"field": "log10(T)",
                                                                                     "clamp_min_value": 0.1}}}}})
    (d,) = run_yaml(yaml.safe_dump({"pipelines": {k: {f: {"type": v["type"], "params": v["params"],
                                                           **({"pipeline": v["input"]} if "input" in v else {})}
                                                       for f, v in p.items()}
                                                   for k, p in cfg["pipelines"].items()}}), grid()[0], "b")
    t = values(d, "T")
    np.testing.assert_allclose(values(d, "log2(log10(T))"), np.log2(np.maximum(np.log10(t), 0.1)))
    with pytest.raises(ConfigError, match=r"pipelines a -> b -> a form a cycle"):
        load({"pipelines": {"a": {"pipeline": "b", "f": {"type": "log", "params": {"field": "T"}}},
                            "b": {"pipeline": "a", "f": {"type": "log", "params": {"field": "T"}}}}})
    with pytest.raises(ConfigError, match=r"starts from unknown pipeline 'zz'"):
        load({"pipelines": {"a": {"pipeline": "zz", "f": {"type": "log", "params": {"field": "T"}}}}})


# -- filters -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [grid, hexes], ids=["grid", "hexes"])
def test_divergence_vorticity_and_qcriterion_of_a_bilinear_velocity(make):
    mesh, (x, y, z) = make()
    text = """
-
  action: "add_pipelines"
  pipelines:
    pl1:
      f1:
        type: "divergence"
        params:
          field: "velocity"
          output_name: "my_div"
          use_cell_gradient: "false"
      f2:
        type: "vorticity"
        params:
          field: "velocity"
          output_name: "my_vorticity"
          use_cell_gradient: "false"
      f3:
        type: "qcriterion"
        params:
          field: "velocity"
          output_name: "my_q"
          use_cell_gradient: "false"
"""
    (d,) = run_yaml(text, mesh)
    x, y, z = (np.ravel(a) for a in (x, y, z))
    # J = [[y, x, 0], [0, z, y], [z, 0, x]]: exact for products linear in each variable
    np.testing.assert_allclose(values(d, "my_div"), x + y + z, atol=1e-9)
    for c, want in zip("xyz", (-y, -z, -x)):
        np.testing.assert_allclose(values(d, f"my_vorticity/{c}"), want, atol=1e-9)
    np.testing.assert_allclose(values(d, "my_q"), -0.5 * (x * x + y * y + z * z), atol=1e-9)


def test_log_filters_and_composite_vector_against_numpy():
    mesh, (x, y, z) = grid()
    text = """
-
  action: "add_pipelines"
  pipelines:
    pl1:
      f1:
        type: "log"
        params:
          field: "T"
          output_name: "lnT"
      f2:
        type: "log10"
        params:
          field: "r"
          clamp_min_value: 0.5
      f3:
        type: "composite_vector"
        params:
          field1: "T"
          field2: "r"
          field3: "lnT"
          output_name: "my_vec"
      f4:
        type: "vector_magnitude"
        params:
          field: "my_vec"
          output_name: "mag"
"""
    (d,) = run_yaml(text, mesh)
    t, r = (2.0 + x).ravel(), np.sqrt(x * x + y * y + z * z).ravel()
    np.testing.assert_allclose(values(d, "lnT"), np.log(t), rtol=1e-14)
    np.testing.assert_allclose(values(d, "log10(r)"), np.log10(np.maximum(r, 0.5)), rtol=1e-14)
    np.testing.assert_array_equal(values(d, "my_vec/x"), t)
    np.testing.assert_array_equal(values(d, "my_vec/z"), np.log(t))
    assert d.fields["my_vec/y"].values.dtype == np.float64
    np.testing.assert_allclose(values(d, "mag"), np.sqrt(t * t + r * r + np.log(t) ** 2), rtol=1e-12)


# -- renders -----------------------------------------------------------------------------------------


SCENE = """
-
  action: "add_scenes"
  scenes:
    s1:
      plots:
        p1:
          type: "pseudocolor"
          field: "T"
{renders}
"""


def frames(tmp_path, renders: str, steps=(10,)):
    with adaptors.Adaptor(SCENE.format(renders=renders)) as a:
        for s in steps:
            assert a.execute(s, 0.0, grid()[0]), a.results()["errors"]
        return a.results()["frames"]


def test_image_prefix_and_image_name_follow_ascents_naming(tmp_path):
    # Ascent's documentation: image_prefix "image_" at cycle 10 -> image_10.png; "image_%04d" -> image_0010.png;
    # image_name: that file (.png appended), overwritten every cycle
    renders = f"""      renders:
        r1:
          image_width: 64
          image_height: 48
          image_prefix: "{tmp_path / 'image_'}"
        r2:
          image_width: 64
          image_height: 48
          image_prefix: "{tmp_path / 'image_%04d'}"
        r3:
          image_width: 64
          image_height: 48
          image_name: "{tmp_path / 'some_image'}"
"""
    frames(tmp_path, renders, steps=(10, 11))
    assert sorted(os.listdir(tmp_path)) == ["image_0010.png", "image_0011.png", "image_10.png", "image_11.png",
                                            "some_image.png"]
    for f in os.listdir(tmp_path):
        assert (read_png(tmp_path / f)[..., 3] > 0).all()  # opaque white background, the mesh drawn over it
    # a scene's own image_name (no renders)
    with adaptors.Adaptor([{"action": "add_scenes", "scenes": {"s1": {
            "plots": {"p1": {"type": "pseudocolor", "field": "T"}}, "image_name": str(tmp_path / "scene")}}}]) as a:
        assert a.execute(5, 0.0, grid()[0])
    assert (tmp_path / "scene.png").stat().st_size > 0


def test_pan_moves_the_look_at_point_as_vtkms_projection_shift():
    from render.camera import from_settings

    bounds = (-1, 1, -1, 1, -1, 1)
    for settings in ({"azimuth": 30.0, "elevation": 20.0}, {"position": [3, 2, 5], "look_at": [0.2, 0, 0]}):
        for xpan, ypan in ((0.5, 0.0), (0.0, -0.25), (0.3, 0.4)):
            base = from_settings(settings, bounds)
            cam = from_settings({**settings, "xpan": xpan, "ypan": ypan}, bounds, aspect=64 / 48)
            # VTK-m adds (xpan, ypan) to normalized device coordinates: the old look-at point
            # lands at pixel ((1 + xpan) W/2, (1 - ypan) H/2)
            (pix,), _ = cam.project(np.array([base.look_at]), 64, 48)
            np.testing.assert_allclose(pix, [(1 + xpan) * 32, (1 - ypan) * 24], atol=1e-9)
            np.testing.assert_allclose(cam.forward, base.forward, atol=1e-12)


def test_near_and_far_planes_clip_what_is_drawn(tmp_path):
    camera = "          camera: {position: [0.0, 0.0, 6.0], look_at: [0.0, 0.0, 0.0], %s}\n"
    render = ("      renders:\n        r1:\n          image_width: 64\n          image_height: 48\n"
              f"          image_name: \"{tmp_path / '%s'}\"\n          bg_color: [0.0, 0.0, 0.0]\n")
    frames(tmp_path, render % "all" + camera % "near_plane: 0.1")
    frames(tmp_path, render % "none" + camera % "far_plane: 4.0")  # the data lies 5 to 7 away
    frames(tmp_path, render % "behind" + camera % "near_plane: 7.5, far_plane: 9.0")
    assert (read_png(tmp_path / "all.png")[..., :3] > 0).any()
    for name in ("none", "behind"):
        assert not (read_png(tmp_path / f"{name}.png")[..., :3] > 0).any()
    with pytest.raises(ConfigError, match="camera/far_plane: must be > 0"):
        load(SCENE.format(renders="      renders:\n        r1:\n          camera: {far_plane: -1.0}\n"))


def test_ascent_colour_table_names_draw_the_same_maps(tmp_path):
    def drawn(name):
        text = f"""
-
  action: "add_scenes"
  scenes:
    s1:
      plots:
        p1:
          type: "pseudocolor"
          field: "T"
          color_table:
            name: "{name}"
      renders:
        r1:
          image_width: 48
          image_height: 48
          image_name: "{tmp_path / name.replace(' ', '_')}"
"""
        with adaptors.Adaptor(text) as a:
            assert a.execute(0, 0.0, grid()[0]), a.results()["errors"]
        return read_png(tmp_path / (name.replace(" ", "_") + ".png"))

    np.testing.assert_array_equal(drawn("Cool to Warm"), drawn("coolwarm"))
    np.testing.assert_array_equal(drawn("Viridis"), drawn("viridis"))
    assert not np.array_equal(drawn("Viridis"), drawn("inferno"))


def test_what_insitu_does_not_draw_is_refused_by_name():
    text = """
-
  action: "add_scenes"
  scenes:
    s1:
      plots:
        p1:
          type: "mesh"
        p2:
          type: "volume"
          field: "braid"
          color_table:
            name: "Jet"
            control_points:
              - {type: "rgb", position: 0.0, color: [1.0, 0.0, 0.0]}
              - {type: "alpha", position: 0.0, alpha: 0.0}
      renders:
        r1:
          type: "auto_camera"
          auto_camera:
            metric: "dds_entropy"
        r2:
          type: "cinema"
          phi: 2
"""
    with pytest.raises(ConfigError) as e:
        load(text)
    msg = str(e.value)
    assert "scenes/s1/plots/p1/type: plot 'mesh' is not supported by insitu" in msg
    assert "scenes/s1/plots/p2/color_table/name: expected one of viridis" in msg and "got 'Jet' (not available" in msg
    assert "scenes/s1/plots/p2/color_table/control_points: colour tables from control points are not supported" in msg
    assert "scenes/s1/renders/r1/type: 'auto_camera' renders are not supported by insitu" in msg
    assert "scenes/s1/renders/r2: a cinema render needs theta, db_name" in msg


# -- docs/ASCENT.md ----------------------------------------------------------------------------------


def test_ascent_table_is_generated_and_agrees_with_the_schema():
    from adaptors import ascent_doc

    path = os.path.join(os.path.dirname(__file__), "..", "docs", "ASCENT.md")
    with open(path) as f:
        assert f.read() == ascent_doc.describe() + "\n", "regenerate: python -m adaptors.ascent_doc > docs/ASCENT.md"
    rows = ascent_doc.entries()
    for kind, name, status, how in rows:
        have = ascent_doc.schema_names(kind)
        if status in ("supported", "partial", "insitu only"):
            assert name in have, (kind, name, status)
        else:
            assert name not in have and how.startswith("`"), (kind, name, how)
            assert "not supported" in how or "unknown" in how, (kind, name, how)  # the error names it
    # and every entry of the schema is in the table: Ascent's or insitu's own
    listed = {(k, n) for k, n, _, _ in rows}
    for kind in ascent_doc.ASCENT:
        for name in ascent_doc.schema_names(kind):
            assert (kind, name) in listed, f"{kind} {name!r} is in the schema but not in docs/ASCENT.md"


def test_vorticity_qcriterion_divergence_of_cells_match_vtk_gradient_filter():
    vtk = pytest.importorskip("vtk", reason="VTK's vtkGradientFilter is the reference")
    from vtk.util import numpy_support as ns

    c = grid_cells(*axes())
    p = c.points
    rng = np.random.default_rng(3)
    p = p + rng.uniform(-0.2, 0.2, p.shape) * H  # not a grid: the cells' own shape functions matter
    x, y, z = p[:, 0], p[:, 1], p[:, 2]
    vel = {"u": np.sin(2 * y) * z, "v": np.cos(x) * z * z, "w": np.exp(0.5 * x) * y}
    m = unstructured(p, c.connectivity, "hex", {"T": x})
    m["fields"]["velocity"] = {"association": "vertex", "topology": "mesh", "values": vel}
    text = yaml.safe_dump([{"action": "add_pipelines", "pipelines": {"pl1": {
        "f1": {"type": "divergence", "params": {"field": "velocity", "output_name": "div"}},
        "f2": {"type": "vorticity", "params": {"field": "velocity", "output_name": "vort"}},
        "f3": {"type": "qcriterion", "params": {"field": "velocity", "output_name": "q"}}}}}])
    (d,) = run_yaml(text, m)

    ug = vtk.vtkUnstructuredGrid()
    vp = vtk.vtkPoints()
    vp.SetData(ns.numpy_to_vtk(p, deep=True))
    ug.SetPoints(vp)
    cells = vtk.vtkCellArray()
    conn = c.connectivity.astype(np.int64)
    cells.SetData(ns.numpy_to_vtkIdTypeArray(np.arange(0, conn.size + 1, 8), deep=True),
                  ns.numpy_to_vtkIdTypeArray(conn, deep=True))
    ug.SetCells(vtk.VTK_HEXAHEDRON, cells)
    arr = ns.numpy_to_vtk(np.stack([vel["u"], vel["v"], vel["w"]], axis=1), deep=True)
    arr.SetName("velocity")
    ug.GetPointData().AddArray(arr)
    g = vtk.vtkGradientFilter()
    g.SetInputData(ug)
    g.SetInputArrayToProcess(0, 0, 0, vtk.vtkDataObject.FIELD_ASSOCIATION_POINTS, "velocity")
    g.SetComputeDivergence(True)
    g.SetComputeVorticity(True)
    g.SetComputeQCriterion(True)
    g.Update()
    out = g.GetOutput().GetPointData()
    np.testing.assert_allclose(values(d, "div"), ns.vtk_to_numpy(out.GetArray("Divergence")), rtol=1e-6,
                               atol=1e-9)
    vort = ns.vtk_to_numpy(out.GetArray("Vorticity"))
    for i, comp in enumerate("xyz"):
        np.testing.assert_allclose(values(d, f"vort/{comp}"), vort[:, i], rtol=1e-6, atol=1e-9)
    q = ns.vtk_to_numpy(out.GetArray(g.GetQCriterionArrayName() or "Q-criterion"))
    np.testing.assert_allclose(values(d, "q"), q, rtol=1e-6, atol=1e-9)


def test_cinema_render_writes_ascents_database_layout(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # Ascent's documentation example (scene1/plots/plt1/params/field, renders/r1: type cinema)
    text = """
-
  action: "add_scenes"
  scenes:
    scene1:
      plots:
        plt1:
          type: "pseudocolor"
          params:
            field: "T"
      renders:
        r1:
          type: "cinema"
          phi: 2
          theta: 2
          db_name: "example_db"
          image_width: 48
          image_height: 48
"""
    with adaptors.Adaptor(text) as a:
        for cycle in (10, 20):
            assert a.execute(cycle, 0.0, grid()[0]), a.results()["errors"]
        frames = a.results()["frames"]
    db = tmp_path / "cinema_databases" / "example_db"
    names = [f"{p}_{t}_example_db.png" for p in ("-180.0", "0.0") for t in ("0.0", "90.0")]
    assert sorted(os.listdir(db)) == ["0.0", "1.0", "data.csv", "info.js", "info.json"]
    for time in ("0.0", "1.0"):
        assert sorted(os.listdir(db / time)) == sorted(names)
    assert sorted(frames) == sorted(f"cinema_databases/example_db/1.0/{n}" for n in names)
    info = json.loads((db / "info.json").read_text())
    assert info["name_pattern"] == "{time}/{phi}_{theta}_example_db.png"
    assert info["metadata"] == {"type": "parametric-image-stack"}
    assert info["arguments"]["time"]["values"] == ["0.0", "1.0"]
    assert info["arguments"]["phi"]["values"] == ["-180.0", "0.0"]
    assert info["arguments"]["theta"]["values"] == ["0.0", "90.0"]
    csv = (db / "data.csv").read_text().splitlines()
    assert csv[0] == "phi,theta,time,FILE" and len(csv) == 9 and csv[-1] == "0.0,90.0,1.0,1.0/0.0_90.0_example_db.png"
    # the views see the data from different sides: theta 0 looks down -z (both phis: the same view turned),
    # theta 90 from -y (phi -180: +y)
    imgs = {n: read_png(db / "1.0" / n) for n in names}
    for img in imgs.values():
        assert (img[..., 3] > 0).all()
    assert not np.array_equal(imgs[names[1]], imgs[names[3]])
    from adaptors.cinema import cameras

    views = cameras((-1, 1, -1, 1, -1, 1), 2, 2)
    eyes = {(p, t): np.round(np.subtract(c.position, c.look_at) / np.linalg.norm(np.subtract(c.position, c.look_at)),
                             12) for p, t, c in views}
    np.testing.assert_allclose(eyes[(0.0, 90.0)], [0, -1, 0], atol=1e-12)
    np.testing.assert_allclose(eyes[(-180.0, 90.0)], [0, 1, 0], atol=1e-12)
    np.testing.assert_allclose(eyes[(0.0, 0.0)], [0, 0, 1], atol=1e-12)
    assert all(np.linalg.norm(c.position) == pytest.approx(2.5 * np.sqrt(3)) for _, _, c in views)


# -- Ascent's own example actions files ----------------------------------------------------------------

# From Ascent's documentation (src/docs/sphinx/Actions/examples/*.yaml), unchanged but for the
# image_prefix value, rendered at cycle 100 as Ascent's test suite does.
ASCENT_EXAMPLES = {
    "tout_pipelines": """
-
  action: "add_pipelines"
  pipelines:
    pl1:
      f1:
        type: "vector_magnitude"
        params:
          field: "vel"
          output_name: "mag"
    pl2:
      pipeline: "pl1"
      f1:
        type: "log"
        params:
          field: "mag"
          output_name: "log_mag"
-
  action: "add_scenes"
  scenes:
    s1:
      plots:
        p1:
          type: "pseudocolor"
          field: "log_mag"
          pipeline: "pl2"
      image_prefix: "{prefix}"
""",
    "tout_qcriterion_vel": """
-
  action: "add_pipelines"
  pipelines:
    pl1:
      f2:
        type: "qcriterion"
        params:
          field: "vel"
          output_name: "vel_qcriterion"
          use_cell_gradient: "false"
-
  action: "add_scenes"
  scenes:
    s1:
      plots:
        p1:
          type: "pseudocolor"
          field: "vel_qcriterion"
          pipeline: "pl1"
      image_prefix: "{prefix}"
""",
    "tout_divergence_vel": """
-
  action: "add_pipelines"
  pipelines:
    pl1:
      f2:
        type: "divergence"
        params:
          field: "vel"
          output_name: "vel_divergence"
          use_cell_gradient: "false"
-
  action: "add_scenes"
  scenes:
    s1:
      plots:
        p1:
          type: "pseudocolor"
          field: "vel_divergence"
          pipeline: "pl1"
      image_prefix: "{prefix}"
""",
    "tout_vorticity_vel": """
-
  action: "add_pipelines"
  pipelines:
    pl1:
      f2:
        type: "vorticity"
        params:
          field: "vel"
          output_name: "vel_vorticity"
          use_cell_gradient: "false"
      f1:
        type: "vector_magnitude"
        params:
          field: "vel_vorticity"
          output_name: "mag_vorticity"
-
  action: "add_scenes"
  scenes:
    s1:
      plots:
        p1:
          type: "pseudocolor"
          field: "mag_vorticity"
          pipeline: "pl1"
      image_prefix: "{prefix}"
""",
    "tout_log2_field_clamp": """
-
  action: "add_pipelines"
  pipelines:
    pl1:
      f1:
        type: "vector_magnitude"
        params:
          field: "vel"
          output_name: "mag"
      f2:
        type: "log2"
        params:
          field: "mag"
          output_name: "log2_mag"
          clamp_min_value: 2.0
-
  action: "add_scenes"
  scenes:
    s1:
      plots:
        p1:
          type: "pseudocolor"
          field: "log2_mag"
          pipeline: "pl1"
      image_prefix: "{prefix}"
""",
    "tout_log10_field": """
-
  action: "add_pipelines"
  pipelines:
    pl1:
      f1:
        type: "vector_magnitude"
        params:
          field: "vel"
          output_name: "mag"
      f2:
        type: "log10"
        params:
          field: "mag"
          output_name: "log10_mag"
-
  action: "add_scenes"
  scenes:
    s1:
      plots:
        p1:
          type: "pseudocolor"
          field: "log10_mag"
          pipeline: "pl1"
      image_prefix: "{prefix}"
""",
    "tout_composite_vector": """
-
  action: "add_pipelines"
  pipelines:
    pl1:
      f1:
        type: "composite_vector"
        params:
          field1: "braid"
          field2: "braid"
          field3: "braid"
          output_name: "my_vec"
      f2:
        type: "vector_magnitude"
        params:
          field: "my_vec"
          output_name: "my_vec_mag"
-
  action: "add_scenes"
  scenes:
    s1:
      plots:
        p1:
          type: "pseudocolor"
          field: "my_vec_mag"
          pipeline: "pl1"
      image_prefix: "{prefix}"
""",
}


def example_mesh():
    """braid (a scalar) and vel (an mcarray whose magnitude stays above 1) on the test grid."""
    x, y, z = np.meshgrid(*axes(), indexing="ij")
    m = adaptors.uniform({"braid": np.sin(3 * x) * np.cos(2 * y) + z}, origin=(-1.0,) * 3, spacing=(H,) * 3)
    vel = (2 + np.sin(y) * z, 1 + np.cos(x) * z, 1.5 + x * y)
    m["fields"]["vel"] = {"association": "vertex", "topology": "mesh",
                          "values": dict(zip("uvw", (np.asfortranarray(c) for c in vel)))}
    return m, (x, y, z), vel


@pytest.mark.parametrize("name", sorted(ASCENT_EXAMPLES))
def test_ascents_example_actions_run_and_name_their_images_as_ascent(name, tmp_path):
    mesh, (x, y, z), vel = example_mesh()
    text = ASCENT_EXAMPLES[name].format(prefix=tmp_path / name)
    with adaptors.Adaptor(text) as a:
        assert a.execute(100, 0.0, mesh), a.results()["errors"]
    assert os.listdir(tmp_path) == [f"{name}100.png"]  # Ascent's name at cycle 100
    img = read_png(tmp_path / f"{name}100.png")
    rgb = img[..., :3].reshape(-1, 3)
    assert len(np.unique(rgb, axis=0)) > 8  # the field coloured over the mesh, not a blank frame
    # the plotted field against NumPy on the same values
    outputs = run_all(text, mesh)
    field = load(text)["scenes"]["s1"]["plots"]["p1"]
    (d,) = outputs[field["pipeline"]].domains
    got = np.asarray(d.fields[field["field"]].values)
    mag = np.sqrt(sum(c * c for c in vel))
    want = {"tout_pipelines": np.log(mag), "tout_log2_field_clamp": np.log2(np.maximum(mag, 2.0)),
            "tout_log10_field": np.log10(mag),
            "tout_composite_vector": np.sqrt(3) * np.abs(np.sin(3 * x) * np.cos(2 * y) + z)}.get(name)
    if want is not None:
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    else:
        assert np.isfinite(got).all() and got.shape == x.shape


def test_booleans_as_ascent_writes_them():
    cfg = load([{"action": "add_pipelines", "pipelines": {"pl1": {
        "f1": {"type": "clip_with_field", "params": {"field": "T", "clip_value": 0.0, "invert": "true"}},
        "f2": {"type": "divergence", "params": {"field": "vel", "use_cell_gradient": False}}}}}])
    assert cfg["pipelines"]["pl1"]["f1"]["params"]["invert"] is True
    assert cfg["pipelines"]["pl1"]["f2"]["params"]["use_cell_gradient"] == "false"
    with pytest.raises(ConfigError, match="invert: expected true or false, got str 'yes'"):
        load({"pipelines": {"p": {"f": {"type": "clip_with_field",
                                        "params": {"field": "T", "clip_value": 0.0, "invert": "yes"}}}}})
