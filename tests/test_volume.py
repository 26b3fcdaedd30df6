"""Volume ray casting (Numba path): against closed forms (Beer-Lambert, linear fields),
against itself split into blocks, and its argument checks."""

import math

import numpy as np
import pytest

from insitu import Domain
from render.camera import Camera
from render.colormap import NAMES, colormap, table
from render.volume import (TransferFunction, composite, over, ray_cast, ray_cast_blocks, segment_alpha,
                           visibility_order)

SPACING = np.array([0.5, 0.8, 1.2])
ORIGIN = np.array([1.0, -2.0, 0.5])


def smooth_random(shape, seed):
    rng = np.random.default_rng(seed)
    f = np.fft.fftn(rng.standard_normal(shape))
    k = np.meshgrid(*[np.fft.fftfreq(n) for n in shape], indexing="ij")
    v = np.real(np.fft.ifftn(f * np.exp(-sum(kk ** 2 for kk in k) * 200)))
    return (v - v.min()) / (v.max() - v.min())


def box_of(shape, spacing=SPACING, origin=ORIGIN):
    hi = origin + (np.asarray(shape) - 1) * spacing
    return np.ravel(np.c_[origin, hi])


def chords(cam, width, height, box, t_min=0.0, t_max=np.inf):
    """Entry and exit ray parameters of every pixel's ray in `box` (slab method, NumPy)."""
    eye, d = cam.rays(width, height, np.float64)
    lo, hi = np.asarray(box)[0::2], np.asarray(box)[1::2]
    with np.errstate(divide="ignore", invalid="ignore"):
        t1, t2 = (lo - eye) / d, (hi - eye) / d
    t_in = np.maximum(np.nanmax(np.minimum(t1, t2), axis=2), t_min)
    t_out = np.minimum(np.nanmin(np.maximum(t1, t2), axis=2), t_max)
    return t_in, np.maximum(t_out, t_in), d


CAMERAS = [dict(azimuth=0, elevation=0), dict(azimuth=35, elevation=25), dict(azimuth=-120, elevation=-60, zoom=2),
           dict(azimuth=200, elevation=10, zoom=4)]


# --------------------------------------------------------------------------- closed forms


@pytest.mark.parametrize("unit_length", [None, 2.0])
@pytest.mark.parametrize("view", CAMERAS)
def test_constant_medium_follows_beer_lambert(view, unit_length):
    shape = (24, 20, 18)
    vol = np.full(shape, 0.5)
    colour, a = np.array([0.9, 0.6, 0.3]), 0.05
    tf = TransferFunction([(0.0, (*colour, a)), (1.0, (*colour, a))], unit_length=unit_length)
    box = box_of(shape)
    cam = Camera.fit(box, **view)
    w, h = 40, 32
    rgba, depth = ray_cast(vol, cam, w, h, tf, spacing=SPACING, origin=ORIGIN)
    t_in, t_out, d = chords(cam, w, h, box)
    unit = unit_length or SPACING.min()
    expect = 1 - (1 - a) ** ((t_out - t_in) / unit)
    hit = t_out > t_in
    assert hit.mean() > 0.2
    np.testing.assert_allclose(rgba[..., 3], expect, rtol=1e-4, atol=1e-6)
    # Colour of a constant medium: the TF colour, premultiplied.
    np.testing.assert_allclose(rgba[..., :3], rgba[..., 3:] * colour, rtol=1e-5, atol=1e-7)
    # Depth: the first sample, within one step of where the ray enters.
    cos = d @ cam.forward
    step = 0.5 * SPACING.min()
    assert np.isinf(depth[~hit]).all()
    z = depth[hit].astype(np.float64)
    assert ((z >= t_in[hit] * cos[hit] - 1e-4) & (z <= (t_in[hit] + step) * cos[hit] + 1e-4)).all()


