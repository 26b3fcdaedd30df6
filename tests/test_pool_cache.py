"""The worker's block cache: LRU spilling to host and disk under budgets, persist, exact round trips."""

import os
import pickle
import shutil
import tempfile
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from insitu.errors import InsituError
from insitu.pool.cache import BlockCache, CacheBudgetError, CacheStats, Handle

KIB = 1024


def block(i, n=8 * KIB, dtype=np.float64):
    """Block `i` of a 1-D field: n values (64 KiB of float64 by default)."""
    return np.random.default_rng(i).random(n).astype(dtype)


# --------------------------------------------------------------------------- an iterative job


def jacobi_blocks(cache, hs, sweeps):
    """`sweeps` Jacobi sweeps u_i <- (u_{i-1} + u_i + u_{i+1}) / 3 over a 1-D field cut into the
    cached blocks `hs` (ends fixed), fetching every block through the cache, as a worker would."""
    for _ in range(sweeps):
        edges = []
        for h in hs:  # pass 1: the old edge values (the halos), taken right after get
            x = cache.get(h)
            edges.append((x[0], x[-1]))
        for i, h in enumerate(hs):  # pass 2: smooth each block with its neighbours' old edges
            x = cache.get(h)
            left = edges[i - 1][1] if i else x[0]
            right = edges[i + 1][0] if i + 1 < len(hs) else x[-1]
            pad = np.concatenate(([left], x, [right]))
            new = (pad[:-2] + pad[1:-1] + pad[2:]) / 3
            if i == 0:
                new[0] = x[0]
            if i + 1 == len(hs):
                new[-1] = x[-1]
            cache.replace(h, new)


def jacobi_global(u, sweeps):
    u = u.copy()
    for _ in range(sweeps):
        new = u.copy()
        new[1:-1] = (u[:-2] + u[1:-1] + u[2:]) / 3
        u = new
    return u


def test_iterative_job_under_a_small_budget_equals_unlimited(tmp_path):
    data = [block(i) for i in range(40)]  # 40 x 64 KiB = 2.5 MiB
    results, stats = {}, {}
    for budget in (None, 256 * KIB):
        with BlockCache(budget, host_budget_bytes=512 * KIB, spill_dir=str(tmp_path)) as cache:
            pinned = [cache.put(data[i].copy(), persist=True) for i in (0, 1)]  # 128 KiB pinned
            hs = pinned + [cache.put(a.copy()) for a in data[2:]]
            jacobi_blocks(cache, hs, sweeps=4)
            for h in pinned:
                assert cache.tier(h) == "resident" and cache.is_persisted(h)
            s = cache.stats()
            if budget is not None:
                assert s.resident_bytes <= budget and s.host_bytes <= 512 * KIB
                assert s.resident_entries + s.host_entries + s.disk_entries == 40
                assert {cache.tier(h) for h in hs} == {"resident", "host", "disk"}
            results[budget] = np.concatenate([cache.get(h) for h in hs])
            stats[budget] = s
    s = stats[256 * KIB]
    assert s.spills_to_host > 0 and s.spills_to_disk > 0 and s.reloads > 0 and s.evictions > 0
    assert s.misses > 0 and s.hits > 0 and s.persisted_bytes == 2 * 64 * KIB
    free = stats[None]
    assert free.evictions == free.spills_to_host == free.spills_to_disk == free.reloads == free.misses == 0
    np.testing.assert_array_equal(results[256 * KIB], results[None])
    np.testing.assert_array_equal(results[None], jacobi_global(np.concatenate(data), 4))


# --------------------------------------------------------------------------- LRU and tiers


def test_least_recently_used_is_evicted_first(tmp_path):
    with BlockCache(3 * 64 * KIB, spill_dir=str(tmp_path)) as cache:
        a, b, c = (cache.put(block(i)) for i in range(3))
        assert cache.get(a) is not None  # a is now more recent than b and c
        d = cache.put(block(3))
        assert [cache.tier(h) for h in (a, b, c, d)] == ["resident", "host", "resident", "resident"]
        cache.get(c)
        cache.get(b)  # a miss: reloads b, evicting a (now the least recently used)
        assert [cache.tier(h) for h in (a, b, c, d)] == ["host", "resident", "resident", "resident"]
        s = cache.stats()
        assert (s.hits, s.misses, s.evictions, s.reloads) == (2, 1, 2, 1)
        assert s.resident_bytes == 3 * 64 * KIB and s.host_bytes == 64 * KIB


