"""Volume ray casting on CuPy arrays (CUDA kernel): the CPU image within 1e-4, no
host<->device transfer once the transfer function's table is on the device, and block
images that composite like the CPU's."""

import numpy as np
import pytest

import insitu
from insitu import Domain
from render.camera import Camera
from render.colormap import colormap
from render.volume import TransferFunction, composite, ray_cast, ray_cast_blocks, visibility_order

cp = pytest.importorskip("cupy", reason="needs CuPy")

SPACING = (0.5, 0.8, 1.2)
ORIGIN = (1.0, -2.0, 0.5)


def smooth_random(shape, seed):
    rng = np.random.default_rng(seed)
    f = np.fft.fftn(rng.standard_normal(shape))
    k = np.meshgrid(*[np.fft.fftfreq(n) for n in shape], indexing="ij")
    v = np.real(np.fft.ifftn(f * np.exp(-sum(kk ** 2 for kk in k) * 200)))
    return (v - v.min()) / (v.max() - v.min())


def box_of(shape):
    hi = np.asarray(ORIGIN) + (np.asarray(shape) - 1) * np.asarray(SPACING)
    return np.ravel(np.c_[ORIGIN, hi])


def close_depths(gpu, cpu):
    """Same inf pattern and depths but where a sample sat on the TF's zero-opacity edge."""
    g = cp.asnumpy(gpu)
    same_hits = np.isinf(g) == np.isinf(cpu)
    assert same_hits.mean() > 0.999
    both = same_hits & np.isfinite(cpu)
    assert (np.abs(g[both] - cpu[both]) <= 1e-4 * np.abs(cpu[both]) + 1e-4).mean() > 0.999


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gpu_image_equals_cpu_image(dtype):
    vol = smooth_random((40, 36, 30), 1).astype(dtype)
    vol[5:9, 10:12, 3:7] = np.nan
    tf = TransferFunction.from_colormap("inferno", 0, 1, opacity=[(0.2, 0.0), (1.0, 0.5)])
    for view in (dict(azimuth=30, elevation=20), dict(azimuth=-140, elevation=-60, zoom=3)):
        cam = Camera.fit(box_of(vol.shape), **view)
        kw = dict(spacing=SPACING, origin=ORIGIN, background=(0.1, 0.2, 0.3, 1.0))
        # Without early termination the backends agree to rounding; with it, a ray whose
        # opacity lands on the threshold may stop one sample apart (at most 1 - threshold).
        cpu, cpu_depth = ray_cast(vol, cam, 96, 80, tf, early_termination=1.0, **kw)
        gpu, gpu_depth = ray_cast(cp.asarray(vol), cam, 96, 80, tf, early_termination=1.0, **kw)
        assert isinstance(gpu, cp.ndarray) and gpu.dtype == cp.float32 and gpu.shape == (80, 96, 4)
        np.testing.assert_allclose(cp.asnumpy(gpu), cpu, atol=1e-4)
        close_depths(gpu_depth, cpu_depth)
        et_cpu, _ = ray_cast(vol, cam, 96, 80, tf, **kw)
        et_gpu, _ = ray_cast(cp.asarray(vol), cam, 96, 80, tf, **kw)
        np.testing.assert_allclose(cp.asnumpy(et_gpu), et_cpu, atol=1 / 255 + 1e-4)


def test_rectilinear_grid_gpu_equals_cpu_and_uploads_its_axes_once():
    shape = (34, 30, 26)
    vol = smooth_random(shape, 5).astype(np.float32)
    axes = [ORIGIN[a] + SPACING[a] * (n - 1) * (np.arange(n) / (n - 1)) ** 1.6 for a, n in enumerate(shape)]
    tf = TransferFunction.from_colormap("inferno", 0, 1, opacity=[(0.2, 0.0), (1.0, 0.5)])
    cam = Camera.fit(box_of(shape), azimuth=35, elevation=25)
    cpu, cpu_depth = ray_cast(vol, cam, 80, 64, tf, coords=axes, early_termination=1.0)
    dvol = cp.asarray(vol)
    ray_cast(dvol, cam, 80, 64, tf, coords=axes, early_termination=1.0)  # the table and the axes go up once
    with insitu.no_host_transfers():
        gpu, gpu_depth = ray_cast(dvol, cam, 80, 64, tf, coords=axes, early_termination=1.0)
    assert float(cpu[..., 3].max()) > 0.3
    np.testing.assert_allclose(cp.asnumpy(gpu), cpu, atol=1e-4)
    close_depths(gpu_depth, cpu_depth)
    on_device, _ = ray_cast(dvol, cam, 80, 64, tf, coords=[cp.asarray(a) for a in axes], early_termination=1.0)
    np.testing.assert_allclose(cp.asnumpy(on_device), cpu, atol=1e-4)


