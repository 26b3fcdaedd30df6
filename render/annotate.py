"""Annotations drawn into frames: text in the package's bitmap font, a colour legend, the step.

Every function draws in place on an (H, W, 4) float32 premultiplied RGBA frame, NumPy or
CuPy, and returns it. What is drawn is opaque and *set*, never blended: text, ticks and the
legend's frame take ``(r, g, b, 1)`` of the foreground colour, the colour bar the colormap's
RGB with alpha 1. So the GPU and the CPU draw the same bits.

No host copy of the frame is made, and on the device nothing moves per frame:

- the font (4 KB) goes to each device once (counted by :mod:`insitu.arrays`), and
  :func:`render.colormap.colormap` uploads each colormap's table once per device;
- the colour bar is computed on the device from that table and cached per (colormap,
  height, device);
- text and rectangles are *items* (a glyph or a rectangle with its position, packed in 64
  bits) passed to one kernel as its by-value arguments, 64 items a launch, the way
  every scalar reaches a kernel; the kernel draws them from the cached font. Strings
  that change every frame (the step, the time, the range) cost no transfer either.

The NumPy path draws the same items with slicing.
"""

from __future__ import annotations

import contextlib
import functools
import math
from typing import Any, NamedTuple, Sequence

import numpy as np

from insitu import arrays

from . import _font
from .colormap import colormap as _colormap
from .colormap import table as _table

__all__ = ["Layout", "annotate", "bar_positions", "foreground_for", "layout", "legend", "measure", "text", "tick_rows"]

_MAX_SIDE = 32767  # items pack coordinates in 16 bits (offset below)
_OFFSET = 16384  # x, y may be negative (text running off the left or top edge)
_BATCH = 64  # items per kernel launch (512 bytes of arguments)
_TICKS = 5  # legend ticks: lo, three between, hi


# --------------------------------------------------------------------------- checks


def _frame(rgba):
    a = arrays.asarray(rgba, name="rgba")
    if a.ndim != 3 or a.shape[2] != 4:
        raise ValueError(f"rgba: expected shape (H, W, 4), got {tuple(a.shape)}")
    if a.dtype != np.float32:
        raise TypeError(f"rgba: expected float32 premultiplied RGBA, got {a.dtype}")
    if max(a.shape[0], a.shape[1]) > _MAX_SIDE:
        raise ValueError(f"rgba: at most {_MAX_SIDE} pixels a side, got {a.shape[0]} x {a.shape[1]}")
    if arrays.is_device_array(a) and not a.flags.c_contiguous:
        raise ValueError("rgba: a device frame must be C-contiguous (it is drawn in place by a kernel)")
    return a


def _colour(c, name: str) -> tuple[float, float, float]:
    try:
        v = [float(x) for x in c]
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected three numbers [r, g, b] in [0, 1], got {c!r}") from None
    if len(v) != 3 or not all(math.isfinite(x) and 0.0 <= x <= 1.0 for x in v):
        raise ValueError(f"{name}: expected three numbers [r, g, b] in [0, 1], got {c!r}")
    return v[0], v[1], v[2]


def _scale(scale) -> int:
    if isinstance(scale, bool) or not isinstance(scale, (int, np.integer)) or not 1 <= scale <= 64:
        raise ValueError(f"scale: expected an integer in 1..64, got {scale!r}")
    return int(scale)


def _int(v, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name}: expected an integer, got {type(v).__name__}")
    return int(v)


# --------------------------------------------------------------------------- items
#
# An item is one uint64: x + OFFSET in bits 0-15, y + OFFSET in bits 16-31, then either a
# glyph (bit 63 set; glyph index in bits 32-38, scale in bits 39-46) or a rectangle (width in
# bits 32-47, height in bits 48-62). Both backends draw from the same items.

_GLYPH_BIT = 1 << 63


def _glyph_item(code: int, x: int, y: int, s: int) -> int:
    return _GLYPH_BIT | (s << 39) | (code << 32) | ((y + _OFFSET) << 16) | (x + _OFFSET)


def _rect_item(x: int, y: int, w: int, h: int) -> int:
    return (h << 48) | (w << 32) | ((y + _OFFSET) << 16) | (x + _OFFSET)


