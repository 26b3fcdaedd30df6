"""Tile ranges handed in with a Blueprint field: parse checks them (errors name the field),
the adaptor's contours pass them to marching cubes on both engines, frames stay the same.
(Device fields and ranges: tests/gpu/test_mesh_tile_ranges_gpu.py.)"""

import json
import os

import numpy as np
import pytest

import adaptors
from adaptors import draw
from adaptors.draw import block_layout, pack_block, unpack_block
from adaptors.mesh import parse
from insitu import arrays
from insitu.ranges import TileRanges, tile_ranges
from render.image import read_png
from test_ranges import reference

N = 41
X = np.linspace(-1.2, 1.2, N)
H = float(X[1] - X[0])
R = np.sqrt(X[:, None, None] ** 2 + X[None, :, None] ** 2 + X[None, None, :] ** 2)
M = N // 2
SPAN = (8, 5, 16)  # divides no axis: the last tiles are shorter


def two_domains(ranges=None, field=R):
    """`field` in two domains along x (one shared ghost layer); ``ranges(values)`` gives
    each domain's ``tile_ranges`` entry for "r" (None: none)."""
    parts = [(field[:M + 2], -1.2, ((0, 1), (0, 0), (0, 0))), (field[M - 1:], -1.2 + (M - 1) * H,
                                                                 ((1, 0), (0, 0), (0, 0)))]
    return [adaptors.uniform({"r": v}, origin=(x0, -1.2, -1.2), spacing=(H,) * 3, ghost=g, domain_id=i,
                             tile_ranges=None if ranges is None else {"r": ranges(v)})
            for i, (v, x0, g) in enumerate(parts)]


def as_mapping(v):
    return {"span": list(SPAN), "values": reference(v, SPAN)}


def config(prefix, engine="embedded", threshold=False):
    pipelines = {"pl": {"c": {"type": "contour", "params": {"field": "r", "iso_values": [0.7, 1.0]}}}}
    plots = {"p": {"type": "pseudocolor", "pipeline": "pl"},
             "v": {"type": "volume", "field": "r", "color_table": {"name": "plasma", "opacity": [[0.0, 0.6],
                                                                                                [1.2, 0.0]]}}}
    if threshold:  # its surface contours a derived field: no ranges of the simulation's belong to it
        pipelines["th"] = {"t": {"type": "threshold", "params": {"field": "r", "min_value": 0.0, "max_value": 0.9}}}
        plots["q"] = {"type": "pseudocolor", "pipeline": "th"}
    return {"engine": engine, "pipelines": pipelines,
            "scenes": {"s": {"plots": plots,
                             "renders": {"r": {"image_width": 96, "image_height": 80, "image_prefix": prefix,
                                               "camera": {"azimuth": 35, "elevation": 25}}}}}}


# -- parse -------------------------------------------------------------------------------------------


def test_parse_takes_the_mapping_and_the_object_forms_without_copies():
    v = R[M - 1:]
    want = reference(v, SPAN)
    flat = want.ravel()
    forms = {"mapping": {"span": SPAN, "values": want}, "flat": {"span": list(SPAN), "values": flat},
             "object": tile_ranges(v, SPAN)}
    for form, given in forms.items():
        (d,) = parse(adaptors.uniform({"r": v, "q": v * 2}, tile_ranges={"r": given}))
        got = d.fields["r"].tile_ranges
        assert isinstance(got, TileRanges), form
        assert got.span == SPAN and got.shape == v.shape and got.values.shape == (3, 9, 3, 2), form
        np.testing.assert_array_equal(got.values, want)
        given_values = given.values if isinstance(given, TileRanges) else given["values"]
        assert np.shares_memory(got.values, given_values), form  # the simulation's array, not a copy
        assert d.fields["q"].tile_ranges is None


def test_a_flat_field_keeps_ranges_indexed_i_j_k():
    v = np.ascontiguousarray(R[:M + 2])
    conduit = v.transpose().ravel()  # i fastest, as Conduit stores it
    mesh = adaptors.uniform({"r": v}, tile_ranges={"r": as_mapping(v)})
    mesh["fields"]["r"]["values"] = conduit
    (d,) = parse(mesh)
    assert d.fields["r"].tile_ranges.shape == v.shape
    np.testing.assert_array_equal(d.fields["r"].tile_ranges.values, reference(d.fields["r"].values, SPAN))


