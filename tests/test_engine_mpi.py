"""The embedded engine under mpiexec: halo/key shuffles and moves equal a NumPy reference."""

import pytest

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_engine_pipeline_equals_single_array(mpi, tmp_path, nranks):
    # engine_check.py: Jacobi sweeps with a halo shuffle before each under a cache budget
    # smaller than the blocks, a key shuffle of partial sums, moves there and back.
    p = mpi(nranks, "engine_check.py", tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"OK ranks={nranks}" in p.stdout


@pytest.mark.parametrize("fault,message", [
    ("silent", "rank 0: PeerTimeoutError: shuffle on rank 0: rank(s) [1] did not answer in time"),
    ("badrank", "rank 0: ValueError: shuffle: item 0 (tag 0) goes to rank 9; the job has ranks 0..1"),
])
def test_shuffle_faults_are_named(mpi, fault, message):
    p = mpi(2, "engine_faults.py", fault, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert message in p.stdout
