"""insitu.ranges: per-tile (min, max) against a NumPy loop over the tiles."""

import numpy as np
import pytest

from insitu.ranges import TileRanges, as_tile_ranges, tile_grid, tile_ranges


def reference(v, span):
    """(min, max) per tile by slicing, (nan, nan) where a sample is not finite."""
    grid = tile_grid(v.shape, span)
    out = np.empty((*grid, 2))
    for a in range(grid[0]):
        for b in range(grid[1]):
            for c in range(grid[2]):
                t = v[a * span[0]:(a + 1) * span[0], b * span[1]:(b + 1) * span[1],
                      c * span[2]:(c + 1) * span[2]].astype(np.float64)
                out[a, b, c] = (np.nan, np.nan) if not np.isfinite(t).all() else (t.min(), t.max())
    return out


@pytest.mark.parametrize("shape,span", [((37, 20, 65), (32, 8, 32)), ((16, 16, 16), (4, 4, 4)),
                                        ((5, 9, 3), (2, 3, 7)), ((33, 5, 40), (32, 4, 32))])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int16, np.uint8])
def test_matches_reference(shape, span, dtype):
    rng = np.random.default_rng(1)
    v = (rng.standard_normal(shape) * 50).astype(dtype)
    r = tile_ranges(v, span)
    assert isinstance(r, TileRanges) and r.span == span and r.shape == shape
    np.testing.assert_array_equal(r.values, reference(v, span))


def test_strided_view_and_nonfinite_tiles():
    rng = np.random.default_rng(2)
    base = rng.random((40, 30, 50))
    v = base[::2, 3:, ::-1].transpose(1, 0, 2)  # no contiguous axis order
    v = v.copy() if not v.flags.writeable else v
    v[0, 0, 0] = np.nan
    v[-1, -1, -1] = np.inf
    r = tile_ranges(v, (8, 8, 8))
    ref = reference(v, (8, 8, 8))
    np.testing.assert_array_equal(r.values, ref)
    assert np.isnan(r.values[0, 0, 0]).all() and np.isnan(r.values[-1, -1, -1]).all()
    assert np.isfinite(r.values[1, 0, 0]).all()


def test_out_is_written_in_place():
    v = np.arange(64.0).reshape(4, 4, 4)
    out = np.zeros((2, 2, 2, 2))
    r = tile_ranges(v, (2, 2, 2), out=out)
    assert r.values is out
    assert out[0, 0, 0].tolist() == [0.0, 21.0] and out[1, 1, 1].tolist() == [42.0, 63.0]
    with pytest.raises(ValueError, match="out must be"):
        tile_ranges(v, (2, 2, 2), out=np.zeros((2, 2, 2, 2), np.float32))


@pytest.mark.parametrize("span", [(0, 1, 1), (1, 2), (1.5, 2, 2), "abc"])
def test_bad_span(span):
    with pytest.raises(ValueError, match="span"):
        tile_ranges(np.zeros((4, 4, 4)), span)


def test_as_tile_ranges_checks():
    v = np.zeros((10, 10, 10), np.float32)
    r = tile_ranges(v, (4, 4, 4))
    assert as_tile_ranges(r, v.shape, v).values.shape == (3, 3, 3, 2)
    flat = {"span": [4, 4, 4], "values": r.values.ravel()}
    assert as_tile_ranges(flat, v.shape, v).values.shape == (3, 3, 3, 2)
    with pytest.raises(ValueError, match="shape"):
        as_tile_ranges(r, (10, 10, 11), v)
    with pytest.raises(ValueError, match="54 values"):
        as_tile_ranges({"span": [4, 4, 8], "values": r.values}, v.shape, v)
    with pytest.raises(ValueError, match="float64"):
        as_tile_ranges({"span": [4, 4, 4], "values": r.values.astype(np.float32)}, v.shape, v)
    with pytest.raises(ValueError, match="expected TileRanges"):
        as_tile_ranges([1, 2], v.shape, v)
