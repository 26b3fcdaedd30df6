"""The Catalyst implementation's Python side with CUDA memory: a Conduit leaf whose pointer is
device memory becomes a CuPy view of that memory (mcarray components strided, no copy, no
host transfer), and the adaptor's Blueprint parser keeps it on the device.

The C module (libcatalyst-insitu) hands adaptors.catalyst.array_view the leaf's address,
dtype, count and stride; here the addresses come from CuPy arrays directly (tests/test_catalyst.py
runs the whole C path on host memory).
"""

from __future__ import annotations

import numpy as np

import insitu


def test_a_device_leaf_becomes_a_cupy_view_of_the_same_memory():
    import cupy as cp

    from adaptors.catalyst import array_view

    vel = cp.arange(3 * 64, dtype=cp.float64).reshape(64, 3)  # interleaved x, y, z
    with insitu.arrays.count_transfers() as moved:
        views = [array_view(f"velocity/values/{c}", vel.data.ptr + 8 * i, "float64", 64, 24, 8)
                 for i, c in enumerate("xyz")]
    assert moved.calls == 0
    for i, v in enumerate(views):
        assert isinstance(v, cp.ndarray) and v.data.ptr == vel.data.ptr + 8 * i and v.strides == (24,)
        assert v.device.id == vel.device.id
        cp.testing.assert_array_equal(v, vel[:, i])


def test_device_mcarray_components_reach_the_parser_as_device_views():
    import cupy as cp

    from adaptors.catalyst import array_view, mesh_from_channels
    from adaptors.mesh import parse

    n = 4
    vel = cp.random.default_rng(0).random((n * n * n, 3))
    comps = {c: array_view(f"v/{c}", vel.data.ptr + 8 * i, "float64", n ** 3, 24, 8) for i, c in enumerate("xyz")}
    dom = {"coordsets": {"coords": {"type": "uniform", "dims": {"i": n, "j": n, "k": n}}},
           "topologies": {"mesh": {"type": "uniform", "coordset": "coords"}},
           "fields": {"velocity": {"association": "vertex", "topology": "mesh", "values": comps}}}
    with insitu.arrays.count_transfers() as moved:
        (d,) = parse(mesh_from_channels({"grid": {"type": "mesh", "data": dom}}))
    assert moved.calls == 0
    y = d.fields["velocity/y"].values
    assert isinstance(y, cp.ndarray) and y.shape == (n, n, n) and y.data.ptr == vel.data.ptr + 8
    want = cp.asnumpy(vel[:, 1]).reshape(n, n, n).transpose()  # Blueprint order: i fastest
    np.testing.assert_array_equal(cp.asnumpy(y), want)
