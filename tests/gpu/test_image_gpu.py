"""render.image.to_uint8 on the GPU (one kernel) gives the bytes of the NumPy path."""

import numpy as np
import pytest

from insitu import arrays
from render.image import to_uint8

cp = pytest.importorskip("cupy")
if not arrays.cuda_available():
    pytest.skip("needs a CUDA device (CuPy found none)", allow_module_level=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("channels", [3, 4])
@pytest.mark.parametrize("unpremultiply", [False, True])
def test_same_bytes_as_numpy(dtype, channels, unpremultiply):
    rng = np.random.default_rng(5)
    img = rng.uniform(-0.2, 1.2, (37, 53, channels)).astype(dtype)
    img[0, 0, 0], img[1, 1, 1], img[2, 2, 0] = np.nan, np.inf, -np.inf
    if channels == 4:
        img[3, :, 3] = 0.0  # transparent row
        img[4, 4, 3] = np.nan
    ref = to_uint8(img, unpremultiply=unpremultiply)
    dev = cp.asarray(img)
    with arrays.count_transfers() as c:
        kept = to_uint8(dev, unpremultiply=unpremultiply, host=False)
    assert arrays.is_device_array(kept) and c.d2h_calls == 0
    np.testing.assert_array_equal(cp.asnumpy(kept), ref)
    np.testing.assert_array_equal(to_uint8(dev[:, ::-1], unpremultiply=unpremultiply), ref[:, ::-1])