def test_opacity_does_not_depend_on_the_step_and_clips_apply():
    shape = (16, 16, 16)
    vol = np.full(shape, 0.5)
    tf = TransferFunction([(0.0, (1, 1, 1, 0.2)), (1.0, (1, 1, 1, 0.2))], unit_length=1.0)
    box = box_of(shape)
    cam = Camera.fit(box, azimuth=20, elevation=30)
    images = [ray_cast(vol, cam, 24, 24, tf, spacing=SPACING, origin=ORIGIN, step=s, early_termination=1.0)[0]
              for s in (0.05, 0.37, 1.9)]
    for im in images[1:]:
        np.testing.assert_allclose(im, images[0], atol=2e-6)
    # A far clip (depth along the view direction) shortens every chord.
    t_in, t_out, d = chords(cam, 24, 24, box)
    far = 0.5 * (t_in.max() + t_out.max()) * float(np.median(d @ cam.forward))
    clipped = Camera(cam.position, cam.look_at, cam.up, cam.fov, far=far)
    rgba, _ = ray_cast(vol, clipped, 24, 24, tf, spacing=SPACING, origin=ORIGIN, early_termination=1.0)
    t_in, t_out, _ = chords(cam, 24, 24, box, t_max=far / (d @ cam.forward))
    np.testing.assert_allclose(rgba[..., 3], segment_alpha(0.2, t_out - t_in, 1.0), rtol=1e-4, atol=1e-6)


def test_background_goes_behind():
    vol = np.full((8, 8, 8), 0.5)
    tf = TransferFunction([(0.0, (1, 0, 0, 0.3)), (1.0, (1, 0, 0, 0.3))])
    cam = Camera.fit(box_of(vol.shape), azimuth=10)
    bg = (0.2, 0.4, 0.6, 0.5)
    plain, _ = ray_cast(vol, cam, 16, 16, tf, spacing=SPACING, origin=ORIGIN)
    backed, _ = ray_cast(vol, cam, 16, 16, tf, spacing=SPACING, origin=ORIGIN, background=bg)
    behind = np.array([0.1, 0.2, 0.3, 0.5], np.float32)  # premultiplied
    np.testing.assert_allclose(backed, over(plain, np.broadcast_to(behind, plain.shape)), atol=1e-6)


def _sample_set(t_in, t_out, step):
    """Sample parameters and the length each stands for, as documented in render.volume._cpu."""
    k = np.arange(math.ceil(t_in / step), math.ceil(t_out / step))
    t = k * step
    t = t[(t >= t_in) & (t < t_out)]
    if len(t) == 0:
        return np.array([(t_in + t_out) / 2]), np.array([t_out - t_in])
    edges = np.concatenate([[t_in], (t[1:] + t[:-1]) / 2, [t_out]])
    return t, np.diff(edges)


def stretched_axes(shape):
    """Unevenly spaced axes over the box of a uniform grid of `shape` (the same end points)."""
    return [ORIGIN[a] + SPACING[a] * (n - 1) * (np.arange(n) / (n - 1)) ** 1.6 for a, n in enumerate(shape)]


@pytest.mark.parametrize("grid", ["uniform", "rectilinear"])
def test_trilinear_sampling_of_a_linear_field_is_exact(grid):
    shape = (20, 18, 16)
    grad, v0 = np.array([0.011, -0.007, 0.013]), 0.4
    axes = ([ORIGIN[a] + SPACING[a] * np.arange(shape[a]) for a in range(3)] if grid == "uniform"
            else stretched_axes(shape))
    pos = np.meshgrid(*axes, indexing="ij")
    vol = v0 + sum(grad[a] * pos[a] for a in range(3))
    lo, hi = vol.min(), vol.max()
    sigma = 0.08  # extinction per unit length
    a = 1 - math.exp(-sigma)
    # Red is linear in the value: the image integrates the field itself.
    tf = TransferFunction([(lo, (0, 0, 1, a)), (hi, (1, 0, 1, a))], unit_length=1.0)
    box = box_of(shape)
    cam = Camera.fit(box, azimuth=40, elevation=-35)
    w, h = 24, 20
    step = 0.3
    grid_args = dict(spacing=SPACING, origin=ORIGIN) if grid == "uniform" else dict(coords=axes)
    rgba, _ = ray_cast(vol, cam, w, h, tf, step=step, early_termination=1.0, **grid_args)
    t_in, t_out, d = chords(cam, w, h, box)
    eye = np.asarray(cam.position)
    checked = 0
    for r in range(h):
        for c in range(w):
            if t_out[r, c] - t_in[r, c] < 1e-9:
                assert rgba[r, c, 3] == 0
                continue
            # Discrete: the renderer's own samples, with the field's exact values there.
            t, ds = _sample_set(t_in[r, c], t_out[r, c], step)
            red = (v0 + (eye + t[:, None] * d[r, c]) @ grad - lo) / (hi - lo)
            alpha = 1 - np.exp(-sigma * ds)
            trans = np.concatenate([[1.0], np.cumprod(1 - alpha)[:-1]])
            assert rgba[r, c, 0] == pytest.approx(np.sum(trans * alpha * red), abs=2e-6)
            # Continuous: the emission-absorption integral in closed form.
            L = t_out[r, c] - t_in[r, c]
            r0 = (v0 + (eye + t_in[r, c] * d[r, c]) @ grad - lo) / (hi - lo)
            q = (d[r, c] @ grad) / (hi - lo)
            e = math.exp(-sigma * L)
            assert rgba[r, c, 0] == pytest.approx(r0 * (1 - e) + q * ((1 - e) / sigma - L * e), abs=2e-4)
            assert rgba[r, c, 3] == pytest.approx(1 - e, abs=1e-5)
            checked += 1
    assert checked > 100