def _bad_cases():
    v = R[M - 1:]
    good = reference(v, SPAN)
    return {
        "span zero": ({"span": [0, 5, 16], "values": good}, r"span must be three positive integers"),
        "span of two": ({"span": [8, 5], "values": good}, r"span must be three positive integers"),
        "span fractional": ({"span": [8.5, 5, 16], "values": good}, r"span must be three positive integers"),
        "size": ({"span": [4, 4, 4], "values": good}, r"\d+ values for \(6, 11, 11\) tiles of span \(4, 4, 4\)"),
        "dtype": ({"span": SPAN, "values": good.astype(np.float32)}, r"values must be float64, got float32"),
        "other shape": (tile_ranges(R, SPAN), r"ranges of an array of shape \(41, 41, 41\), the field has "
                                              r"\(22, 41, 41\)"),
        "not ranges": ([1.0, 2.0], r"expected TileRanges or"),
        "no values": ({"span": SPAN}, r"expected TileRanges or"),
    }


@pytest.mark.parametrize("case", sorted(_bad_cases()))
def test_parse_refuses_bad_ranges_naming_the_field(case):
    obj, message = _bad_cases()[case]
    mesh = two_domains()
    mesh[1]["fields"]["r"]["tile_ranges"] = obj
    with pytest.raises(adaptors.MeshError, match=r"^domain 1/fields/r/tile_ranges(:| values)? ?.*" + message):
        parse(mesh)


def test_parse_refuses_ranges_on_an_element_field():
    v = R[M - 1:]
    mesh = adaptors.uniform({"r": v, "e": v[1:, 1:, 1:]}, element=("e",))
    mesh["fields"]["e"]["tile_ranges"] = {"span": SPAN, "values": reference(v[1:, 1:, 1:], SPAN)}
    with pytest.raises(adaptors.MeshError, match=r"^fields/e/tile_ranges: only vertex fields carry tile ranges, "
                                                 r"this field is element-associated"):
        parse(mesh)


def test_parse_refuses_ranges_on_another_device_than_the_field():
    from fakes import FakeCudaArray

    if arrays.cuda_available():
        pytest.skip("this machine has a GPU: the refusal is for machines without one (tests/gpu checks the rest)")
    v = R[M - 1:]
    mesh = adaptors.uniform({"r": v}, tile_ranges={"r": {"span": SPAN, "values": FakeCudaArray(reference(v, SPAN))}})
    with pytest.raises(adaptors.MeshError, match=r"^fields/r/tile_ranges values is a CUDA device array, but"):
        parse(mesh)


def test_uniform_refuses_ranges_of_an_unknown_field():
    with pytest.raises(adaptors.MeshError, match=r"tile_ranges: no field 'T'; fields: r"):
        adaptors.uniform({"r": R}, tile_ranges={"T": tile_ranges(R, SPAN)})


# -- drawing -----------------------------------------------------------------------------------------


def test_pack_block_gives_back_every_array_exactly():
    rng = np.random.default_rng(5)
    items = [rng.standard_normal((7, 5, 3)).astype(np.float32)[::-1, :, ::2],  # strided
             rng.integers(-9, 9, (7, 5, 2)).astype(np.int16),
             rng.standard_normal((2, 3, 1, 2)),
             np.zeros((0, 4, 4), np.uint8)]
    layout = block_layout(items)
    block = pack_block(*items)
    assert block.dtype == np.uint8 and block.ndim == 1
    back = unpack_block(block, layout)
    for a, b in zip(items, back):
        assert b.dtype == a.dtype and b.shape == a.shape
        np.testing.assert_array_equal(b, a)
        if b.size:
            assert np.shares_memory(b, block) and (b.ctypes.data - block.ctypes.data) % 256 == 0


def _calls_of_marching_cubes(monkeypatch) -> list:
    import render.contour

    real, calls = render.contour.marching_cubes, []

    def record(volume, *args, tile_ranges=None, **kwargs):
        calls.append((volume, tile_ranges))
        return real(volume, *args, tile_ranges=tile_ranges, **kwargs)

    monkeypatch.setattr(render.contour, "marching_cubes", record)
    return calls


