"""Frames leave the GPU as bytes: to_uint8 on a device image equals the host conversion."""

import numpy as np
import pytest

import insitu
from render.image import to_uint8

cp = pytest.importorskip("cupy", reason="needs CuPy")


@pytest.mark.parametrize("unpremultiply", [False, True])
def test_device_conversion_equals_host_and_moves_only_the_bytes(unpremultiply):
    rng = np.random.default_rng(4)
    img = rng.uniform(0, 1, (96, 128, 4)).astype(np.float32)
    img[..., :3] *= img[..., 3:]  # premultiplied
    img[0, 0, 3] = 0.0
    img[1, 1, :] = np.nan
    host = to_uint8(img, unpremultiply=unpremultiply)
    d = cp.asarray(img)
    with insitu.count_transfers() as c:
        dev = to_uint8(d, unpremultiply=unpremultiply)
    assert isinstance(dev, np.ndarray) and dev.dtype == np.uint8
    np.testing.assert_array_equal(dev, host)
    assert (c.d2h_calls, c.d2h_bytes, c.h2d_calls) == (1, 96 * 128 * 4, 0)
