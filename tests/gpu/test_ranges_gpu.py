"""insitu.ranges on the GPU: the CUDA kernel against the NumPy loop of tests/test_ranges.py."""

import numpy as np
import pytest

from insitu import arrays
from insitu.ranges import as_tile_ranges, tile_ranges

cp = pytest.importorskip("cupy")
if not arrays.cuda_available():
    pytest.skip("needs a CUDA device (CuPy found none)", allow_module_level=True)

from test_ranges import reference  # noqa: E402


@pytest.mark.parametrize("shape,span", [((37, 20, 65), (32, 8, 32)), ((5, 9, 3), (2, 3, 7)),
                                        ((130, 66, 70), (32, 4, 32))])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.uint8])
def test_gpu_matches_reference(shape, span, dtype):
    rng = np.random.default_rng(3)
    v = (rng.standard_normal(shape) * 50).astype(dtype)
    with arrays.no_host_transfers():
        r = tile_ranges(cp.asarray(v), span)
    np.testing.assert_array_equal(cp.asnumpy(r.values), reference(v, span))


def test_gpu_strided_and_nonfinite():
    rng = np.random.default_rng(4)
    v = rng.random((40, 30, 50))
    v[5, 6, 7] = np.nan
    v[39, 29, 0] = -np.inf
    view = cp.asarray(v)[::2, 3:, ::-1].transpose(1, 0, 2)
    r = tile_ranges(view, (8, 4, 16))
    np.testing.assert_array_equal(cp.asnumpy(r.values), reference(cp.asnumpy(view), (8, 4, 16)))


def test_gpu_device_mismatch():
    v = cp.zeros((8, 8, 8), cp.float32)
    host = tile_ranges(np.zeros((8, 8, 8)), (4, 4, 4))
    with pytest.raises(ValueError, match="live on"):
        as_tile_ranges({"span": (4, 4, 4), "values": host.values}, v.shape, v)
