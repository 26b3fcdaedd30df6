"""The block cache with CuPy blocks: spills to pinned host memory and to disk, reloads to the
device, and exactly one counted transfer per spill or reload (none for hits)."""

import numpy as np
import pytest

import insitu
from insitu.pool.cache import BlockCache

cp = pytest.importorskip("cupy", reason="needs CuPy")

KIB = 1024


def block(i, n=16 * KIB, dtype=np.float32):
    """A 64 KiB (float32) device block."""
    return cp.asarray(np.random.default_rng(i).random(n).astype(dtype))


def counts(t):
    return (t.d2h_calls, t.h2d_calls)


def test_spills_and_reloads_cost_one_transfer_each_and_hits_none(tmp_path):
    with BlockCache(2 * 64 * KIB, host_budget_bytes=64 * KIB, spill_dir=str(tmp_path)) as cache:
        want = [block(i) for i in range(4)]
        with insitu.count_transfers() as t:
            a, b = cache.put(want[0]), cache.put(want[1])
        assert counts(t) == (0, 0)
        with insitu.count_transfers() as t:
            c = cache.put(want[2])  # a: device -> pinned host
        assert counts(t) == (1, 0) and t.d2h_bytes == 64 * KIB and cache.tier(a) == "host"
        assert cp.cuda.runtime.pointerGetAttributes(cache._entries[a].host.ctypes.data).type == 1  # pinned
        with insitu.count_transfers() as t:
            d = cache.put(want[3])  # b: device -> host, pushing a from host to disk (no transfer)
        assert counts(t) == (1, 0)
        assert [cache.tier(h) for h in (a, b, c, d)] == ["disk", "host", "resident", "resident"]

        with insitu.count_transfers() as t:
            got = cache.get(a)  # c: device -> host (b to disk); a: disk -> pinned -> device
        assert counts(t) == (1, 1) and t.h2d_bytes == 64 * KIB
        assert isinstance(got, cp.ndarray) and got.dtype == cp.float32 and got.shape == (16 * KIB,)
        cp.testing.assert_array_equal(got, want[0])
        assert [cache.tier(h) for h in (a, b, c, d)] == ["resident", "disk", "host", "resident"]

        with insitu.count_transfers() as t:
            assert cache.get(a) is got  # a hit: the live device array
            cache.get(d)
        assert counts(t) == (0, 0)

        with insitu.count_transfers() as t:
            got = cache.get(c)  # a: device -> host; c: pinned host -> device
        assert counts(t) == (1, 1)
        cp.testing.assert_array_equal(got, want[2])

        with insitu.count_transfers() as t:
            for h, w in zip((a, b, c, d), want):
                cp.testing.assert_array_equal(cache.get(h), w)
        s = cache.stats()
        assert s.spills_to_host > 0 and s.spills_to_disk > 0 and s.reloads > 0 and s.hits > 0
        assert s.resident_bytes <= 2 * 64 * KIB and s.host_bytes <= 64 * KIB


def test_persisted_device_blocks_are_never_moved(tmp_path):
    with BlockCache(3 * 64 * KIB, host_budget_bytes=64 * KIB, spill_dir=str(tmp_path)) as cache:
        p = cache.put(block(0), persist=True)
        hs = [cache.put(block(i)) for i in range(1, 8)]
        for h in hs:
            cache.get(h)
        with insitu.count_transfers() as t:
            got = cache.get(p)
        assert counts(t) == (0, 0) and cache.tier(p) == "resident"
        cp.testing.assert_array_equal(got, block(0))


@pytest.mark.parametrize("host_budget", [None, 0], ids=["via-pinned-host", "straight-to-disk"])
@pytest.mark.parametrize("make", [
    lambda: block(1, 1000, np.float16)[::3],  # non-contiguous
    lambda: cp.arange(-60, 60, dtype=cp.int8).reshape(10, 12).T,
    lambda: cp.asfortranarray(block(2, 600, np.float64).reshape(20, 30)),
], ids=["f16-strided", "i8-transposed", "f64-fortran"])
def test_device_blocks_round_trip_exactly(tmp_path, make, host_budget):
    a = make()
    with BlockCache(0, host_budget_bytes=host_budget, spill_dir=str(tmp_path)) as cache:
        with insitu.count_transfers() as t:
            h = cache.put(a)  # never fits a zero budget: spilled at once
        assert counts(t) == (1, 0) and cache.tier(h) == ("host" if host_budget is None else "disk")
        with insitu.count_transfers() as t:
            back = cache.get(h)  # a fresh device copy each time
        assert counts(t) == (0, 1)
        assert isinstance(back, cp.ndarray) and back.dtype == a.dtype and back.shape == a.shape
        assert back.device.id == a.device.id
        cp.testing.assert_array_equal(back, a)


def test_iterative_device_job_under_a_small_budget_equals_unlimited(tmp_path):
    data = [block(i) for i in range(12)]
    results = {}
    for budget in (None, 3 * 64 * KIB):
        with BlockCache(budget, host_budget_bytes=3 * 64 * KIB, spill_dir=str(tmp_path)) as cache:
            hs = [cache.put(x.copy()) for x in data]
            for _ in range(4):
                for h in hs:
                    x = cache.get(h)
                    cache.replace(h, (cp.roll(x, 1) + x + cp.roll(x, -1)) / 3)
            results[budget] = cp.concatenate([cache.get(h) for h in hs])
            s = cache.stats()
        if budget is not None:
            assert s.spills_to_host > 0 and s.spills_to_disk > 0 and s.reloads > 0
    cp.testing.assert_array_equal(results[None], results[3 * 64 * KIB])
