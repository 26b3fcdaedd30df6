"""Halo exchange under mpiexec: every ghost cell equals the global array there."""

import pytest

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("nranks", [1, 2, 3, 4, 6, 8])
@pytest.mark.parametrize("per_rank", [1, 3])
def test_ghosts_equal_global_array(mpi, nranks, per_rank):
    # halo_check.py loops over float32/float64, g = 1/2, non/fully/partly periodic,
    # with uneven splits, against np.pad of the global array.
    p = mpi(nranks, "halo_check.py", per_rank)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"OK ranks={nranks} blocks={nranks * per_rank}" in p.stdout


@pytest.mark.parametrize("fault,message", [
    ("silent", "halo exchange set-up on rank 0 (duplicating the communicator): some rank of the "
               "communicator did not answer in time"),
    ("stops", "MPI halo exchange on rank 0: rank(s) [1] did not answer in time"),
])
def test_silent_peer_times_out(mpi, fault, message):
    # Rank 1 stays away for 4 s; rank 0 (timeout 2 s) must raise, not hang.
    p = mpi(2, "halo_faults.py", fault, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "rank 0: PeerTimeoutError" in p.stdout
    assert message in p.stdout


def test_rank_arriving_after_the_others_gave_up_times_out_too(mpi):
    # A second set-up (new dtype) after one exchange: rank 0 (timeout 1 s) gives up,
    # rank 1 comes 3 s late (timeout 2 s). It must get PeerTimeoutError too, not
    # complete rank 0's abandoned half of a collective and block in the next one.
    p = mpi(2, "halo_faults.py", "late", timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    for r in (0, 1):
        assert (f"rank {r}: PeerTimeoutError: halo exchange set-up on rank {r}: some rank of the communicator "
                "did not answer in time") in p.stdout, p.stdout


@pytest.mark.parametrize("fault,message", [
    ("dtype", "rank 1 has dtype 'float64', rank 0 has 'float32'"),
    ("ghost", "rank 1 has ghost width 2, rank 0 has 1"),
    ("transport", "rank 1 has transport override 'mpi', rank 0 has None"),
    ("pairs", "halo exchange: rank 0 chose transport 'ipc' for rank 1, rank 1 chose 'mpi' for rank 0; "
              "both ends of a pair must choose the same"),
])
def test_mismatch_across_ranks_is_named(mpi, fault, message):
    p = mpi(2, "halo_faults.py", fault, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "rank 0: MismatchError" in p.stdout
    assert message in p.stdout


@pytest.mark.parametrize("nranks", [2, 3])
def test_mpi_transport_conformance(mpi, nranks):
    p = mpi(nranks, "transport_check.py", "mpi")
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"OK transport=mpi ranks={nranks}" in p.stdout
