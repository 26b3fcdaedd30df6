"""The first use of a CUDA kernel says it compiles (insitu.log), once."""

import logging

import numpy as np

import insitu
from insitu.pool.kernels import KernelCache

SCALE = r"""
extern "C" __global__ void scale2(float* x, const long long n) {
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) x[i] *= 2.0f;
}
"""


def compiles(caplog):
    return [r for r in caplog.records if r.getMessage().startswith("compiling ")]


def test_a_kernel_cache_miss_is_logged_once_with_its_directory(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="insitu")
    cache = KernelCache(str(tmp_path))
    cache.get(SCALE, "scale2")
    cache.get(SCALE, "scale2")
    KernelCache(str(tmp_path)).get(SCALE, "scale2")  # loaded from the disk: no compile
    recs = compiles(caplog)
    assert [(r.name, r.getMessage()) for r in recs] == [
        ("insitu.pool.kernels", f"compiling CUDA kernel 'scale2' (first use; cached in {tmp_path})")]
    assert hasattr(recs[0], "rank") and cache.stats()["compiles"] == 1


def test_the_first_marching_cubes_on_the_device_says_it_compiles(caplog):
    import render.contour._gpu as gpu
    from render.contour import marching_cubes

    gpu._module.cache_clear()
    gpu._kernel.cache_clear()
    caplog.set_level(logging.INFO, logger="render")
    x = np.linspace(-1, 1, 16, dtype=np.float32)
    vol = insitu.to_device(np.sqrt(x[:, None, None] ** 2 + x[None, :, None] ** 2 + x[None, None, :] ** 2))
    marching_cubes(vol, 0.5)
    marching_cubes(vol, 0.6)
    msgs = [r.getMessage() for r in compiles(caplog) if r.name == "render.contour._gpu"]
    want = "compiling the marching cubes kernels (mc_*) for float (first use; cached in "
    assert len(msgs) == 1 and msgs[0].startswith(want)
