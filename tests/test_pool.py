"""Workers, command packages and the paper's API (in-process placement)."""

import numpy as np
import pytest

from insitu.pool import GPUBlocks, Package, Worker


def smooth(block):
    """One Jacobi sweep (a new array): the mean of the six neighbours inside, edges kept."""
    out = block.copy()
    out[1:-1, 1:-1, 1:-1] = (block[2:, 1:-1, 1:-1] + block[:-2, 1:-1, 1:-1] + block[1:-1, 2:, 1:-1]
                             + block[1:-1, :-2, 1:-1] + block[1:-1, 1:-1, 2:] + block[1:-1, 1:-1, :-2]) / 6
    return out


def scale(block, factor):
    block *= factor  # in place: the block itself is the result


def blocks_of(n=12, shape=(16, 16, 16), seed=0):
    rng = np.random.default_rng(seed)
    return {g: rng.random(shape) for g in range(n)}


def test_three_operations_cost_one_round_trip(tmp_path):
    data = blocks_of(4)
    with Worker(spill_dir=str(tmp_path)) as w:
        out = (GPUBlocks.from_arrays(w, data).send_gpu().exec_gpu(smooth).exec_gpu(scale, None, 2.0)
               .exec_gpu_seq([(smooth, None, ()), (scale, None, (0.5,))]).recv_gpu())
        assert w.round_trips == 1
    for g, a in data.items():
        np.testing.assert_allclose(out[g], smooth(smooth(a) * 2.0) * 0.5)


def test_iterative_job_under_a_small_cache_equals_unlimited(tmp_path):
    data = blocks_of(12)  # 12 x 32 KiB
    results = {}
    for budget in (None, 100_000):
        with Worker(budget_bytes=budget, host_budget_bytes=60_000, spill_dir=str(tmp_path / str(budget))) as w:
            blocks = GPUBlocks.from_arrays(w, data).send_gpu().cache_gpu()
            for _ in range(5):
                blocks = blocks.exec_gpu(smooth).cache_gpu()  # one round trip per sweep
            results[budget] = blocks.recv_gpu()
            stats = w.cache.stats()
            assert w.round_trips == 7
        if budget is not None:
            assert stats.spills_to_host > 0 and stats.spills_to_disk > 0 and stats.reloads > 0
            assert stats.evictions > 0
    for g in data:
        np.testing.assert_array_equal(results[100_000][g], results[None][g])


def test_persisted_blocks_are_never_spilled(tmp_path):
    data = blocks_of(8)
    with Worker(budget_bytes=120_000, spill_dir=str(tmp_path)) as w:
        pinned = GPUBlocks.from_arrays(w, {g: data[g] for g in (0, 1)}).send_gpu().persist_gpu()
        other = GPUBlocks.from_arrays(w, {g: data[g] for g in range(2, 8)}).send_gpu().cache_gpu()
        for _ in range(3):
            other = other.exec_gpu(smooth).cache_gpu()
        for _, h in pinned._sources.values():
            assert w.cache.tier(h) == "resident"
        assert w.cache.stats().evictions > 0
        got = pinned.recv_gpu()
        np.testing.assert_array_equal(got[0], data[0])
        pinned.unpersist_gpu()


def test_registered_algorithms_and_gl(tmp_path):
    x = np.linspace(-1, 1, 24)
    sphere = np.sqrt(x[:, None, None] ** 2 + x[None, :, None] ** 2 + x[None, None, :] ** 2)

    def draw(mesh):
        from render.surface import render_mesh

        return render_mesh(*mesh[:3], width=40, height=30)[0]

    with Worker(spill_dir=str(tmp_path)) as w:
        out = (GPUBlocks.from_arrays(w, {"a": sphere}).send_gpu()
               .exec_gpu("contour.marching_cubes", None, 0.6).exec_gl(draw).recv_gpu())
        assert w.round_trips == 1
    img = out["a"]
    assert img.shape == (30, 40, 4) and 0.05 < (img[..., 3] > 0).mean() < 0.95


