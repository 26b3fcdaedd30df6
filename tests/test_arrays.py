"""insitu.arrays: zero-copy acceptance of arrays and the counted transfer gateway (CPU)."""

import re

import numpy as np
import pytest

import insitu
from insitu import arrays
from insitu.arrays import DeviceUnavailableError, HostTransferError

from fakes import DL_CPU, ArrayInterfaceOnly, DLPackOnly, FakeCudaArray, FakeCudaDLPack

no_cuda = pytest.mark.skipif(arrays.cuda_available(), reason="checks behaviour without a usable CUDA device")

# What _cupy_status says when CuPy is missing or cannot reach a device.
CUPY_UNUSABLE = r"CuPy (is not installed|found no)"


def _host(shape=(3, 4, 5), dtype=np.float64):
    return np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)


# --------------------------------------------------------------------------- asarray


@pytest.mark.parametrize("a", [_host(), _host()[:, ::2, 1:], _host((7,), np.int32), np.zeros((), np.float32)])
def test_asarray_returns_numpy_unchanged(a):
    assert insitu.asarray(a) is a
    assert arrays.backend_of(a) == "numpy"
    assert not arrays.is_device_array(a)
    assert arrays.device_id(a) is None
    assert arrays.get_array_module(a) is np


@pytest.mark.parametrize("wrap", [ArrayInterfaceOnly, DLPackOnly], ids=["array_interface", "dlpack"])
@pytest.mark.parametrize("view", [np.s_[...], np.s_[1:, ::2, ::-1]], ids=["contiguous", "strided"])
def test_asarray_wraps_host_protocols_without_copying(wrap, view):
    src = _host()[view]
    expected = src.copy()
    obj = wrap(src)
    assert not isinstance(obj, np.ndarray)
    assert not arrays.is_device_array(obj)
    assert arrays.backend_of(obj) == "numpy"

    out = insitu.asarray(obj, name="fields/phi/values")

    assert type(out) is np.ndarray
    if wrap is DLPackOnly:
        assert obj.exports == 1  # exported once, not copied through a buffer
    assert out.shape == src.shape and out.dtype == src.dtype and out.strides == src.strides
    np.testing.assert_array_equal(out, expected)
    assert arrays.data_pointer(out) == arrays.data_pointer(obj) == src.__array_interface__["data"][0]
    assert np.shares_memory(out, src)
    # Writing through the result is seen in the source: same memory, not a copy.
    out[(0,) * out.ndim] = -42.0
    out[(-1,) * out.ndim] = -43.0
    assert src[(0,) * src.ndim] == -42.0
    assert src[(-1,) * src.ndim] == -43.0


def test_data_pointer_of_offset_view_is_first_element():
    a = _host()
    v = a[1, 2:]
    assert arrays.data_pointer(v) == a.ctypes.data + a.strides[0] + 2 * a.strides[1]
    assert arrays.data_pointer(ArrayInterfaceOnly(v)) == arrays.data_pointer(v)
    assert arrays.data_pointer(DLPackOnly(v)) == arrays.data_pointer(v)


@pytest.mark.parametrize("bad", [[1.0, 2.0], (1, 2, 3), 3.0, "abc", None])
def test_asarray_refuses_sequences_naming_the_parameter(bad):
    with pytest.raises(TypeError, match=r"^coords/values: expected an array .*got " + type(bad).__name__):
        insitu.asarray(bad, name="coords/values")
    with pytest.raises(TypeError, match=r"^array: expected an array"):
        insitu.asarray(bad)


def test_asarray_refuses_unsupported_dlpack_device():
    class OpenCL(DLPackOnly):
        def __dlpack_device__(self):
            return (4, 0)  # kDLOpenCL

    obj = OpenCL(_host())
    with pytest.raises(TypeError, match=r"^fields/rho/values: DLPack device type 4 is not supported"):
        insitu.asarray(obj, name="fields/rho/values")
    assert obj.exports == 0


# --------------------------------------------------------------------------- device arrays (fake)


def test_fake_cuda_array_interface_is_version_3_over_host_memory():
    a = _host()
    cai = FakeCudaArray(a).__cuda_array_interface__
    assert cai == {"shape": (3, 4, 5), "typestr": "<f8", "data": (a.ctypes.data, False), "strides": None, "version": 3}


@pytest.mark.parametrize("make", [FakeCudaArray, FakeCudaDLPack], ids=["cuda_array_interface", "dlpack_cuda"])
def test_device_arrays_are_recognised(make):
    a = _host()
    fake = make(a)
    assert arrays.is_device_array(fake)
    assert arrays.backend_of(fake) == "cupy"
    if make is FakeCudaArray:
        assert arrays.data_pointer(fake) == a.ctypes.data


@no_cuda
@pytest.mark.parametrize("make", [FakeCudaArray, FakeCudaDLPack], ids=["cuda_array_interface", "dlpack_cuda"])
def test_device_array_without_cupy_raises_naming_the_array(make):
    fake = make(_host())
    want = re.escape("fields/phi/values") + r" is a CUDA device array, but " + CUPY_UNUSABLE
    with pytest.raises(DeviceUnavailableError, match=want):
        insitu.asarray(fake, name="fields/phi/values")
    with pytest.raises(DeviceUnavailableError, match=CUPY_UNUSABLE):
        arrays.get_array_module(fake)
    if make is FakeCudaDLPack:
        assert fake.exports == 0  # refused before asking the producer for its memory


