"""Eikonal solver against scikit-fmm, the analytic point source, and itself decomposed."""


import h5py
import numpy as np
import pytest
import skfmm

from solvers.eikonal import EikonalSolver, seeds_from_fractions, solve, update_block
from solvers.eikonal.speed import constant, from_hdf5, random_smooth, speed_model, two_layer
from insitu import Domain

from eikonal_checks import assert_skipping_idle_tiles_changes_nothing

MPI_ENV = {"NUMBA_NUM_THREADS": "1"}  # several ranks on 2 cores: one thread each


def grid_speed(f, shape, spacing):
    x, y, z = (np.arange(n) * h for n, h in zip(shape, spacing))
    return np.broadcast_to(f(x[:, None, None], y[None, :, None], z[None, None, :]), shape).copy()


def skfmm_reference(speed, seeds, spacing):
    # A node with phi == 0 is frozen at T = 0 and nothing else is initialised: the
    # same problem as T = 0 on the seed nodes.
    phi = np.ones(speed.shape)
    phi[seeds] = 0.0
    return skfmm.travel_time(phi, speed, dx=spacing, order=1)


@pytest.mark.parametrize("model", [constant(1.7), two_layer(1.0, 3.0, interface=0.4), random_smooth(seed=3)],
                         ids=["constant", "two-layer", "random-smooth"])
@pytest.mark.parametrize("spacing", [(0.05, 0.05, 0.05), (0.03, 0.05, 0.04)], ids=["iso", "aniso"])
def test_equals_scikit_fmm_order_1(model, spacing):
    shape = (30, 26, 28)
    speed = grid_speed(model, shape, spacing)
    seeds = np.zeros(shape, bool)
    seeds[5, 6, 7] = seeds[22, 20, 4] = True
    T = solve(speed, seeds, spacing)
    ref = skfmm_reference(speed, seeds, spacing)
    rel = np.abs(T - ref) / np.maximum(ref, 1e-300)
    assert rel.max() <= 1e-6, rel.max()
    assert (T[seeds] == 0).all()


