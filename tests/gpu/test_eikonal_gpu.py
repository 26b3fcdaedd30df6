"""Eikonal solver on the GPU: equals the CPU result; no array transfers while iterating."""

import numpy as np
import pytest

import insitu
from insitu import Domain
from solvers.eikonal import EikonalSolver, solve
from solvers.eikonal.speed import random_smooth, two_layer

from eikonal_checks import assert_skipping_idle_tiles_changes_nothing

cp = pytest.importorskip("cupy", reason="needs CuPy")


def grid_speed(f, shape, spacing):
    x, y, z = (np.arange(n) * h for n, h in zip(shape, spacing))
    return np.broadcast_to(f(x[:, None, None], y[None, :, None], z[None, None, :]), shape).copy()


@pytest.mark.parametrize("model", [two_layer(), random_smooth(seed=2)], ids=["two-layer", "random-smooth"])
def test_gpu_equals_cpu(model):
    shape, spacing = (40, 36, 44), (0.03, 0.035, 0.025)
    speed = grid_speed(model, shape, spacing)
    seeds = [(4, 5, 6), (30, 30, 30)]
    cpu = solve(speed, seeds, spacing)
    gpu = solve(cp.asarray(speed), seeds, spacing)
    assert isinstance(gpu, cp.ndarray)
    np.testing.assert_allclose(insitu.to_host(gpu), cpu, rtol=1e-5, atol=0)


def test_iteration_loop_makes_no_array_transfers():
    shape, spacing = (48, 40, 44), (0.02, 0.02, 0.02)
    dom = Domain.create(shape, blocks=(2, 2, 1), spacing=spacing)
    s = EikonalSolver(dom, random_smooth(seed=1), [(10, 10, 10)], xp=cp, local_iters=4)
    with insitu.no_host_transfers(allow_scalars=True) as c:
        steps = s.solve()
    # One scalar (the largest change) per step for the convergence test; no arrays.
    assert c.calls == 0 and c.scalar_reads == steps
    ref = solve(grid_speed(random_smooth(seed=1), shape, spacing), [(10, 10, 10)], spacing)
    np.testing.assert_allclose(s.gather(), ref, rtol=1e-5)


@pytest.mark.mpi
@pytest.mark.parametrize("nranks", [2, 4])
def test_decomposed_on_gpus_equals_single_block(mpi, nranks):
    p = mpi(nranks, "eikonal_check.py", 1, "--backend", "cupy")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "OK ranks=" in p.stdout


def test_speed_model_is_set_up_on_the_device():
    # A speed model is evaluated on the GPU: only the 1-D coordinates go up, and the
    # solve equals the one set up from a host speed array.
    shape, spacing = (36, 40, 32), (0.03, 0.025, 0.03)
    dom = Domain.create(shape, blocks=(2, 1, 1), spacing=spacing)
    with insitu.count_transfers() as c:
        s = EikonalSolver(dom, two_layer(interface=0.4), [(5, 6, 7)], xp=cp)
    block_bytes = sum(np.prod(dom.block(g).padded_shape) * 8 for g in range(dom.nblocks))
    assert c.h2d_bytes < 0.01 * block_bytes, c.h2d_bytes
    s.solve()
    ref = solve(grid_speed(two_layer(interface=0.4), shape, spacing), [(5, 6, 7)], spacing)
    np.testing.assert_allclose(s.gather(), ref, rtol=1e-5)
    with pytest.raises(ValueError, match="speed: must be finite and > 0 everywhere; found values <= 0"):
        EikonalSolver(dom, lambda x, y, z: x - 0.5, [(5, 6, 7)], xp=cp)


def test_float32_slowness_on_the_gpu_equals_the_cpu():
    shape, spacing = (40, 36, 44), (0.03, 0.035, 0.025)
    dom = Domain.create(shape, blocks=(2, 1, 1), spacing=spacing)
    out = {}
    for name, xp in (("cpu", np), ("gpu", cp)):
        s = EikonalSolver(dom, random_smooth(seed=2), [(4, 5, 6)], xp=xp, slowness="float32")
        s.solve()
        out[name] = s.gather()
    np.testing.assert_allclose(insitu.to_host(out["gpu"]), out["cpu"], rtol=1e-5)


def test_float32_travel_times_on_the_gpu_converge_to_the_cpu_answer():
    shape, spacing = (40, 36, 44), (0.03, 0.035, 0.025)
    dom = Domain.create(shape, blocks=(2, 1, 1), spacing=spacing)
    out = {}
    for name, xp in (("cpu", np), ("gpu", cp)):
        s = EikonalSolver(dom, random_smooth(seed=2), [(4, 5, 6)], xp=xp, precision="float32", slowness="float32")
        s.solve(max_iter=400)  # ends when no stored value moves
        assert all(b.dtype == np.float32 for b in s.blocks.values())
        out[name] = s.gather()
    ref = solve(grid_speed(random_smooth(seed=2), shape, spacing), [(4, 5, 6)], spacing)
    # Each backend rounds its double update to float32 at every store (the GPU's update
    # also contracts to fused multiply-adds), so their fixed points differ by a few float32
    # rounding steps along the characteristics: both stay within 3e-5 of the float64 solve.
    np.testing.assert_allclose(out["cpu"], ref, rtol=3e-5)
    np.testing.assert_allclose(insitu.to_host(out["gpu"]), ref, rtol=3e-5)


@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_display_copy_is_written_by_the_sweep(precision):
    shape, spacing = (40, 36, 44), (0.03, 0.035, 0.025)
    dom = Domain.create(shape, blocks=(2, 1, 1), spacing=spacing)
    s = EikonalSolver(dom, random_smooth(seed=2), [(4, 5, 6)], xp=cp, local_iters=3, precision=precision)
    views = s.display_copy(clip=0.5)
    seen_inf = False
    for _ in range(6):
        with insitu.count_transfers() as counted:
            s.step()
        assert counted.bytes <= 8  # the one scalar read of the global change, nothing else
        for g, v in views.items():
            assert isinstance(v, cp.ndarray) and v.dtype == cp.float32
            cp.testing.assert_array_equal(v, cp.minimum(s.blocks[g], 0.5).astype(cp.float32))
            seen_inf |= bool(cp.isinf(s.blocks[g]).any())
    assert seen_inf


@pytest.mark.parametrize("blocks,local_iters", [((1, 1, 1), 2), ((2, 1, 1), 1), ((2, 1, 1), 3), ((1, 2, 2), 2)])
def test_skipping_idle_tiles_gives_the_full_sweeps_result(blocks, local_iters):
    # Tiles with no change nearby are skipped (an active list, as the fast iterative
    # method keeps one); every step must equal the full sweep's bit for bit, across halo
    # exchanges between blocks, with the display copy too.
    dom = Domain.create((70, 66, 90), blocks=blocks, spacing=(0.03, 0.035, 0.025))
    assert_skipping_idle_tiles_changes_nothing(dom, cp, local_iters=local_iters, max_steps=500, early=5)
