"""Ascent's actions files, written as Ascent's documentation writes them (YAML list form),
loaded and run through adaptors.Adaptor on small uniform meshes.

References: analytic fields (a bilinear velocity's divergence, curl and Q-criterion are
exact under central and one-sided differences alike), NumPy's log on the same values,
file names as Ascent's documentation gives them.
"""

from __future__ import annotations

import functools
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


def axes(n=N):
    return [np.linspace(-1.0, 1.0, n)] * 3


def _frozen(mesh):
    """`mesh` with its arrays read-only: built once and shared, no test can change it."""
    for f in mesh["fields"].values():
        vals = f["values"] if isinstance(f["values"], dict) else {"": f["values"]}
        for v in vals.values():
            v.flags.writeable = False
    return mesh


@functools.cache
def grid(n=N):
    """A uniform grid of n^3 nodes over [-1, 1]^3 with T = 2 + x (positive), r, and a bilinear
    velocity (u, v, w) = (x y, y z, z x) as an mcarray (shared: read-only)."""
    x, y, z = np.meshgrid(*axes(n), indexing="ij")
    h = 2.0 / (n - 1)
    m = adaptors.uniform({"T": 2.0 + x, "r": np.sqrt(x * x + y * y + z * z)}, origin=(-1.0,) * 3, spacing=(h,) * 3)
    m["fields"]["velocity"] = {"association": "vertex", "topology": "mesh",
                               "values": {"u": np.asfortranarray(x * y), "v": np.asfortranarray(y * z),
                                          "w": np.asfortranarray(z * x)}}
    return _frozen(m), (x, y, z)


@functools.cache
def hexes(n=N):
    """The same grid as unstructured hexahedra, with the same fields (shared: read-only)."""
    c = grid_cells(*axes(n))
    p = c.points
    x, y, z = p[:, 0], p[:, 1], p[:, 2]
    m = unstructured(p, c.connectivity, "hex", {"T": 2.0 + x, "r": np.sqrt((p ** 2).sum(axis=1))})
    m["fields"]["velocity"] = {"association": "vertex", "topology": "mesh",
                               "values": {"u": x * y, "v": y * z, "w": z * x}}
    return _frozen(m), (x, y, z)


def run(actions, mesh=None, *, steps=(0,), time=0.0) -> dict:
    """`actions` (Ascent's YAML, or its list / map) executed by an Adaptor at `steps` (on the
    shared grid by default), each step checked to succeed; the final results()."""
    with adaptors.Adaptor(actions) as a:
        for s in steps:
            assert a.execute(s, time, grid()[0] if mesh is None else mesh), a.results()["errors"]
        return a.results()


def scene(plots: str, render: str = "", *, width=48, height=48, name=None) -> str:
    """Ascent's add_scenes action for scene s1: `plots` (YAML under plots:, 8 spaces in), one
    render r1 of `width` x `height` to image_name `name` with the keys in `render` (YAML, 10
    spaces in); no render without `name` (the scene's default)."""
    text = f"""
-
  action: "add_scenes"
  scenes:
    s1:
      plots:
{plots}"""
    if name is not None:
        text += f"""      renders:
        r1:
          image_width: {width}
          image_height: {height}
          image_name: "{name}"
{render}"""
    return text


def image(tmp_path, actions: str, name: str, mesh=None):
    """Run `actions` (which write image_name `tmp_path / name`) once; the PNG (H, W, 4) uint8."""
    run(actions, mesh)
    return read_png(tmp_path / f"{name}.png")


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
    run(cfg, steps=(3,))
    img = read_png(tmp_path / "contour_0003.png")
    assert (img[..., 3] > 0).any() and os.path.getsize(tmp_path / "contour_0003.png") > 0


def test_save_info_writes_ascents_default_name_and_an_explicit_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run(ACTIONS.format(prefix=tmp_path / "img_%04d") + '-\n  action: "save_info"\n', steps=(100,), time=1.5)
    # Ascent: out_ascent_info_{cycle:06d}.yaml in the working directory
    info = yaml.safe_load((tmp_path / "out_ascent_info_000100.yaml").read_text())
    assert info["state"] == {"cycle": 100, "time": 1.5}
    assert info["images"] == [{"image_name": str(tmp_path / "img_0100.png")}]
    assert "s1" in info["actions"]["scenes"]
    run([{"action": "save_info", "file_name": str(tmp_path / "mine.yaml")}], steps=(1,))
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
    run(cfg, mesh)
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


