"""adaptors.draw: one domain's drawing, shared by the engines. Domains drawn apart and
merged give the whole grid's image; the embedded engine draws through draw_domain (the
Spark engine too: tests/test_adaptor_spark.py)."""

import os

import numpy as np
import pytest

import adaptors
from adaptors import draw
from adaptors.draw import (DomainImage, DomainSpec, Renderers, SurfacePlot, View, VolumePlot, describe_domain,
                           draw_domain, front_to_back, merge_domains)
from adaptors.mesh import parse
from adaptors.pipelines import Dataset
from render.camera import Camera

N = 33
X = np.linspace(-1.0, 1.0, N)
H = float(X[1] - X[0])
R = np.sqrt(X[:, None, None] ** 2 + X[None, :, None] ** 2 + X[None, None, :] ** 2)
BOUNDS = (-1.0, 1.0, -1.0, 1.0, -1.0, 1.0)
VIEW = View(Camera.fit(BOUNDS, azimuth=30.0, elevation=20.0), 64, 48, BOUNDS)
PLOTS = (SurfacePlot(0, 0, (0.6,), 0.0, 1.7, "viridis"),
         VolumePlot(0, 0.0, 1.7, "plasma", ((0.0, 0.8), (1.7, 0.0))))


def spec(i0: int, i1: int, plots=PLOTS, ghost=(0, 0)) -> tuple[np.ndarray, DomainSpec]:
    """Nodes i0..i1 along x (plus ghost layers below and above) as one domain."""
    a, b = i0 - ghost[0], i1 + ghost[1]
    cells = ((ghost[0], 0, 0), (ghost[0] + i1 - i0, N - 1, N - 1))
    origin = (float(X[a]), -1.0, -1.0)
    node_origin = (float(X[i0]), -1.0, -1.0)
    box = (float(X[i0]), float(X[i1]), -1.0, 1.0, -1.0, 1.0)
    return R[a:b + 1], DomainSpec((H, H, H), origin, cells, node_origin, box, plots)


@pytest.fixture(scope="module")
def renderers():
    r = Renderers()
    yield r
    r.close()


def test_domains_drawn_apart_and_merged_give_the_whole_grid(renderers):
    whole_field, whole = spec(0, N - 1)
    ref = draw_domain([whole_field], whole, VIEW, renderers=renderers)
    assert ref.surface is not None and ref.volume is not None
    assert np.isfinite(ref.surface[1]).mean() > 0.03 and ref.volume[..., 3].max() > 0.1  # something drawn
    m = N // 2
    parts = [spec(0, m, ghost=(0, 1)), spec(m, N - 1, ghost=(1, 0))]
    images = [draw_domain([f], s, VIEW, renderers=renderers) for f, s in parts]
    merged = merge_domains(images, [s.box for _, s in parts], VIEW.camera.position)
    # Triangles are the same, rasterized apart: the same pixels, the same nearest fragment.
    np.testing.assert_array_equal(merged.surface[1], ref.surface[1])
    np.testing.assert_allclose(merged.surface[0], ref.surface[0], atol=1e-6)
    # Volume blocks take exactly the samples of their box (early termination aside).
    np.testing.assert_allclose(merged.volume, ref.volume, atol=2 / 255)
    # In the wrong order the volume differs: the order is the front-to-back one.
    wrong = merge_domains(images[::-1], [s.box for _, s in parts[::-1]][::-1], VIEW.camera.position)
    assert np.abs(wrong.volume - ref.volume).max() > 2 / 255


def test_several_surfaces_merge_by_depth_and_an_empty_one_draws_nothing(renderers):
    f, near = spec(0, N - 1, plots=(SurfacePlot(0, 0, (0.5,), 0.0, 1.7, "viridis"),))
    _, far = spec(0, N - 1, plots=(SurfacePlot(0, 0, (0.9,), 0.0, 1.7, "viridis"),))
    _, both = spec(0, N - 1, plots=(far.plots[0], near.plots[0]))
    a, b = (draw_domain([f], s, VIEW, renderers=renderers).surface for s in (near, far))
    got = draw_domain([f], both, VIEW, renderers=renderers)
    np.testing.assert_array_equal(got.surface[1], np.minimum(a[1], b[1]))
    assert got.volume is None
    _, empty = spec(0, N - 1, plots=(SurfacePlot(0, 0, (5.0,), 0.0, 1.7, "viridis"),))
    assert draw_domain([f], empty, VIEW, renderers=renderers) == DomainImage(None, None)


def test_packed_images_unpack_to_their_layers(renderers):
    f, s = spec(0, N - 1)
    image = draw_domain([f], s, VIEW, renderers=renderers)
    packed = image.packed(VIEW.width, VIEW.height)
    assert packed.shape == (48, 64, 9) and packed.dtype == np.float32
    back = DomainImage.unpacked(packed, s)
    np.testing.assert_array_equal(back.surface[0], image.surface[0])
    np.testing.assert_array_equal(back.surface[1], image.surface[1])
    np.testing.assert_array_equal(back.volume, image.volume)
    # Without plots of a kind there is no such layer.
    only_volume = DomainImage.unpacked(packed, spec(0, N - 1, plots=PLOTS[1:])[1])
    assert only_volume.surface is None and only_volume.volume is not None
    nothing = DomainImage().packed(4, 3)
    assert np.isinf(nothing[..., 4]).all() and not nothing[..., [0, 1, 2, 3, 5, 6, 7, 8]].any()


