"""Pack/unpack of halo regions between block arrays and one flat exchange area.

Both backends take the same region tables: for each block, a list of
``(starts, shape, area_offset)`` boxes, flattened in C order into the area. NumPy
copies box by box with slices; CuPy runs one table-driven kernel per block (a single
launch per block and direction instead of one per box, which is what keeps small
halos from being dominated by launch overhead).
"""

from __future__ import annotations

import functools

import numpy as np

from . import arrays

Region = tuple[tuple[int, int, int], tuple[int, int, int], int]  # starts, shape, area offset

_TYPES = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long", 16: "ulonglong2"}

_SOURCE = r"""
typedef {ctype} elem_t;
// tab: per region {{start, i0, j0, k0, nj, nk, area_offset}}; regions sorted by start.
extern "C" __global__ void {name}(elem_t* __restrict__ blk, elem_t* __restrict__ area,
                                  const long long* __restrict__ tab, const int nreg,
                                  const long long total, const long long sx, const long long sy)
{{
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += step) {{
        int lo = 0, hi = nreg - 1;
        while (lo < hi) {{
            const int mid = (lo + hi + 1) >> 1;
            if (tab[7 * mid] <= t) lo = mid; else hi = mid - 1;
        }}
        const long long* r = tab + 7 * lo;
        const long long loc = t - r[0];
        const long long njk = r[4] * r[5];
        const long long i = loc / njk;
        const long long rem = loc - i * njk;
        const long long j = rem / r[5];
        const long long k = rem - j * r[5];
        const long long b = (r[1] + i) * sx + (r[2] + j) * sy + (r[3] + k);
        {body}
    }}
}}
"""


@functools.cache
def _get_halo_kernel(itemsize: int, unpack: bool):
    """Kernel copying table boxes of a block into (pack) or out of (unpack) the area."""
    import cupy

    if itemsize not in _TYPES:
        raise TypeError(f"halo exchange: element size {itemsize} bytes is not supported ({sorted(_TYPES)})")
    name = f"halo_{'unpack' if unpack else 'pack'}_{itemsize * 8}bit"
    body = "blk[b] = area[r[6] + loc];" if unpack else "area[r[6] + loc] = blk[b];"
    src = _SOURCE.format(ctype=_TYPES[itemsize], name=name, body=body)
    return cupy.RawKernel(src, name)


class NumpyCopier:
    """Box-by-box slice copies (host arrays)."""

    def __init__(self, pack: dict[int, list[Region]], unpack: dict[int, list[Region]], dtype) -> None:
        self._pack = {g: [(_slices(s, n), n, o, int(np.prod(n))) for s, n, o in rs] for g, rs in pack.items()}
        self._unpack = {g: [(_slices(s, n), n, o, int(np.prod(n))) for s, n, o in rs] for g, rs in unpack.items()}

    def pack(self, blocks, area) -> None:
        for g, rs in self._pack.items():
            a = blocks[g]
            for sl, shape, o, n in rs:
                area[o:o + n].reshape(shape)[...] = a[sl]

    def unpack(self, blocks, area) -> None:
        for g, rs in self._unpack.items():
            a = blocks[g]
            for sl, shape, o, n in rs:
                a[sl] = area[o:o + n].reshape(shape)


class CupyCopier:
    """One table-driven kernel launch per block and direction (device arrays)."""

    def __init__(self, pack: dict[int, list[Region]], unpack: dict[int, list[Region]], dtype) -> None:
        self.itemsize = np.dtype(dtype).itemsize
        self._k_pack = _get_halo_kernel(self.itemsize, False)
        self._k_unpack = _get_halo_kernel(self.itemsize, True)
        # Tables go to the device once, here, through the counted gateway.
        self._pack = {g: self._table(rs) for g, rs in pack.items() if rs}
        self._unpack = {g: self._table(rs) for g, rs in unpack.items() if rs}

    @staticmethod
    def _table(regions: list[Region]):
        rows, start = [], 0
        for (i0, j0, k0), (ni, nj, nk), off in regions:
            rows.append((start, i0, j0, k0, nj, nk, off))
            start += ni * nj * nk
        return arrays.to_device(np.asarray(rows, np.int64).ravel()), len(rows), start

    def _run(self, kernel, tables, blocks, area) -> None:
        for g, (tab, nreg, total) in tables.items():
            a = blocks[g]
            _, ny, nz = a.shape
            threads = 256
            grid = int(min((total + threads - 1) // threads, 8192))
            kernel((grid,), (threads,), (a, area, tab, np.int32(nreg), np.int64(total),
                                         np.int64(ny * nz), np.int64(nz)))

    def pack(self, blocks, area) -> None:
        self._run(self._k_pack, self._pack, blocks, area)

    def unpack(self, blocks, area) -> None:
        self._run(self._k_unpack, self._unpack, blocks, area)


def _slices(starts, shape):
    return tuple(slice(s, s + n) for s, n in zip(starts, shape))