# --------------------------------------------------------------------------- NaN, early termination, layouts


def test_nan_samples_render_transparent():
    tf = TransferFunction.from_colormap("magma", 0, 1, opacity=0.1)
    shape = (20, 16, 14)
    box = box_of(shape)
    cam = Camera.fit(box, azimuth=-70, elevation=15)
    blank, depth = ray_cast(np.full(shape, np.nan), cam, 20, 20, tf, spacing=SPACING, origin=ORIGIN)
    assert (blank == 0).all() and np.isinf(depth).all()
    # NaN from sample 12 on along axis 0: the cells that touch it are transparent, so the
    # image is the clean volume's with only the samples before x(11) taken.
    clean = smooth_random(shape, 5)
    vol = clean.copy()
    vol[12:] = np.nan
    rgba, depth = ray_cast(vol, cam, 20, 20, tf, spacing=SPACING, origin=ORIGIN)
    cut = box.copy()
    cut[1] = ORIGIN[0] + 11 * SPACING[0]
    ref, ref_depth = ray_cast(clean, cam, 20, 20, tf, spacing=SPACING, origin=ORIGIN, extent=cut, bounds=box)
    assert np.isfinite(rgba).all() and ref[..., 3].max() > 0.3
    np.testing.assert_array_equal(rgba, ref)
    np.testing.assert_array_equal(depth, ref_depth)


def test_early_termination_changes_little():
    vol = smooth_random((24, 24, 24), 3)
    cam = Camera.fit(box_of(vol.shape), azimuth=30, elevation=20)
    dense = TransferFunction.from_colormap("inferno", 0, 1, opacity=[(0.0, 0.3), (1.0, 0.9)])
    full, _ = ray_cast(vol, cam, 32, 32, dense, spacing=SPACING, origin=ORIGIN, early_termination=1.0)
    assert (full[..., 3] > 0.999).mean() > 0.3  # many rays would run on, opaque
    for et in (0.9, 0.99, 1 - 1 / 255):
        cut, _ = ray_cast(vol, cam, 32, 32, dense, spacing=SPACING, origin=ORIGIN, early_termination=et)
        diff = np.abs(cut - full)
        # The documented bound: what is left behind a stopped ray is at most 1 - et. So
        # only 1 - 1/255 promises 1/255; the default 0.99 promises 2.55/255.
        assert diff.max() <= 1 - et + 1e-6
        if et < 0.99:
            assert diff.max() > 0.01  # it did stop rays


def test_dtypes_and_layouts():
    vol = smooth_random((18, 16, 14), 7)
    tf = TransferFunction.from_colormap("cividis", 0, 1, opacity=[(0.2, 0.0), (1.0, 0.4)])
    cam = Camera.fit(box_of(vol.shape), azimuth=50, elevation=30)
    kw = dict(spacing=SPACING, origin=ORIGIN)
    ref, ref_depth = ray_cast(vol, cam, 24, 20, tf, **kw)
    f32, _ = ray_cast(vol.astype(np.float32), cam, 24, 20, tf, **kw)
    np.testing.assert_allclose(f32, ref, atol=1e-5)
    # A strided view renders as its contiguous copy does, bit for bit.
    big = np.zeros((36, 16, 28))
    big[::2, :, ::2] = vol
    view, view_depth = ray_cast(big[::2, :, ::2], cam, 24, 20, tf, **kw)
    np.testing.assert_array_equal(view, ref)
    np.testing.assert_array_equal(view_depth, ref_depth)
    # Integers are converted (to float32).
    ints = (vol * 1000).astype(np.int16)
    tf_int = TransferFunction.from_colormap("cividis", 0, 1000, opacity=[(200, 0.0), (1000, 0.4)])
    got, _ = ray_cast(ints, cam, 24, 20, tf_int, **kw)
    np.testing.assert_allclose(got, ray_cast(ints.astype(np.float64), cam, 24, 20, tf_int, **kw)[0], atol=1e-5)


