"""The eikonal filter runs solvers.eikonal.EikonalSolver: the same answer as the solver run
directly on the same blocks, its steps, the job's Context for reductions and agreement."""

import numpy as np
import pytest

import adaptors
from adaptors.mesh import parse
from adaptors.context import Context
from adaptors.pipelines import run_pipeline
from insitu import Domain
from solvers.eikonal import EikonalSolver

from blocks import block_domains

DIMS, H = (21, 17, 13), 0.1
SEED = (0.3, 0.4, 0.5)  # world point: node (3, 4, 5)


def eikonal(domains, ctx, **params):
    cfg = adaptors.load({"pipelines": {"p": {"e": {"type": "eikonal", "params": {
        "seeds": [list(SEED)], "output": "T", **params}}}}})
    ds = run_pipeline("p", cfg["pipelines"]["p"], parse(domains), ctx, {})
    return [d.vertex_values("T") for d in ds.domains]


@pytest.mark.parametrize("speed", ["s", "2.5"], ids=["field", "constant"])
@pytest.mark.parametrize("tol,max_iter", [(0.0, 10000), (1e-3, 10000), (0.0, 3)],
                         ids=["converged", "tol", "max_iter"])
def test_filter_equals_eikonal_solver_run_directly(speed, tol, max_iter):
    dom = Domain.create(DIMS, blocks=(2, 2, 1), spacing=(H,) * 3)
    s = 1 + np.random.default_rng(0).random(DIMS)
    domains, slices = block_domains(dom, {"s": s})
    ours = eikonal(domains, Context(), speed=speed, tol=tol, max_iter=max_iter)
    with EikonalSolver(dom, s if speed == "s" else np.full(DIMS, 2.5), [(3, 4, 5)]) as solver:
        solver.solve(tol, max_iter, on_limit="stop")
        ref = solver.gather()
    ref[np.isinf(ref)] = np.nan
    if max_iter == 3:
        assert np.isnan(ref).any()  # stopped before the front crossed the grid
    for T, sl in zip(ours, slices):
        np.testing.assert_array_equal(T, ref[sl])


def test_the_filter_steps_eikonal_solver(monkeypatch):
    made, steps = [], []
    init, step = EikonalSolver.__init__, EikonalSolver.step

    def recording_init(self, *args, **kwargs):
        made.append(kwargs)
        init(self, *args, **kwargs)

    def recording_step(self, *args, **kwargs):
        steps.append(self)
        return step(self, *args, **kwargs)

    monkeypatch.setattr(EikonalSolver, "__init__", recording_init)
    monkeypatch.setattr(EikonalSolver, "step", recording_step)
    dom = Domain.create(DIMS, blocks=(3, 1, 1), spacing=(H,) * 3)
    domains, _ = block_domains(dom, {"s": np.ones(DIMS)})
    ctx = Context(timeout=12.5)
    eikonal(domains, ctx, speed="s", tol=0.0, max_iter=4)
    assert len(made) == 1 and made[0]["collectives"] is ctx and made[0]["timeout"] == 12.5
    assert len(steps) == 4 and steps[-1].iteration == 4


def test_the_filters_times_are_the_solvers(monkeypatch):
    # A step that solves nothing: only the seed has a time.
    monkeypatch.setattr(EikonalSolver, "step", lambda self, profile=None: 0.0)
    dom = Domain.create(DIMS, blocks=(2, 1, 1), spacing=(H,) * 3)
    domains, slices = block_domains(dom, {"s": np.ones(DIMS)})
    whole = np.full(DIMS, np.nan)
    whole[3, 4, 5] = 0.0
    for T, sl in zip(eikonal(domains, Context(), speed="s"), slices):
        np.testing.assert_array_equal(T, whole[sl])


class RecordingContext(Context):
    def __init__(self) -> None:
        super().__init__()
        self.calls = []

    def allreduce(self, value, op, *, what=None):
        self.calls.append(("allreduce", op))
        return super().allreduce(value, op, what=what)

    def agree(self, error, what):
        self.calls.append(("agree", what, type(error).__name__ if error else None))
        super().agree(error, what)


def test_the_solver_agrees_and_reduces_through_the_context():
    dom = Domain.create(DIMS, blocks=(2, 1, 1), spacing=(H,) * 3)
    s = np.ones(DIMS)
    domains, _ = block_domains(dom, {"s": s})
    ctx = RecordingContext()
    eikonal(domains, ctx, speed="s", tol=0.0, max_iter=5)
    assert ctx.calls == [("agree", "pipelines: eikonal layout", None), ("agree", "eikonal: set-up", None)] + \
        [("allreduce", "max")] * 5
    # A speed that is not positive fails the set-up, through the agreement.
    s[15, 2, 2] = 0.0
    domains, _ = block_domains(dom, {"s": s})
    ctx = RecordingContext()
    with pytest.raises(ValueError, match="speed: must be finite and > 0 everywhere; found values <= 0 in block 1"):
        eikonal(domains, ctx, speed="s")
    assert ctx.calls[-1] == ("agree", "eikonal: set-up", "ValueError")


@pytest.mark.mpi
@pytest.mark.parametrize("nranks", [2, 3])
def test_filter_on_ranks_equals_eikonal_solver_and_agrees_on_failures(mpi, nranks):
    # tests/mpi/eikonal_filter_check.py: bit-equal to EikonalSolver on the same ranks; a
    # zero speed on the last rank fails every rank at the set-up agreement.
    p = mpi(nranks, "eikonal_filter_check.py", env={"NUMBA_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"OK ranks={nranks}" in p.stdout, p.stdout + p.stderr
