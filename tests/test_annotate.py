"""render.annotate: text from the package's bitmap font, the colour legend, annotate(); the
adaptor's ``annotations``/``fg_color`` render keys. Pixel-exact: glyph pixels against glyphs
drawn here by hand, legend colours against render.colormap, everything else untouched."""

import pathlib

import numpy as np
import pytest

import adaptors
from insitu import arrays
from render import _font
from render.annotate import annotate, bar_positions, foreground_for, layout, legend, measure, text, tick_rows
from render.colormap import colormap, table
from render.image import read_png, to_uint8

FG = (1.0, 0.5, 0.25)
FG4 = np.array([*FG, 1.0], np.float32)

# Drawn here by hand, apart from the font's packed bytes: rows of the 5x9 glyph box.
ART = {
    "H": ["#...#", "#...#", "#...#", "#####", "#...#", "#...#", "#...#", ".....", "....."],
    "i": ["..#..", ".....", ".##..", "..#..", "..#..", "..#..", ".###.", ".....", "....."],
    "7": ["#####", "....#", "...#.", "..#..", ".#...", ".#...", ".#...", ".....", "....."],
    "g": [".....", ".....", ".####", "#...#", "#...#", "#...#", ".####", "....#", ".###."],
    "_": [".....", ".....", ".....", ".....", ".....", ".....", ".....", "#####", "....."],
    "\x7f": ["#####", "#...#", "#...#", "#...#", "#...#", "#...#", "#####", ".....", "....."],
}


def art(ch: str) -> np.ndarray:
    return np.array([[c == "#" for c in row] for row in ART[ch]])


def background(h=96, w=128, seed=3):
    rng = np.random.default_rng(seed)
    a = rng.random((h, w, 1), dtype=np.float32)
    return np.concatenate([rng.random((h, w, 3), dtype=np.float32) * a, a], axis=2)


def expected_text(bg, s, x, y, scale=1, fg=FG):
    """The frame `bg` with `s` drawn from the hand-drawn ART (cells 6 x 11)."""
    out = bg.copy()
    H, W = bg.shape[:2]
    for i, ch in enumerate(s):
        m = np.kron(art(ch), np.ones((scale, scale), bool))
        for (r, c) in zip(*np.nonzero(m)):
            py, px = y + r, x + 6 * scale * i + c
            if 0 <= py < H and 0 <= px < W:
                out[py, px] = [*fg, 1.0]
    return out


# --------------------------------------------------------------------------- the font


def test_font_glyphs_match_the_hand_drawn_ones_and_are_all_distinct():
    g = _font.glyphs()
    assert g.shape == (96, 9, 5) and g.dtype == bool and not g.flags.writeable
    for ch in "Hi7g_":
        np.testing.assert_array_equal(g[ord(ch) - 32], art(ch), err_msg=ch)
    np.testing.assert_array_equal(g[_font.UNKNOWN], art("\x7f"))
    assert not g[0].any() and all(g[i].any() for i in range(1, 96))  # only the space is blank
    assert len({g[i].tobytes() for i in range(96)}) == 96
    # Capitals and digits stand on the baseline: nothing below row CAP - 1.
    for ch in "ABCXYZ0123456789":
        assert not g[ord(ch) - 32, _font.CAP:].any(), ch


# --------------------------------------------------------------------------- text


@pytest.mark.parametrize("scale", [1, 2, 3])
def test_text_sets_exactly_the_glyph_pixels_to_fg(scale):
    bg = background()
    out = bg.copy()
    assert text(out, "Hi7g_", 5, 4, color=FG, scale=scale) is out
    np.testing.assert_array_equal(out, expected_text(bg, "Hi7g_", 5, 4, scale))


def test_text_clipped_at_every_edge_equals_the_crop_of_an_unclipped_draw():
    bg = background(40, 50)
    pad = 30
    big = np.zeros((40 + 2 * pad, 50 + 2 * pad, 4), np.float32)
    big[pad:pad + 40, pad:pad + 50] = bg
    for x, y in [(-7, 3), (40, 5), (10, -5), (12, 35), (-3, -4), (44, 36)]:
        small, ref = bg.copy(), big.copy()
        text(small, "Hg7\nHi", x, y, color=FG, scale=2)
        text(ref, "Hg7\nHi", x + pad, y + pad, color=FG, scale=2)
        np.testing.assert_array_equal(small, ref[pad:pad + 40, pad:pad + 50], err_msg=f"{x}, {y}")


