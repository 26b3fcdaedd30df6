"""Volume ray casting of uniform and rectilinear grids, whole or in blocks (uniform) for
sort-last compositing.

World coordinates are the data's (axis 0, 1, 2), as for :class:`render.camera.Camera`:
sample ``vol[i, j, k]`` sits at ``origin + (i, j, k) * spacing`` and is interpolated
trilinearly between samples. Boxes (`extent`, `bounds`) are
``(xmin, xmax, ymin, ymax, zmin, zmax)`` like :meth:`Camera.fit`'s.

Samples sit on each ray at ``t = k * step`` from the eye (k integer), for the whole
volume and for every block alike, and a block render takes exactly the samples inside
the box it owns. So block images, composited front to back with :func:`over` in
:func:`visibility_order`, give the single-volume image (up to rounding, and to early
ray termination, which each block applies on its own).

NumPy volumes render with Numba (_cpu.py), CuPy volumes on their GPU (_gpu.py) with
no host<->device transfer except the transfer function's table, once per device.
"""

from __future__ import annotations

import bisect
import math
from typing import Mapping, Sequence

import numpy as np

from insitu import arrays

from .. import _jit
from .._fields import check_volume
from ..camera import Camera
from . import _cpu, _gpu
from ._params import pack
from ..colormap import device_copy
from .transfer import TransferFunction, segment_alpha

#: Default opacity at which rays stop: the colour then changes by at most 1/255 (8-bit exact).
EARLY_TERMINATION = 1.0 - 1.0 / 255.0

__all__ = ["TransferFunction", "composite", "over", "ray_cast", "ray_cast_blocks", "segment_alpha",
           "visibility_order"]


# --------------------------------------------------------------------------- checks


def _triple(x, name: str, *, positive: bool = False) -> np.ndarray:
    try:
        v = np.asarray(x, np.float64)
    except (TypeError, ValueError):
        v = None
    if v is None or v.shape != (3,) or not np.isfinite(v).all() or (positive and (v <= 0).any()):
        raise ValueError(f"{name}: expected 3 finite numbers{' > 0' if positive else ''}, got {x!r}")
    return v


def _box(x, name: str) -> tuple[np.ndarray, np.ndarray]:
    try:
        b = np.asarray(x, np.float64)
    except (TypeError, ValueError):
        b = None
    if b is None or b.shape != (6,) or not np.isfinite(b).all() or (b[1::2] < b[0::2]).any():
        raise ValueError(f"{name}: expected (xmin, xmax, ymin, ymax, zmin, zmax), finite, min <= max; got {x!r}")
    return b[0::2], b[1::2]


def _pixels(n, name: str) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n <= 0:
        raise ValueError(f"{name}: expected an integer > 0, got {n!r}")
    return int(n)


def _check_volume(volume, name: str = "volume"):
    # float32: what the ray caster samples in any case
    return check_volume(volume, name, supported=_gpu.supported, fallback="float32")


def _check_common(camera, width, height, tf, step, background, early_termination):
    if not isinstance(camera, Camera):
        raise ValueError(f"camera: expected a render.camera.Camera, got {type(camera).__name__}")
    width, height = _pixels(width, "width"), _pixels(height, "height")
    if not isinstance(tf, TransferFunction):
        raise ValueError(f"tf: expected a TransferFunction, got {type(tf).__name__}")
    if step is not None:
        if isinstance(step, bool) or not isinstance(step, (int, float, np.number)) or not (
                math.isfinite(step) and step > 0):
            raise ValueError(f"step: expected a finite number > 0, got {step!r}")
        step = float(step)
    try:
        bg = np.asarray(background, np.float64)
    except (TypeError, ValueError):
        bg = None
    if bg is None or bg.shape != (4,) or not np.isfinite(bg).all() or (bg < 0).any() or (bg > 1).any():
        raise ValueError(f"background: expected (r, g, b, a) in [0, 1], got {background!r}")
    if isinstance(early_termination, bool) or not isinstance(early_termination, (int, float, np.number)) or not (
            0 < early_termination <= 1):
        raise ValueError(f"early_termination: expected a number in (0, 1], got {early_termination!r}")
    near = 0.0 if camera.near is None else float(camera.near)
    far = math.inf if camera.far is None else float(camera.far)
    if not 0 <= near < far:
        raise ValueError(f"camera: bad clip range near={camera.near}, far={camera.far}")
    return width, height, step, bg, float(early_termination), near, far