# --------------------------------------------------------------------------- blocks


BLOCK_CAMERAS = [
    Camera.fit(box_of((30, 28, 26)), azimuth=35, elevation=25, zoom=1.3),
    Camera.fit(box_of((30, 28, 26)), azimuth=-130, elevation=-50, zoom=2.5),
    Camera.fit(box_of((30, 28, 26)), azimuth=0, elevation=0),
    Camera((8.5, 9.0, 16.0), (0.0, 0.0, 0.0), fov=100),  # inside the volume
]


@pytest.mark.parametrize("blocks", [(1, 1, 1), (2, 1, 1), (3, 1, 1), (2, 2, 1), (2, 2, 2)])
def test_blocks_composite_to_the_single_render(blocks):
    vol = smooth_random((30, 28, 26), 2)
    tf = TransferFunction.from_colormap("viridis", 0, 1, opacity=[(0.3, 0.0), (1.0, 0.4)])
    dom = Domain.create(vol.shape, blocks=blocks, ghost=1, spacing=SPACING, origin=ORIGIN)
    padded = {b.gid: dom.extract(vol, b.gid) for b in dom}
    for cam in BLOCK_CAMERAS:
        for et in (1.0, 0.99):
            ref, ref_depth = ray_cast(vol, cam, 40, 36, tf, spacing=SPACING, origin=ORIGIN, early_termination=et)
            parts = ray_cast_blocks(dom, padded, cam, 40, 36, tf, early_termination=et)
            assert sorted(parts) == list(range(dom.nblocks))
            order = visibility_order(dom, list(parts), cam)
            rgba, depth = composite([parts[g] for g in order])
            err = np.abs(rgba - ref).max(axis=2)
            if et == 1.0:
                assert (err <= 1 / 255).mean() >= 0.999, (cam, err.max())
                assert err.max() < 1e-5  # the same samples, split: only rounding differs
            else:
                # Blocks stop their rays on their own opacity, later than the whole
                # render does: within the early-termination bound of each other.
                assert err.max() <= 1 - et + 1e-6
            np.testing.assert_array_equal(np.isinf(depth), np.isinf(ref_depth))
            np.testing.assert_allclose(depth, ref_depth, rtol=1e-6)
            assert ref[..., 3].max() > 0.5
            if dom.nblocks > 1 and cam is BLOCK_CAMERAS[0]:
                wrong, _ = composite([parts[g] for g in order[::-1]])
                assert np.abs(wrong - ref).max() > 0.05  # the order matters, and this one is right


def test_visibility_order_holds_along_rays():
    dom = Domain.create((40, 30, 20), offsets=[(0, 7, 25, 40), (0, 12, 30), (0, 5, 11, 20)], spacing=SPACING,
                        origin=ORIGIN)
    faces = [ORIGIN[a] + SPACING[a] * np.asarray(dom.offsets[a]) for a in range(3)]
    rng = np.random.default_rng(1)
    box = box_of(dom.dims)
    for _ in range(20):
        eye = rng.uniform(box[0::2] - 10, box[1::2] + 10)
        cam = Camera(tuple(eye), tuple(box.reshape(3, 2).mean(axis=1)), fov=60)
        rank = {g: n for n, g in enumerate(visibility_order(dom, range(dom.nblocks), cam))}
        for d in rng.standard_normal((50, 3)):
            d /= np.linalg.norm(d)
            p = eye + np.linspace(0, 80, 4000)[:, None] * d
            inside = ((p >= box[0::2]) & (p < box[1::2])).all(axis=1)
            coords = np.stack([np.searchsorted(faces[a], p[inside, a], side="right") - 1 for a in range(3)], axis=1)
            met = [dom.gid(c) for c in coords]
            ranks = [rank[g] for g in met]
            assert ranks == sorted(ranks)


