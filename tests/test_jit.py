"""render._jit.call: inputs typed read-only (C or any layout) share Numba specializations."""

import numba
import numpy as np

from render import _jit
from render.contour import _cpu, marching_cubes


@numba.njit(cache=False)
def _first_column_twice(a, out):
    out[:] = a[:, 0] * 2


def _views(a):
    """a, a read-only copy, a Fortran-ordered copy, a strided view and an unaligned copy of `a`."""
    ro = a.copy()
    ro.flags.writeable = False
    wide = np.zeros((a.shape[0], 2 * a.shape[1]))
    wide[:, ::2] = a
    raw = np.zeros(a.nbytes + 1, np.uint8)
    unaligned = np.ndarray(a.shape, a.dtype, raw.data, offset=1)
    unaligned[:] = a
    return a, ro, np.asfortranarray(a), wide[:, ::2], unaligned


def test_inputs_share_a_specialization_per_layout_and_give_the_kernels_result():
    a = np.arange(12.0).reshape(6, 2)
    kinds = []
    for v in _views(a):
        out = np.full(6, np.nan)
        _jit.call(_first_column_twice, v, out, inputs=(0,))
        np.testing.assert_array_equal(out, a[:, 0] * 2)
        kinds.append(str(next(reversed(_first_column_twice.overloads))[0]))
    # writeable and read-only C share one; Fortran and strided share the any-layout one
    assert kinds[:4] == ["readonly array(float64, 2d, C)"] * 2 + ["readonly array(float64, 2d, A)"] * 2
    assert "unaligned" in kinds[4]
    assert len(_first_column_twice.overloads) == 3


def test_a_read_only_volume_uses_the_writeable_ones_marching_cubes():
    x = np.linspace(-1.0, 1.0, 24)
    vol = np.sqrt(x[:, None, None] ** 2 + x[None, :, None] ** 2 + x[None, None, :] ** 2)
    ro = vol.copy()
    ro.flags.writeable = False
    before = len(_cpu.generate.overloads)
    a = marching_cubes(vol, 0.5)
    b = marching_cubes(ro, 0.5)
    assert len(_cpu.generate.overloads) - before <= 1  # one for both (none if compiled before)
    assert len(a[1]) > 0
    for p, q in zip(a, b):
        np.testing.assert_array_equal(p, q)