# --------------------------------------------------------------------------- render


def _params(vol_shape, camera, width, height, tf, spacing, origin, step, ext, bounds, bg, et, near, far,
            coords=None) -> dict:
    """The kernels' parameters (see _params.DOUBLES) for one render; `coords`: a
    rectilinear grid's three host axes (then `spacing` and `origin` are not used)."""
    right, up, fwd = camera.basis()
    tan = math.tan(math.radians(camera.fov) / 2)
    n = np.asarray(vol_shape)
    if coords is None:
        data_lo, data_hi = origin, origin + (n - 1) * spacing
        finest = float(spacing.min())
    else:
        data_lo, data_hi = np.array([c[0] for c in coords]), np.array([c[-1] for c in coords])
        finest = float(min(np.diff(c).min() for c in coords))
    ext_lo, ext_hi = np.maximum(ext[0], data_lo), np.minimum(ext[1], data_hi)
    bnd_lo, bnd_hi = bounds if bounds is not None else (ext_lo, ext_hi)
    # Cells the samples inside ext_lo..ext_hi need. The tolerance keeps a face that lies
    # on a sample (up to rounding) from pulling in the cell beyond it, whose far samples
    # may be unfilled ghosts.
    if coords is None:
        ulo, uhi = (ext_lo - origin) / spacing, (ext_hi - origin) / spacing
    else:
        idx = [np.arange(len(c), dtype=np.float64) for c in coords]
        ulo = np.array([np.interp(x, c, i) for x, c, i in zip(ext_lo, coords, idx)])
        uhi = np.array([np.interp(x, c, i) for x, c, i in zip(ext_hi, coords, idx)])
    clo = np.clip(np.floor(ulo + 1e-6), 0, n - 2).astype(np.int64)
    chi = np.maximum(np.clip(np.ceil(uhi - 1e-6) - 1, 0, n - 2), clo).astype(np.int64)
    unit = tf.unit_length if tf.unit_length is not None else finest
    return dict(eye=camera.position, right=right, up=up, fwd=fwd, tanx=tan * width / height, tany=tan,
                near=near, far=far, org=origin if coords is None else 0.0,
                inv_sp=1.0 / spacing if coords is None else 1.0, ext_lo=ext_lo, ext_hi=ext_hi,
                bnd_lo=bnd_lo, bnd_hi=bnd_hi, step=step if step is not None else 0.5 * finest,
                inv_unit=1.0 / unit, vmin=tf.vmin, lut_scale=tf.lut_scale,
                bg=(*(bg[:3] * bg[3]), bg[3]), et=et, clo=clo, chi=chi, nlut=tf.table.shape[0],
                rect=int(coords is not None), aoff=np.cumsum([0, n[0], n[1]]))


def _coords(coords, shape, like) -> tuple[list[np.ndarray], object]:
    """A rectilinear grid's axes checked against the volume's `shape`: host float64 copies
    (for the parameters) and their concatenation where the kernel runs. Host axes reach a
    device once per contents (:func:`render.colormap.device_copy`, one counted upload);
    device axes are read back (counted) for the parameters."""
    if not isinstance(coords, (tuple, list)) or len(coords) != 3:
        raise ValueError(f"coords: expected three 1-D axes (x, y, z), got {type(coords).__name__}")
    host, on_device = [], []
    for a, (c, n) in enumerate(zip(coords, shape)):
        c = arrays.asarray(c, name=f"coords[{a}]")
        if c.ndim != 1 or c.shape[0] != n or c.dtype.kind not in "fiu":
            raise ValueError(f"coords[{a}]: expected {n} real numbers (the volume's axis {a}), got "
                             f"{c.dtype} of shape {tuple(c.shape)}")
        h = np.asarray(arrays.to_host(c) if arrays.is_device_array(c) else c, np.float64)
        if not np.isfinite(h).all() or (np.diff(h) <= 0).any():
            raise ValueError(f"coords[{a}]: expected finite, strictly increasing coordinates")
        host.append(h)
        on_device.append(arrays.is_device_array(c))
    dev = arrays.device_id(like)
    if dev is None:
        return host, np.concatenate(host)
    if all(on_device):
        xp = arrays.get_array_module(like)
        return host, xp.concatenate([arrays.asarray(c).astype(np.float64, copy=False) for c in coords])
    return host, device_copy(np.concatenate(host), dev)


