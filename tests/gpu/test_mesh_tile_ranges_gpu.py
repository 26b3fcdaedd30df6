"""Device tile ranges handed in with CuPy fields: parse keeps them on the device, the
adaptor's contours pass the simulation's own device ranges to marching cubes, frames equal
the run without ranges, and no host transfer happens before the frame (embedded engine;
the Spark engine hands them to its GPU daemon by CUDA IPC, with the fields)."""

import numpy as np
import pytest

import adaptors
import insitu
from insitu import arrays
from insitu.ranges import SPAN, TileRanges, tile_ranges
from render.image import read_png

cp = pytest.importorskip("cupy", reason="needs CuPy")

N = 65
X = np.linspace(-1.2, 1.2, N)
H = float(X[1] - X[0])
R = np.sqrt(X[:, None, None] ** 2 + X[None, :, None] ** 2 + X[None, None, :] ** 2)
M = N // 2
ODD_SPAN = (8, 5, 16)  # divides no axis: the last tiles are shorter


def domains(field, span=None, ranges=None):
    """`field` in two domains along x (one shared ghost layer), each with the tile ranges
    of its own part (of `span`; None: none); `ranges` collects them by domain."""
    parts = [(field[:M + 2], -1.2, ((0, 1), (0, 0), (0, 0))),
             (field[M - 1:], -1.2 + (M - 1) * H, ((1, 0), (0, 0), (0, 0)))]
    out = []
    for i, (v, x0, g) in enumerate(parts):
        tr = None
        if span is not None:
            tr = {"r": tile_ranges(v, span)}
            if ranges is not None:
                ranges[i] = tr["r"]
        out.append(adaptors.uniform({"r": v}, origin=(x0, -1.2, -1.2), spacing=(H,) * 3, ghost=g, domain_id=i,
                                    tile_ranges=tr))
    return out


def config(prefix=None, engine="embedded"):
    render = {"image_width": 160, "image_height": 120, "camera": {"azimuth": 35, "elevation": 25}}
    if prefix:
        render["image_prefix"] = prefix
    return {"engine": engine,
            "pipelines": {"pl": {"c": {"type": "contour", "params": {"field": "r", "iso_values": [0.7, 1.0]}}}},
            "scenes": {"s": {"plots": {"p": {"type": "pseudocolor", "pipeline": "pl", "min_value": 0.6,
                                             "max_value": 1.1},
                                       "v": {"type": "volume", "field": "r", "min_value": 0.0, "max_value": 2.1,
                                             "color_table": {"name": "plasma", "opacity": [[0.0, 0.6], [1.2, 0.0]]}}},
                             "renders": {"r": render}}}}


def test_parse_keeps_device_ranges_and_refuses_host_ranges_for_a_device_field():
    from adaptors.mesh import parse

    v = cp.asarray(R)
    given = tile_ranges(v, ODD_SPAN)
    (d,) = parse(adaptors.uniform({"r": v}, tile_ranges={"r": {"span": list(ODD_SPAN), "values": given.values}}))
    got = d.fields["r"].tile_ranges
    assert isinstance(got, TileRanges) and arrays.is_device_array(got.values)
    assert got.values.data.ptr == given.values.data.ptr and got.span == ODD_SPAN
    host = {"span": list(ODD_SPAN), "values": cp.asnumpy(given.values)}
    with pytest.raises(adaptors.MeshError, match=r"^fields/r/tile_ranges: values live on numpy"):
        parse(adaptors.uniform({"r": v}, tile_ranges={"r": host}))


def test_device_ranges_reach_marching_cubes_and_the_frame_equals_the_one_without(tmp_path, monkeypatch):
    import render.contour

    field = cp.asarray(R)
    with adaptors.Adaptor(config(str(tmp_path / "plain_%d"))) as a:
        assert a.execute(0, 0.0, domains(field)), a.results()["errors"]
    real, calls = render.contour.marching_cubes, []

    def record(volume, *args, tile_ranges=None, **kwargs):
        calls.append((volume.data.ptr, tile_ranges))
        return real(volume, *args, tile_ranges=tile_ranges, **kwargs)

    monkeypatch.setattr(render.contour, "marching_cubes", record)
    for name, span in (("default", SPAN), ("odd", ODD_SPAN)):
        given: dict = {}
        mesh = domains(field, span, given)
        with adaptors.Adaptor(config(str(tmp_path / f"{name}_%d"))) as a:
            assert a.execute(0, 0.0, mesh), a.results()["errors"]
        got = calls[-2:]
        assert len(got) == 2 and all(isinstance(r, TileRanges) and r.span == span for _, r in got)
        # The simulation's own device arrays, of the field each came with.
        assert sorted((p, r.values.data.ptr) for p, r in got) == sorted(
            (mesh[i]["fields"]["r"]["values"].data.ptr, given[i].values.data.ptr) for i in (0, 1))
    plain = read_png(tmp_path / "plain_0.png")
    assert (plain[..., 3] > 0).mean() > 0.1
    np.testing.assert_array_equal(read_png(tmp_path / "default_0.png"), plain)  # the ranges it computes itself
    odd = read_png(tmp_path / "odd_0.png").astype(int)
    assert (np.abs(odd - plain.astype(int)) <= 1).all(axis=2).mean() >= 0.999


def test_device_ranges_make_no_host_transfers():
    field = cp.asarray(R)
    with adaptors.Adaptor(config()) as a:
        assert a.execute(0, 0.0, domains(field, ODD_SPAN)), a.results()["errors"]  # warm-up: tables, GL buffers
        mesh = domains(field, ODD_SPAN)  # the simulation's sweep writes them; not counted below
        with insitu.count_transfers() as c:
            assert a.execute(1, 0.1, mesh), a.results()["errors"]
    assert c.stats.calls == 0, c.stats


def test_spark_hands_device_ranges_to_its_gpu_daemon(tmp_path):
    pytest.importorskip("pyspark", reason="needs PySpark (stage it on the GPU node: ../shared/device/spark-stage.sh)")
    from spark_needs import require_java

    require_java()
    field = cp.asarray(R)
    with adaptors.Adaptor(config(str(tmp_path / "plain_%d"))) as e:
        assert e.execute(0, 0.0, domains(field)), e.results()["errors"]
    spark = {"type": "spark", "params": {"master": "local[2]"}}
    with adaptors.Adaptor(config(str(tmp_path / "spark_%d"), spark)) as a:
        assert a.execute(0, 0.0, domains(field, ODD_SPAN)), a.results()["errors"]
        mesh = domains(field, ODD_SPAN)
        with insitu.count_transfers() as c:  # fields and ranges by CUDA IPC, images back on the host
            assert a.execute(1, 0.0, mesh), a.results()["errors"]
    assert c.stats.calls == 0, c.stats
    plain = read_png(tmp_path / "plain_0.png").astype(int)
    for step in (0, 1):
        s = read_png(tmp_path / f"spark_{step}.png").astype(int)
        assert (s[..., 3] > 0).mean() > 0.1
        assert (np.abs(s - plain) <= 1).all(axis=2).mean() >= 0.999, step
