"""GPU tests: run on a machine with CuPy and a CUDA device (`make gpu-test`)."""

import pytest

import insitu


def _ngpus() -> int:
    cp = insitu.arrays.cupy_or_none()
    return cp.cuda.runtime.getDeviceCount() if cp is not None else 0


NGPUS = _ngpus()


def pytest_collection_modifyitems(config, items):
    if NGPUS == 0:
        why = insitu.arrays._cupy_status()[1]
        skip = pytest.mark.skip(reason=f"tests/gpu needs CuPy and a CUDA device: {why}")
        for item in items:
            item.add_marker(skip)
        return
    for item in items:
        need = item.get_closest_marker("gpus")
        if need and NGPUS < need.args[0]:
            item.add_marker(pytest.mark.skip(
                reason=f"needs {need.args[0]} GPUs (e.g. nvidia-h200-x2), this machine has {NGPUS}"))


def pytest_configure(config):
    config.addinivalue_line("markers", "gpus(n): needs at least n CUDA devices")