def test_point_source_converges_to_distance():
    c, errs = 2.0, []
    for n in (32, 64, 128):
        h = 1.0 / (n - 1)
        T = solve(np.full((n, n, n), c), [(n // 2,) * 3], (h, h, h))
        x = (np.arange(n) - n // 2) * h
        exact = np.sqrt(x[:, None, None] ** 2 + x[None, :, None] ** 2 + x[None, None, :] ** 2) / c
        errs.append(float(np.abs(T - exact).mean()))
    orders = [np.log2(a / b) for a, b in zip(errs, errs[1:])]
    print(f"point source, mean |T - r/c|: {errs}; measured order {orders}")
    assert errs[0] > errs[1] > errs[2]
    # First-order Godunov with a point source: O(h log(1/h)), so a bit below 1.
    assert all(0.5 < o < 1.2 for o in orders), orders


def test_update_block_reports_change_and_keeps_border():
    T = np.full((5, 5, 5), np.inf)
    T[2, 2, 2] = 0.0
    frozen = T == 0
    out = T.copy()
    w = np.ones_like(T)
    T1, out1, change = update_block(T, out, w, frozen, (1, 1, 1), iterations=1)
    assert change == np.inf  # infinite nodes got finite values
    assert T1[1, 2, 2] == 1.0 and T1[1, 1, 2] == np.inf  # one sweep reaches face neighbours only
    assert np.isinf(T1[0]).all()  # the border is copied, never updated
    T2, _, change = update_block(T1, out1, w, frozen, (1, 1, 1), iterations=1)
    assert T2[1, 1, 2] == pytest.approx(1 + np.sqrt(0.5))  # two-axis Godunov: 1 + h/(f*sqrt(2))


def test_hdf5_speed_equals_array(tmp_path):
    shape, spacing = (16, 18, 14), (0.1, 0.1, 0.1)
    speed = grid_speed(random_smooth(seed=5), shape, spacing)
    path = tmp_path / "speed.h5"
    with h5py.File(path, "w") as f:
        f["c"] = speed
    dom = Domain.create(shape, blocks=(2, 1, 1), spacing=spacing)
    s = EikonalSolver(dom, from_hdf5(str(path), "c"), [(3, 3, 3)])
    s.solve()
    np.testing.assert_allclose(s.gather(), solve(speed, [(3, 3, 3)], spacing), rtol=1e-12)
    with pytest.raises(KeyError, match=r"has no dataset 'missing'; it has \['c'\]"):
        from_hdf5(str(path), "missing")


@pytest.mark.parametrize("bad,msg", [(0.0, "found values <= 0"), (-1.0, "found values <= 0"),
                                     (np.nan, "found NaN"), (np.inf, "found inf")])
def test_bad_speed(bad, msg):
    sp = np.ones((6, 6, 6))
    sp[1, 2, 3] = bad
    with pytest.raises(ValueError, match=f"speed: must be finite and > 0 everywhere; {msg}"):
        solve(sp, [(0, 0, 0)])


def test_bad_seeds_and_shapes():
    sp = np.ones((6, 6, 6))
    with pytest.raises(ValueError, match="seeds: none given"):
        solve(sp, np.zeros((6, 6, 6), bool))
    with pytest.raises(ValueError, match=r"seeds: index \(6, 0, 0\) is outside the grid \(6, 6, 6\)"):
        solve(sp, [(6, 0, 0)])
    with pytest.raises(ValueError, match=r"seeds: mask has shape \(5, 6, 6\), speed has shape \(6, 6, 6\)"):
        solve(sp, np.ones((5, 6, 6), bool))
    with pytest.raises(ValueError, match=r"speed: expected a 3-D array, got shape \(6, 6\)"):
        solve(np.ones((6, 6)), [(0, 0)])
    dom = Domain.create((6, 6, 6), blocks=(2, 1, 1))
    with pytest.raises(ValueError, match=r"speed: array has shape \(6, 6, 5\), the grid is \(6, 6, 6\)"):
        EikonalSolver(dom, np.ones((6, 6, 5)), [(0, 0, 0)])
    with pytest.raises(ValueError, match=r"seed \(0.5, 1.5, 0.0\): expected three fractions in \[0, 1\]"):
        seeds_from_fractions([(0.5, 1.5, 0.0)], (6, 6, 6))
    with pytest.raises(ValueError, match="unknown model 'granite'; known: constant, two-layer"):
        speed_model("granite")


def test_no_convergence_is_reported():
    with pytest.raises(RuntimeError, match="no convergence after 2 iterations"):
        solve(np.ones((30, 30, 30)), [(0, 0, 0)], local_iters=1, max_iter=2)


@pytest.mark.mpi
@pytest.mark.parametrize("nranks,per_rank", [(1, 1), (2, 1), (4, 1), (8, 1), (2, 3)])
def test_decomposed_equals_single_block(mpi, nranks, per_rank):
    p = mpi(nranks, "eikonal_check.py", per_rank, env=MPI_ENV)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "OK ranks=" in p.stdout
    print(p.stdout.strip())  # iterations to converge, for the record


@pytest.mark.mpi
def test_simulation_command(mpi, tmp_path):
    out = tmp_path / "T.h5"
    p = mpi(4, "-m", "solvers.eikonal", "--shape", 20, 18, 16, "--seed", "0.5,0.5,0.5",
            "--speed", "two-layer", "--every", 5, "--save", out, env=MPI_ENV)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "4 blocks" in p.stdout and "converged after" in p.stdout and "iteration     5" in p.stdout
    with h5py.File(out) as f:
        T = f["T"][...]
    shape = (20, 18, 16)
    spacing = tuple(1.0 / (n - 1) for n in shape)
    speed = grid_speed(two_layer(), shape, spacing)
    np.testing.assert_allclose(T, solve(speed, seeds_from_fractions([(0.5, 0.5, 0.5)], shape), spacing),
                               rtol=1e-12)


@pytest.mark.mpi
def test_simulation_command_bad_speed_is_a_clear_error(mpi):
    p = mpi(2, "-m", "solvers.eikonal", "--shape", 8, 8, 8, "--speed", "granite", env=MPI_ENV)
    assert p.returncode != 0
    assert "error: speed: unknown model 'granite'" in p.stderr


def test_speed_model_evaluated_by_an_array_module_equals_the_host_set_up():
    # The GPU set-up evaluates a model with the device's array module; with NumPy as that
    # module it must give the host set-up's speeds, and refuse the same bad speeds.
    from solvers.eikonal import _block_speed, _block_speed_on
    from solvers.eikonal.speed import random_smooth, two_layer

    dom = Domain.create((20, 18, 16), blocks=(2, 1, 2), spacing=(0.05, 0.05, 0.06))
    for model in (two_layer(interface=0.4), random_smooth(seed=3)):
        for g in range(dom.nblocks):
            np.testing.assert_array_equal(_block_speed_on(np, model, dom, g), _block_speed(model, dom, g))
    with pytest.raises(ValueError, match="found values <= 0 in block 0"):
        _block_speed_on(np, lambda x, y, z: x - 0.5, dom, 0)
    last = dom.nblocks - 1  # the block at the far x end
    with pytest.raises(ValueError, match=f"found NaN in block {last}"):
        _block_speed_on(np, lambda x, y, z: np.where(x > 0.6, np.nan, 1.0), dom, last)


def test_a_model_that_only_takes_numpy_arrays_is_set_up_on_the_host(monkeypatch):
    # The GPU set-up first evaluates a model with the device's arrays; one that cannot
    # take them (TypeError) is evaluated on the host instead. Here the "device" module is
    # NumPy under another name, and uploads make an ndarray subclass.
    import solvers.eikonal as eik
    from solvers.eikonal.speed import two_layer

    class Device(np.ndarray):  # what "uploaded" arrays are
        pass

    monkeypatch.setattr(eik.arrays, "to_device", lambda a: np.asarray(a).view(Device))

    class NotNumpy:
        def __getattr__(self, name):
            return getattr(np, name)

    def only_numpy(x, y, z):
        if not all(type(a) is np.ndarray for a in (x, y, z)):
            raise TypeError("numpy arrays only")
        return two_layer(interface=0.4)(x, y, z)

    dom = Domain.create((16, 14, 12), blocks=(2, 1, 1), spacing=(0.06, 0.07, 0.08))
    xp = NotNumpy()
    for g in range(dom.nblocks):
        on, host = eik._setup_speed(xp, two_layer(interface=0.4), dom, g), eik._block_speed(only_numpy, dom, g)
        assert on[1] is True
        np.testing.assert_array_equal(on[0], host)
        off = eik._setup_speed(xp, only_numpy, dom, g)
        assert off[1] is False
        np.testing.assert_array_equal(off[0], host)


def test_float32_slowness_changes_the_solution_by_its_rounding_only():
    from solvers.eikonal.speed import random_smooth

    dom = Domain.create((22, 20, 18), blocks=(2, 1, 1), spacing=(0.05, 0.05, 0.05))
    runs = {}
    for dt in ("float64", "float32"):
        s = EikonalSolver(dom, random_smooth(seed=5), [(4, 5, 6)], slowness=dt)
        s.solve()
        runs[dt] = s.gather()
    np.testing.assert_allclose(runs["float32"], runs["float64"], rtol=1e-6)
    assert not np.array_equal(runs["float32"], runs["float64"])  # it did use float32
    with pytest.raises(ValueError, match="slowness must be 'float64' or 'float32', got 'half'"):
        EikonalSolver(dom, random_smooth(seed=5), [(4, 5, 6)], slowness="half")


def test_float32_travel_times_end_when_no_stored_value_moves():
    # Travel times kept in float32: the run still converges (to tol 0: no stored value
    # changes) and stays within float32 rounding of the float64 solve.
    from solvers.eikonal.speed import random_smooth

    dom = Domain.create((22, 20, 18), blocks=(2, 1, 1), spacing=(0.05, 0.05, 0.05))
    ref = EikonalSolver(dom, random_smooth(seed=5), [(4, 5, 6)])
    ref.solve()
    s = EikonalSolver(dom, random_smooth(seed=5), [(4, 5, 6)], precision="float32", slowness="float32")
    s.solve(max_iter=200)
    assert all(b.dtype == np.float32 for b in s.blocks.values())
    np.testing.assert_allclose(s.gather(), ref.gather(), rtol=2e-6)
    with pytest.raises(ValueError, match="precision must be 'float64' or 'float32', got 'float16'"):
        EikonalSolver(dom, random_smooth(seed=5), [(4, 5, 6)], precision="float16")


def test_the_float32_gpu_kernel_is_derived_from_the_float64_one():
    # The float32-travel-time CUDA kernel is the float64 text with two edits; both must
    # still apply (checked here without a GPU: the text only).
    from solvers.eikonal import _gpu

    for old, new in _gpu._T32_EDITS:
        assert _gpu._SOURCE.count(old) == 1, old
    # The display-copy edits apply to the float64 and the float32 text alike.
    for src in (_gpu._SOURCE, _gpu._edit(_gpu._SOURCE, _gpu._T32_EDITS)):
        assert "view[p]" in _gpu._edit(src, _gpu._VIEW_EDITS)


def test_display_copy_follows_every_step():
    # float32 min(T, clip) of each padded block, current after every step (written by the
    # sweep on the GPU; tests/gpu checks that path against the same expectation).
    from solvers.eikonal.speed import random_smooth

    dom = Domain.create((22, 20, 18), blocks=(2, 1, 1), spacing=(0.05, 0.05, 0.05))
    s = EikonalSolver(dom, random_smooth(seed=5), [(4, 5, 6)], local_iters=2)
    views = s.display_copy(clip=0.3)
    for _ in range(4):
        for g, v in views.items():
            assert v.dtype == np.float32 and v.shape == s.blocks[g].shape
            np.testing.assert_array_equal(v, np.minimum(s.blocks[g], 0.3).astype(np.float32))
        s.step()
    assert any(np.isinf(b).any() for b in s.blocks.values())  # clip had something to do
    with pytest.raises(ValueError, match="display_copy clip must be a number, got nan"):
        s.display_copy(clip=float("nan"))


@pytest.mark.parametrize("blocks,local_iters", [((1, 1, 1), 2), ((2, 1, 1), 1), ((2, 1, 1), 3), ((1, 2, 2), 2)])
def test_skipping_idle_tiles_gives_the_full_sweeps_result(blocks, local_iters):
    # The active list (tiles with nothing changing nearby are skipped) must give every
    # step of the full sweeps bit for bit, across halo exchanges, display copy included.
    dom = Domain.create((40, 36, 150), blocks=blocks, spacing=(0.03, 0.035, 0.025))
    assert_skipping_idle_tiles_changes_nothing(dom, np, local_iters=local_iters, max_steps=400, early=3)


# -- what the adaptor's eikonal filter uses: per-block speeds, the job's collectives ----------


def _split_speed(dom, speed):
    return {g: speed[tuple(slice(l, h) for l, h in zip(dom.block(g).lo, dom.block(g).hi))].copy()
            for g in dom.blocks_of(0)}


def test_speed_per_block_gives_the_global_arrays_result():
    dom = Domain.create((21, 17, 13), blocks=(2, 2, 1), spacing=(0.1, 0.1, 0.1))
    speed = 1 + np.random.default_rng(1).random(dom.dims)
    ref = EikonalSolver(dom, speed, [(3, 4, 5)])
    ref.solve()
    with EikonalSolver(dom, _split_speed(dom, speed), [(3, 4, 5)]) as s:
        s.solve()
        np.testing.assert_array_equal(s.gather(), ref.gather())
    ref.close()


def test_speed_per_block_is_checked():
    dom = Domain.create((12, 10, 8), blocks=(2, 1, 1))
    speeds = _split_speed(dom, np.ones(dom.dims))
    with pytest.raises(ValueError, match=r"speed: no array for block 1; the mapping has blocks \[0\]"):
        EikonalSolver(dom, {0: speeds[0]}, [(1, 1, 1)])
    with pytest.raises(ValueError,
                       match=r"speed: the array of block 1 has shape \(6, 10, 7\), the block is \(6, 10, 8\)"):
        EikonalSolver(dom, {0: speeds[0], 1: speeds[1][..., :7]}, [(1, 1, 1)])
    speeds[1][2, 3, 4] = 0.0
    with pytest.raises(ValueError, match="speed: must be finite and > 0 everywhere; found values <= 0 in block 1"):
        EikonalSolver(dom, speeds, [(1, 1, 1)])


class RecordingCollectives:
    """A one-process Collectives that records the calls (and can make set-up fail elsewhere)."""

    def __init__(self, peer_failed: bool = False) -> None:
        self.calls, self.peer_failed = [], peer_failed

    def allreduce(self, value, op):
        self.calls.append(("allreduce", op))
        return value

    def agree(self, error, what):
        self.calls.append(("agree", what, error))
        if error is not None:
            raise error
        if self.peer_failed:
            raise RuntimeError("rank 1 failed")


def test_collectives_reduce_each_step_and_agree_on_the_set_up():
    dom = Domain.create((16, 14, 12), blocks=(2, 1, 1), spacing=(0.1, 0.1, 0.1))
    coll = RecordingCollectives()
    with EikonalSolver(dom, random_smooth(seed=2), [(3, 4, 5)], collectives=coll) as s:
        assert coll.calls == [("agree", "eikonal: set-up", None)]
        n = s.solve()
    assert n > 1 and coll.calls[1:] == [("allreduce", "max")] * n
    # A failed set-up goes to the agreement (raised there), before any halo exchange.
    coll = RecordingCollectives()
    with pytest.raises(ValueError, match="outside the grid"):
        EikonalSolver(dom, random_smooth(seed=2), [(30, 4, 5)], collectives=coll)
    assert [c[:2] for c in coll.calls] == [("agree", "eikonal: set-up")]
    assert isinstance(coll.calls[0][2], ValueError)
    # Another rank's failure, told by the agreement, stops this one too.
    with pytest.raises(RuntimeError, match="rank 1 failed"):
        EikonalSolver(dom, random_smooth(seed=2), [(3, 4, 5)], collectives=RecordingCollectives(peer_failed=True))


def test_run_stops_at_max_iter_when_asked():
    dom = Domain.create((30, 12, 10), blocks=(2, 1, 1))
    s = EikonalSolver(dom, np.ones(dom.dims), [(0, 0, 0)], local_iters=1)
    with pytest.raises(RuntimeError, match="no convergence after 3 iterations"):
        s.solve(max_iter=3)
    s = EikonalSolver(dom, np.ones(dom.dims), [(0, 0, 0)], local_iters=1)
    assert s.solve(max_iter=3, on_limit="stop") == 3
    assert np.isinf(s.gather()).any()  # really stopped before the front crossed the grid
    with pytest.raises(ValueError, match="on_limit must be 'raise' or 'stop', got 'warn'"):
        s.solve(on_limit="warn")


def test_refresh_ghosts_fills_the_ghosts_with_the_neighbours_newest_values():
    dom = Domain.create((20, 8, 8), blocks=(2, 1, 1))
    s = EikonalSolver(dom, np.ones(dom.dims), [(9, 4, 4)], local_iters=3)
    s.step()
    s.step()
    T0, T1 = s.blocks[0], s.blocks[1]
    assert not np.array_equal(T0[-1, 1:-1, 1:-1], T1[1, 1:-1, 1:-1])  # stale after the sweeps
    s.refresh_ghosts()
    np.testing.assert_array_equal(s.blocks[0][-1, 1:-1, 1:-1], s.blocks[1][1, 1:-1, 1:-1])
    np.testing.assert_array_equal(s.blocks[1][0, 1:-1, 1:-1], s.blocks[0][-2, 1:-1, 1:-1])
    s.close()