PSEUDOCOLOR_T = """        p1:
          type: "pseudocolor"
          field: "T"
"""


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
    run(scene(PSEUDOCOLOR_T) + renders, steps=(10, 11))
    assert sorted(os.listdir(tmp_path)) == ["image_0010.png", "image_0011.png", "image_10.png", "image_11.png",
                                            "some_image.png"]
    for f in os.listdir(tmp_path):
        assert (read_png(tmp_path / f)[..., 3] > 0).all()  # opaque white background, the mesh drawn over it
    # a scene's own image_name (no renders)
    run([{"action": "add_scenes", "scenes": {"s1": {
        "plots": {"p1": {"type": "pseudocolor", "field": "T"}}, "image_name": str(tmp_path / "scene")}}}], steps=(5,))
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
    camera = ("          bg_color: [0.0, 0.0, 0.0]\n"
              "          camera: {position: [0.0, 0.0, 6.0], look_at: [0.0, 0.0, 0.0], %s}\n")
    for name, planes in (("all", "near_plane: 0.1"), ("none", "far_plane: 4.0"),  # the data lies 5 to 7 away
                         ("behind", "near_plane: 7.5, far_plane: 9.0")):
        run(scene(PSEUDOCOLOR_T, camera % planes, width=64, height=48, name=tmp_path / name))
    assert (read_png(tmp_path / "all.png")[..., :3] > 0).any()
    for name in ("none", "behind"):
        assert not (read_png(tmp_path / f"{name}.png")[..., :3] > 0).any()
    with pytest.raises(ConfigError, match="camera/far_plane: must be > 0"):
        load(scene(PSEUDOCOLOR_T, "          camera: {far_plane: -1.0}\n", name="x"))


# -- colour tables -------------------------------------------------------------------------------------


FRONT = "          camera: {position: [0.0, 0.0, 6.0], look_at: [0.0, 0.0, 0.0]}\n"


def front_face_t(w, h):
    """Where each pixel's ray meets the grid's front face z = 1 seen by FRONT's camera, from the
    camera's matrices: the colour coordinate (T - 1) / 2 = (x + 1) / 2 and a mask of the face's
    inside (a pixel from its edges)."""
    from render.camera import from_settings

    cam = from_settings({"position": [0.0, 0.0, 6.0], "look_at": [0.0, 0.0, 0.0]}, (-1, 1, -1, 1, -1, 1),
                        aspect=w / h)
    inv = np.linalg.inv(cam.projection_matrix(w, h, 1.0, 10.0) @ cam.view_matrix())
    c, r = np.meshgrid(np.arange(w), np.arange(h))
    ndc = np.stack([(2 * c + 1) / w - 1, 1 - (2 * r + 1) / h], -1)
    ends = [np.concatenate([ndc, np.full(c.shape + (1,), z), np.ones(c.shape + (1,))], -1) @ inv.T for z in (-1, 1)]
    a, b = (e[..., :3] / e[..., 3:] for e in ends)
    p = a + (b - a) * ((1.0 - a[..., 2]) / (b[..., 2] - a[..., 2]))[..., None]
    pix = 2.0 * np.tan(np.radians(cam.fov) / 2) * 5.0 / h  # a pixel's size on the face
    inside = (np.abs(p[..., 0]) < 1 - 2 * pix) & (np.abs(p[..., 1]) < 1 - 2 * pix)
    return (p[..., 0] + 1) / 2, inside


def shaded_differences(img, ref_rgb):
    """The face is lit head-on: colour = 0.9 base + 0.2 specular (render.surface.Material's
    defaults), the specular term the same in every channel; the channel differences R - G and
    G - B are then 0.9 times the table's, whatever the specular term (where neither channel is
    clipped at 1)."""
    got = img[..., :3].astype(np.float64) / 255
    return np.stack([got[..., 0] - got[..., 1], got[..., 1] - got[..., 2]], -1), \
        0.9 * np.stack([ref_rgb[..., 0] - ref_rgb[..., 1], ref_rgb[..., 1] - ref_rgb[..., 2]], -1)


def vtk_table(points, t, space):
    core = pytest.importorskip("vtkmodules.vtkRenderingCore", reason="VTK's colour transfer function is the reference")
    f = core.vtkColorTransferFunction()
    {"rgb": f.SetColorSpaceToRGB, "diverging": f.SetColorSpaceToDiverging, "lab": f.SetColorSpaceToLab}[space]()
    for p in points:
        f.AddRGBPoint(*map(float, p))
    return np.array([f.GetColor(float(v)) for v in np.ravel(t)]).reshape(np.shape(t) + (3,))


