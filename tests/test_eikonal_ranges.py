"""EikonalSolver.display_ranges on the CPU: the tile ranges of the display copies, current after every step."""

import math

import numpy as np
import pytest

from insitu import Domain
from insitu.ranges import TileRanges, tile_grid, tile_ranges
from solvers.eikonal import DISPLAY_SPAN, EikonalSolver, _gpu, update_block
from solvers.eikonal.speed import random_smooth

from test_ranges import reference  # the NumPy slicing loop (tests/ is on sys.path)

SPAN = (32, 4, 32)


def test_display_span_is_the_gpu_sweeps_thread_block():
    assert DISPLAY_SPAN == SPAN == (_gpu.CHUNK, _gpu.TILE[1], _gpu.TILE[0])


@pytest.mark.parametrize("clip", [0.5, math.inf], ids=["clip", "inf"])
@pytest.mark.parametrize("blocks", [(1, 1, 1), (2, 1, 2)], ids=["one-block", "four-blocks"])
@pytest.mark.parametrize("local_iters", [1, 3])
@pytest.mark.parametrize("skip_idle", [True, False], ids=["skip-idle", "full"])
def test_display_ranges_follow_every_step(skip_idle, local_iters, blocks, clip):
    # Padded blocks of several tiles along every axis (the last ones shorter); a seed
    # near a corner leaves unreached (+inf) nodes for many steps: with clip = inf their
    # tiles are (nan, nan), with a finite clip every tile has a range.
    dom = Domain.create((90, 30, 100), blocks=blocks, spacing=(0.02, 0.02, 0.02))
    s = EikonalSolver(dom, random_smooth(seed=4), [(3, 4, 5)], local_iters=local_iters, skip_idle=skip_idle)
    views = s.display_copy(clip=clip)
    held = s.display_ranges()  # updated in place by the steps
    first = {g: r.values.copy() for g, r in held.items()}
    assert sorted(held) == sorted(s.blocks)
    seen = {"nan": False, "finite": False}

    def check() -> None:
        now = s.display_ranges()
        for g, v in views.items():
            r = now[g]
            assert isinstance(r, TileRanges) and r.values is held[g].values
            assert r.span == SPAN and r.shape == v.shape
            assert r.values.shape == (*tile_grid(v.shape, SPAN), 2) and r.values.dtype == np.float64
            np.testing.assert_array_equal(r.values, tile_ranges(v, SPAN).values)
            np.testing.assert_array_equal(r.values, reference(v, SPAN))
            seen["nan"] |= bool(np.isnan(r.values).any())
            seen["finite"] |= bool(np.isfinite(r.values).any())

    check()
    for _ in range(12):
        s.step()
        check()
    assert seen["nan"] == (clip == math.inf)
    s.solve()  # to the end: the tiles of interior nodes only are finite whatever the clip
    check()
    assert seen["finite"]
    # The ranges moved with the front (not the ones display_copy computed).
    assert any(not np.array_equal(first[g], held[g].values, equal_nan=True) for g in held)


def test_display_copy_with_a_new_clip_refreshes_the_ranges():
    dom = Domain.create((40, 20, 70), blocks=(1, 1, 1), spacing=(0.02, 0.02, 0.02))
    s = EikonalSolver(dom, random_smooth(seed=4), [(3, 4, 5)], local_iters=2)
    s.display_copy(clip=math.inf)
    for _ in range(5):
        s.step()
    assert np.isnan(s.display_ranges()[0].values).any()
    views = s.display_copy(clip=0.05)
    r = s.display_ranges()[0]
    np.testing.assert_array_equal(r.values, reference(views[0], SPAN))
    assert np.isfinite(r.values).all() and r.values.max() == np.float32(0.05)


def test_display_ranges_need_a_display_copy():
    dom = Domain.create((20, 12, 14), blocks=(1, 1, 1))
    s = EikonalSolver(dom, random_smooth(seed=4), [(3, 4, 5)])
    with pytest.raises(RuntimeError, match=r"display_ranges needs the display copies; call display_copy\(clip\) first"):
        s.display_ranges()
    s.step()
    with pytest.raises(RuntimeError, match="display_ranges needs the display copies"):
        s.display_ranges()


def test_update_block_ranges_need_a_view():
    T = np.full((6, 6, 6), np.inf)
    T[3, 3, 3] = 0
    view = np.empty(T.shape, np.float32)
    r = tile_ranges(view, SPAN)
    with pytest.raises(ValueError, match="update_block ranges are those of a view; got ranges without a view"):
        update_block(T, T.copy(), np.ones(T.shape), T == 0, (1, 1, 1), ranges=r)
    T2, _, _ = update_block(T, T.copy(), np.ones(T.shape), T == 0, (1, 1, 1), view=view, clip=1.5, ranges=r)
    np.testing.assert_array_equal(r.values, reference(np.minimum(T2, 1.5).astype(np.float32), SPAN))
    assert r.values.tolist() == [[[[0.0, 1.5]], [[1.0, 1.5]]]]  # j = 0..3 holds the seed, j = 4 its neighbour


def test_the_range_edits_apply_to_every_view_kernel():
    # Checked on the text (no GPU here): every view variant carries the ranges, the plain
    # sweep does not.
    for w32 in (False, True):
        for t32 in (False, True):
            for tiles in (False, True):
                for unroll in (1, 2):
                    plain, _ = _gpu._sweep_source(w32, t32, False, unroll, tiles)
                    src, name = _gpu._sweep_source(w32, t32, True, unroll, tiles)
                    assert "ranges" not in plain and "view[p]" not in plain
                    assert src.count("double* __restrict__ ranges") == 1 and src.count("view[p] = v;") == 2
                    assert src.count(f"void {name}(") == 1 and "_view" in name
    assert _gpu._sweep_source() == (_gpu._SOURCE, "eikonal_sweep_f64")