def test_text_lines_unknown_characters_and_measure():
    bg = np.zeros((60, 80, 4), np.float32)
    out = bg.copy()
    text(out, "Hi\n7\u00b5", 2, 3, color=FG)
    ref = expected_text(bg, "Hi", 2, 3)
    ref = expected_text(ref, "7\x7f", 2, 3 + 11)  # the next line 11 rows down; a box for the micro sign
    np.testing.assert_array_equal(out, ref)
    assert measure("ab\ncde", scale=2) == ((3 * 6 - 1) * 2, (2 * 11 - 2) * 2)
    assert measure("") == (0, 0)
    w, h = measure("Hg\n7_H", scale=3)
    out = bg.copy()
    text(out, "Hg\n7_H", 4, 2, color=FG, scale=3)
    ys, xs = np.nonzero((out != bg).any(axis=2))
    assert ys.min() >= 2 and ys.max() < 2 + h and xs.min() >= 4 and xs.max() < 4 + w
    assert ys.max() == 2 + h - 1 - 3  # '_' sits on row 7 of the last line, one row above its box's end
    assert xs.max() == 4 + w - 1  # the last column belongs to the widest line's last glyph


# --------------------------------------------------------------------------- legend


def interp(name, t):
    """Independent of render.colormap.colormap: np.interp over the 256 samples."""
    tab = table(name).astype(np.float64)
    x = np.linspace(0.0, 1.0, 256)
    return np.stack([np.interp(t, x, tab[:, c]) for c in range(3)], axis=-1)


@pytest.mark.parametrize("name", ["viridis", "coolwarm", "grayscale"])
def test_legend_colours_equal_the_colormap_at_their_positions(name):
    bg = background(120, 90)
    out = bg.copy()
    x, y, w, h, lo, hi = 60, 20, 9, 81, -2.0, 6.0
    legend(out, colormap=name, lo=lo, hi=hi, field="T", x=x, y=y, w=w, h=h, fg=FG)
    bar = out[y:y + h, x:x + w]
    t = bar_positions(h)
    assert t[0] == 1.0 and t[-1] == 0.0
    want = colormap(name, t, 0.0, 1.0)  # (h, 4)
    np.testing.assert_array_equal(bar, np.broadcast_to(want[:, None, :], bar.shape))
    np.testing.assert_allclose(bar[:, 0, :3], interp(name, t), atol=1e-6)
    np.testing.assert_allclose(bar[:, 0], colormap(name, lo + t * (hi - lo), lo, hi), atol=1e-6)
    assert (bar[..., 3] == 1).all()


def test_legend_frame_ticks_labels_and_nothing_else():
    bg = background(140, 110)
    out = bg.copy()
    x, y, w, h, s = 70, 30, 10, 81, 1
    legend(out, colormap="viridis", lo=0.0, hi=8.0, field="Hi", x=x, y=y, w=w, h=h, fg=FG, scale=s)
    fg = (out == FG4).all(axis=2)
    # The frame, one pixel outside the bar.
    assert fg[y - 1, x - 1:x + w + 1].all() and fg[y + h, x - 1:x + w + 1].all()
    assert fg[y:y + h, x - 1].all() and fg[y:y + h, x + w].all()
    rows = tick_rows(h)
    assert rows == [0, 20, 40, 60, 80]
    g = _font.glyphs()
    for k, r in enumerate(rows):
        assert fg[y + r, x - 4:x - 1].all()  # the tick: 3 pixels left of the frame
        assert not fg[y + r, x - 6:x - 4].any()  # then a gap of 2
        label = str(8 - 2 * k)  # 8, 6, 4, 2, 0: one digit, right-aligned 2 pixels left of the tick
        gx, gy = x - 4 - 2 - 5, y + r - 3
        np.testing.assert_array_equal(fg[gy:gy + 9, gx:gx + 5], g[ord(label) - 32], err_msg=label)
    # The field's name above the top label, right-aligned with the frame's right edge.
    fy = y - 3 - 1 - 9
    np.testing.assert_array_equal(fg[fy:fy + 9, x + w + 1 - 11:x + w + 1], expected_text(
        np.zeros((9, 11, 4), np.float32), "Hi", 0, 0)[..., 3] == 1)
    # Every changed pixel lies in the legend's box: labels, ticks, frame, bar, name.
    changed = (out != bg).any(axis=2)
    ys, xs = np.nonzero(changed)
    assert ys.min() >= fy and ys.max() <= y + h + 6 and xs.min() >= x - 11 and xs.max() <= x + w
    outside = changed.copy()
    outside[fy:y + h + 7, x - 11:x + w + 1] = False
    assert not outside.any()


