"""The shuffle manager and the embedded engine with CuPy blocks: IPC, NCCL, no host copies."""

import re

import numpy as np
import pytest

import insitu
from insitu import Domain
from insitu.pool import GPUBlocks, GPUShuffleManager, Worker

cp = pytest.importorskip("cupy", reason="needs CuPy")
ONE_GPU = {"CUDA_VISIBLE_DEVICES": "0"}


def test_halo_shuffle_on_one_worker_makes_no_host_copies(tmp_path):
    dims = (40, 36, 30)
    glob = np.random.default_rng(0).random(dims).astype(np.float32)
    dom = Domain.create(dims, blocks=(2, 2, 2), ghost=2, periodic=True)
    blocks = {}
    for b in dom:
        a = np.full(b.padded_shape, np.nan, np.float32)
        a[b.interior] = glob[tuple(slice(lo, hi) for lo, hi in zip(b.lo, b.hi))]
        blocks[b.gid] = insitu.to_device(a)
    with Worker(0, spill_dir=str(tmp_path)) as w:
        mgr = GPUShuffleManager(w)
        with insitu.no_host_transfers():
            filled = mgr.gpu_shuffle(GPUBlocks.from_arrays(w, blocks), "halo", domain=dom).cache_gpu()
            got = filled.recv_gpu(host=False)
        assert all(isinstance(a, cp.ndarray) for a in got.values())
    padded = np.pad(glob, 2, mode="wrap")
    for b in dom:
        want = padded[tuple(slice(lo, hi + 4) for lo, hi in zip(b.lo, b.hi))]
        np.testing.assert_array_equal(cp.asnumpy(got[b.gid]), want)


def test_init_gl_on_the_gpu_worker(tmp_path):
    with Worker(0, spill_dir=str(tmp_path)) as w:
        GPUBlocks.from_arrays(w, {}).init_gl()
        assert "GLContext" in repr(w._gl)


def _transfers(out):
    m = re.search(r"OK ranks=(\d+) transfers=(\d+)", out)
    assert m, out
    return int(m.group(2))


@pytest.mark.mpi
@pytest.mark.parametrize("nranks", [2, 3])
def test_ranks_sharing_a_gpu_shuffle_over_ipc_without_host_copies(mpi, tmp_path, nranks):
    p = mpi(nranks, "engine_check.py", tmp_path, "--backend", "cupy", "--no-budget", env=ONE_GPU)
    assert p.returncode == 0, p.stdout + p.stderr
    assert _transfers(p.stdout) == 0


@pytest.mark.mpi
def test_engine_under_a_small_gpu_budget_spills_and_still_agrees(mpi, tmp_path):
    p = mpi(2, "engine_check.py", tmp_path, "--backend", "cupy", env=ONE_GPU)
    assert p.returncode == 0, p.stdout + p.stderr
    assert _transfers(p.stdout) > 0  # the spills to pinned host memory, counted


@pytest.mark.mpi
@pytest.mark.gpus(2)
def test_two_gpus_shuffle_over_nccl_without_host_copies(mpi, tmp_path):
    p = mpi(2, "engine_check.py", tmp_path, "--backend", "cupy", "--no-budget")
    assert p.returncode == 0, p.stdout + p.stderr
    assert _transfers(p.stdout) == 0
