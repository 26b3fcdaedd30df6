"""Transfer functions: scalar value -> colour and opacity, as one lookup table both
ray-casting backends read.

Opacity is per unit world length: a ray segment of length ``ds`` through a medium of
opacity ``a`` has alpha ``1 - (1 - a) ** (ds / unit_length)``, so an image does not
change with the step size, only gets more accurate.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..colormap import colormap, device_copy

__all__ = ["TransferFunction", "segment_alpha"]

def segment_alpha(a, length, unit_length: float):
    """Alpha of a segment of `length` through a medium of opacity `a` per `unit_length`."""
    return 1.0 - (1.0 - np.asarray(a, np.float64)) ** (np.asarray(length, np.float64) / unit_length)


def _finite(x, what: str) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise ValueError(f"{what}: expected a number, got {x!r}") from None
    if not np.isfinite(v):
        raise ValueError(f"{what}: expected a finite number, got {x!r}")
    return v


def _size(size) -> int:
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 2:
        raise ValueError(f"transfer function size: expected an integer >= 2, got {size!r}")
    return int(size)


def _unit(unit_length) -> float | None:
    if unit_length is None:
        return None
    u = _finite(unit_length, "unit_length")
    if u <= 0:
        raise ValueError(f"unit_length: must be > 0, got {unit_length!r}")
    return u


class TransferFunction:
    """Colour (RGB) and opacity per unit length (A) of scalar values, as a table.

    Prefer the constructors: ``TransferFunction(points)`` from control points, or
    :meth:`from_colormap`.

    Parameters
    ----------
    points : sequence of (value, (r, g, b, a))
        Control points with non-decreasing values and components in [0, 1]; the
        function is piecewise linear between them and constant beyond the ends.
    size : int
        Table entries, evenly spaced from the first point's value to the last's.
    unit_length : float, optional
        World length over which opacity `a` is reached; default the grid's smallest
        spacing (the renderer fills it in).

    Attributes
    ----------
    table : (size, 4) float32
        RGBA at ``vmin + i * (vmax - vmin) / (size - 1)``, read-only.
    vmin, vmax : float
        Values at the table's ends; values outside are clamped to them.
    unit_length : float or None
    """

    def __init__(self, points: Sequence, *, size: int = 1024, unit_length: float | None = None):
        try:
            pts = list(points)
        except TypeError:
            raise ValueError(f"transfer function points: expected a sequence of (value, (r, g, b, a)), "
                             f"got {points!r}") from None
        if not pts:
            raise ValueError("transfer function points: need at least one (value, (r, g, b, a))")
        vals, rgba = [], []
        for n, p in enumerate(pts):
            try:
                v, c = p
                c = np.asarray(c, np.float64)
            except (TypeError, ValueError):
                raise ValueError(f"transfer function points[{n}]: expected (value, (r, g, b, a)), got {p!r}") from None
            vals.append(_finite(v, f"transfer function points[{n}] value"))
            if c.shape != (4,) or not np.isfinite(c).all() or (c < 0).any() or (c > 1).any():
                raise ValueError(f"transfer function points[{n}] colour: expected 4 numbers in [0, 1], got {p[1]!r}")
            rgba.append(c)
        vals = np.asarray(vals)
        if (np.diff(vals) < 0).any():
            raise ValueError(f"transfer function points: values must not decrease, got {vals.tolist()}")
        size = _size(size)
        x = np.linspace(vals[0], vals[-1], size)
        rgba = np.asarray(rgba)
        table = np.stack([np.interp(x, vals, rgba[:, i]) for i in range(4)], axis=1)
        self._init(table, vals[0], vals[-1], _unit(unit_length))

    @classmethod
    def from_table(cls, table, vmin: float, vmax: float, *, unit_length: float | None = None) -> "TransferFunction":
        """From an (N, 4) RGBA table (components in [0, 1]) spanning ``vmin..vmax``."""
        t = np.array(table, np.float64)
        if t.ndim != 2 or t.shape[1] != 4 or t.shape[0] < 2:
            raise ValueError(f"transfer function table: expected shape (N >= 2, 4), got {t.shape}")
        if not np.isfinite(t).all() or (t < 0).any() or (t > 1).any():
            raise ValueError("transfer function table: components must be finite, in [0, 1]")
        lo, hi = _finite(vmin, "vmin"), _finite(vmax, "vmax")
        if hi < lo:
            raise ValueError(f"vmin, vmax: expected vmin <= vmax, got {vmin}, {vmax}")
        tf = cls.__new__(cls)
        tf._init(t, lo, hi, _unit(unit_length))
        return tf

    @classmethod
    def from_colormap(cls, name: str, vmin: float, vmax: float, opacity=None, *, size: int = 1024,
                      unit_length: float | None = None) -> "TransferFunction":
        """Colours of colormap `name` (see :mod:`render.colormap`) over ``vmin..vmax``.

        Parameters
        ----------
        opacity : float or sequence of (value, a), optional
            Opacity per unit length: one number for all values, or control points
            (piecewise linear, constant beyond the ends). Default a ramp from 0 at
            `vmin` to 1 at `vmax`.
        """
        lo, hi = _finite(vmin, "vmin"), _finite(vmax, "vmax")
        if hi < lo:
            raise ValueError(f"vmin, vmax: expected vmin <= vmax, got {vmin}, {vmax}")
        x = np.linspace(lo, hi, _size(size))
        table = np.empty((len(x), 4))
        table[:, :3] = colormap(name, x, lo, hi)[:, :3]
        if opacity is None:
            opacity = [(lo, 0.0), (hi, 1.0)]
        if np.ndim(opacity) == 0:
            a = _finite(opacity, "opacity")
            table[:, 3] = a
        else:
            try:
                ov, oa = (np.asarray(c, np.float64) for c in zip(*opacity))
            except (TypeError, ValueError):
                raise ValueError(f"opacity: expected a number or (value, a) pairs, got {opacity!r}") from None
            if not (np.isfinite(ov).all() and np.isfinite(oa).all()) or (np.diff(ov) < 0).any():
                raise ValueError(f"opacity: values must be finite and not decrease, got {opacity!r}")
            a = table[:, 3] = np.interp(x, ov, oa)
        if (np.asarray(a) < 0).any() or (np.asarray(a) > 1).any():
            raise ValueError(f"opacity: must lie in [0, 1], got {opacity!r}")
        return cls.from_table(table, lo, hi, unit_length=unit_length)

    def _init(self, table: np.ndarray, vmin: float, vmax: float, unit_length: float | None) -> None:
        t = np.ascontiguousarray(table, np.float32)
        t.flags.writeable = False  # the device copies are cached: the table must not change
        self.table, self.vmin, self.vmax, self.unit_length = t, float(vmin), float(vmax), unit_length
        self._on_device: dict[int, object] = {}

    @property
    def lut_scale(self) -> float:
        """Table index per unit value (0 when ``vmin == vmax``: everything maps to entry 0)."""
        n = self.table.shape[0]
        return (n - 1) / (self.vmax - self.vmin) if self.vmax > self.vmin else 0.0

    def __call__(self, values) -> np.ndarray:
        """RGBA (opacity per unit length) of host `values`, as the kernels look it up.

        Returns ``values.shape + (4,)`` float64; non-finite values give zeros.
        """
        v = np.asarray(values, np.float64)
        ok = np.isfinite(v)
        n = self.table.shape[0]
        x = np.clip((np.where(ok, v, self.vmin) - self.vmin) * self.lut_scale, 0, n - 1)
        i = np.minimum(x.astype(np.int64), n - 2)
        g = (x - i)[..., None]
        t = self.table.astype(np.float64)
        return np.where(ok[..., None], t[i] + (t[i + 1] - t[i]) * g, 0.0)

    def device_table(self, device: int):
        """The table on CUDA `device`, uploaded (one counted transfer) the first time a table of
        these contents is used there (a plot whose range moves every step makes a new
        TransferFunction with the same table: no upload per step): :func:`render.colormap.device_copy`."""
        if device not in self._on_device:
            self._on_device[device] = device_copy(self.table, device)
        return self._on_device[device]

    def __repr__(self) -> str:
        return (f"TransferFunction(size={self.table.shape[0]}, vmin={self.vmin:g}, vmax={self.vmax:g}, "
                f"unit_length={self.unit_length})")
