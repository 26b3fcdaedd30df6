"""The adaptor under mpiexec: the composited frame equals a one-process render of the whole field."""

import pytest

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_decomposed_frame_equals_whole_field_render(mpi, tmp_path, nranks):
    # adaptor_check.py: contour + pseudocolor + volume of blocks with ghost cells on N
    # ranks, against one process holding the whole field; eikonal filter against the
    # whole-grid solve.
    p = mpi(nranks, "adaptor_check.py", tmp_path, env={"NUMBA_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"OK ranks={nranks}" in p.stdout