def test_over_and_composite():
    rng = np.random.default_rng(0)
    layers = []
    for _ in range(3):
        a = rng.uniform(0, 1, (5, 4, 1))
        layers.append(np.concatenate([rng.uniform(0, 1, (5, 4, 3)) * a, a], axis=2))
    np.testing.assert_allclose(over(over(layers[0], layers[1]), layers[2]),
                               over(layers[0], over(layers[1], layers[2])), atol=1e-12)  # associative
    opaque = np.concatenate([np.full((5, 4, 3), 0.5), np.ones((5, 4, 1))], axis=2)
    np.testing.assert_array_equal(over(opaque, layers[0]), opaque)
    depths = [rng.uniform(1, 2, (5, 4)) for _ in range(3)]
    rgba, depth = composite(list(zip(layers, depths)))
    np.testing.assert_allclose(rgba, over(layers[0], over(layers[1], layers[2])))
    np.testing.assert_array_equal(depth, np.minimum.reduce(depths))
    with pytest.raises(ValueError, match="over: expected two RGBA arrays"):
        over(layers[0], layers[0][..., :3])


# --------------------------------------------------------------------------- transfer functions, colormaps


def test_transfer_function_tables():
    tf = TransferFunction([(-1.0, (0, 0, 0, 0)), (0.0, (1, 0.5, 0, 0.2)), (3.0, (1, 1, 1, 1))], size=301)
    assert tf.table.shape == (301, 4) and tf.table.dtype == np.float32 and not tf.table.flags.writeable
    np.testing.assert_allclose(tf([-5, -1, -0.5, 0, 1.5, 3, 9, np.nan]),
                               [[0, 0, 0, 0], [0, 0, 0, 0], [0.5, 0.25, 0, 0.1], [1, 0.5, 0, 0.2],
                                [1, 0.75, 0.5, 0.6], [1, 1, 1, 1], [1, 1, 1, 1], [0, 0, 0, 0]], atol=1e-6)
    v = np.linspace(2, 4, 37)
    cm = TransferFunction.from_colormap("plasma", 2.0, 4.0, opacity=0.25, size=256)  # entries on the map's
    np.testing.assert_allclose(cm(v), colormap("plasma", v, 2.0, 4.0) * [1, 1, 1, 0.25], atol=1e-6)
    # 257 entries: one on the opacity's kink at 3, so the table is exact.
    cm = TransferFunction.from_colormap("plasma", 2.0, 4.0, opacity=[(3.0, 0.0), (4.0, 0.5)], size=257)
    np.testing.assert_allclose(cm(v)[:, 3], np.clip(v - 3, 0, None) * 0.5, atol=1e-6)
    assert segment_alpha(0.3, 2.0, 1.0) == pytest.approx(1 - 0.7 ** 2)


def test_colormaps():
    mine = ("viridis", "plasma", "inferno", "magma", "cividis", "coolwarm")  # VTK-m's presets: tests/test_colormap.py
    assert set(NAMES) >= {*mine, "grayscale"}
    # Published end points of viridis (matplotlib's _cm_listed) and coolwarm's grey middle.
    np.testing.assert_allclose(table("viridis")[[0, -1]], [[0.267004, 0.004874, 0.329415],
                                                           [0.993248, 0.906157, 0.143936]], atol=1 / 510)
    np.testing.assert_allclose(colormap("coolwarm", np.array([0.5]), 0, 1)[0, :3], [0.865, 0.865, 0.865], atol=0.01)
    out = colormap("grayscale", np.array([[-1.0, 0.25], [np.nan, 7.0]]), 0.0, 1.0)
    np.testing.assert_allclose(out, [[[0, 0, 0, 1], [0.25, 0.25, 0.25, 1]], [[0, 0, 0, 0], [1, 1, 1, 1]]])
    mpl = pytest.importorskip("matplotlib")
    for name in mine:
        ref = mpl.colormaps[name].resampled(256)(np.arange(256))[:, :3]
        np.testing.assert_allclose(table(name), ref, atol=1 / 510 + 1e-6)