def _render(vol, tf: TransferFunction, params: dict, width: int, height: int, ax=None):
    """Run the kernel of vol's backend; (rgba, depth) on that backend."""
    dev = arrays.device_id(vol)
    if dev is not None:
        cp = arrays.get_array_module(vol)
        with cp.cuda.Device(dev):
            rgba = cp.empty((height, width, 4), cp.float32)
            depth = cp.empty((height, width), cp.float32)
            _gpu.render(vol, tf.device_table(dev), params, ax, rgba, depth)
        return rgba, depth
    rgba = np.empty((height, width, 4), np.float32)
    depth = np.empty((height, width), np.float32)
    _jit.call(_cpu.render, vol, tf.table, *pack(params), ax if ax is not None else _NO_AXES, rgba, depth,
              inputs=(0, 1))
    return rgba, depth


_NO_AXES = np.zeros(1, np.float64)  # the CPU kernel's axes argument for a uniform grid


def ray_cast(volume, camera: Camera, width: int, height: int, tf: TransferFunction, *,
             spacing: Sequence[float] = (1.0, 1.0, 1.0), origin: Sequence[float] = (0.0, 0.0, 0.0),
             step: float | None = None, extent: Sequence[float] | None = None,
             bounds: Sequence[float] | None = None, background: Sequence[float] = (0.0, 0.0, 0.0, 0.0),
             early_termination: float = EARLY_TERMINATION, coords: Sequence | None = None):
    """Render `volume` by ray casting: front-to-back emission-absorption.

    Parameters
    ----------
    volume : (X, Y, Z) array
        NumPy (Numba) or CuPy (CUDA) samples; float32 and float64 are read as they
        are, in any layout; other real types are converted to float32. Non-finite
        samples make the cells around them transparent.
    camera : render.camera.Camera
    width, height : int
        Image size in pixels.
    tf : TransferFunction
    spacing, origin : (3,) floats
        Sample ``vol[i, j, k]`` is at ``origin + (i, j, k) * spacing``.
    step : float, optional
        Distance between samples along a ray; default half the smallest spacing.
    coords : (x, y, z) 1-D arrays, optional
        A rectilinear grid: sample ``vol[i, j, k]`` is at ``(x[i], y[j], z[k])``
        (strictly increasing axes, one value per sample, on the volume's backend);
        `spacing` and `origin` are then not used, and `step` defaults to half the
        smallest gap. Each sample interpolates trilinearly within its cell, found
        by a binary search along each axis. Host axes with a device volume are
        uploaded once per contents; device axes are read to the host (counted) to
        set up the render.
    extent : (6,) floats, optional
        The box this render owns (a block's interior, for sort-last compositing); only
        samples inside it count. Default the volume's own box.
    bounds : (6,) floats, optional
        The whole data set's box (a block render passes the domain's): the first and
        last samples' segments end on its faces. Default `extent`.
    background : (r, g, b, a)
        Composited behind the volume (straight, not premultiplied, colour).
    early_termination : float
        A ray stops once its opacity reaches this (default 1 - 1/255); 1 never stops
        early. Stopping changes no channel by more than ``1 - early_termination``.

    Returns
    -------
    rgba : (height, width, 4) float32
        Premultiplied colour and opacity, on the volume's backend.
    depth : (height, width) float32
        Distance along the viewing direction of each ray's first sample with non-zero
        opacity; inf where there is none.
    """
    vol = _check_volume(volume)
    width, height, step, bg, et, near, far = _check_common(camera, width, height, tf, step, background,
                                                           early_termination)
    sp, org = _triple(spacing, "spacing", positive=True), _triple(origin, "origin")
    host, ax = _coords(coords, vol.shape, vol) if coords is not None else (None, None)
    if extent is not None:
        ext = _box(extent, "extent")
    elif host is not None:
        ext = (np.array([c[0] for c in host]), np.array([c[-1] for c in host]))
    else:
        ext = (org, org + (np.asarray(vol.shape) - 1) * sp)
    bnd = _box(bounds, "bounds") if bounds is not None else None
    params = _params(vol.shape, camera, width, height, tf, sp, org, step, ext, bnd, bg, et, near, far, host)
    return _render(vol, tf, params, width, height, ax)


