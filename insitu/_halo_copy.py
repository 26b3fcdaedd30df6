"""Pack/unpack of halo regions between block arrays and one flat exchange area.

Both backends take the same region tables: for each block, a list of
``(starts, shape, area_offset)`` boxes, flattened in C order into the area. NumPy
copies box by box with slices; CuPy runs one table-driven kernel for all boxes of all
blocks (one launch per direction instead of one per box: small halos would otherwise
be dominated by launch overhead).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from . import arrays

Region = tuple[tuple[int, int, int], tuple[int, int, int], int]  # starts, shape, area offset

_TYPES = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long", 16: "ulonglong2"}

_SOURCE = r"""
typedef {ctype} elem_t;
// One launch for all boxes of all blocks. Each CUDA block copies up to {per_block}
// consecutive elements of one box; it finds its box by binary search over the boxes'
// first CUDA-block index (the same for all its threads). Box sizes fit 32 bits.
// tab: per box {{first_cuda_block, block, i0, j0, k0, nj, nk, area_offset, stride0,
// stride1, n}}.
extern "C" __global__ void {name}(elem_t* const* __restrict__ blks, elem_t* __restrict__ area,
                                  const long long* __restrict__ tab, const int nbox)
{{
    int lo = 0, hi = nbox - 1;
    while (lo < hi) {{
        const int mid = (lo + hi + 1) >> 1;
        if (tab[11 * mid] <= blockIdx.x) lo = mid; else hi = mid - 1;
    }}
    const long long* r = tab + 11 * lo;
    const int nj = (int)r[5], nk = (int)r[6], njk = nj * nk, n = (int)r[10];
    elem_t* blk = blks[r[1]];
    elem_t* box = area + r[7];
    const long long s0 = r[8], s1 = r[9];
    const long long base = r[2] * s0 + r[3] * s1 + r[4];
    const int first = (int)(blockIdx.x - r[0]) * {per_block};
    #pragma unroll
    for (int e = 0; e < {per_block} / {threads}; ++e) {{
        const int t = first + e * {threads} + threadIdx.x;
        if (t < n) {{
            const int i = t / njk;
            const int rem = t - i * njk;
            const int j = rem / nk;
            const int k = rem - j * nk;
            const long long b = base + i * s0 + j * s1 + k;
            {body}
        }}
    }}
}}
"""
_THREADS, _PER_BLOCK = 256, 1024


@functools.cache
def _get_halo_kernel(itemsize: int, unpack: bool):
    """Kernel copying table boxes of the blocks into (pack) or out of (unpack) the area."""
    import cupy

    if itemsize not in _TYPES:
        raise TypeError(f"halo exchange: element size {itemsize} bytes is not supported ({sorted(_TYPES)})")
    name = f"halo_{'unpack' if unpack else 'pack'}_{itemsize * 8}bit"
    body = "blk[b] = box[t];" if unpack else "box[t] = blk[b];"
    src = _SOURCE.format(ctype=_TYPES[itemsize], name=name, body=body, threads=_THREADS, per_block=_PER_BLOCK)
    return cupy.RawKernel(src, name)


class NumpyCopier:
    """Box-by-box slice copies (host arrays)."""

    def __init__(self, pack: dict[int, list[Region]], unpack: dict[int, list[Region]], dtype,
                 shapes: dict[int, tuple[int, int, int]]) -> None:
        del dtype, shapes  # slices need neither
        self._pack = {g: [(_slices(s, n), n, o, int(np.prod(n))) for s, n, o in rs] for g, rs in pack.items()}
        self._unpack = {g: [(_slices(s, n), n, o, int(np.prod(n))) for s, n, o in rs] for g, rs in unpack.items()}

    def upload_pointers(self, blocks) -> None:
        """Nothing to upload on the host."""

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
    """One table-driven kernel launch for all blocks per direction (device arrays).

    The box tables go to the device once. The kernel reads the blocks through a
    device table of their pointers; tables for the last few sets of arrays are kept,
    so a solver that keeps (or double-buffers) its arrays uploads nothing per step,
    and one that allocates new arrays each step uploads 8 bytes per block (counted).
    """

    _KEEP = 8

    def __init__(self, pack: dict[int, list[Region]], unpack: dict[int, list[Region]], dtype,
                 shapes: dict[int, tuple[int, int, int]]) -> None:
        itemsize = np.dtype(dtype).itemsize
        self._k_pack = _get_halo_kernel(itemsize, False)
        self._k_unpack = _get_halo_kernel(itemsize, True)
        self._order = sorted(shapes)
        slot = {g: i for i, g in enumerate(self._order)}
        self._pack = self._table(pack, slot, shapes)
        self._unpack = self._table(unpack, slot, shapes)
        self._ptr_tables: dict[tuple[int, ...], Any] = {}

    @staticmethod
    def _table(regions: dict[int, list[Region]], slot, shapes):
        rows, nblocks = [], 0
        for g in sorted(regions):
            _, ny, nz = shapes[g]
            for (i0, j0, k0), (ni, nj, nk), off in regions[g]:
                n = ni * nj * nk
                if n >= 2**31:
                    raise ValueError(f"halo exchange: a ghost box of {n} elements exceeds the kernel's 2^31 limit")
                rows.append((nblocks, slot[g], i0, j0, k0, nj, nk, off, ny * nz, nz, n))
                nblocks += -(-n // _PER_BLOCK)
        if not rows:
            return None
        return arrays.to_device(np.asarray(rows, np.int64).ravel()), len(rows), nblocks

    def upload_pointers(self, blocks):
        """Device table of the blocks' pointers (uploaded once per set of arrays)."""
        if self._pack is None and self._unpack is None:
            return None  # no boxes: nothing will read it
        key = tuple(blocks[g].data.ptr for g in self._order)
        tab = self._ptr_tables.get(key)
        if tab is None:
            if len(self._ptr_tables) >= self._KEEP:
                self._ptr_tables.pop(next(iter(self._ptr_tables)))
            tab = self._ptr_tables[key] = arrays.to_device(np.asarray(key, np.uint64))
        return tab

    def _run(self, kernel, table, blocks, area) -> None:
        if table is None:
            return
        tab, nbox, nblocks = table
        kernel((nblocks,), (_THREADS,), (self.upload_pointers(blocks), area, tab, np.int32(nbox)))

    def pack(self, blocks, area) -> None:
        self._run(self._k_pack, self._pack, blocks, area)

    def unpack(self, blocks, area) -> None:
        self._run(self._k_unpack, self._unpack, blocks, area)


def _slices(starts, shape):
    return tuple(slice(s, s + n) for s, n in zip(starts, shape))
