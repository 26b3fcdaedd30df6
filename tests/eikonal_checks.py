"""Checks shared by the eikonal tests of both backends (NumPy in tests/, CuPy in tests/gpu/).

Import as ``from eikonal_checks import ...`` (``tests/`` is on ``sys.path`` through pytest's
rootdir conftest, as for :mod:`fakes`).
"""

from solvers.eikonal import EikonalSolver
from solvers.eikonal.speed import random_smooth


def assert_skipping_idle_tiles_changes_nothing(dom, xp, *, local_iters: int, max_steps: int, early: int) -> None:
    """Solve on `dom` with and without skipping idle tiles; every step (change, blocks,
    display copy) must be equal bit for bit, both must converge at the same iteration,
    and within the first `early` steps most tiles of one block (some of split blocks)
    must have been skipped."""
    runs = [EikonalSolver(dom, random_smooth(seed=3), [(10, 12, 14)], xp=xp, local_iters=local_iters,
                          skip_idle=skip) for skip in (True, False)]
    views = [r.display_copy(clip=0.4) for r in runs]
    visited = []
    for _ in range(max_steps):
        changes = [r.step() for r in runs]
        assert changes[0] == changes[1]
        for g in runs[0].blocks:
            xp.testing.assert_array_equal(runs[0].blocks[g], runs[1].blocks[g])
            xp.testing.assert_array_equal(views[0][g], views[1][g])
        visited.append(min(t.fraction() for t in runs[0]._tiles.values()))
        if changes[0] == 0:
            break
    assert changes[0] == 0 and runs[0].iteration == runs[1].iteration
    # Early on most tiles are idle and skipped (split blocks keep their face tiles awake).
    assert min(visited[:early]) < (0.5 if dom.nblocks == 1 else 1.0)
    assert runs[1]._tiles == {}