def test_host_tier_overflows_to_disk_least_recently_used_first(tmp_path):
    with BlockCache(64 * KIB, host_budget_bytes=2 * 64 * KIB, spill_dir=str(tmp_path)) as cache:
        hs = [cache.put(block(i)) for i in range(5)]
        assert [cache.tier(h) for h in hs] == ["disk", "disk", "host", "host", "resident"]
        s = cache.stats()
        assert (s.resident_entries, s.host_entries, s.disk_entries) == (1, 2, 2)
        assert (s.spills_to_host, s.spills_to_disk, s.evictions) == (4, 2, 4)
        assert s.disk_bytes == 2 * 64 * KIB and len(os.listdir(cache.spill_path)) == 2
        np.testing.assert_array_equal(cache.get(hs[0]), block(0))  # disk -> resident, its file removed
        assert cache.tier(hs[0]) == "resident" and cache.tier(hs[4]) == "host" and cache.tier(hs[2]) == "disk"
        assert len(os.listdir(cache.spill_path)) == 2
        for i, h in enumerate(hs):
            np.testing.assert_array_equal(cache.get(h), block(i))


def test_host_budget_zero_sends_spilled_blocks_straight_to_disk(tmp_path):
    with BlockCache(64 * KIB, host_budget_bytes=0, spill_dir=str(tmp_path)) as cache:
        a, b = cache.put(block(0)), cache.put(block(1))
        assert cache.tier(a) == "disk" and cache.tier(b) == "resident"
        s = cache.stats()
        assert (s.spills_to_host, s.spills_to_disk, s.evictions) == (0, 1, 1)


def test_a_block_larger_than_the_free_budget_is_kept_spilled(tmp_path):
    with BlockCache(100 * KIB, spill_dir=str(tmp_path)) as cache:
        small = cache.put(block(0, 4 * KIB))  # 32 KiB
        big = cache.put(block(1))  # 64 KiB: fits
        cache.persist(small)
        huge = cache.put(block(2, 16 * KIB))  # 128 KiB: never fits, spilled at once (big stays)
        assert [cache.tier(h) for h in (small, big, huge)] == ["resident", "resident", "host"]
        for _ in range(2):
            got = cache.get(huge)  # a miss each time, not made resident
            np.testing.assert_array_equal(got, block(2, 16 * KIB))
        assert cache.tier(huge) == "host" and cache.tier(big) == "resident"
        s = cache.stats()
        assert s.misses == 2 and s.evictions == 0 and s.resident_bytes == 96 * KIB


def test_get_returns_the_live_array_and_a_new_one_after_a_spill(tmp_path):
    with BlockCache(64 * KIB, host_budget_bytes=0, spill_dir=str(tmp_path)) as cache:
        a = block(0)
        h = cache.put(a)
        assert cache.get(h) is a  # no copy: in-place changes change the cached value
        cache.get(h)[0] = -1.0
        assert cache.get(h)[0] == -1.0
        other = cache.put(block(1))  # spills h to disk
        back = cache.get(h)
        assert back is not a and back[0] == -1.0
        np.testing.assert_array_equal(back[1:], block(0)[1:])
        assert cache.tier(other) == "disk"


# --------------------------------------------------------------------------- persist


def test_persisting_more_than_the_budget_raises_and_unpersist_makes_evictable(tmp_path):
    with BlockCache(2 * 64 * KIB, spill_dir=str(tmp_path)) as cache:
        a = cache.put(block(0), persist=True)
        b = cache.put(block(1), persist=True)
        with pytest.raises(CacheBudgetError, match=r"budget_bytes=131072 \(131072 B already persisted\)") as err:
            cache.put(block(2), persist=True)
        assert isinstance(err.value, MemoryError)
        assert len(cache) == 2  # nothing half-added
        c = cache.put(block(2))  # evictable: does not fit next to the pinned blocks, spilled
        assert cache.tier(c) == "host"
        with pytest.raises(CacheBudgetError, match=r"pinning Handle\(\d+\) \(65536 B\)"):
            cache.persist(c)
        assert not cache.is_persisted(c) and cache.tier(c) == "host"
        cache.unpersist(a)
        cache.persist(c)  # reloads c, evicting a (evictable now)
        assert [cache.tier(h) for h in (a, b, c)] == ["host", "resident", "resident"]
        assert cache.stats().persisted_bytes == 2 * 64 * KIB
        cache.persist(c)  # idempotent
        cache.unpersist(a)  # not persisted: nothing happens
        with pytest.raises(CacheBudgetError):
            cache.replace(b, block(3, 16 * KIB))  # a persisted block may not grow past the budget
        np.testing.assert_array_equal(cache.get(b), block(1))
        for h, i in ((a, 0), (b, 1), (c, 2)):
            np.testing.assert_array_equal(cache.get(h), block(i))