def _decode(v: int) -> tuple[int, int, int, int, int]:
    """``(x, y, w, h, glyph index or -1)``; a glyph's w, h are its scaled size."""
    x, y = (v & 0xFFFF) - _OFFSET, ((v >> 16) & 0xFFFF) - _OFFSET
    if v & _GLYPH_BIT:
        s = (v >> 39) & 0xFF
        return x, y, _font.GLYPH[1] * s, _font.GLYPH[0] * s, (v >> 32) & 0x7F
    return x, y, (v >> 32) & 0xFFFF, (v >> 48) & 0x7FFF, -1


def _code(ch: str) -> int:
    c = ord(ch) - _font.FIRST
    return c if 0 <= c < _font.UNKNOWN else _font.UNKNOWN


def _text_items(s: str, x: int, y: int, scale: int, H: int, W: int) -> list[int]:
    """Items of string `s` with its top-left at (x, y); glyphs wholly off the frame and
    spaces are left out."""
    out = []
    ch, cw = _font.CELL[0] * scale, _font.CELL[1] * scale
    gh, gw = _font.GLYPH[0] * scale, _font.GLYPH[1] * scale
    for row, line in enumerate(s.split("\n")):
        gy = y + row * ch
        if gy >= H or gy + gh <= 0:
            continue
        for col, c in enumerate(line):
            gx = x + col * cw
            if c == " " or gx >= W or gx + gw <= 0:
                continue
            out.append(_glyph_item(_code(c), gx, gy, scale))
    return out


def _rect_items(x: int, y: int, w: int, h: int, H: int, W: int) -> list[int]:
    x0, y0, x1, y1 = max(x, 0), max(y, 0), min(x + w, W), min(y + h, H)
    return [_rect_item(x0, y0, x1 - x0, y1 - y0)] if x1 > x0 and y1 > y0 else []


def _where(a):
    """The frame's device made current (every kernel runs where the frame is)."""
    return a.device if arrays.is_device_array(a) else contextlib.nullcontext()


def _draw(a, items: Sequence[int], fg: tuple[float, float, float]) -> None:
    if not items:
        return
    if arrays.is_device_array(a):
        _draw_device(a, items, fg)
    else:
        _draw_host(a, items, fg)


@functools.lru_cache(maxsize=1024)
def _glyph_mask(code: int, s: int) -> np.ndarray:
    m = np.repeat(np.repeat(_font.glyphs()[code], s, axis=0), s, axis=1)
    m.flags.writeable = False
    return m