def test_legend_labels_are_the_values_at_the_tick_rows():
    # h - 1 not a multiple of 4: ticks round to whole rows, labels say the value there.
    out = np.zeros((100, 200, 4), np.float32)
    h = 23
    rows = tick_rows(h)
    assert rows == [0, 6, 11, 17, 22]
    ref = out.copy()
    legend(out, colormap="viridis", lo=0.0, hi=22.0, field="", x=150, y=10, w=5, h=h, fg=FG)
    for r in rows:
        lab = f"{22.0 * (h - 1 - r) / (h - 1):.4g}"
        lw, _ = measure(lab)
        text(ref, lab, 150 - 1 - 3 - 2 - lw, 10 + r - 3, color=FG)
    sel = np.zeros(out.shape[:2], bool)
    sel[:, :150 - 6] = True  # left of the ticks: only the labels
    np.testing.assert_array_equal(out[sel], ref[sel])


def test_legend_partly_off_the_frame_is_clipped():
    bg = background(60, 60)
    pad = 40
    big = np.zeros((140, 140, 4), np.float32)
    big[pad:pad + 60, pad:pad + 60] = bg
    for x, y in [(-4, 10), (55, 30), (20, -30), (30, 45)]:
        small, ref = bg.copy(), big.copy()
        kw = dict(colormap="plasma", lo=1.0, hi=2.0, field="name", w=8, h=41, fg=FG, scale=1)
        legend(small, x=x, y=y, **kw)
        legend(ref, x=x + pad, y=y + pad, **kw)
        np.testing.assert_array_equal(small, ref[pad:pad + 60, pad:pad + 60], err_msg=f"{x}, {y}")


# --------------------------------------------------------------------------- annotate


@pytest.mark.parametrize("size", [(256, 256), (200, 480), (1024, 1024)])
def test_annotate_is_legend_status_and_title_at_the_layout(size):
    H, W = size
    bg = background(H, W)
    out = bg.copy()
    assert annotate(out, field="arrival_time", lo=0.5, hi=2.5, colormap="inferno", step=42, time=0.125,
                    title="run 7", fg=FG) is out
    lay = layout(H, W)
    s = lay.scale
    assert s == (2 if H == 1024 else 1)
    ref = bg.copy()
    x, y, w, h = lay.bar
    assert (h - 1) % 4 == 0  # ticks on whole rows at the quarter values
    legend(ref, colormap="inferno", lo=0.5, hi=2.5, field="arrival_time", x=x, y=y, w=w, h=h, fg=FG, scale=s)
    text(ref, "step 42  t = 0.125", *lay.status, color=FG, scale=s)
    text(ref, "run 7", *lay.title, color=FG, scale=s)
    np.testing.assert_array_equal(out, ref)
    # The bar lies on the frame, the status line at the bottom left.
    assert 0 <= x and x + w + s <= W - lay.margin and lay.status[1] + 9 * s == H - lay.margin
    np.testing.assert_array_equal(out[y:y + h, x], colormap("inferno", bar_positions(h), 0.0, 1.0))


def test_annotate_without_time_or_title_and_on_a_tiny_frame():
    out = np.zeros((96, 96, 4), np.float32)
    annotate(out, field="T", lo=0, hi=1, colormap="viridis", step=3, time=None, fg=FG)
    ref = np.zeros((96, 96, 4), np.float32)
    lay = layout(96, 96)
    legend(ref, colormap="viridis", lo=0, hi=1, field="T", x=lay.bar[0], y=lay.bar[1], w=lay.bar[2],
           h=lay.bar[3], fg=FG)
    text(ref, "step 3", *lay.status, color=FG)
    np.testing.assert_array_equal(out, ref)
    tiny = np.zeros((12, 20, 4), np.float32)
    annotate(tiny, field="T", lo=0, hi=1, colormap="viridis", step=3, time=1.0)  # no room for a legend
    assert layout(12, 20).bar is None


