"""Transport registry, per-pair choice and CUDA-aware MPI detection."""

import pytest

from insitu import transports
from insitu.transports import PeerInfo, choose, get_transport, mpi_cuda_aware


def info(rank, host="n0", backend="cupy", device="0000:01:00.0"):
    return PeerInfo(rank, host, 1000 + rank, backend, device if backend == "cupy" else None)


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


def test_choice_is_symmetric(with_nccl):
    everyone = [info(0), info(1), info(2, device="0000:02:00.0"), info(3, host="n1"),
                info(4, backend="numpy")]
    for p in everyone:
        for q in everyone:
            assert choose(p, q, everyone) == choose(q, p, everyone)


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
