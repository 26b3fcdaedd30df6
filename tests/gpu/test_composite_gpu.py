"""Sort-last compositing of CuPy images over insitu.transports: CUDA IPC between ranks of one GPU,
p2p/NCCL between GPUs, all without host copies; forced MPI staged and counted; references on device.

Multi-rank cases run tests/mpi/composite_check.py under mpirun (-n 2, 3, 4)."""

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
@pytest.mark.parametrize("nranks", [2, 3, 4])
def test_ranks_sharing_one_gpu_composite_over_cuda_ipc_without_host_copies(mpi, nranks):
    # Every method x depth and over (rank, permuted, reversed order) x three sizes, the
    # root moving around, equal to the single-rank references; the calls run inside
    # insitu.no_host_transfers(), so a single counted host<->device copy fails the run.
    p = mpi(nranks, "composite_check.py", "--backend", "cupy", "--no-host-transfers", "--expect-transport", "ipc",
            env=ONE_GPU)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"OK ranks={nranks} backend=cupy" in p.stdout
    assert _transports(p.stdout) == (["ipc"], 0)


@pytest.mark.mpi
@pytest.mark.gpus(2)
@pytest.mark.parametrize("args", [["--transport", "nccl"], ["--nccl", "given"], ["--nccl", "on"]])
def test_two_gpus_nccl_without_host_copies(mpi, args):
    # --nccl on: the deprecated nccl=True, which means transport="nccl".
    p = mpi(2, "composite_check.py", "--backend", "cupy", *args, "--no-host-transfers", "--expect-transport", "nccl")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "OK ranks=2 backend=cupy" in p.stdout
    assert _transports(p.stdout) == (["nccl"], 0)


@pytest.mark.mpi
@pytest.mark.gpus(2)
def test_two_gpus_default_choice_without_host_copies(mpi):
    # p2p where the two GPUs reach each other (NVLink), else NCCL: as the halo chooses.
    # p2p's set-up uploads its flag addresses once (counted), so each configuration is
    # set up by a first call and the second call is the one that must make no transfer.
    p = mpi(2, "composite_check.py", "--backend", "cupy", "--repeat", "--no-host-transfers")
    assert p.returncode == 0, p.stdout + p.stderr
    kinds, calls = _transports(p.stdout)
    rt = cp.cuda.runtime
    want = "p2p" if rt.deviceCanAccessPeer(0, 1) and rt.deviceCanAccessPeer(1, 0) else "nccl"
    assert (kinds, calls) == ([want], 0)


@pytest.mark.mpi
@pytest.mark.gpus(2)
def test_four_ranks_on_two_gpus_use_cuda_ipc(mpi):
    # Two ranks per GPU: NCCL's spinning kernels would stall the GPU's other rank, so
    # every pair, on one GPU or across the two, copies over CUDA IPC.
    p = mpi(4, "composite_check.py", "--backend", "cupy", "--no-host-transfers")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "OK ranks=4 backend=cupy" in p.stdout
    assert _transports(p.stdout) == (["ipc"], 0)


@pytest.mark.mpi
@pytest.mark.parametrize("nranks", [2, 3])
def test_mpi_forced_on_one_gpu_stages_through_the_counted_gateway(mpi, nranks):
    p = mpi(nranks, "composite_check.py", "--backend", "cupy", "--transport", "mpi", "--sizes", "37x53", "64x64",
            env=ONE_GPU)
    assert p.returncode == 0, p.stdout + p.stderr
    kinds, calls = _transports(p.stdout)
    if insitu.transports.mpi_cuda_aware():
        assert (kinds, calls) == (["mpi-cuda-aware"], 0)
    else:
        assert kinds == ["mpi-staged"] and calls > 0


@pytest.mark.mpi
@pytest.mark.parametrize("args", [["--transport", "nccl"], ["--nccl", "on"]])
def test_nccl_demanded_on_a_shared_gpu_is_a_clear_error(mpi, args):
    p = mpi(2, "composite_check.py", "--backend", "cupy", *args, "--sizes", "8x8", env=ONE_GPU)
    assert p.returncode != 0
    assert "transport 'nccl' needs one GPU per rank of a pair; ranks 0 and 1 share GPU" in p.stdout + p.stderr