@no_cuda
def test_dlpack_producer_on_cpu_is_accepted_but_cuda_one_is_not():
    # Same host memory; only the reported device differs.
    a = _host()
    assert DLPackOnly(a).__dlpack_device__()[0] == DL_CPU
    assert np.shares_memory(insitu.asarray(DLPackOnly(a)), a)
    with pytest.raises(DeviceUnavailableError):
        insitu.asarray(FakeCudaDLPack(a))


def test_device_error_is_a_runtime_error():
    assert issubclass(DeviceUnavailableError, RuntimeError)
    assert issubclass(HostTransferError, AssertionError)


# --------------------------------------------------------------------------- gateway


def test_to_host_of_host_array_is_identity_and_uncounted():
    a = _host()
    before = arrays.transfer_stats()
    with insitu.no_host_transfers() as c:
        assert insitu.to_host(a) is a
        wrapped = insitu.to_host(ArrayInterfaceOnly(a))
        assert np.shares_memory(wrapped, a)
        out = np.empty_like(a)
        assert insitu.to_host(a, out=out) is out
        np.testing.assert_array_equal(out, a)
    assert c.calls == 0 and c.bytes == 0
    assert arrays.transfer_stats() == before


def test_count_transfers_of_host_only_work_is_zero():
    with insitu.count_transfers() as c:
        a = insitu.asarray(_host())
        b = insitu.to_host(a) * 2
        insitu.to_host(b)
    assert (c.h2d_calls, c.h2d_bytes, c.d2h_calls, c.d2h_bytes, c.calls, c.bytes) == (0, 0, 0, 0, 0, 0)


def test_no_host_transfers_raises_on_a_counted_transfer():
    with pytest.raises(HostTransferError, match=re.escape("1 host->device (100 B)")) as err:
        with insitu.no_host_transfers():
            arrays._count("h2d", 100)
    assert "0 device->host (0 B)" in str(err.value)


def test_no_host_transfers_reports_both_directions():
    msg = "expected no host<->device transfers, got 2 host->device (30 B) and 1 device->host (7 B)"
    with pytest.raises(HostTransferError, match="^" + re.escape(msg) + "$"):
        with insitu.no_host_transfers():
            arrays._count("h2d", 10)
            arrays._count("d2h", 7)
            arrays._count("h2d", 20)


def test_count_transfers_reports_deltas_only():
    arrays._count("h2d", 1000)  # before the block: not reported
    arrays._count("d2h", 500)
    total_before = arrays.transfer_stats()
    with insitu.count_transfers() as c:
        assert c.calls == 0 and c.bytes == 0
        arrays._count("d2h", 40)
        assert (c.d2h_calls, c.d2h_bytes) == (1, 40)  # live inside the block
        arrays._count("h2d", 8)
        arrays._count("d2h", 2)
    arrays._count("h2d", 64)  # after the block: not reported
    assert (c.h2d_calls, c.h2d_bytes, c.d2h_calls, c.d2h_bytes) == (1, 8, 2, 42)
    assert (c.calls, c.bytes) == (3, 50)
    d = arrays.transfer_stats() - total_before
    assert (d.h2d_calls, d.h2d_bytes, d.d2h_calls, d.d2h_bytes) == (2, 72, 2, 42)


def test_nested_counters_each_see_their_own_window():
    with insitu.count_transfers() as outer:
        arrays._count("h2d", 1)
        with insitu.count_transfers() as inner:
            arrays._count("h2d", 2)
        arrays._count("h2d", 4)
    assert (inner.h2d_calls, inner.h2d_bytes) == (1, 2)
    assert (outer.h2d_calls, outer.h2d_bytes) == (3, 7)


@no_cuda
def test_to_device_without_cupy_raises():
    a = _host()
    with insitu.count_transfers() as c:
        with pytest.raises(DeviceUnavailableError, match=CUPY_UNUSABLE):
            insitu.to_device(a)
        with pytest.raises(DeviceUnavailableError, match=CUPY_UNUSABLE):
            insitu.to_device(a, device=0)
    assert c.calls == 0


@no_cuda
def test_to_host_of_device_array_without_cupy_raises_and_counts_nothing():
    with insitu.count_transfers() as c:
        with pytest.raises(DeviceUnavailableError, match=CUPY_UNUSABLE):
            insitu.to_host(FakeCudaArray(_host()))
    assert c.calls == 0


# --------------------------------------------------------------------------- devices, pinned memory


@no_cuda
def test_cuda_unavailable_here():
    assert arrays.cupy_or_none() is None
    assert arrays.cuda_available() is False


@no_cuda
def test_select_device_without_cupy_is_none():
    assert arrays.select_device() is None
    from mpi4py import MPI

    assert arrays.select_device(MPI.COMM_WORLD) is None


@pytest.mark.parametrize("shape,dtype",
                         [((4, 5, 6), np.float32), ((7,), np.int64), ((0, 3), np.uint8), (5, np.float64)])
def test_pinned_empty_shape_and_dtype(shape, dtype):
    a = arrays.pinned_empty(shape, dtype)
    assert isinstance(a, np.ndarray)
    assert a.shape == (shape if isinstance(shape, tuple) else (shape,))
    assert a.dtype == np.dtype(dtype)
    assert a.flags.c_contiguous and a.flags.writeable
    a[...] = 3
    assert np.all(a == 3)


def test_scalars_to_host_of_host_values_is_uncounted():
    with arrays.count_transfers() as counted:
        assert arrays.scalars_to_host(np.array([3, -1, 7], np.int64)) == [3, -1, 7]
        assert arrays.scalars_to_host_async(np.array([2.5, 4.0])).result() == [2.5, 4.0]
    assert counted.scalar_reads == 0
