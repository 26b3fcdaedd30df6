"""render.annotate on CuPy frames: the same bits as the NumPy path, drawn in place, and no
host<->device transfer per frame once the font and the colormap are on the device."""

import numpy as np
import pytest

from insitu import arrays
from render.annotate import annotate, legend, text

cp = pytest.importorskip("cupy")
if not arrays.cuda_available():
    pytest.skip("needs a CUDA device (CuPy found none)", allow_module_level=True)

FG = (1.0, 0.5, 0.25)


def background(h, w, seed=3):
    rng = np.random.default_rng(seed)
    a = rng.random((h, w, 1), dtype=np.float32)
    return np.concatenate([rng.random((h, w, 3), dtype=np.float32) * a, a], axis=2)


def both(h, w, draw):
    """`draw` applied to the same frame on the host and on the device; (host, device as host)."""
    host = background(h, w)
    dev = cp.asarray(host)
    ptr = dev.data.ptr
    draw(host)
    draw(dev)
    assert dev.data.ptr == ptr  # in place
    return host, cp.asnumpy(dev)


@pytest.mark.parametrize("size", [(256, 256), (200, 480), (1024, 1024), (1500, 700)])
@pytest.mark.parametrize("name", ["viridis", "coolwarm"])
def test_annotate_same_bits_as_numpy(size, name):
    def draw(a):
        annotate(a, field="arrival_time", lo=-0.5, hi=2.25, colormap=name, step=1234, time=0.0625,
                 title="insitu: eikonal demo", fg=FG)

    host, dev = both(*size, draw)
    np.testing.assert_array_equal(dev, host)
    assert (host != background(*size)).any()


@pytest.mark.parametrize("scale", [1, 2, 5])
def test_text_same_bits_as_numpy_with_clipping_and_more_than_one_launch(scale):
    s = "".join(chr(c) for c in range(33, 127)) + "\u00b5\n" + "gjpqy_" * 20  # > 64 items: several launches

    def draw(a):
        text(a, s, -7, -3, color=FG, scale=scale)
        text(a, "Hg7", 300 - 8 * scale, 150 - 4 * scale, color=(0, 1, 0), scale=scale)

    host, dev = both(150, 300, draw)
    np.testing.assert_array_equal(dev, host)


def test_legend_same_bits_as_numpy_partly_off_the_frame():
    def draw(a):
        for x, y in [(-4, 10), (90, 30), (20, -30), (40, 80)]:
            legend(a, colormap="plasma", lo=1.0, hi=2.0, field="name", x=x, y=y, w=8, h=41, fg=FG, scale=2)
        legend(a, colormap="grayscale", lo=0.0, hi=0.0, field="flat", x=50, y=20, w=5, h=23, fg=(0, 0, 0))

    host, dev = both(100, 100, draw)
    np.testing.assert_array_equal(dev, host)


def test_no_transfers_per_frame_after_the_first():
    frame = cp.asarray(background(1024, 1024))
    annotate(frame, field="T", lo=0.0, hi=1.0, colormap="magma", step=0, time=0.0)  # font, colormap: once
    with arrays.count_transfers() as c:
        for step in range(1, 6):  # every string changes: step, time, range, title
            annotate(frame, field="T", lo=-step, hi=step * 1.5, colormap="magma", step=step, time=step * 0.1,
                     title=f"frame {step}", fg=(0.1 * step, 1, 1))
            text(frame, f"{step}", 10, 10, color=FG)
        cp.cuda.get_current_stream().synchronize()
    assert c.calls == 0 and c.bytes == 0 and c.scalar_reads == 0, c


def test_first_frame_moves_only_the_font_and_the_colormap_table():
    from render import annotate as mod
    from render import colormap as cm

    dev = cp.cuda.Device().id
    mod._fonts.pop(dev, None)
    mod._bars.clear()
    for key in [k for k in cm._DEVICE_TABLES if k[0] == dev]:  # tables are cached by (device, contents)
        del cm._DEVICE_TABLES[key]
    frame = cp.zeros((512, 512, 4), cp.float32)
    with arrays.count_transfers() as c:
        annotate(frame, field="T", lo=0.0, hi=1.0, colormap="cividis", step=0, time=0.0)
    assert c.d2h_calls == 0 and c.h2d_calls == 2 and c.h2d_bytes == 96 * 9 * 5 + 256 * 3 * 4, c


def test_a_strided_device_frame_is_refused():
    frame = cp.zeros((64, 128, 4), cp.float32)[:, ::2]
    with pytest.raises(ValueError, match="C-contiguous"):
        annotate(frame, field="T", lo=0.0, hi=1.0, colormap="viridis", step=0, time=None)


@pytest.mark.gpus(2)
def test_a_frame_on_the_second_device():
    host = background(300, 400)
    annotate(host, field="T", lo=0.0, hi=3.0, colormap="inferno", step=9, time=1.5, fg=FG)
    with cp.cuda.Device(1):
        dev = cp.asarray(background(300, 400))
    # Drawn on device 1 whichever device is current.
    annotate(dev, field="T", lo=0.0, hi=3.0, colormap="inferno", step=9, time=1.5, fg=FG)
    with cp.cuda.Device(1):
        got = cp.asnumpy(dev)
    np.testing.assert_array_equal(got, host)


def test_adaptor_with_annotations_makes_no_host_transfers_until_the_frame():
    import adaptors

    n = 49
    x = np.linspace(-1.2, 1.2, n)
    r = np.sqrt(x[:, None, None] ** 2 + x[None, :, None] ** 2 + x[None, None, :] ** 2)
    field = cp.asarray(r)
    cfg = {"pipelines": {"pl": {"c": {"type": "contour", "params": {"field": "r", "iso_values": [0.8]}}}},
           "scenes": {"s": {"plots": {"p": {"type": "pseudocolor", "pipeline": "pl", "field": "r"}},
                            "renders": {"r": {"image_width": 256, "image_height": 192, "annotations": True,
                                              "camera": {"azimuth": 30, "elevation": 20}}}}}}

    def mesh():
        return adaptors.uniform({"r": field}, origin=(-1.2,) * 3, spacing=(x[1] - x[0],) * 3)

    with adaptors.Adaptor(cfg) as a:
        assert a.execute(0, 0.0, mesh()), a.results()["errors"]  # warm-up: font, tables, GL buffers
        with arrays.count_transfers() as c:
            assert a.execute(1, 0.1, mesh()), a.results()["errors"]
    assert c.calls == 0, c.stats
