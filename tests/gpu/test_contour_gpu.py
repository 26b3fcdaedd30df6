"""Marching cubes on CuPy arrays: equals the CPU mesh; no array transfers once the tables are up."""

import numpy as np
import pytest

import insitu
from insitu import Domain
from render.contour import marching_cubes, marching_cubes_blocks

cp = pytest.importorskip("cupy", reason="needs CuPy")


def smooth_random(shape, seed):
    rng = np.random.default_rng(seed)
    f = np.fft.fftn(rng.standard_normal(shape))
    k = np.meshgrid(*[np.fft.fftfreq(n) for n in shape], indexing="ij")
    return np.real(np.fft.ifftn(f * np.exp(-sum(kk ** 2 for kk in k) * 200)))


def test_gpu_mesh_equals_cpu_mesh():
    vol = smooth_random((40, 36, 38), 1)
    field = np.cos(vol * 7)
    cpu = marching_cubes(vol, [0.0, 0.05], spacing=(0.1, 0.2, 0.3), values=field)
    dvol, dfield = cp.asarray(vol), cp.asarray(field)
    marching_cubes(dvol, 0.0)  # the first call uploads the case tables
    with insitu.no_host_transfers(allow_scalars=True):
        gpu = marching_cubes(dvol, [0.0, 0.05], spacing=(0.1, 0.2, 0.3), values=dfield)
    assert all(isinstance(a, cp.ndarray) for a in gpu)
    for c, g in zip(cpu, gpu):
        assert c.shape == g.shape
    np.testing.assert_array_equal(cp.asnumpy(gpu[1]), cpu[1])  # same faces, same order
    for i in (0, 2, 3):
        np.testing.assert_allclose(cp.asnumpy(gpu[i]), cpu[i], atol=1e-5)


def test_gpu_blocks_merge_like_cpu():
    vol = smooth_random((30, 28, 26), 2)
    dom = Domain.create(vol.shape, blocks=(2, 2, 2), ghost=2)
    cpu = marching_cubes_blocks(dom, {b.gid: dom.extract(vol, b.gid) for b in dom}, 0.0)
    gpu = marching_cubes_blocks(dom, {b.gid: cp.asarray(dom.extract(vol, b.gid)) for b in dom}, 0.0)
    np.testing.assert_array_equal(cp.asnumpy(gpu[1]), cpu[1])
    np.testing.assert_allclose(cp.asnumpy(gpu[0]), cpu[0], atol=1e-5)