def test_foreground_contrasts_with_the_background():
    assert foreground_for([1, 1, 1]) == (0, 0, 0) and foreground_for([0, 0, 0.2, 1]) == (1, 1, 1)
    assert foreground_for([0.9, 0.9, 0.0]) == (0, 0, 0)


def test_bad_arguments_are_refused_by_name():
    a = np.zeros((64, 64, 4), np.float32)
    kw = dict(field="T", lo=0.0, hi=1.0, colormap="viridis", step=1, time=0.0)
    with pytest.raises(ValueError, match="rgba: expected shape"):
        annotate(np.zeros((64, 64, 3), np.float32), **kw)
    with pytest.raises(TypeError, match="rgba: expected float32"):
        annotate(np.zeros((64, 64, 4)), **kw)
    with pytest.raises(ValueError, match="lo, hi"):
        annotate(a, **{**kw, "lo": 2.0})
    with pytest.raises(ValueError, match="lo, hi"):
        annotate(a, **{**kw, "hi": float("nan")})
    with pytest.raises(ValueError, match="colormap name"):
        annotate(a, **{**kw, "colormap": "no_such_map"})
    with pytest.raises(ValueError, match="fg"):
        annotate(a, **kw, fg=(1, 2, 0))
    with pytest.raises(TypeError, match="step"):
        annotate(a, **{**kw, "step": 1.5})
    with pytest.raises(ValueError, match="time"):
        annotate(a, **{**kw, "time": float("inf")})
    with pytest.raises(ValueError, match="scale"):
        text(a, "x", 0, 0, color=FG, scale=0)
    with pytest.raises(ValueError, match="color"):
        text(a, "x", 0, 0, color=(1, 1))
    with pytest.raises(ValueError, match="w, h"):
        legend(a, colormap="viridis", lo=0, hi=1, field="", x=0, y=0, w=4, h=1, fg=FG)
    with pytest.raises(TypeError, match="expected an array"):
        text([[0.0]], "x", 0, 0, color=FG)


def test_no_transfers_on_the_host():
    a = background(128, 128)
    with arrays.count_transfers() as c:
        annotate(a, field="T", lo=0, hi=1, colormap="viridis", step=1, time=0.5, title="t")
    assert c.calls == 0 and c.scalar_reads == 0


# --------------------------------------------------------------------------- the adaptor


def _config(tmp_path, **render):
    r = {"image_width": 200, "image_height": 150, "bg_color": [0.1, 0.1, 0.2],
         "camera": {"azimuth": 30, "elevation": 20}, "image_prefix": str(tmp_path / "f_%03d"), **render}
    return {"scenes": {"s": {"plots": {"p": {"type": "pseudocolor", "field": "r", "min_value": 0.25,
                                             "max_value": 2.0, "color_table": {"name": "plasma"}}},
                             "renders": {"r": r}}}}


def _mesh():
    n = 16
    g = np.linspace(-1, 1, n)
    r = np.sqrt(sum(c ** 2 for c in np.meshgrid(g, g, g, indexing="ij")))
    return adaptors.uniform({"r": r}, origin=(-1.0,) * 3, spacing=(2 / (n - 1),) * 3)


def _frame(cfg, step=7, scenes=None):
    with adaptors.Adaptor(cfg) as a:
        assert a.execute(step, 0.5, _mesh())
    scenes = scenes or cfg["scenes"]
    return read_png(scenes["s"]["renders"]["r"]["image_prefix"] % step + ".png")


@pytest.mark.parametrize("on", [True, "true"])
def test_adaptor_draws_annotations_when_asked(tmp_path, on):
    plain = _frame(_config(tmp_path / "plain"))
    assert plain.shape == (150, 200, 4) and (plain[..., 3] == 255).all()
    got = _frame(_config(tmp_path / "on", annotations=on, fg_color=[1.0, 1.0, 0.0]))
    # The same frame with annotate() drawn over it (8 bits survive the float round trip).
    want = plain.astype(np.float32) / np.float32(255)
    annotate(want, field="r", lo=0.25, hi=2.0, colormap="plasma", step=7, time=0.5, fg=(1, 1, 0))
    np.testing.assert_array_equal(got, to_uint8(want, unpremultiply=True))
    assert (got != plain).any()