def test_gpu_strided_volume_reads_in_place():
    vol = smooth_random((30, 26, 22), 4)
    tf = TransferFunction.from_colormap("viridis", 0, 1, opacity=[(0.3, 0.0), (1.0, 0.3)])
    cam = Camera.fit(box_of(vol.shape), azimuth=60, elevation=10)
    big = cp.zeros((60, 26, 44))
    big[::2, :, ::2] = cp.asarray(vol)
    view = big[::2, :, ::2]
    ray_cast(view, cam, 32, 32, tf, spacing=SPACING, origin=ORIGIN)  # the table goes up once
    with insitu.no_host_transfers():
        gpu, _ = ray_cast(view, cam, 32, 32, tf, spacing=SPACING, origin=ORIGIN)
    cpu, _ = ray_cast(vol, cam, 32, 32, tf, spacing=SPACING, origin=ORIGIN)
    np.testing.assert_allclose(cp.asnumpy(gpu), cpu, atol=1e-4)


def test_gpu_uploads_only_the_table_once():
    vol = cp.asarray(smooth_random((24, 24, 24), 2), cp.float32)
    tf = TransferFunction.from_colormap("magma", 0, 1, opacity=0.2, size=512)
    cam = Camera.fit((0, 23, 0, 23, 0, 23), azimuth=15)
    with insitu.count_transfers() as first:
        ray_cast(vol, cam, 64, 64, tf)
    assert (first.h2d_calls, first.h2d_bytes, first.d2h_calls, first.scalar_reads) == (1, 512 * 16, 0, 0)
    with insitu.no_host_transfers():
        rgba, depth = ray_cast(vol, cam, 64, 64, tf)
        cam2 = Camera.fit((0, 23, 0, 23, 0, 23), azimuth=75, elevation=40)  # a new frame: scalars only
        ray_cast(vol, cam2, 128, 64, tf, step=0.3)
    assert isinstance(rgba, cp.ndarray) and isinstance(depth, cp.ndarray)


def test_a_moving_range_reuses_the_uploaded_table():
    # a volume plot's range follows its field every step: a new TransferFunction, the same table
    vol = cp.asarray(smooth_random((16, 16, 16), 4), cp.float32)
    cam = Camera.fit((0, 15, 0, 15, 0, 15), azimuth=15)
    ray_cast(vol, cam, 32, 32, TransferFunction.from_colormap("cividis", 0.0, 1.0, opacity=0.3, size=300))
    moved = TransferFunction.from_colormap("cividis", 0.1, 1.3, opacity=0.3, size=300)
    with insitu.no_host_transfers():
        rgba, _ = ray_cast(vol, cam, 32, 32, moved)
    # and the image is the moved range's (its table read at other indices), not the first one's
    host = TransferFunction.from_colormap("cividis", 0.1, 1.3, opacity=0.3, size=300)
    want, _ = ray_cast(cp.asnumpy(vol), cam, 32, 32, host)
    np.testing.assert_allclose(cp.asnumpy(rgba), want, atol=2e-3)


def test_gpu_blocks_composite_like_cpu():
    vol = smooth_random((34, 30, 28), 2)
    tf = TransferFunction.from_colormap("viridis", 0, 1, opacity=[(0.3, 0.0), (1.0, 0.4)])
    dom = Domain.create(vol.shape, blocks=(2, 2, 2), ghost=1, spacing=SPACING, origin=ORIGIN)
    cams = [Camera.fit(box_of(vol.shape), azimuth=35, elevation=25, zoom=1.3),
            Camera((8.5, 9.0, 16.0), (0.0, 0.0, 0.0), fov=100)]
    host = {b.gid: dom.extract(vol, b.gid) for b in dom}
    dev = {g: cp.asarray(a) for g, a in host.items()}
    for cam in cams:
        ray_cast_blocks(dom, dev, cam, 64, 48, tf, early_termination=1.0)
        with insitu.no_host_transfers():
            parts = ray_cast_blocks(dom, dev, cam, 64, 48, tf, early_termination=1.0)
            order = visibility_order(dom, list(parts), cam)
            gpu, gpu_depth = composite([parts[g] for g in order])
        cpu_parts = ray_cast_blocks(dom, host, cam, 64, 48, tf, early_termination=1.0)
        cpu, cpu_depth = composite([cpu_parts[g] for g in order])
        np.testing.assert_allclose(cp.asnumpy(gpu), cpu, atol=1e-4)
        close_depths(gpu_depth, cpu_depth)
        single, _ = ray_cast(cp.asarray(vol), cam, 64, 48, tf, spacing=SPACING, origin=ORIGIN, early_termination=1.0)
        err = cp.asnumpy(cp.abs(gpu - single).max(axis=2))
        assert (err <= 1 / 255).mean() >= 0.999


def test_gpu_colormap_matches_host():
    v = np.linspace(-0.2, 1.2, 101)
    v[7] = np.nan
    np.testing.assert_allclose(cp.asnumpy(colormap("coolwarm", cp.asarray(v), 0, 1)), colormap("coolwarm", v, 0, 1),
                               atol=1e-6)