def _draw_host(a: np.ndarray, items: Sequence[int], fg) -> None:
    H, W = a.shape[:2]
    fg4 = np.array([*fg, 1.0], np.float32)
    for v in items:
        x, y, w, h, code = _decode(v)
        x0, y0, x1, y1 = max(x, 0), max(y, 0), min(x + w, W), min(y + h, H)
        if x1 <= x0 or y1 <= y0:
            continue
        if code < 0:
            a[y0:y1, x0:x1] = fg4
        else:
            m = _glyph_mask(code, w // _font.GLYPH[1])[y0 - y:y1 - y, x0 - x:x1 - x]
            a[y0:y1, x0:x1][m] = fg4


_KERNEL = r"""
extern "C" __global__ void insitu_annotate_items(
    float* __restrict__ rgba, const unsigned char* __restrict__ font, const int height, const int width,
    const int n, const float r, const float g, const float b, %(params)s)
{
    if ((int)blockIdx.x >= n) return;
    const unsigned long long items[%(batch)d] = {%(names)s};
    const unsigned long long v = items[blockIdx.x];
    const int x = (int)(v & 0xFFFFull) - %(offset)d;
    const int y = (int)((v >> 16) & 0xFFFFull) - %(offset)d;
    int w, h, code = -1, s = 1;
    if (v >> 63) {
        code = (int)((v >> 32) & 0x7Full);
        s = (int)((v >> 39) & 0xFFull);
        w = %(gw)d * s;
        h = %(gh)d * s;
    } else {
        w = (int)((v >> 32) & 0xFFFFull);
        h = (int)((v >> 48) & 0x7FFFull);
    }
    for (int k = threadIdx.x; k < w * h; k += blockDim.x) {
        const int dx = k %% w, dy = k / w, px = x + dx, py = y + dy;
        if (px < 0 || py < 0 || px >= width || py >= height) continue;
        if (code >= 0 && !font[(code * %(gh)d + dy / s) * %(gw)d + dx / s]) continue;
        float* o = rgba + ((long long)py * width + px) * 4;
        o[0] = r; o[1] = g; o[2] = b; o[3] = 1.0f;
    }
}
"""


def _kernel_source() -> str:
    """The CUDA source of the items kernel (plain C++ but for ``__global__`` and the
    thread indices: the CPU tests compile it for the host and compare it with NumPy)."""
    names = ", ".join(f"p{i}" for i in range(_BATCH))
    params = ", ".join(f"const unsigned long long p{i}" for i in range(_BATCH))
    return _KERNEL % {"params": params, "names": names, "batch": _BATCH, "offset": _OFFSET, "gh": _font.GLYPH[0],
                      "gw": _font.GLYPH[1]}


@functools.cache
def _items_kernel():
    import cupy

    return cupy.RawKernel(_kernel_source(), "insitu_annotate_items")


_fonts: dict[int, Any] = {}


def _device_font(dev: int):
    if dev not in _fonts:  # once per device: 4320 bytes, counted
        _fonts[dev] = arrays.to_device(np.ascontiguousarray(_font.glyphs(), dtype=np.uint8), device=dev)
    return _fonts[dev]


def _draw_device(a, items: Sequence[int], fg) -> None:
    dev = arrays.device_id(a)
    assert dev is not None
    font = _device_font(dev)
    kern = _items_kernel()
    H, W = a.shape[:2]
    with a.device:
        for i in range(0, len(items), _BATCH):
            chunk = list(items[i:i + _BATCH])
            n = len(chunk)
            # Items go by value, as kernel arguments (numpy.uint64 scalars): no copy to the device.
            args = list(np.array(chunk + [0] * (_BATCH - n), np.uint64))
            kern((n,), (128,), (a, font, np.int32(H), np.int32(W), np.int32(n), np.float32(fg[0]),
                                 np.float32(fg[1]), np.float32(fg[2]), *args))


# --------------------------------------------------------------------------- text


def measure(s: str, *, scale: int = 1) -> tuple[int, int]:
    """``(width, height)`` in pixels of `s` drawn by :func:`text` (lines split at ``\\n``).

    Each character takes a cell 6 pixels wide and 11 high times `scale` (a 5 x 9 glyph box:
    7 rows to the baseline, 2 for descenders; then a column and two rows of space); the size
    leaves out the space after the last column and below the last line.
    """
    s, scale = str(s), _scale(scale)
    lines = s.split("\n")
    n = max(len(line) for line in lines)
    if n == 0 and len(lines) == 1:
        return 0, 0
    w = max(n * _font.CELL[1] - (_font.CELL[1] - _font.GLYPH[1]), 0) * scale
    h = (len(lines) * _font.CELL[0] - (_font.CELL[0] - _font.GLYPH[0])) * scale
    return w, h


def text(rgba, s: str, x: int, y: int, *, color: Sequence[float], scale: int = 1):
    """Draw `s` in the package's 5x7 font, its top-left corner at pixel (x, y).

    Parameters
    ----------
    rgba : (H, W, 4) float32 array
        Premultiplied RGBA, NumPy or CuPy (C-contiguous on the device); drawn in place.
    s : str
        Text; ``\\n`` starts a new line, characters outside ASCII 32..126 draw as a box.
    x, y : int
        Column and row of the top-left corner (may be off the frame: what falls outside is
        clipped).
    color : (3,) floats in [0, 1]
        The glyphs' pixels become ``(r, g, b, 1)``; the others are untouched.
    scale : int, optional
        Each font pixel drawn as `scale` x `scale` pixels (1..64).

    Returns
    -------
    rgba
        The same array.
    """
    a = _frame(rgba)
    fg = _colour(color, "color")
    x, y, scale = _int(x, "x"), _int(y, "y"), _scale(scale)
    H, W = a.shape[:2]
    _draw(a, _text_items(str(s), x, y, scale, H, W), fg)
    return rgba


# --------------------------------------------------------------------------- legend


def _label(v: float) -> str:
    t = f"{v:.4g}"
    return "0" if t == "-0" else t


_bars: dict[tuple, Any] = {}


def _bar(name: str, h: int, xp, dev):
    """(h, 4) colours of the bar, top (t = 1) to bottom (t = 0): row r has
    ``t = (h - 1 - r) / (h - 1)``, coloured by ``colormap(name, t, 0, 1)``; cached."""
    key = (name, h, dev)
    if key not in _bars:
        if len(_bars) >= 64:
            _bars.clear()
        with xp.cuda.Device(dev) if dev is not None else contextlib.nullcontext():
            t = (float(h - 1) - xp.arange(h, dtype=xp.float64)) / float(max(h - 1, 1))
            _bars[key] = _colormap(name, t, 0.0, 1.0)  # on the frame's backend: no transfer
    return _bars[key]


def bar_positions(h: int) -> np.ndarray:
    """The legend's positions in [0, 1] per row of a bar `h` pixels high, top first:
    ``(h - 1 - r) / (h - 1)`` (float64); its colours are the colormap at these positions."""
    h = int(h)
    return (float(h - 1) - np.arange(h, dtype=np.float64)) / float(max(h - 1, 1))


def tick_rows(h: int) -> list[int]:
    """Rows (from the bar's top) of the legend's 5 ticks: hi, three between, lo."""
    return [(k * (h - 1) + (_TICKS - 1) // 2) // (_TICKS - 1) for k in range(_TICKS)]


def _legend(a, colormap: str, field: str, lo: float, hi: float, x: int, y: int, w: int, h: int,
            s: int) -> list[int]:
    """Draw the bar (its part on the frame); return the items of the rest."""
    H, W = a.shape[:2]
    x0, y0, x1, y1 = max(x, 0), max(y, 0), min(x + w, W), min(y + h, H)
    if x1 > x0 and y1 > y0:
        strip = _bar(colormap, h, arrays.get_array_module(a), arrays.device_id(a))
        a[y0:y1, x0:x1] = strip[y0 - y:y1 - y, None, :]  # one copy kernel on the device
    return list(_legend_items(field, lo, hi, x, y, w, h, s, H, W))


@functools.lru_cache(maxsize=64)
def _legend_items(field: str, lo: float, hi: float, x: int, y: int, w: int, h: int, s: int, H: int,
                  W: int) -> tuple[int, ...]:
    # Cached: with a fixed range (min_value/max_value) the legend is the same every frame.
    items: list[int] = []
    # Frame, s pixels wide, just outside the bar.
    for rx, ry, rw, rh in ((x - s, y - s, w + 2 * s, s), (x - s, y + h, w + 2 * s, s),
                           (x - s, y, s, h), (x + w, y, s, h)):
        items += _rect_items(rx, ry, rw, rh, H, W)
    tick = 3 * s
    half = _font.CAP * s // 2  # labels centred on their ticks by the capitals' height
    for r in tick_rows(h):
        row = y + r
        items += _rect_items(x - s - tick, row - (s - 1) // 2, tick, s, H, W)
        t = (h - 1 - r) / max(h - 1, 1)
        lab = _label(lo + (hi - lo) * t)
        lw, _ = measure(lab, scale=s)
        items += _text_items(lab, x - s - tick - 2 * s - lw, row - half, s, H, W)
    if field:  # above the top label, right-aligned with the frame
        fw, _ = measure(field, scale=s)
        items += _text_items(field, x + w + s - fw, y - half - s - _font.GLYPH[0] * s, s, H, W)
    return tuple(items)


def _check_range(lo, hi) -> tuple[float, float]:
    try:
        lo, hi = float(lo), float(hi)
    except (TypeError, ValueError):
        raise TypeError(f"lo, hi: expected numbers, got {lo!r}, {hi!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi < lo:
        raise ValueError(f"lo, hi: expected finite lo <= hi, got {lo}, {hi}")
    return lo, hi


def legend(rgba, *, colormap: str, lo: float, hi: float, field: str, x: int, y: int, w: int, h: int,
           fg: Sequence[float], scale: int = 1):
    """Draw a vertical colour bar with 5 labelled ticks and the field's name above it.

    Parameters
    ----------
    rgba : (H, W, 4) float32 array
        Premultiplied RGBA, NumPy or CuPy (C-contiguous on the device); drawn in place.
    colormap : str
        One of :data:`render.colormap.NAMES`.
    lo, hi : float
        The range the colormap spans (finite, ``lo <= hi``): `hi` at the top, `lo` at the
        bottom.
    field : str
        Name drawn above the bar, right-aligned with it ("" for none).
    x, y, w, h : int
        The bar's top-left pixel and size (``h >= 2``). Row ``r`` of the bar has colour
        ``colormap(name, t, 0, 1)`` with ``t = (h - 1 - r) / (h - 1)`` (:func:`bar_positions`),
        which is the colour of ``lo + t (hi - lo)`` under ``colormap(name, ., lo, hi)``.
        A frame `scale` pixels wide surrounds the bar; ticks (:func:`tick_rows`) and their
        values stand to its left.
    fg : (3,) floats in [0, 1]
        Colour of the frame, ticks and text.
    scale : int, optional
        Text scale and the frame's and ticks' thickness.

    Returns
    -------
    rgba
        The same array.
    """
    a = _frame(rgba)
    _table(colormap)  # ValueError naming the known maps
    lo, hi = _check_range(lo, hi)
    fgc = _colour(fg, "fg")
    x, y, w, h, s = _int(x, "x"), _int(y, "y"), _int(w, "w"), _int(h, "h"), _scale(scale)
    if w < 1 or h < 2:
        raise ValueError(f"w, h: expected w >= 1 and h >= 2 pixels, got {w}, {h}")
    with _where(a):
        _draw(a, _legend(a, colormap, str(field), lo, hi, x, y, w, h, s), fgc)
    return rgba


# --------------------------------------------------------------------------- annotate


def foreground_for(bg: Sequence[float]) -> tuple[float, float, float]:
    """Black on a light background, white on a dark one (Rec. 709 luminance, 0.5 apart)."""
    r, g, b = (float(c) for c in list(bg)[:3])
    return (0.0, 0.0, 0.0) if 0.2126 * r + 0.7152 * g + 0.0722 * b >= 0.5 else (1.0, 1.0, 1.0)


class Layout(NamedTuple):
    """Where :func:`annotate` draws (pixels)."""

    scale: int  #: text scale: 1 below 768 pixels on the shorter side, 2 below 1280, ... (every 512)
    margin: int
    bar: tuple[int, int, int, int] | None  #: the legend's bar (x, y, w, h); None on a small frame
    title: tuple[int, int]  #: top-left corner of the title
    status: tuple[int, int]  #: top-left corner of the step/time line


def layout(H: int, W: int) -> Layout:
    """Where :func:`annotate` draws on an H x W frame."""
    s = max(1, int(min(H, W) / 512 + 0.5))
    m = 6 * s
    gh = _font.GLYPH[0] * s
    h = ((int(0.45 * H) - 1) // (_TICKS - 1)) * (_TICKS - 1) + 1  # ticks on whole rows
    w = 10 * s
    bar = (W - m - s - w, m + gh + s + _font.CAP * s // 2, w, h) if h >= 2 * _TICKS - 1 else None
    return Layout(s, m, bar, (m, m), (m, H - m - gh))


def annotate(rgba, *, field: str, lo: float, hi: float, colormap: str, step: int, time: float | None,
             title: str | None = None, fg: Sequence[float] = (1.0, 1.0, 1.0)):
    """Draw Ascent-style screen annotations: the colour legend at the right, the step and
    time at the bottom left, an optional title at the top left (positions: :func:`layout`).

    Parameters
    ----------
    rgba : (H, W, 4) float32 array
        Premultiplied RGBA, NumPy or CuPy (C-contiguous on the device); drawn in place.
    field : str
        Name of the field the colormap shows.
    lo, hi : float
        Its range (finite, ``lo <= hi``).
    colormap : str
        One of :data:`render.colormap.NAMES`.
    step : int
        The cycle.
    time : float or None
        Simulation time (left out when None).
    title : str, optional
        A line of text at the top left.
    fg : (3,) floats in [0, 1]
        Colour of the text, ticks and the legend's frame.

    Returns
    -------
    rgba
        The same array.
    """
    a = _frame(rgba)
    _table(colormap)
    lo, hi = _check_range(lo, hi)
    fgc = _colour(fg, "fg")
    step = _int(step, "step")
    if time is not None and not math.isfinite(float(time)):
        raise ValueError(f"time: expected a finite number or None, got {time!r}")
    H, W = a.shape[:2]
    lay = layout(H, W)
    s = lay.scale
    status = f"step {step}" + ("" if time is None else f"  t = {float(time):.6g}")
    items = _text_items(status, lay.status[0], lay.status[1], s, H, W)
    if title:
        items += _text_items(str(title), lay.title[0], lay.title[1], s, H, W)
    with _where(a):
        if lay.bar is not None:
            x, y, w, h = lay.bar
            items += _legend(a, colormap, str(field), lo, hi, x, y, w, h, s)
        _draw(a, items, fgc)  # one launch on the device (a second past 64 items)
    return rgba
