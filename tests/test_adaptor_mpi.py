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


@pytest.mark.parametrize("nranks", [1, 3])
def test_spark_engine_frame_equals_whole_field_render(mpi, tmp_path, nranks):
    # The same job with engine: spark: the ranks hand their blocks to the node's worker
    # daemon and Spark tasks (local[2]) draw them; the reference is the embedded
    # one-process render.
    p = mpi(nranks, "adaptor_check.py", tmp_path, "spark", env={"NUMBA_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stdout + p.stderr[-4000:]
    assert f"OK ranks={nranks} engine=spark" in p.stdout