def test_exec_gl_makes_the_declared_context_current(tmp_path, monkeypatch):
    from insitu import plugins
    from insitu.pool.worker import GL_GROUP

    # the installed renderer declares the default factory (exec_gl above used it)
    assert plugins.declared(GL_GROUP) == {"context": "render.gl:get_context"}
    made = []
    with Worker(spill_dir=str(tmp_path), gl_context=lambda: made.append(1) or "ctx") as w:
        out = GPUBlocks.from_arrays(w, {0: np.ones(3)}).send_gpu().exec_gl(lambda b: b * 2).recv_gpu()
        GPUBlocks.from_arrays(w, {0: np.ones(3)}).send_gpu().exec_gl(lambda b: b).recv_gpu()
    np.testing.assert_array_equal(out[0], 2.0)
    assert made == [1, 1]  # every exec_gl: a context is current per thread
    monkeypatch.setattr(plugins, "_groups", {GL_GROUP: {}})  # no renderer installed
    with Worker(spill_dir=str(tmp_path)) as w:
        with pytest.raises(RuntimeError, match=r"exec_gl needs an OpenGL context: pass Worker\(gl_context="):
            GPUBlocks.from_arrays(w, {0: np.ones(3)}).send_gpu().exec_gl(lambda b: b).recv_gpu()


def test_a_failing_operation_is_named(tmp_path):
    def broken(block):
        raise ArithmeticError("no good")

    with Worker(spill_dir=str(tmp_path)) as w:
        with pytest.raises(ArithmeticError, match="no good") as err:
            GPUBlocks.from_arrays(w, {0: np.zeros(3)}).send_gpu().exec_gpu(broken).recv_gpu()
        assert any("operation 1 (exec)" in n for n in err.value.__notes__)
        with pytest.raises(ValueError, match="unknown operation 'launch'"):
            Package().add("launch")
        with pytest.raises(ValueError, match="not cached"):
            GPUBlocks.from_arrays(w, {0: np.zeros(3)}).unpersist_gpu()


@pytest.mark.parametrize("periodic", [False, True])
def test_extract_and_append_halo_fill_the_ghosts(tmp_path, periodic):
    from insitu import Domain

    dims = (14, 12, 10)
    glob = np.random.default_rng(3).random(dims)
    dom = Domain.create(dims, blocks=(3, 2, 2), ghost=2, periodic=(periodic,) * 3)
    start = {}
    for b in dom:
        a = np.full(b.padded_shape, np.nan)
        a[b.interior] = glob[tuple(slice(lo, hi) for lo, hi in zip(b.lo, b.hi))]
        start[b.gid] = a
    with Worker(spill_dir=str(tmp_path)) as w:
        blocks = GPUBlocks.from_arrays(w, start).send_gpu().cache_gpu()
        halos = blocks.extract_halo(dom).recv_gpu()  # the shuffle: here all blocks are on one worker
        filled = blocks.append_halo(dom, halos).recv_gpu()
        assert w.round_trips == 3
    for b in dom:
        idx = [np.arange(lo - dom.ghost, hi + dom.ghost) for lo, hi in zip(b.lo, b.hi)]
        inside = [(i >= 0) & (i < n) for i, n in zip(idx, dims)]
        if periodic:
            want = glob[np.ix_(*[i % n for i, n in zip(idx, dims)])]
            np.testing.assert_array_equal(filled[b.gid], want)
        else:
            mask = inside[0][:, None, None] & inside[1][None, :, None] & inside[2][None, None, :]
            want = glob[np.ix_(*[np.clip(i, 0, n - 1) for i, n in zip(idx, dims)])]
            np.testing.assert_array_equal(filled[b.gid][mask], want[mask])
            assert np.isnan(filled[b.gid][~mask]).all()  # outside the domain: untouched