@pytest.mark.parametrize("table,space", [
    ("""            control_points:
              - {type: "rgb", position: 0.0, color: [0.8, 0.1, 0.1]}
              - {type: "rgb", position: 1.0, color: [0.1, 0.2, 0.8]}
""", "diverging"),  # Ascent's default table cleared: its diverging space, white between the two hues
    ("""            name: "Jet"
            control_points:
              - {type: "rgb", position: 0.0, color: [0.1, 0.0, 0.7]}
              - {type: "rgb", position: 0.3, r: 0.8, g: 0.1, b: 0.0}
              - {type: "rgb", position: 1.0, color: [0.0, 0.6, 0.1]}
""", "jet"),  # added to Jet's points, in Jet's RGB space (a point's colour also as r, g, b keys)
    ("""            name: "cool to warm"
""", "preset"),
    ("", "default"),  # no color_table: Cool to Warm, as Ascent's renderers (vtkh::Renderer) draw
])
def test_colour_tables_are_ascents_drawn_as_the_table_at_the_field(tmp_path, table, space):
    w, h = 96, 64
    plots = PSEUDOCOLOR_T + ("          color_table:\n" + table if table else "")
    img = image(tmp_path, scene(plots, FRONT, width=w, height=h, name=tmp_path / "ct"), "ct")
    t, inside = front_face_t(w, h)
    if space == "diverging":
        ref = vtk_table([[0.0, 0.8, 0.1, 0.1], [1.0, 0.1, 0.2, 0.8]], t, "diverging")
    elif space == "jet":  # VTK-m's Jet, the points at 0 and 1 replaced, one added at 0.3
        pts = [[0.0, 0.1, 0.0, 0.7], [0.111111, 0, 0, 1], [0.3, 0.8, 0.1, 0.0], [0.3650795, 0, 1, 1],
               [0.4920635, 0.5, 1, 0.5], [0.6190475, 1, 1, 0], [0.873016, 1, 0, 0], [1.0, 0.0, 0.6, 0.1]]
        ref = np.stack([np.interp(t, [p[0] for p in pts], [p[c] for p in pts]) for c in (1, 2, 3)], -1)
    else:  # VTK-m's Cool to Warm (named or the default): Moreland's diverging map between its published ends
        ref = vtk_table([[0, 0.23137254902, 0.298039215686, 0.752941176471], [0.5, 0.865, 0.865, 0.865],
                         [1, 0.705882352941, 0.0156862745098, 0.149019607843]], t, "diverging")
    got, want = shaded_differences(img, ref)
    for k in range(2):  # R - G, G - B where neither channel is clipped at 1
        ok = inside & (img[..., k] < 255) & (img[..., k + 1] < 255)
        assert ok.sum() > 0.3 * inside.sum() > 300
        np.testing.assert_allclose(got[ok, k], want[ok, k], atol=1.5 / 255)  # 8-bit rounding: 1 / 255


def test_colour_table_names_resolve_as_ascent_and_reverse(tmp_path):
    def drawn(ct):
        name = f"ct{abs(hash(ct))}"
        return image(tmp_path, scene(PSEUDOCOLOR_T + "          color_table:\n" + ct, name=tmp_path / name), name)

    vtkm = drawn('            name: "Cool to Warm"\n')
    np.testing.assert_array_equal(vtkm, drawn('            name: "CooltoWarm"\n'))  # Ascent's docs' spelling
    assert not np.array_equal(vtkm, drawn('            name: "coolwarm"\n'))  # insitu's (matplotlib's) map
    assert not np.array_equal(drawn('            name: "Viridis"\n'), drawn('            name: "inferno"\n'))
    # reversed: the same as the points of the table reversed by hand
    pts = "\n".join(f'              - {{type: "rgb", position: {x}, color: {c}}}' for x, c in
                     ((0.0, [0.2, 0.3, 0.9]), (0.4, [0.9, 0.9, 0.2]), (1.0, [0.7, 0.1, 0.1])))
    rev = "\n".join(f'              - {{type: "rgb", position: {1 - x}, color: {c}}}' for x, c in
                     ((0.0, [0.2, 0.3, 0.9]), (0.4, [0.9, 0.9, 0.2]), (1.0, [0.7, 0.1, 0.1])))
    np.testing.assert_array_equal(drawn(f'            reverse: "true"\n            control_points:\n{pts}\n'),
                                  drawn(f"            control_points:\n{rev}\n"))


