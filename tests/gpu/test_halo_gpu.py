"""Halo exchange of CuPy blocks: same-device, CUDA IPC, NCCL and staged MPI paths."""

import re

import numpy as np
import pytest

import insitu
from insitu import Domain, HaloExchange

cp = pytest.importorskip("cupy", reason="needs CuPy")
ONE_GPU = {"CUDA_VISIBLE_DEVICES": "0"}


def _summary(out):
    m = re.search(r"transports=(\[.*?\]) setup_bytes=(\d+) steady_calls=(\d+)", out)
    assert m, out
    return eval(m.group(1)), int(m.group(2)), int(m.group(3))


@pytest.mark.parametrize("graphs", [True, False])
@pytest.mark.parametrize("g", [1, 2])
def test_blocks_in_one_process(g, graphs):
    rng = np.random.default_rng(3)
    G = rng.standard_normal((40, 33, 37)).astype(np.float32)
    dom = Domain.create(G.shape, blocks=(2, 2, 2), ghost=g, periodic=(True, False, True))
    blocks = {b.gid: insitu.to_device(dom.extract(G, b.gid, ghost=False)) for b in dom}
    blocks = {gid: cp.pad(a, g, constant_values=-1) for gid, a in blocks.items()}
    ex = HaloExchange(dom, graphs=graphs)
    with insitu.count_transfers() as setup:
        ex.exchange(blocks)
    assert 0 < setup.h2d_bytes < 64 * 1024 and setup.d2h_calls == 0  # copy tables only
    spare = {gid: a.copy() for gid, a in blocks.items()}  # a second set of arrays (double buffering)
    with insitu.no_host_transfers():
        for _ in range(3):
            for a in blocks.values():
                a[...] = cp.where(_interior(a.shape, g), a, -1)  # spoil ghosts: each round refills
            ex.exchange(blocks)
    for a in spare.values():
        a[...] = cp.where(_interior(a.shape, g), a, -1)
    ex.exchange(spare)  # new arrays: a new pointer table (one small upload) and graph
    for got_set in (blocks, spare):
        _check(dom, G, got_set)


def _interior(shape, g):
    m = cp.zeros(shape, bool)
    m[g:-g, g:-g, g:-g] = True
    return m


def _check(dom, G, blocks):
    for b in dom:
        want = dom.extract(G, b.gid)  # reference padding of the global array (zeros outside)
        got = insitu.to_host(blocks[b.gid])
        inside = want != 0  # non-periodic outer ghosts stay as they were (-1)
        np.testing.assert_array_equal(got[inside], want[inside])


@pytest.mark.mpi
@pytest.mark.parametrize("nranks,per_rank", [(2, 1), (2, 3), (4, 2)])
def test_ranks_sharing_a_gpu_use_ipc_without_host_copies(mpi, nranks, per_rank):
    p = mpi(nranks, "halo_check.py", per_rank, "--backend", "cupy", env=ONE_GPU)
    assert p.returncode == 0, p.stdout + p.stderr
    kinds, _, steady = _summary(p.stdout)
    assert kinds == ["ipc"] and steady == 0


@pytest.mark.mpi
def test_forced_mpi_stages_through_counted_gateway(mpi):
    p = mpi(2, "halo_check.py", 1, "--backend", "cupy", "--transport", "mpi", env=ONE_GPU)
    assert p.returncode == 0, p.stdout + p.stderr
    kinds, _, steady = _summary(p.stdout)
    # MPI here is not CUDA-aware: 2 ranks x 2 exchanges x (1 down + 1 up).
    if insitu.transports.mpi_cuda_aware():
        assert steady == 0
    else:
        assert kinds == ["mpi"] and steady == 8


@pytest.mark.mpi
@pytest.mark.gpus(2)
@pytest.mark.parametrize("nranks,per_rank,force,kinds", [
    (2, 4, [], ["p2p"]),  # one rank per GPU, joined by NVLink: the default
    (2, 4, ["--transport", "nccl"], ["nccl"]),
    (4, 2, [], ["ipc"]),  # GPUs shared by two ranks each: peer-to-peer IPC across GPUs too
])
def test_two_gpus_without_host_copies(mpi, nranks, per_rank, force, kinds):
    p = mpi(nranks, "halo_check.py", per_rank, "--backend", "cupy", *force)
    assert p.returncode == 0, p.stdout + p.stderr
    got, _, steady = _summary(p.stdout)
    assert got == kinds and steady == 0


@pytest.mark.mpi
@pytest.mark.gpus(2)
@pytest.mark.parametrize("per_rank", [1, 4])
def test_p2p_between_two_gpus(mpi, per_rank):
    # Pushed over NVLink with device-side flags: every ghost right, graphs and eager
    # (halo_check runs both), and nothing through the host.
    p = mpi(2, "halo_check.py", per_rank, "--backend", "cupy", "--transport", "p2p")
    assert p.returncode == 0, p.stdout + p.stderr
    got, _, steady = _summary(p.stdout)
    assert got == ["p2p"] and steady == 0


@pytest.mark.mpi
@pytest.mark.gpus(2)
def test_p2p_with_several_peers_per_rank(mpi):
    # Three ranks on two GPUs, p2p forced between all pairs: each rank's one kernel per
    # exchange writes to two peers and waits on two (per-peer flags, item numbering).
    # Ranks 0 and 2 share GPU 0, time-sliced: slow, but every wait has its timeout.
    p = mpi(3, "halo_check.py", 1, "--backend", "cupy", "--transport", "p2p", timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    got, _, steady = _summary(p.stdout)
    assert got == ["p2p"] and steady == 0


@pytest.mark.mpi
@pytest.mark.gpus(2)
def test_p2p_peer_that_stops_times_out_on_the_device(mpi):
    # Rank 1 exchanges once and stops; rank 0's device-side wait gives up after the
    # timeout (2 s) and the host raises PeerTimeoutError instead of hanging.
    p = mpi(2, "halo_faults.py", "stops", "cupy:p2p", timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "rank 0: PeerTimeoutError" in p.stdout, p.stdout + p.stderr


@pytest.mark.mpi
@pytest.mark.gpus(2)
def test_a_rank_arriving_after_the_others_gave_up_times_out_on_the_device(mpi):
    # Both set up again after one exchange; rank 0 gives up after 1 s, rank 1 comes 3 s
    # later: it times out in the set-up too instead of waiting for a collective rank 0 left.
    p = mpi(2, "halo_faults.py", "late", "cupy:p2p", timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    for r in (0, 1):
        assert f"rank {r}: PeerTimeoutError: halo exchange set-up on rank {r}" in p.stdout, p.stdout + p.stderr


@pytest.mark.mpi
@pytest.mark.parametrize("name,nranks,env", [
    ("ipc", 3, ONE_GPU), ("mpi", 2, ONE_GPU),
    pytest.param("nccl", 2, {}, marks=pytest.mark.gpus(2)),
    pytest.param("p2p", 2, {}, marks=pytest.mark.gpus(2)),
])
def test_transport_conformance_on_device(mpi, name, nranks, env):
    p = mpi(nranks, "transport_check.py", name, "--backend", "cupy", env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"OK transport={name} ranks={nranks}" in p.stdout
    staged = int(re.search(r"staged_calls=(\d+)", p.stdout).group(1))
    assert staged == 0 if name != "mpi" or insitu.transports.mpi_cuda_aware() else staged > 0
