"""Sort-last compositing of CuPy images: NCCL without host copies, staged MPI, references on device."""

import re

import numpy as np
import pytest
from mpi4py import MPI

import insitu
from render.composite import composite, depth_composite, over_composite

cp = pytest.importorskip("cupy", reason="needs CuPy")
ONE_GPU = {"CUDA_VISIBLE_DEVICES": "0"}


def _transports(out):
    m = re.search(r"transports=(\[.*?\]) host_transfers=(\d+)", out)
    assert m, out
    return eval(m.group(1)), int(m.group(2))


def _images(n, h=19, w=23):
    rng = np.random.default_rng(5)
    a = rng.random((n, h, w, 1)).astype(np.float32)
    rgba = np.concatenate([rng.random((n, h, w, 3)).astype(np.float32) * a, a], axis=3)
    depth = rng.integers(0, 3, (n, h, w)).astype(np.float32)
    depth[rng.random((n, h, w)) < 0.3] = np.inf
    return list(rgba), list(depth)


def test_references_on_device_equal_host():
    rgba, depth = _images(4)
    drgba, ddepth = [cp.asarray(a) for a in rgba], [cp.asarray(d) for d in depth]
    got = depth_composite(drgba, ddepth)
    want = depth_composite(rgba, depth)
    assert all(isinstance(g, cp.ndarray) for g in got)
    np.testing.assert_array_equal(cp.asnumpy(got[0]), want[0])
    np.testing.assert_array_equal(cp.asnumpy(got[1]), want[1])
    np.testing.assert_allclose(cp.asnumpy(over_composite(drgba)), over_composite(rgba), atol=1e-6)


def test_single_rank_stays_on_device():
    rgba, depth = _images(1)
    c, d = cp.asarray(rgba[0]), cp.asarray(depth[0])
    with insitu.no_host_transfers():
        out_c, out_d = composite(c, d, comm=MPI.COMM_SELF)
        out = composite(c, comm=MPI.COMM_SELF, mode="over")
    assert isinstance(out_c, cp.ndarray) and isinstance(out, cp.ndarray)
    assert bool((out_c == c).all()) and bool((out_d == d).all()) and bool((out == c).all())


@pytest.mark.mpi
@pytest.mark.gpus(2)
@pytest.mark.parametrize("nccl", ["on", "auto", "given"])
def test_two_gpus_nccl_without_host_copies(mpi, nccl):
    # The script fails if a host transfer was counted on the NCCL path.
    p = mpi(2, "composite_check.py", "--backend", "cupy", "--nccl", nccl, "--expect-transport", "nccl")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "OK ranks=2 backend=cupy" in p.stdout
    assert _transports(p.stdout) == (["nccl"], 0)


@pytest.mark.mpi
@pytest.mark.gpus(2)
def test_four_ranks_on_two_gpus_fall_back_to_mpi(mpi):
    # Two ranks per GPU: NCCL would refuse the communicator.
    p = mpi(4, "composite_check.py", "--backend", "cupy")
    assert p.returncode == 0, p.stdout + p.stderr
    kinds, calls = _transports(p.stdout)
    assert kinds == ["mpi-cuda-aware" if insitu.transports.mpi_cuda_aware() else "mpi-staged"]
    assert (calls == 0) == insitu.transports.mpi_cuda_aware()


@pytest.mark.mpi
@pytest.mark.parametrize("nranks", [2, 3])
def test_one_gpu_staged_through_the_counted_gateway(mpi, nranks):
    p = mpi(nranks, "composite_check.py", "--backend", "cupy", "--sizes", "37x53", "64x64", env=ONE_GPU)
    assert p.returncode == 0, p.stdout + p.stderr
    kinds, calls = _transports(p.stdout)
    if not insitu.transports.mpi_cuda_aware():
        assert kinds == ["mpi-staged"] and calls > 0


@pytest.mark.mpi
def test_nccl_demanded_on_a_shared_gpu_is_a_clear_error(mpi):
    p = mpi(2, "composite_check.py", "--backend", "cupy", "--nccl", "on", "--sizes", "8x8", env=ONE_GPU)
    assert p.returncode != 0
    assert "nccl=True needs NCCL in CuPy on every rank and one GPU per rank" in p.stdout + p.stderr