def test_alpha_control_points_are_a_volume_plots_opacity(tmp_path):
    def volume(alphas):
        pts = "".join(f'              - {{type: "alpha", position: {x}, alpha: {a}}}\n' for x, a in alphas)
        plots = f"""        p1:
          type: "volume"
          field: "T"
          color_table:
            name: "Jet"
            control_points:
{pts}"""
        name = f"v{len(alphas)}{alphas[0][1]}"
        return image(tmp_path, scene(plots, "          bg_color: [0.0, 0.0, 0.0]\n" + FRONT, name=tmp_path / name),
                     name)

    clear = volume([(0.0, 0.0), (1.0, 0.0)])
    assert not clear[..., :3].any()  # alpha 0 everywhere: the black background only
    ramp = volume([(0.0, 0.0), (0.5, 0.0), (1.0, 1.0)])
    t, inside = front_face_t(48, 48)
    lum = ramp[..., :3].astype(float).sum(-1)
    assert lum[inside & (t < 0.45)].max() == 0 and lum[inside & (t > 0.8)].min() > 0  # opacity from 0.5 up only


# -- mesh plots ---------------------------------------------------------------------------------------


def projected_edges(n_cells, cam, w, h):
    """Pixel positions along every edge of the outer surface of a box of n_cells^3 cells over
    [-1, 1]^3, from the camera's matrices (numbered independently of render/cells/edges.py)."""
    ticks = np.linspace(-1, 1, n_cells + 1)
    segs = set()
    for ax in range(3):  # edges along axis ax: at each node line (u, v) on the box's surface
        u_ax, v_ax = [a for a in range(3) if a != ax]
        for iu in range(n_cells + 1):
            for iv in range(n_cells + 1):
                if iu not in (0, n_cells) and iv not in (0, n_cells):
                    continue  # a line through the inside
                for k in range(n_cells):
                    a, b = np.zeros(3), np.zeros(3)
                    a[u_ax] = b[u_ax] = ticks[iu]
                    a[v_ax] = b[v_ax] = ticks[iv]
                    a[ax], b[ax] = ticks[k], ticks[k + 1]
                    segs.add((tuple(a), tuple(b)))
    near, far = cam.clip_range((-1, 1, -1, 1, -1, 1))
    m = cam.projection_matrix(w, h, near, far) @ cam.view_matrix()
    s = np.linspace(0.04, 0.96, 200)[:, None]
    pts = np.concatenate([np.array(a) + s * (np.array(b) - np.array(a)) for a, b in sorted(segs)])
    clip = np.c_[pts, np.ones(len(pts))] @ m.T
    return len(segs), np.stack([(clip[:, 0] / clip[:, 3] + 1) * w / 2, (1 - clip[:, 1] / clip[:, 3]) * h / 2], -1)


@pytest.mark.parametrize("make", [grid, hexes], ids=["grid", "hexes"])
def test_mesh_plot_draws_the_edges_of_the_outer_surface(tmp_path, make):
    from render.camera import from_settings

    w, h = 120, 96
    settings = {"azimuth": 35.0, "elevation": 25.0}
    plots = '        p1:\n          type: "mesh"\n'
    render = "          bg_color: [1.0, 1.0, 1.0]\n          camera: {azimuth: 35.0, elevation: 25.0}\n"
    img = image(tmp_path, scene(plots, render, width=w, height=h, name=tmp_path / "mesh"), "mesh", make(3)[0])
    n, pix = projected_edges(2, from_settings(settings, (-1, 1, -1, 1, -1, 1), aspect=w / h), w, h)
    assert n == 48  # 2 x 2 x 2 cells: 12 box edges of 2 cell edges, 4 more lines of 2 on each face
    line = (img[..., :3] == 0).all(-1)  # the render's foreground on white: black
    col, row = np.floor(pix).astype(int).T
    hit = np.zeros_like(line)  # pixels within one of a projected edge
    for dc in (-1, 0, 1):
        for dr in (-1, 0, 1):
            hit[np.clip(row + dr, 0, h - 1), np.clip(col + dc, 0, w - 1)] = True
    assert line[row, col].mean() > 0.85  # the edges are drawn where they project
    assert not line[~hit].any()  # and nothing else: background elsewhere
    assert ((img[..., :3] == 255).all(-1) | line)[~hit].all()