def test_transfer_functions_are_kept_while_their_settings_stay():
    r = Renderers()
    a = r.transfer_function(PLOTS[1])
    assert r.transfer_function(VolumePlot(0, 0.0, 1.7, "plasma", ((0.0, 0.8), (1.7, 0.0)))) is a
    assert r.transfer_function(VolumePlot(0, 0.0, 1.5, "plasma", ((0.0, 0.8), (1.7, 0.0)))) is not a
    for hi in range(Renderers.MAX_TRANSFER_FUNCTIONS):
        r.transfer_function(VolumePlot(0, 0.0, 2.0 + hi, "plasma"))
    assert r.transfer_function(PLOTS[1]) is not a  # the oldest went first


def test_front_to_back_orders_boxes_by_the_eye():
    boxes = [(0, 1, 0, 1, 0, 1), (1, 2, 0, 1, 0, 1), (2, 3, 0, 1, 0, 1), (1, 2, 1, 2, 0, 1)]
    assert front_to_back(boxes, (10.0, 0.5, 0.5)) == [2, 1, 3, 0]
    assert front_to_back(boxes, (-10.0, 0.5, 0.5)) == [0, 1, 3, 2]
    order = front_to_back(boxes, (1.5, 10.0, 0.5))
    assert order.index(3) < order.index(1)  # above box 1, on the eye's side


def test_describe_domain_names_each_field_once_and_draws_the_box_without_a_surface():
    m = adaptors.uniform({"r": R, "q": R * 2}, origin=(-1.0,) * 3, spacing=(H,) * 3)
    (d,) = parse(m)
    raw = Dataset([d])
    plots = [("v", {"type": "volume", "color_table": {"opacity": [[0, 1], [1, 0]]}}, raw, "q", 0.0, 2.0, "jet"),
             ("w", {"type": "volume", "color_table": {}}, raw, "q", 0.0, 1.0, "gray")]
    fields, s = describe_domain(plots, 0, d)
    assert len(fields) == 1 and fields[0] is d.fields["q"].values
    assert s.plots == (VolumePlot(0, 0.0, 2.0, "jet", ((0.0, 1.0), (1.0, 0.0))), VolumePlot(0, 0.0, 1.0, "gray"))
    assert s.box == tuple(map(float, d.box)) and s.cells == ((0, 0, 0), (N - 1, N - 1, N - 1))
    # a pseudocolor plot of a dataset without a surface draws the faces of the grid's box
    fields, s = describe_domain([("p", {"type": "pseudocolor", "pipeline": None}, raw, "r", 0.0, 1.0, "jet")], 0, d)
    assert s.plots == (SurfacePlot(-1, 0, (), 0.0, 1.0, "jet", kind="boundary"),) and fields[0] is d.fields["r"].values
    with pytest.raises(ValueError, match="plot p: needs a field to colour by"):
        describe_domain([("p", {"type": "pseudocolor", "pipeline": "pl"}, raw, None, 0.0, 1.0, "jet")], 0, d)


def test_draw_domain_refuses_an_unknown_plot(renderers):
    f, s = spec(0, N - 1, plots=(("volume", 0),))
    with pytest.raises(TypeError, match="plots must be SurfacePlot, VolumePlot, CellSurfacePlot, CellVolumePlot "
                                        "or MeshPlot, got tuple"):
        draw_domain([f], s, VIEW, renderers=renderers)


# -- the engines draw through draw_domain -------------------------------------------------------

ORIGINAL = draw.draw_domain


class Spy:
    """draw_domain that notes each call (pid and domain box) in a file, then draws: it
    travels to Spark's worker daemons by reference, so they log to the same file."""

    def __init__(self, log: str) -> None:
        self.log = log

    def __call__(self, fields, spec: DomainSpec, view: View, **kw) -> DomainImage:
        with open(self.log, "a") as f:
            f.write(f"{os.getpid()} {type(spec).__name__} {spec.box[0]:.6f}\n")
        return ORIGINAL(fields, spec, view, **kw)

    def calls(self) -> list[tuple[int, str, float]]:
        if not os.path.exists(self.log):
            return []
        with open(self.log) as f:
            return [(int(p), k, float(x)) for p, k, x in (line.split() for line in f)]


def test_the_embedded_engine_draws_each_domain_through_draw_domain(tmp_path, monkeypatch):
    spy = Spy(str(tmp_path / "calls"))
    monkeypatch.setattr(draw, "draw_domain", spy)
    m = N // 2
    doms = [adaptors.uniform({"r": R[:m + 2]}, origin=(-1.0,) * 3, spacing=(H,) * 3, ghost=((0, 1), (0, 0), (0, 0)),
                             domain_id=0),
            adaptors.uniform({"r": R[m - 1:]}, origin=(float(X[m - 1]), -1.0, -1.0), spacing=(H,) * 3,
                             ghost=((1, 0), (0, 0), (0, 0)), domain_id=1)]
    cfg = {"pipelines": {"pl": {"c": {"type": "contour", "params": {"field": "r", "iso_values": [0.6]}}}},
           "scenes": {"s": {"plots": {"p": {"type": "pseudocolor", "pipeline": "pl"}},
                            "renders": {"r": {"image_width": 32, "image_height": 24,
                                              "image_prefix": str(tmp_path / "f_%d")}}}}}
    with adaptors.Adaptor(cfg) as a:
        assert a.execute(0, 0.0, doms), a.results()["errors"]
    assert sorted(spy.calls()) == sorted([(os.getpid(), "DomainSpec", -1.0), (os.getpid(), "DomainSpec", float(X[m]))])
    assert os.path.exists(tmp_path / "f_0.png")