def test_persisted_blocks_are_never_spilled(tmp_path):
    with BlockCache(3 * 64 * KIB, host_budget_bytes=64 * KIB, spill_dir=str(tmp_path)) as cache:
        p = cache.put(block(0), persist=True)
        hs = [cache.put(block(i)) for i in range(1, 10)]
        for _ in range(3):
            for h in hs:
                cache.get(h)
                assert cache.tier(p) == "resident"
        s = cache.stats()
        assert s.evictions > 0 and s.persisted_entries == 1 and s.resident_bytes <= 3 * 64 * KIB
        cache.drop(p)
        assert p not in cache and cache.stats().persisted_bytes == 0


# --------------------------------------------------------------------------- round trips and cleanup


@pytest.mark.parametrize("make", [
    lambda: block(0, 1000, np.float16),
    lambda: np.arange(-300, 300, dtype=np.int16).reshape(20, 30),
    lambda: np.arange(64, dtype=np.uint8).reshape(4, 4, 4)[:, ::2, 1:],  # non-contiguous
    lambda: np.asfortranarray(block(1, 60).reshape(6, 10)),
    lambda: block(2, 100).reshape(10, 10).T[::3],  # strided, transposed
    lambda: np.array([True, False, True]),
    lambda: (block(3, 10) + 1j * block(4, 10)).astype(np.complex64),
    lambda: np.arange(5, dtype=">i4"),
    lambda: np.array(3.5),  # 0-d
    lambda: np.zeros((0, 7), np.float32),  # empty
    lambda: np.arange(4).astype("datetime64[s]"),  # no HDF5 type: raw bytes
], ids=["f16", "i16", "u8-view", "fortran", "strided", "bool", "c64", "big-endian", "0d", "empty", "datetime"])
def test_blocks_round_trip_exactly_through_disk(tmp_path, make):
    a = make()
    with BlockCache(0, host_budget_bytes=0, spill_dir=str(tmp_path)) as cache:
        h = cache.put(a)
        assert cache.tier(h) == "disk" or a.nbytes == 0
        back = cache.get(h)
        assert type(back) is np.ndarray and back.dtype == a.dtype and back.shape == a.shape
        np.testing.assert_array_equal(back, a)


def test_close_removes_the_spill_directory_and_frees_everything(tmp_path):
    cache = BlockCache(64 * KIB, host_budget_bytes=0, spill_dir=str(tmp_path / "spill"))
    assert cache.spill_path is None  # made only when needed
    hs = [cache.put(block(i)) for i in range(3)]
    d = cache.spill_path
    assert os.path.dirname(d) == str(tmp_path / "spill") and len(os.listdir(d)) == 2
    cache.drop(hs[0])
    assert len(os.listdir(d)) == 1  # a dropped block's file goes at once
    cache.close()
    assert not os.path.exists(d) and os.path.isdir(tmp_path / "spill")  # the user's directory stays
    assert len(cache) == 0 and cache.stats().resident_bytes == 0
    cache.close()  # twice: nothing
    with pytest.raises(InsituError, match="closed"):
        cache.get(hs[1])


def test_default_spill_directory_is_temporary_and_removed():
    with BlockCache(0, host_budget_bytes=0) as cache:
        cache.put(block(0))
        d = cache.spill_path
        assert d.startswith(tempfile.gettempdir()) and os.path.isdir(d)
    assert not os.path.exists(d)


def test_replace_frees_the_old_value_and_keeps_the_new_one(tmp_path):
    with BlockCache(0, host_budget_bytes=0, spill_dir=str(tmp_path)) as cache:
        h = cache.put(block(0))
        cache.replace(h, block(1, 100, np.int32))  # disk -> disk: the old file goes, the new one stays
        assert cache.tier(h) == "disk" and len(os.listdir(cache.spill_path)) == 1
        np.testing.assert_array_equal(cache.get(h), block(1, 100, np.int32))
        assert cache.stats().disk_bytes == 400