def test_mesh_plot_over_a_pseudocolor_plot_and_of_a_pipeline(tmp_path):
    plots = PSEUDOCOLOR_T + '        p2:\n          type: "mesh"\n'
    both = image(tmp_path, scene(plots, FRONT, name=tmp_path / "both"), "both", grid(3)[0])
    alone = image(tmp_path, scene(PSEUDOCOLOR_T, FRONT, name=tmp_path / "alone"), "alone", grid(3)[0])
    line = (both[..., :3] == 0).all(-1)
    # the front face's grid lines over the surface (z = 1 is nearest), its inside coloured as alone
    t, inside = front_face_t(48, 48)
    assert line[inside].mean() > 0.05 and (both[inside & ~line] == alone[inside & ~line]).all()
    mesh_of_pl1 = '        p1:\n          type: "mesh"\n          pipeline: "pl1"\n'
    text = """
-
  action: "add_pipelines"
  pipelines:
    pl1:
      f1:
        type: "threshold"
        params:
          field: "T"
          min_value: 2.5
          max_value: 3.0
""" + scene(mesh_of_pl1, FRONT, name=tmp_path / "kept")
    kept = image(tmp_path, text, "kept", grid(5)[0])  # the kept cells: x from 0.5 to 1, a quarter of the face
    klines = (kept[..., :3] == 0).all(-1)
    # (its side x = 0.5 is seen, between t = 0.68 and 0.75, from the camera at x = 0)
    assert klines[inside & (t > 0.8)].any() and not klines[inside & (t < 0.65)].any()
    contour = ACTIONS.format(prefix=tmp_path / "c").replace('type: "pseudocolor"\n          pipeline: "pl1"\n'
                                                           '          field: "T"', 'type: "mesh"\n'
                                                           '          pipeline: "pl1"')
    with adaptors.Adaptor(contour) as a:
        assert not a.execute(0, 0.0, grid()[0])
        assert "a mesh plot draws the edges of cells; its pipeline's output is a contour's" in a.results()["errors"][0]


def test_what_insitu_does_not_draw_is_refused_by_name():
    text = """
-
  action: "add_scenes"
  scenes:
    s1:
      plots:
        p2:
          type: "volume"
          field: "braid"
          color_table:
            name: "Jte"
            control_points:
              - {type: "rgb", position: 1.5, color: [1.0, 0.0, 0.0]}
              - {type: "alpha", position: 0.0}
              - {type: "hsv", position: 0.0}
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
    assert "scenes/s1/plots/p2/color_table/name: unknown 'Jte'; close: 'Jet'" in msg
    assert "scenes/s1/plots/p2/color_table/control_points[0]/position: must be in [0, 1]" in msg
    assert "scenes/s1/plots/p2/color_table/control_points[1]/alpha: expected a finite number, got None" in msg
    assert "scenes/s1/plots/p2/color_table/control_points[2]: expected {type: rgb" in msg
    assert "scenes/s1/renders/r1/type: 'auto_camera' renders are not supported by insitu" in msg
    assert "scenes/s1/renders/r2: a cinema render needs theta, db_name" in msg
    with pytest.raises(ConfigError, match=r"control_points: position, r, g, b \(and a\) must have one value each"):
        load(scene(PSEUDOCOLOR_T + "          color_table:\n            control_points: {position: [0, 1], r: [1], "
                   "g: [0, 1], b: [0, 1]}\n"))


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
    frames = run(text, steps=(10, 20))["frames"]
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


@functools.cache
def example_mesh():
    """braid (a scalar) and vel (an mcarray whose magnitude stays above 1) on the test grid (shared:
    read-only)."""
    x, y, z = np.meshgrid(*axes(), indexing="ij")
    m = adaptors.uniform({"braid": np.sin(3 * x) * np.cos(2 * y) + z}, origin=(-1.0,) * 3, spacing=(H,) * 3)
    vel = (2 + np.sin(y) * z, 1 + np.cos(x) * z, 1.5 + x * y)
    m["fields"]["vel"] = {"association": "vertex", "topology": "mesh",
                          "values": dict(zip("uvw", (np.asfortranarray(c) for c in vel)))}
    return _frozen(m), (x, y, z), vel


@pytest.mark.parametrize("name", sorted(ASCENT_EXAMPLES))
def test_ascents_example_actions_run_and_name_their_images_as_ascent(name, tmp_path):
    mesh, (x, y, z), vel = example_mesh()
    text = ASCENT_EXAMPLES[name].format(prefix=tmp_path / name)
    run(text, mesh, steps=(100,))
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
