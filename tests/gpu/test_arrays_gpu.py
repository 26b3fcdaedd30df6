"""Zero-copy acceptance of device arrays and the counted gateway, on a real GPU."""

import numpy as np
import pytest

import insitu
from insitu import arrays

cp = pytest.importorskip("cupy", reason="needs CuPy")


class CAIOnly:
    """Exposes only __cuda_array_interface__ (as Numba or PyTorch device arrays do)."""

    def __init__(self, a):
        self._a = a
        self.__cuda_array_interface__ = a.__cuda_array_interface__


class DLPackOnly:
    """Exposes only __dlpack__/__dlpack_device__ (as JAX arrays do)."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kw):
        return self._a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_cupy_passes_through():
    a = cp.arange(10, dtype=cp.float32)
    assert arrays.asarray(a) is a
    assert arrays.backend_of(a) == "cupy" and arrays.device_id(a) == a.device.id


@pytest.mark.parametrize("wrap", [CAIOnly, DLPackOnly])
def test_foreign_device_arrays_are_views(wrap):
    a = cp.arange(24, dtype=cp.float64).reshape(2, 3, 4)
    with insitu.no_host_transfers():
        b = arrays.asarray(wrap(a))
    assert isinstance(b, cp.ndarray)
    assert arrays.data_pointer(b) == a.data.ptr
    b[1, 2, 3] = -5.0
    assert float(a[1, 2, 3]) == -5.0  # same memory


def test_gateway_counts_bytes_and_calls():
    a = cp.ones((64, 64), cp.float32)
    with insitu.count_transfers() as c:
        h = insitu.to_host(a)
        d = insitu.to_device(h)
        insitu.to_host(a, out=arrays.pinned_empty(a.shape, a.dtype))
    assert (c.d2h_calls, c.d2h_bytes, c.h2d_calls, c.h2d_bytes) == (2, 2 * a.nbytes, 1, a.nbytes)
    assert bool((d == a).all())
    with pytest.raises(insitu.HostTransferError, match=r"1 device->host \(16384 B\)"):
        with insitu.no_host_transfers():
            insitu.to_host(a)


def test_select_device():
    assert arrays.select_device() == 0
    assert cp.cuda.Device().id == 0


def test_scalars_to_host_reads_a_few_values_counted_one_each():
    d = cp.asarray(np.array([5, 0, 2**40], np.int64))
    with insitu.no_host_transfers(allow_scalars=True) as counted:
        assert arrays.scalars_to_host(d) == [5, 0, 2**40]
    assert counted.scalar_reads == 3
    with pytest.raises(ValueError, match="at most 2 values"):
        arrays.scalars_to_host(d, limit=2)
    with pytest.raises(ValueError, match="1-D"):
        arrays.scalars_to_host(d.reshape(3, 1))


def test_scalars_to_host_async_waits_for_its_copy_not_for_later_work():
    """The values queued before the read come back while a kernel queued after it still runs."""
    spin = cp.RawKernel(r"""
    extern "C" __global__ void spin(long long cycles) {
        const long long t0 = clock64();
        while (clock64() - t0 < cycles) {}
    }""", "spin")
    d = cp.arange(12, dtype=cp.int64)[::3] * 7  # strided: copied contiguous first
    with insitu.no_host_transfers(allow_scalars=True) as counted:
        pending = arrays.scalars_to_host_async(d)
        spin((1,), (1,), (np.int64(2_000_000_000),))  # about a second at the H200's clocks
        assert pending.result() == [0, 21, 42, 63]
        assert not cp.cuda.get_current_stream().done  # the spin kernel is still running
    assert counted.scalar_reads == 4
    cp.cuda.get_current_stream().synchronize()
    with pytest.raises(ValueError, match="at most 2 values"):
        arrays.scalars_to_host_async(d, limit=2)


@pytest.mark.parametrize("own_stream", [False, True])
def test_scalars_to_host_async_reads_what_work_queued_before_it_wrote(own_stream):
    """The copy runs on a stream of its own, after the work queued before it on the
    caller's stream: values a slow kernel writes before the read come back, on the
    default stream and on one of the caller's."""
    late = cp.RawKernel(r"""
    extern "C" __global__ void late(long long cycles, long long* out) {
        const long long t0 = clock64();
        while (clock64() - t0 < cycles) {}
        out[threadIdx.x] = 10 * (threadIdx.x + 1);
    }""", "late")
    stream = cp.cuda.Stream(non_blocking=True) if own_stream else cp.cuda.Stream.null
    with stream:
        d = cp.zeros(4, cp.int64)
        late((1,), (4,), (np.int64(400_000_000), d))  # about 0.2 s at the H200's clocks
        assert arrays.scalars_to_host_async(d).result() == [10, 20, 30, 40]
