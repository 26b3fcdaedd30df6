"""EikonalSolver.display_ranges on the GPU: reduced by the sweep that writes the display
copy, equal to insitu.ranges.tile_ranges of the copies (and the NumPy loop of
tests/test_ranges.py) after every step, with no host transfers while stepping."""

import math

import numpy as np
import pytest

import insitu
from insitu import Domain
from insitu.ranges import TileRanges, tile_grid, tile_ranges
from solvers.eikonal import DISPLAY_SPAN, EikonalSolver, _gpu
from solvers.eikonal.speed import random_smooth

cp = pytest.importorskip("cupy", reason="needs CuPy")

from test_ranges import reference  # noqa: E402

SPAN = (32, 4, 32)


def assert_ranges_of(r, view, span) -> None:
    """`r` (ranges array or TileRanges) is the tile ranges of `view`, exactly."""
    values = r.values if isinstance(r, TileRanges) else r
    cp.testing.assert_array_equal(values, tile_ranges(view, span).values)
    np.testing.assert_array_equal(cp.asnumpy(values), reference(cp.asnumpy(view), span))


@pytest.mark.parametrize("clip", [0.5, math.inf], ids=["clip", "inf"])
@pytest.mark.parametrize("blocks", [(1, 1, 1), (2, 1, 1)], ids=["one-block", "two-blocks"])
@pytest.mark.parametrize("local_iters", [1, 3])
@pytest.mark.parametrize("skip_idle", [True, False], ids=["skip-idle", "full"])
def test_display_ranges_follow_every_step(skip_idle, local_iters, blocks, clip):
    # 100^3 (padded blocks of several tiles along every axis, the last ones shorter), a
    # seed near a corner: most tiles idle for many steps when skip_idle is on.
    dom = Domain.create((100, 100, 100), blocks=blocks, spacing=(0.01, 0.01, 0.01))
    s = EikonalSolver(dom, random_smooth(seed=4), [(3, 4, 5)], xp=cp, local_iters=local_iters,
                      skip_idle=skip_idle)
    views = s.display_copy(clip=clip)
    held = s.display_ranges()  # updated in place by the sweeps
    first = {g: r.values.copy() for g, r in held.items()}
    seen = {"nan": False, "finite": False}
    visited = []

    def check() -> None:
        now = s.display_ranges()
        for g, v in views.items():
            r = now[g]
            assert isinstance(r, TileRanges) and r.values is held[g].values
            assert isinstance(r.values, cp.ndarray) and r.values.dtype == cp.float64
            assert r.span == SPAN and r.shape == v.shape and r.values.shape == (*tile_grid(v.shape, SPAN), 2)
            assert_ranges_of(r, v, SPAN)
            seen["nan"] |= bool(cp.isnan(r.values).any())
            seen["finite"] |= bool(cp.isfinite(r.values).any())

    check()
    for _ in range(40):
        with insitu.no_host_transfers(allow_scalars=True) as c:
            s.step()
        assert c.calls == 0 and c.scalar_reads == 1  # the global change only
        check()
        if skip_idle:
            visited.append(min(t.fraction() for t in s._tiles.values()))
    assert seen["nan"] == (clip == math.inf)
    if skip_idle:
        assert min(visited) < 0.5  # idle tiles were skipped, their ranges kept
    with insitu.no_host_transfers(allow_scalars=True) as c:
        steps = s.solve(max_iter=2000)
    assert c.calls == 0 and c.scalar_reads == steps - 40
    check()
    assert seen["finite"]
    assert any(not cp.array_equal(first[g], held[g].values, equal_nan=True) for g in held)


@pytest.mark.parametrize("skip_idle", [True, False], ids=["skip-idle", "full"])
def test_display_ranges_with_float32_travel_times(skip_idle):
    dom = Domain.create((70, 66, 90), blocks=(1, 2, 1), spacing=(0.03, 0.035, 0.025))
    s = EikonalSolver(dom, random_smooth(seed=2), [(4, 5, 6)], xp=cp, local_iters=3, precision="float32",
                      slowness="float32", skip_idle=skip_idle)
    views = s.display_copy(clip=0.7)
    for _ in range(25):
        with insitu.no_host_transfers(allow_scalars=True):
            s.step()
        for g, r in s.display_ranges().items():
            assert_ranges_of(r, views[g], SPAN)


@pytest.mark.parametrize("tile,chunk", [((32, 4), 32), ((8, 2), 16), ((16, 1), 8), ((64, 4), 32), ((32, 8), 16)])
@pytest.mark.parametrize("skip_idle", [True, False], ids=["skip-idle", "full"])
def test_sweep_ranges_for_every_launch_shape(tile, chunk, skip_idle):
    # Blocks of fewer than 32 threads (one partial warp) and of up to 8 warps: the ranges
    # are the view's with span (chunk, tile[1], tile[0]).
    shape, clip = (70, 50, 90), 12.0
    T = cp.full(shape, cp.inf)
    T[60, 7, 80] = 0
    out, w, frozen = T.copy(), cp.ones(shape, cp.float32), T == 0
    view = cp.minimum(T, clip).astype(cp.float32)
    span = (chunk, tile[1], tile[0])
    ranges = tile_ranges(view, span).values
    tiles = _gpu.ActiveTiles(shape, tile=tile, chunk=chunk) if skip_idle else None
    ch = cp.zeros(1, cp.uint64)
    fractions = []
    for _ in range(30):
        _gpu.sweep(T, out, w, frozen, 1.0, 1.0, 1.0, ch, view, clip, tiles=tiles, tile=tile, chunk=chunk,
                   ranges=ranges)
        T, out = out, T
        cp.testing.assert_array_equal(view, cp.minimum(T, clip).astype(cp.float32))
        assert_ranges_of(ranges, view, span)
        if tiles is not None:
            fractions.append(tiles.fraction())
    assert float(ranges[..., 0].min()) == 0.0 and float(ranges[..., 1].max()) == clip
    if tiles is not None:
        assert min(fractions) < 0.5


def test_sweep_ranges_are_checked_and_optional():
    shape = (40, 20, 36)
    T = cp.full(shape, cp.inf)
    T[5, 5, 5] = 0
    out, w, frozen, ch = T.copy(), cp.ones(shape), T == 0, cp.zeros(1, cp.uint64)
    view = cp.empty(shape, cp.float32)
    _gpu.sweep(T, out, w, frozen, 1.0, 1.0, 1.0, ch, view, 3.0)  # scratch ranges (bench_eikonal's call)
    cp.testing.assert_array_equal(view, cp.minimum(out, 3.0).astype(cp.float32))
    good = (*tile_grid(shape, DISPLAY_SPAN), 2)
    with pytest.raises(ValueError, match=r"ranges must be C-contiguous float64 \(2, 5, 2, 2\)"):
        _gpu.sweep(T, out, w, frozen, 1.0, 1.0, 1.0, ch, view, 3.0, ranges=cp.empty((2, 5, 1, 2)))
    with pytest.raises(ValueError, match="ranges must be C-contiguous float64"):
        _gpu.sweep(T, out, w, frozen, 1.0, 1.0, 1.0, ch, view, 3.0, ranges=cp.empty(good, cp.float32))
