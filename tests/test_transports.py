"""Transport registry, per-pair choice and CUDA-aware MPI detection."""

import pytest

from insitu import transports
from insitu.transports import PeerInfo, choose, get_transport, mpi_cuda_aware


def info(rank, host="n0", backend="cupy", device="0000:01:00.0", peers=()):
    return PeerInfo(rank, host, 1000 + rank, backend, device if backend == "cupy" else None, tuple(peers))


@pytest.fixture
def with_nccl(monkeypatch):
    monkeypatch.setattr(transports, "nccl_available", lambda: True)


def test_registry_names_known_transports():
    assert get_transport("mpi") is transports.MPITransport
    with pytest.raises(ValueError, match="unknown transport 'ucx'; known transports: inproc, mpi, nccl, ipc, p2p"):
        get_transport("ucx")


def test_choice_per_pair(with_nccl):
    a, b = info(0), info(1)
    other_gpu = info(1, device="0000:02:00.0")
    other_node = info(1, host="n1", device="0000:02:00.0")
    assert choose(a, a) == "inproc"
    assert choose(info(0, backend="numpy"), info(1, backend="numpy")) == "mpi"
    assert choose(a, b) == "ipc"  # same node, same GPU
    assert choose(a, other_gpu, [a, other_gpu]) == "nccl"  # one rank per GPU
    assert choose(a, other_node, [a, other_node]) == "nccl"
    # A GPU shared by two ranks on this node: NCCL's spinning kernels would stall it.
    crowd = [a, other_gpu, info(2), info(3, device="0000:02:00.0")]
    assert choose(a, other_gpu, crowd) == "ipc"


def test_persistent_patterns_use_p2p_between_gpus_that_reach_each_other(with_nccl):
    gpu0, gpu1, gpu2 = "0000:01:00.0", "0000:02:00.0", "0000:03:00.0"
    a = info(0, device=gpu0, peers=[gpu1])
    b = info(1, device=gpu1, peers=[gpu0])
    assert choose(a, b, [a, b], persistent=True) == "p2p"
    assert choose(a, b, [a, b]) == "nccl"  # per-call patterns (shuffles) keep NCCL's cached communicators
    c = info(1, device=gpu2, peers=[gpu0])  # gpu0 does not reach gpu2: both ends must see the link
    assert choose(a, c, [a, c], persistent=True) == choose(c, a, [a, c], persistent=True) == "nccl"
    shared = [a, b, info(2, device=gpu1, peers=[gpu0])]  # a spinning wait would stall gpu1's other rank
    assert choose(a, b, shared, persistent=True) == "ipc"
    far = info(1, host="n1", device=gpu1, peers=[gpu0])
    assert choose(a, far, [a, far], persistent=True) == "nccl"


def test_choice_is_symmetric(with_nccl):
    everyone = [info(0), info(1), info(2, device="0000:02:00.0"), info(3, host="n1"),
                info(4, backend="numpy")]
    linked = [info(5, device="0000:03:00.0", peers=["0000:04:00.0"]),
              info(6, device="0000:04:00.0", peers=["0000:03:00.0"])]
    everyone += linked
    for p in everyone:
        for q in everyone:
            for persistent in (False, True):
                assert choose(p, q, everyone, persistent=persistent) == choose(q, p, everyone, persistent=persistent)
    assert choose(*linked, everyone, persistent=True) == "p2p"


def test_without_nccl_other_gpus_fall_back(monkeypatch):
    monkeypatch.setattr(transports, "nccl_available", lambda: False)
    a = info(0)
    assert choose(a, info(1, device="0000:02:00.0")) == "ipc"
    assert choose(a, info(1, host="n1")) == "mpi"


def test_cuda_aware_detection(monkeypatch):
    mpi_cuda_aware.cache_clear()
    # The mpich wheel (and the GPU node's Debian Open MPI) is built without CUDA.
    assert mpi_cuda_aware() is False
    mpi_cuda_aware.cache_clear()
    monkeypatch.setenv("INSITU_MPI_CUDA_AWARE", "1")
    assert mpi_cuda_aware() is True
    mpi_cuda_aware.cache_clear()


def test_p2p_refuses_host_arrays():
    import numpy as np

    from insitu.transports import P2PTransport, TransportContext

    with pytest.raises(ValueError, match="transport 'p2p' moves device arrays only; use 'mpi' for host arrays"):
        P2PTransport(TransportContext(None, 0, [], 1.0), {}, {}, np.zeros(4))