def test_a_failing_disk_write_loses_nothing(tmp_path, monkeypatch):
    import h5py

    with BlockCache(2 * 64 * KIB, host_budget_bytes=64 * KIB, spill_dir=str(tmp_path)) as cache:
        hs = [cache.put(block(i)) for i in range(3)]  # 0: host, 1 and 2: resident
        real = h5py.File

        def full(path, mode="r", **kw):
            if mode == "w":
                open(path, "wb").close()  # a partial file, to be cleaned up
                raise OSError("No space left on device")
            return real(path, mode, **kw)

        monkeypatch.setattr(h5py, "File", full)
        with pytest.raises(OSError, match="No space"):
            cache.put(block(3))  # evicts 1 to the host, which must first write 0 to disk
        with pytest.raises(OSError, match="No space"):
            cache.replace(hs[2], block(4, 16 * KIB))  # too big to be resident: straight to disk
        assert os.listdir(cache.spill_path) == []
        assert len(cache) == 3 and [cache.tier(h) for h in hs] == ["host", "resident", "resident"]
        s = cache.stats()
        assert (s.resident_bytes, s.host_bytes, s.disk_bytes) == (2 * 64 * KIB, 64 * KIB, 0)
        monkeypatch.setattr(h5py, "File", real)
        for i, h in enumerate(hs):
            np.testing.assert_array_equal(cache.get(h), block(i))


# --------------------------------------------------------------------------- API and errors


def test_handles_and_container_protocol(tmp_path):
    with BlockCache(spill_dir=str(tmp_path)) as cache:
        hs = [cache.put(np.full(3, i)) for i in range(3)]
        assert cache.handles() == hs and len(cache) == 3 and hs[1] in cache and 5 not in cache
        cache.drop(hs[1])
        assert cache.handles() == [hs[0], hs[2]] and hs[1] not in cache
        h = pickle.loads(pickle.dumps(hs[0]))
        assert h == hs[0] and hash(h) == hash(hs[0]) and cache.get(h)[0] == 0
        assert isinstance(cache.stats(), CacheStats)
        assert "3 blocks" not in repr(cache) and "2 blocks" in repr(cache)


def test_bad_input_is_named(tmp_path):
    with pytest.raises(ValueError, match="budget_bytes must be >= 0 bytes, got -1"):
        BlockCache(-1)
    with pytest.raises(ValueError, match="host_budget_bytes must be >= 0"):
        BlockCache(10, host_budget_bytes=-5)
    with pytest.raises(TypeError, match="budget_bytes must be an int"):
        BlockCache(1.5)
    with BlockCache(spill_dir=str(tmp_path)) as cache, BlockCache() as other:
        with pytest.raises(TypeError, match="list"):
            cache.put([1, 2, 3])
        with pytest.raises(TypeError, match="Python objects"):
            cache.put(np.array([None, 1], dtype=object))
        h = cache.put(np.zeros(3))
        cache.drop(h)
        for bad in (lambda: cache.get(h), lambda: cache.drop(h), lambda: cache.persist(h),
                    lambda: cache.unpersist(h), lambda: cache.tier(h), lambda: cache.replace(h, np.zeros(3))):
            with pytest.raises(KeyError, match=rf"Handle\({h.id}\) is not in this BlockCache"):
                bad()
        with pytest.raises(KeyError, match="not in this BlockCache"):
            cache.get(other.put(np.zeros(1)))  # another cache's handle
        with pytest.raises(TypeError, match="expected a Handle"):
            cache.get(h.id)


def test_threads_share_one_cache(tmp_path):
    with BlockCache(4 * 8 * KIB, host_budget_bytes=4 * 8 * KIB, spill_dir=str(tmp_path)) as cache:
        errors = []

        def work(t):
            try:
                mine = {cache.put(np.full(KIB, float(t * 100 + i))): float(t * 100 + i) for i in range(10)}
                for _ in range(5):
                    for h, v in mine.items():
                        x = cache.get(h)
                        assert x[0] == v and x[-1] == v
                        cache.replace(h, x + 0)
            except Exception as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        s = cache.stats()
        assert len(cache) == 40 and s.resident_bytes <= 4 * 8 * KIB and s.spills_to_disk > 0