def test_contours_pass_the_fields_ranges_to_marching_cubes(tmp_path, monkeypatch):
    calls = _calls_of_marching_cubes(monkeypatch)
    given = {}

    def ranges(v):
        given[v.shape[0], v.ctypes.data] = r = as_mapping(v)
        return r

    mesh = two_domains(ranges)
    with adaptors.Adaptor(config(str(tmp_path / "f_%d"), threshold=True)) as a:
        assert a.execute(0, 0.0, mesh), a.results()["errors"]
    assert len(calls) == 2  # the contour's plot, two domains (the threshold draws its kept cells: no contour)
    with_ranges = [(v, r) for v, r in calls if r is not None]
    assert len(with_ranges) == 2
    for v, r in with_ranges:
        assert isinstance(r, TileRanges) and r.span == SPAN and r.shape == v.shape
        want = given[v.shape[0], v.ctypes.data]["values"]  # the very field the ranges came with
        assert np.shares_memory(r.values, want)
        np.testing.assert_array_equal(r.values, reference(v, SPAN))
    assert {v.ctypes.data for v, _ in with_ranges} == {d["fields"]["r"]["values"].ctypes.data for d in mesh}


def test_frames_with_and_without_ranges_are_equal(tmp_path):
    for name, ranges in (("plain", None), ("mapping", as_mapping), ("object", lambda v: tile_ranges(v, SPAN))):
        with adaptors.Adaptor(config(str(tmp_path / f"{name}_%d"))) as a:
            assert a.execute(0, 0.0, two_domains(ranges)), a.results()["errors"]
    plain = read_png(tmp_path / "plain_0.png")
    assert (plain[..., 3] > 0).mean() > 0.1  # something drawn
    np.testing.assert_array_equal(read_png(tmp_path / "mapping_0.png"), plain)
    np.testing.assert_array_equal(read_png(tmp_path / "object_0.png"), plain)


class RangesSpy:
    """draw_domain that notes, per surface plot, the tile ranges it hands marching cubes
    (and the process it runs in) in a file, then draws: it travels to Spark's worker
    daemons by reference, so they log to the same file."""

    def __init__(self, log: str) -> None:
        self.log = log

    def __call__(self, fields, spec, view, **kw):
        with open(self.log, "a") as f:
            for plot in spec.plots:
                if isinstance(plot, draw.SurfacePlot):
                    r = draw._tile_ranges(fields, plot)
                    f.write(json.dumps({"pid": os.getpid(), "shape": list(fields[plot.field].shape),
                                        "ranges": None if r is None else
                                        {"span": list(r.span), "shape": list(r.shape),
                                         "values": arrays.to_host(r.values).tolist()}}) + "\n")
        return ORIGINAL(fields, spec, view, **kw)

    def calls(self) -> list[dict]:
        with open(self.log) as f:
            return [json.loads(line) for line in f]


ORIGINAL = draw.draw_domain


def test_the_spark_engine_hands_the_ranges_to_its_daemons(tmp_path, monkeypatch):
    from spark_needs import require_java

    require_java()
    from insitu.pool import DaemonWorker
    from insitu.pool.daemon import default_socket_path

    spark = {"type": "spark", "params": {"master": "local[2]", "timeout": 30}}
    with adaptors.Adaptor(config(str(tmp_path / "plain_%d"), "embedded")) as e:
        assert e.execute(0, 0.0, two_domains()), e.results()["errors"]
    spy = RangesSpy(str(tmp_path / "calls"))
    with adaptors.Adaptor(config(str(tmp_path / "spark_%d"), spark)) as a:
        monkeypatch.setattr(draw, "draw_domain", spy)
        assert a.execute(0, 0.0, two_domains(as_mapping)), a.results()["errors"]
        daemon = DaemonWorker(default_socket_path(None, directory=a._scenes.daemon_dir), timeout=5).ping()
    calls = spy.calls()
    assert len(calls) == 2 and {c["pid"] for c in calls} == {daemon}
    for c in calls:  # both domains have 22 x 41 x 41 nodes: each call's ranges are its own field's
        assert c["ranges"]["span"] == list(SPAN) and c["ranges"]["shape"] == c["shape"] == [M + 2, N, N]
    got = sorted(np.asarray(c["ranges"]["values"]).tobytes() for c in calls)
    assert got == sorted(reference(v, SPAN).tobytes() for v in (R[:M + 2], R[M - 1:]))
    # As tests/test_adaptor_spark.py compares the engines' frames.
    A, B = (read_png(tmp_path / f).astype(int) for f in ("spark_0.png", "plain_0.png"))
    assert (A[..., 3] > 0).mean() > 0.1 and (np.abs(A - B) <= 1).all(axis=2).mean() >= 0.999
