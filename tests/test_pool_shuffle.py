"""The shuffle manager and the embedded engine in one process (MPI runs: test_engine_mpi.py)."""

import numpy as np
import pytest

from insitu import Domain
from insitu.engine import EmbeddedEngine, get_engine
from insitu.pool import GPUBlocks, GPUShuffleManager, Worker, stable_partition


def padded_blocks(dom, glob, fill=np.nan):
    out = {}
    for b in dom:
        a = np.full(b.padded_shape, fill)
        a[b.interior] = glob[tuple(slice(lo, hi) for lo, hi in zip(b.lo, b.hi))]
        out[b.gid] = a
    return out


def test_halo_shuffle_fills_ghosts_like_np_pad(tmp_path):
    dims = (12, 10, 9)
    glob = np.random.default_rng(0).random(dims)
    dom = Domain.create(dims, blocks=(2, 2, 2), ghost=2, periodic=True)
    with Worker(spill_dir=str(tmp_path)) as w:
        mgr = GPUShuffleManager(w)
        filled = mgr.gpu_shuffle(GPUBlocks.from_arrays(w, padded_blocks(dom, glob)), "halo", domain=dom).recv_gpu()
    padded = np.pad(glob, 2, mode="wrap")
    for b in dom:
        want = padded[tuple(slice(lo, hi + 4) for lo, hi in zip(b.lo, b.hi))]
        np.testing.assert_array_equal(filled[b.gid], want)


def test_key_shuffle_groups_values_in_block_order(tmp_path):
    with Worker(spill_dir=str(tmp_path)) as w:
        mgr = GPUShuffleManager(w)
        data = {0: {"a": np.array([1.0]), "b": np.array([2.0])}, 1: [("a", np.array([3.0]))]}
        grouped = mgr.gpu_shuffle(GPUBlocks.from_arrays(w, data), "key").recv_gpu()
    assert set(grouped) == {"a", "b"}
    assert [float(x[0]) for x in grouped["a"]] == [1.0, 3.0]
    assert [float(x[0]) for x in grouped["b"]] == [2.0]


def test_move_keeps_staying_blocks_and_drops_nothing_locally(tmp_path):
    with Worker(spill_dir=str(tmp_path)) as w:
        mgr = GPUShuffleManager(w)
        blocks = GPUBlocks.from_arrays(w, {0: np.zeros(4), 1: np.ones(4)}).cache_gpu()
        before = blocks.handles()
        after = mgr.move(blocks, {0: 0})  # one rank: everything stays
        assert after.handles() == before and len(w.cache) == 2


def test_stable_partition_is_the_same_in_every_process():
    import subprocess
    import sys

    keys = [0, 1, "a", ("x", 3), 2.5]
    here = [stable_partition(k, 7) for k in keys]
    code = f"from insitu.pool import stable_partition; print([stable_partition(k, 7) for k in {keys!r}])"
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": "123", **__import__("os").environ}).stdout
    assert there.strip() == repr(here)
    assert all(0 <= r < 7 for r in here)


def test_bad_shuffles_are_named(tmp_path):
    dom = Domain.create((8, 8, 8), blocks=(2, 1, 1), ghost=1, nranks=1)
    with Worker(spill_dir=str(tmp_path)) as w:
        mgr = GPUShuffleManager(w)
        blocks = GPUBlocks.from_arrays(w, {0: np.zeros(3)})
        with pytest.raises(ValueError, match="unknown shuffle 'sort'; expected 'key' or 'halo'"):
            mgr.gpu_shuffle(blocks, "sort")
        with pytest.raises(ValueError, match="needs domain="):
            mgr.gpu_shuffle(blocks, "halo")
        with pytest.raises(ValueError, match=r"block\(s\) \[5\] are not owned by this rank"):
            mgr.gpu_shuffle(GPUBlocks.from_arrays(w, {5: np.zeros(3)}), "halo", domain=dom)
        with pytest.raises(TypeError, match="block 0 must yield a mapping"):
            mgr.gpu_shuffle(blocks, "key")
        with pytest.raises(ValueError, match=r"goes to rank 3; the job has ranks 0..0"):
            mgr.exchange([(3, "t", np.zeros(2))])
        with pytest.raises(ValueError, match="unknown transport 'tcp'"):
            GPUShuffleManager(w, transport="tcp")
        with Worker(spill_dir=str(tmp_path)) as other:
            with pytest.raises(ValueError, match="another worker"):
                GPUShuffleManager(other).gpu_shuffle(blocks, "key")


def test_engine_runs_a_pipeline_in_one_process(tmp_path):
    dims = (10, 8, 6)
    glob = np.random.default_rng(1).random(dims)
    dom = Domain.create(dims, blocks=(2, 2, 1), ghost=1, periodic=True)

    def pipeline(engine, blocks):
        return engine.gpu_shuffle(blocks, "halo", domain=dom).exec_gpu(lambda b: b * 2)

    with EmbeddedEngine(device=None, spill_dir=str(tmp_path)) as eng:
        out = eng.run(pipeline, eng.blocks(padded_blocks(dom, glob), domain=dom))
        gathered = eng.gather(out)
    padded = np.pad(glob, 1, mode="wrap") * 2
    for b in dom:
        np.testing.assert_array_equal(gathered[b.gid], padded[tuple(slice(lo, hi + 2) for lo, hi in zip(b.lo, b.hi))])


def test_engine_errors(tmp_path):
    dom = Domain.create((8, 8, 8), blocks=(2, 1, 1), ghost=1)
    with EmbeddedEngine(device=None, spill_dir=str(tmp_path)) as eng:
        with pytest.raises(ValueError, match=r"expected blocks \[0, 1\] of the domain, got \[0\]"):
            eng.blocks({0: np.zeros((6, 10, 10))}, domain=dom)
        with pytest.raises(ValueError, match=r"block 1 has shape \(3,\), expected \(6, 10, 10\)"):
            eng.blocks({0: np.zeros((6, 10, 10)), 1: np.zeros(3)}, domain=dom)

        def broken(engine):
            raise KeyError("field 'T'")

        with pytest.raises(KeyError) as err:
            eng.run(broken)
        assert any("pipeline 'broken' on rank 0 of 1" in n for n in err.value.__notes__)
    with pytest.raises(ValueError, match="unknown engine .flink.; known engines: embedded, spark"):
        get_engine("flink")
    assert get_engine("embedded") is EmbeddedEngine