def test_override_is_checked_and_applied_per_peer(with_nccl):
    from insitu.transports import check_override, choose_peers

    check_override(None)
    check_override({1: "ipc", 2: "mpi"})
    with pytest.raises(ValueError, match="transport 'inproc' serves only blocks of the same rank; for other ranks"):
        check_override({1: "inproc"})
    with pytest.raises(ValueError, match="unknown transport 'tcp'; known transports: inproc, mpi, nccl, ipc, p2p"):
        check_override("tcp")
    everyone = [info(0), info(1, host="n1"), info(2, backend="numpy")]
    assert choose_peers(everyone[0], [1, 2], everyone) == {1: "nccl", 2: "mpi"}
    assert choose_peers(everyone[0], [1, 2], everyone, "mpi") == {1: "mpi", 2: "mpi"}
    assert choose_peers(everyone[0], [1, 2], everyone, {1: "ipc"}) == {1: "ipc", 2: "mpi"}


def test_pairs_are_checked_from_both_ends(with_nccl, monkeypatch):
    from insitu import MismatchError
    from insitu.transports import check_pairs

    everyone = [info(0), info(1, host="n1"), info(2, backend="numpy")]
    pairs = [(1, 2), (0, 1), (0, 2)]
    check_pairs(everyone, [None] * 3, pairs, "test")
    check_pairs(everyone, ["mpi"] * 3, pairs, "test")
    # One end naming a pair is enough when the other end's default agrees.
    check_pairs(everyone, [{2: "mpi"}, None, None], pairs, "test")
    check_pairs(everyone, [{1: "mpi"}, {0: "mpi"}, None], pairs, "test")
    with pytest.raises(MismatchError, match="test: rank 0 chose transport 'mpi' for rank 1, rank 1 chose 'nccl' "
                                            "for rank 0; both ends of a pair must choose the same"):
        check_pairs(everyone, [{1: "mpi"}, None, None], pairs, "test")
    with pytest.raises(MismatchError, match="rank 1 chose transport 'ipc' for rank 2, rank 2 chose 'mpi'"):
        check_pairs(everyone, [None, {2: "ipc"}, {0: "mpi"}], pairs, "test")
    # Pairs no override names cost nothing: the default is the same at both ends.
    monkeypatch.setattr(transports, "choose", lambda *a, **k: pytest.fail("choose called"))
    check_pairs(everyone * 1000, [None] * 3000, [(i, i + 1) for i in range(2999)], "test")


def test_open_transports_groups_peers_by_name():
    import numpy as np

    from insitu.transports import TransportContext, open_transports

    area = np.zeros(8)
    send = {1: area[0:2], 2: area[2:4], 3: area[4:5]}
    recv = {1: area[5:6], 3: area[6:8]}
    ts = open_transports(TransportContext(None, 0, [], 1.0), {3: "mpi", 1: "mpi"}, send, recv, area)
    assert [t.name for t in ts] == ["mpi"] and ts[0].peers == [1, 3]
    assert set(ts[0].send) == {1, 3} and ts[0].recv[3] is recv[3]
    assert ts[0].label == "mpi"  # host data: nothing staged


def test_open_transports_gives_options_only_to_the_transport_they_name():
    import numpy as np

    from insitu.transports import TransportContext, open_transports

    area = np.zeros(4)
    ctx = TransportContext(None, 0, [], 1.0)
    # MPITransport takes no item_flags: p2p's options must not reach it.
    (t,) = open_transports(ctx, {1: "mpi"}, {1: area[:2]}, {1: area[2:]}, area, {"p2p": {"item_flags": {1: 3}}})
    assert t.name == "mpi" and t.peers == [1]
    with pytest.raises(TypeError, match="item_flags"):
        open_transports(ctx, {1: "mpi"}, {1: area[:2]}, {1: area[2:]}, area, {"mpi": {"item_flags": {1: 3}}})


def test_override_signature_is_what_ranks_compare():
    from insitu.transports import override_signature

    assert override_signature(None) is None
    assert override_signature("ipc") == "ipc"
    # Per-peer maps name different peers on each rank: only their kind is compared.
    assert override_signature({1: "ipc"}) == override_signature({0: "mpi", 2: "p2p"}) == "per-peer"


def test_allgather_object_on_one_rank_round_trips_large_objects():
    import time

    import numpy as np
    from mpi4py import MPI

    from insitu.transports import allgather_object

    big = {"a": np.arange(100_000), "b": "x" * 70_000}
    (got,) = allgather_object(MPI.COMM_SELF, big, time.monotonic() + 5, "test")
    np.testing.assert_array_equal(got["a"], big["a"])
    assert got["b"] == big["b"]
