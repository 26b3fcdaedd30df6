"""The CPU marching cubes' kept scratch (render.contour._cpu.ScratchPool)."""

import threading

import numpy as np

from render.contour import _cpu, marching_cubes


def test_pool_gives_back_the_same_array_by_shape_and_dtype():
    pool = _cpu.ScratchPool()
    a = pool.take((2, 1, 10), np.int32)
    assert a.shape == (2, 1, 10) and a.dtype == np.int32
    pool.give(a)
    assert pool.take((2, 1, 11), np.int32) is not a  # another shape: a new array
    assert pool.take((2, 1, 10), np.int64) is not a  # another dtype: a new array
    assert pool.take((2, 1, 10), np.int32) is a
    assert pool.take((2, 1, 10), np.int32) is not a  # taken: not handed out twice


def test_pool_keeps_at_most_max_bytes_oldest_first():
    pool = _cpu.ScratchPool(max_bytes=100)
    a, b = np.empty(10, np.int32), np.empty(15, np.int32)  # 40 + 60 bytes
    pool.give(a)
    pool.give(b)
    c = np.empty(5, np.int32)
    pool.give(c)  # 120 bytes: the oldest (a) goes
    assert pool.take((10,), np.int32) is not a
    assert pool.take((15,), np.int32) is b and pool.take((5,), np.int32) is c


def test_pool_under_threads_hands_each_array_to_one_taker():
    pool = _cpu.ScratchPool()
    arrays = [np.empty(8, np.int32) for _ in range(8)]
    for a in arrays:
        pool.give(a)
    got: list = []

    def take():
        got.append(pool.take((8,), np.int32))

    threads = [threading.Thread(target=take) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(a) for a in got}) == 8 and {id(a) for a in got} == {id(a) for a in arrays}


def test_meshes_of_calls_with_kept_scratch_are_independent():
    x = np.linspace(-1, 1, 24)
    vol = np.sqrt(x[:, None, None] ** 2 + x[None, :, None] ** 2 + x[None, None, :] ** 2)
    first = marching_cubes(vol, 0.6)
    copies = [a.copy() for a in first]
    second = marching_cubes(vol, [0.3, 0.8])  # same geometry: reuses the scratch of the first
    for a, c in zip(first, copies):
        np.testing.assert_array_equal(a, c)  # the first mesh is not overwritten
    again = marching_cubes(vol, 0.6)
    for a, c in zip(again, copies):
        np.testing.assert_array_equal(a, c)
    assert len(second[0]) > 0