def ray_cast_blocks(domain, blocks: Mapping[int, object], camera: Camera, width: int, height: int,
                    tf: TransferFunction, *, step: float | None = None,
                    early_termination: float = EARLY_TERMINATION) -> dict:
    """Render each block of a decomposed field for sort-last compositing.

    Block ``b`` owns the world box from its first sample to the next block's first
    sample (to the domain's last sample for the last block along an axis), so the
    boxes tile the domain; its padded array supplies the ghost samples that trilinear
    interpolation reads on the box's faces. Composite the images front to back in
    :func:`visibility_order` (:func:`composite`) to get :func:`ray_cast` of the whole
    field; on a transparent background (put one behind with :func:`over`).

    Parameters
    ----------
    domain : insitu.domain.Domain
        Ghost width >= 1 when it has more than one block. Periodic axes are rendered
        as the primary domain.
    blocks : mapping gid -> padded array
        Any subset of the blocks (one rank's), ghost layers filled.
    camera, width, height, tf, step, early_termination
        As for :func:`ray_cast`; `step` defaults to half the smallest spacing. Each
        block stops its rays on its own opacity, so with early termination the
        composite may differ from the single render by up to ``1 - early_termination``
        (1.0 makes them equal up to rounding).

    Returns
    -------
    dict gid -> (rgba, depth)
        Each as :func:`ray_cast` returns them.
    """
    width, height, step, bg, et, near, far = _check_common(camera, width, height, tf, step, (0, 0, 0, 0),
                                                           early_termination)
    if domain.ghost < 1 and domain.nblocks > 1:
        raise ValueError(f"ray_cast_blocks: needs ghost width >= 1 to interpolate across block faces, "
                         f"the domain has {domain.ghost}")
    sp, org = np.asarray(domain.spacing, np.float64), np.asarray(domain.origin, np.float64)
    last = np.asarray(domain.dims) - 1
    bnd = (org, org + last * sp)
    out = {}
    for gid, arr in blocks.items():
        b = domain.block(gid)
        vol = _check_volume(arr, f"block {gid}")
        if tuple(vol.shape) != b.padded_shape:
            raise ValueError(f"block {gid}: shape {tuple(vol.shape)}, expected {b.padded_shape}")
        # Faces shared by two blocks are computed by the same expression in both, so
        # both split every ray at the same parameter.
        ext = (org + np.asarray(b.lo) * sp, org + np.minimum(b.hi, last) * sp)
        porg = org + (np.asarray(b.lo) - domain.ghost) * sp
        params = _params(vol.shape, camera, width, height, tf, sp, porg, step, ext, bnd, bg, et, near, far)
        out[gid] = _render(vol, tf, params, width, height)
    return out


# --------------------------------------------------------------------------- compositing


def visibility_order(domain, gids: Sequence[int], camera: Camera) -> list[int]:
    """`gids` sorted front to back as seen from `camera`.

    Along each axis a ray from the eye crosses the slabs of blocks in order of their
    distance (in slabs) from the eye's slab, never coming back; so a block one ray
    meets before another has a smaller sum of per-axis slab distances, and sorting by
    that sum is a valid order for every ray at once.
    """
    eye = camera.position
    slab_of_eye = []
    for a in range(3):
        planes = [domain.origin[a] + o * domain.spacing[a] for o in domain.offsets[a][1:-1]]
        slab_of_eye.append(bisect.bisect_right(planes, eye[a]))

    def key(gid):
        c = domain.coords(gid)
        return sum(abs(c[a] - slab_of_eye[a]) for a in range(3)), gid

    return sorted((int(g) for g in gids), key=key)


def over(front, back):
    """`front` over `back`, premultiplied RGBA (..., 4) arrays (NumPy or CuPy)."""
    f, b = arrays.asarray(front, name="front"), arrays.asarray(back, name="back")
    if f.shape != b.shape or f.shape[-1:] != (4,):
        raise ValueError(f"over: expected two RGBA arrays (..., 4) of one shape, got {f.shape} and {b.shape}")
    return f + (1 - f[..., 3:4]) * b


def composite(parts: Sequence[tuple]):
    """One (rgba, depth) from block images given front to back (:func:`visibility_order`).

    Depth is the nearest of the parts' depths.
    """
    if not parts:
        raise ValueError("composite: no images")
    rgba, depth = parts[0]
    xp = arrays.get_array_module(rgba)
    for r, d in parts[1:]:
        rgba = over(rgba, r)
        depth = xp.minimum(depth, d)
    return rgba, depth