# --------------------------------------------------------------------------- bad input


def test_bad_input_is_named():
    vol = np.zeros((4, 4, 4))
    tf = TransferFunction([(0.0, (1, 1, 1, 0.5))])
    cam = Camera.fit(box_of(vol.shape, (1, 1, 1), (0, 0, 0)))
    with pytest.raises(ValueError, match="volume: expected a 3-D array"):
        ray_cast(np.zeros((4, 4)), cam, 8, 8, tf)
    with pytest.raises(ValueError, match="volume: needs at least 2 samples per axis"):
        ray_cast(np.zeros((4, 1, 4)), cam, 8, 8, tf)
    with pytest.raises(TypeError, match="volume: expected real numbers"):
        ray_cast(vol.astype(complex), cam, 8, 8, tf)
    with pytest.raises(ValueError, match="tf: expected a TransferFunction, got list"):
        ray_cast(vol, cam, 8, 8, [(0, (1, 1, 1, 1))])
    with pytest.raises(ValueError, match="camera: expected"):
        ray_cast(vol, "front", 8, 8, tf)
    for w, h, name in ((0, 8, "width"), (8, -1, "height"), (8.5, 8, "width"), (8, True, "height")):
        with pytest.raises(ValueError, match=f"{name}: expected an integer > 0"):
            ray_cast(vol, cam, w, h, tf)
    for kw, name in ((dict(step=0), "step"), (dict(spacing=(1, -1, 1)), "spacing"), (dict(origin=(0, 0)), "origin"),
                     (dict(extent=(0, 1, 0, 1, 1, 0)), "extent"), (dict(bounds=(0, 1)), "bounds"),
                     (dict(background=(0, 0, 2, 1)), "background"), (dict(early_termination=0), "early_termination")):
        with pytest.raises(ValueError, match=f"^{name}: "):
            ray_cast(vol, cam, 8, 8, tf, **kw)
    ax = np.arange(4.0)
    for coords, msg in (((ax, ax), r"coords: expected three 1-D axes"),
                        ((ax, ax, np.arange(5.0)), r"coords\[2\]: expected 4 real numbers"),
                        ((ax, ax[::-1], ax), r"coords\[1\]: expected finite, strictly increasing"),
                        ((ax, ax, np.array([0, 1, np.nan, 3])), r"coords\[2\]: expected finite")):
        with pytest.raises(ValueError, match=msg):
            ray_cast(vol, cam, 8, 8, tf, coords=coords)
    with pytest.raises(ValueError, match="points: values must not decrease"):
        TransferFunction([(1.0, (1, 1, 1, 1)), (0.0, (1, 1, 1, 1))])
    with pytest.raises(ValueError, match=r"points\[0\] colour"):
        TransferFunction([(0.0, (1, 1, 1.5, 1))])
    with pytest.raises(ValueError, match="colormap name: unknown"):
        TransferFunction.from_colormap("no_such_map", 0, 1)
    with pytest.raises(ValueError, match="opacity: must lie in"):
        TransferFunction.from_colormap("viridis", 0, 1, opacity=2.0)
    dom = Domain.create((8, 8, 8), blocks=(2, 1, 1), ghost=1)
    with pytest.raises(ValueError, match=r"block 1: shape \(4, 8, 8\), expected \(6, 10, 10\)"):
        ray_cast_blocks(dom, {1: np.zeros((4, 8, 8))}, cam, 8, 8, tf)
    with pytest.raises(ValueError, match="needs ghost width >= 1"):
        ray_cast_blocks(Domain.create((8, 8, 8), blocks=(2, 1, 1), ghost=0), {}, cam, 8, 8, tf)


@pytest.mark.parametrize("n,method", [(1, "auto"), (2, "auto"), (3, "direct-send"), (4, "binary-swap"),
                                      (8, "radix-k")])
def test_sort_last_volume_equals_single_render(mpi, n, method):
    # One block per rank, ray cast there, composited with "over" in visibility order at rank
    # 0 across processes: the single-rank render within 1/255 (tests/mpi/render_check.py).
    p = mpi(n, "render_check.py", "volume", "--method", method, env={"NUMBA_NUM_THREADS": "1"})
    assert p.returncode == 0 and f"OK volume ranks={n}" in p.stdout, p.stdout + p.stderr