# --------------------------------------------------------------------------- property: nothing is lost

BUDGET, HOST_BUDGET = 4000, 3000


class CacheMachine(RuleBasedStateMachine):
    """Random put/get/replace/persist/unpersist/drop under small budgets: every get returns the
    last value put, and resident bytes stay within the budget."""

    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp()
        self.cache = BlockCache(BUDGET, host_budget_bytes=HOST_BUDGET, spill_dir=self.dir)
        self.model = {}  # handle -> expected array
        self.pinned = set()
        self.seed = 0

    def _array(self, n, kind):
        self.seed += 1
        rng = np.random.default_rng(self.seed)
        return rng.integers(-100, 100, n).astype(kind) if kind != "f8" else rng.random(n)

    @rule(n=st.integers(0, 600), kind=st.sampled_from(["f8", "f2", "i1", "u4"]), persist=st.booleans())
    def put(self, n, kind, persist):
        a = self._array(n, kind)
        if persist and sum(self.model[h].nbytes for h in self.pinned) + a.nbytes > BUDGET:
            with pytest.raises(CacheBudgetError):
                self.cache.put(a, persist=True)
            return
        h = self.cache.put(a, persist=persist)
        self.model[h] = a.copy()
        if persist:
            self.pinned.add(h)

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def get(self, data):
        h = data.draw(st.sampled_from(sorted(self.model, key=lambda h: h.id)))
        got = self.cache.get(h)
        want = self.model[h]
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)

    @precondition(lambda self: self.model)
    @rule(data=st.data(), n=st.integers(0, 600))
    def replace(self, data, n):
        h = data.draw(st.sampled_from(sorted(self.model, key=lambda h: h.id)))
        a = self._array(n, "f8")
        if h in self.pinned and sum(self.model[p].nbytes for p in self.pinned if p != h) + a.nbytes > BUDGET:
            with pytest.raises(CacheBudgetError):
                self.cache.replace(h, a)
            return
        self.cache.replace(h, a)
        self.model[h] = a.copy()

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def persist(self, data):
        h = data.draw(st.sampled_from(sorted(self.model, key=lambda h: h.id)))
        pinned = sum(self.model[p].nbytes for p in self.pinned)
        if h not in self.pinned and pinned + self.model[h].nbytes > BUDGET:
            with pytest.raises(CacheBudgetError):
                self.cache.persist(h)
            return
        self.cache.persist(h)
        self.pinned.add(h)
        assert self.cache.tier(h) == "resident"

    @precondition(lambda self: self.pinned)
    @rule(data=st.data())
    def unpersist(self, data):
        h = data.draw(st.sampled_from(sorted(self.pinned, key=lambda h: h.id)))
        self.cache.unpersist(h)
        self.pinned.discard(h)

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def drop(self, data):
        h = data.draw(st.sampled_from(sorted(self.model, key=lambda h: h.id)))
        self.cache.drop(h)
        del self.model[h]
        self.pinned.discard(h)
        with pytest.raises(KeyError):
            self.cache.get(h)

    @invariant()
    def within_budgets(self):
        s = self.cache.stats()
        assert s.resident_bytes <= max(BUDGET, s.persisted_bytes)
        assert s.host_bytes <= HOST_BUDGET
        assert s.persisted_bytes == sum(self.model[h].nbytes for h in self.pinned)
        assert s.resident_bytes + s.host_bytes + s.disk_bytes == sum(a.nbytes for a in self.model.values())
        assert s.resident_entries + s.host_entries + s.disk_entries == len(self.model)
        assert all(self.cache.tier(h) == "resident" for h in self.pinned)
        assert self.cache.handles() == sorted(self.model, key=lambda h: h.id)

    def teardown(self):
        d = self.cache.spill_path
        for h, want in self.model.items():  # finally, everything is still there
            np.testing.assert_array_equal(self.cache.get(h), want)
        self.cache.close()
        assert d is None or not os.path.exists(d)
        shutil.rmtree(self.dir)


CacheMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None,
                                          suppress_health_check=[HealthCheck.too_slow])
test_cache_never_loses_data = CacheMachine.TestCase


def test_handle_is_tiny():
    assert Handle(3) == Handle(3) and repr(Handle(3)) == "Handle(3)" and not hasattr(Handle(3), "__dict__")