def test_adaptor_annotations_default_off_and_ascent_false(tmp_path):
    plain = _frame(_config(tmp_path / "plain"))
    off = _frame(_config(tmp_path / "off", annotations="false", fg_color=[1, 0, 0]))
    np.testing.assert_array_equal(off, plain)
    # Ascent's action-list form, with its string switch.
    cfg = _config(tmp_path / "ascent", annotations="false")
    actions = [{"action": "add_scenes", "scenes": cfg["scenes"]}]
    np.testing.assert_array_equal(_frame(actions, scenes=cfg["scenes"]), plain)


def test_adaptor_default_fg_contrasts_with_bg(tmp_path):
    plain = _frame(_config(tmp_path / "plain", bg_color=[1, 1, 1]))
    got = _frame(_config(tmp_path / "on", bg_color=[1, 1, 1], annotations=True))
    want = plain.astype(np.float32) / np.float32(255)
    annotate(want, field="r", lo=0.25, hi=2.0, colormap="plasma", step=7, time=0.5, fg=(0, 0, 0))
    np.testing.assert_array_equal(got, to_uint8(want, unpremultiply=True))


def test_config_refuses_bad_annotation_keys():
    from adaptors.config import validate
    from adaptors.errors import ConfigError

    cfg = _config(pathlib.Path("unused"), annotations="yes", fg_color=[1, 0])
    with pytest.raises(ConfigError, match="annotations: expected true or false") as e:
        validate(cfg)
    assert "fg_color" in str(e.value)


# --------------------------------------------------------------------------- the CUDA kernel on the host


def test_the_cuda_kernel_compiled_for_the_host_draws_what_numpy_draws(tmp_path):
    """The device path's kernel source, compiled as C++ with a loop standing in for the
    grid, against the NumPy path on the same items (random text and rectangles, clipped)."""
    import ctypes
    import shutil
    import subprocess

    from render import annotate as mod

    cxx = shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("needs a C++ compiler")
    B = mod._BATCH
    src = mod._kernel_source().replace('extern "C" __global__ void insitu_annotate_items(', "static void kern(")
    harness = ("#define __restrict__\nstruct Dim { unsigned x; };\nstatic Dim blockIdx, threadIdx, blockDim;\n"
               + src + "\nextern \"C\" void run(float* rgba, const unsigned char* font, int H, int W, int n, "
               "float r, float g, float b, const unsigned long long* p) {\n  blockDim.x = 128;\n"
               "  for (unsigned i = 0; i < (unsigned)n; ++i) for (unsigned t = 0; t < 128; ++t) {\n"
               "    blockIdx.x = i; threadIdx.x = t;\n    kern(rgba, font, H, W, n, r, g, b, "
               + ", ".join(f"p[{i}]" for i in range(B)) + ");\n  }\n}\n")
    (tmp_path / "k.cpp").write_text(harness)
    subprocess.run([cxx, "-O1", "-shared", "-fPIC", "-o", str(tmp_path / "k.so"), str(tmp_path / "k.cpp")],
                   check=True, capture_output=True)
    lib = ctypes.CDLL(str(tmp_path / "k.so"))
    font = np.ascontiguousarray(_font.glyphs(), dtype=np.uint8)

    def kernel_draw(a, items, fg):
        for i in range(0, len(items), B):
            chunk = list(items[i:i + B])
            p = np.array(chunk + [0] * (B - len(chunk)), np.uint64)
            lib.run(a.ctypes.data_as(ctypes.c_void_p), font.ctypes.data_as(ctypes.c_void_p),
                    ctypes.c_int(a.shape[0]), ctypes.c_int(a.shape[1]), ctypes.c_int(len(chunk)),
                    *(ctypes.c_float(c) for c in fg), p.ctypes.data_as(ctypes.c_void_p))

    rng = np.random.default_rng(0)
    for H, W in [(100, 300), (40, 50), (257, 129)]:
        items = []
        for _ in range(150):
            x, y = int(rng.integers(-40, W)), int(rng.integers(-40, H))
            if rng.random() < 0.3:
                items += mod._rect_items(x, y, int(rng.integers(1, 40)), int(rng.integers(1, 40)), H, W)
            else:
                s = "".join(chr(int(c)) for c in rng.integers(32, 130, 6))
                items += mod._text_items(s, x, y, int(rng.integers(1, 4)), H, W)
        bg = background(H, W)
        host, kern = bg.copy(), bg.copy()
        mod._draw_host(host, items, FG)
        kernel_draw(kern, items, FG)
        assert len(items) > mod._BATCH and (host != bg).any()
        np.testing.assert_array_equal(kern, host)
