import os

import pytest

from insitu.launch import run_mpi

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MPI_DIR = os.path.join(ROOT, "tests", "mpi")


@pytest.fixture
def mpi():
    """Run a script from tests/mpi/ under mpiexec: ``mpi(n, "script.py", *args)``.

    An absolute path runs that file; ``"-m"`` runs a module (``mpi(n, "-m", "pkg", ...)``).
    """

    def _run(n, script, *args, timeout=300, env=None):
        path = script if os.path.isabs(script) or script.startswith("-") else os.path.join(MPI_DIR, script)
        e = {"PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
        e.update(env or {})
        return run_mpi(n, [path, *map(str, args)], timeout=timeout, env=e)

    return _run
