"""Copies of halo boxes between block arrays and a flat exchange area.

A *move* copies one box: from a block array (a gid and the box's start index) or from
the area (an element offset: the box lies there flattened in C order) to either of
the two. Packing (block -> area), unpacking (area -> block) and same-rank copies
(block -> block) are all lists of moves. Both backends take the same lists: NumPy
copies move by move with slices; CuPy runs one table-driven kernel for a whole list
(one launch instead of one per box: small halos would otherwise be dominated by
launch overhead).
"""

from __future__ import annotations

import functools
from typing import Any, Sequence

import numpy as np

from . import arrays

#: (gid, (i0, j0, k0)) for a box inside a block array, or (None, offset) inside the area.
Box = tuple[Any, Any]
#: (source box, destination box, box shape)
Move = tuple[Box, Box, tuple[int, int, int]]

_TYPES = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long", 16: "ulonglong2"}
_THREADS, _PER_BLOCK = 256, 1024
_ROW = 12

_SOURCE = r"""
typedef {ctype} elem_t;
// One launch copies every box of a move list. Each CUDA block copies up to {per_block}
// consecutive elements of one box and finds its box by binary search over the boxes'
// first CUDA-block index (the same for all its threads). Arrays are reached through
// a table of pointers; the exchange area is one of them, with strides that make it
// contiguous. Box sizes fit 32 bits, addresses use 64.
// tab: per box {{first_cuda_block, n, nj, nk, src, src_base, src_s0, src_s1,
//                dst, dst_base, dst_s0, dst_s1}}.
extern "C" __global__ void {name}(elem_t* const* __restrict__ ptrs,
                                  const long long* __restrict__ tab, const int nbox,
                                  const int nwork)
{{
    // Grid-stride over work items ({per_block} elements of one box each), so a launch
    // can be given fewer CUDA blocks than items and leave SMs to concurrent work.
    for (int w = blockIdx.x; w < nwork; w += gridDim.x) {{
        int lo = 0, hi = nbox - 1;
        while (lo < hi) {{
            const int mid = (lo + hi + 1) >> 1;
            if (tab[{row} * mid] <= w) lo = mid; else hi = mid - 1;
        }}
        const long long* r = tab + {row} * lo;
        const int n = (int)r[1], nj = (int)r[2], nk = (int)r[3], njk = nj * nk;
        const elem_t* __restrict__ src = ptrs[r[4]] + r[5];
        elem_t* __restrict__ dst = ptrs[r[8]] + r[9];
        const long long ss0 = r[6], ss1 = r[7], ds0 = r[10], ds1 = r[11];
        const int first = (int)(w - r[0]) * {per_block};
        #pragma unroll
        for (int e = 0; e < {per_block} / {threads}; ++e) {{
            const int t = first + e * {threads} + threadIdx.x;
            if (t < n) {{
                const int i = t / njk;
                const int rem = t - i * njk;
                const int j = rem / nk;
                const int k = rem - j * nk;
                dst[i * ds0 + j * ds1 + k] = src[i * ss0 + j * ss1 + k];
            }}
        }}
    }}
}}
"""


@functools.cache
def _get_halo_copy_kernel(itemsize: int):
    """Kernel running a move table, for elements of `itemsize` bytes."""
    import cupy

    if itemsize not in _TYPES:
        raise TypeError(f"halo exchange: element size {itemsize} bytes is not supported ({sorted(_TYPES)})")
    name = f"halo_copy_{itemsize * 8}bit"
    src = _SOURCE.format(ctype=_TYPES[itemsize], name=name, threads=_THREADS, per_block=_PER_BLOCK, row=_ROW)
    return cupy.RawKernel(src, name)


class NumpyCopier:
    """Move by move slice copies (host arrays)."""

    def __init__(self, moves: Sequence[Move], dtype, shapes: dict[int, tuple[int, int, int]],
                 *, max_blocks: int | None = None) -> None:
        del dtype, shapes, max_blocks  # slices need none of them
        self._moves = [(self._view(s, shape), self._view(d, shape)) for s, d, shape in moves]

    @staticmethod
    def _view(box: Box, shape):
        gid, where = box
        if gid is None:
            n = int(np.prod(shape))
            return None, (slice(where, where + n), shape)
        return gid, tuple(slice(a, a + b) for a, b in zip(where, shape))

    @staticmethod
    def _get(ref, blocks, area):
        gid, sl = ref
        if gid is None:
            flat, shape = sl
            return area[flat].reshape(shape)
        return blocks[gid][sl]

    def upload_pointers(self, blocks, area) -> None:
        """Nothing to upload on the host."""

    def run(self, blocks, area) -> None:
        for s, d in self._moves:
            self._get(d, blocks, area)[...] = self._get(s, blocks, area)


class CupyCopier:
    """One table-driven kernel launch per move list (device arrays).

    The move table goes to the device once. The kernel reaches the arrays through a
    device table of their pointers; tables for the last few sets of arrays are kept,
    so a solver that keeps (or double-buffers) its arrays uploads nothing per step,
    and one that allocates new arrays each step uploads 8 bytes per block (counted).
    """

    _KEEP = 8

    def __init__(self, moves: Sequence[Move], dtype, shapes: dict[int, tuple[int, int, int]],
                 *, max_blocks: int | None = None) -> None:
        self._kernel = _get_halo_copy_kernel(np.dtype(dtype).itemsize)
        self._max_blocks = max_blocks
        self._order = sorted(shapes)
        area_slot = len(self._order)
        slot = {g: i for i, g in enumerate(self._order)}

        def ref(box: Box, shape):
            gid, where = box
            if gid is None:  # the area: contiguous, so strides from the box shape
                return (area_slot, where, shape[1] * shape[2], shape[2])
            _, ny, nz = shapes[gid]
            i0, j0, k0 = where
            return (slot[gid], (i0 * ny + j0) * nz + k0, ny * nz, nz)

        rows, nblocks = [], 0
        for s, d, (ni, nj, nk) in moves:
            n = ni * nj * nk
            if n >= 2**31:
                raise ValueError(f"halo exchange: a ghost box of {n} elements exceeds the kernel's 2^31 limit")
            rows.append((nblocks, n, nj, nk, *ref(s, (ni, nj, nk)), *ref(d, (ni, nj, nk))))
            nblocks += -(-n // _PER_BLOCK)
        self._nbox, self._nblocks = len(rows), nblocks
        self._table = arrays.to_device(np.asarray(rows, np.int64).ravel()) if rows else None
        self._ptr_tables: dict[tuple[int, ...], Any] = {}

    def upload_pointers(self, blocks, area):
        """Device table of the arrays' pointers (uploaded once per set of arrays)."""
        if self._table is None:
            return None  # no boxes: nothing will read it
        key = (*(blocks[g].data.ptr for g in self._order), area.data.ptr)
        tab = self._ptr_tables.get(key)
        if tab is None:
            if len(self._ptr_tables) >= self._KEEP:
                self._ptr_tables.pop(next(iter(self._ptr_tables)))
            tab = self._ptr_tables[key] = arrays.to_device(np.asarray(key, np.uint64))
        return tab

    def run(self, blocks, area) -> None:
        if self._table is None:
            return
        ptrs = self.upload_pointers(blocks, area)
        grid = self._nblocks if self._max_blocks is None else min(self._nblocks, self._max_blocks)
        self._kernel((grid,), (_THREADS,), (ptrs, self._table, np.int32(self._nbox), np.int32(self._nblocks)))
