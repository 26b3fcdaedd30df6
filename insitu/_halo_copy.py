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

import dataclasses
import functools
from typing import Any, Sequence

import numpy as np

from . import arrays
from .log import compiling, cupy_cache_dir, get_logger

_log = get_logger(__name__)

#: (gid, (i0, j0, k0)) for a box inside a block array, or (None, offset) inside the area.
Box = tuple[Any, Any]
#: (source box, destination box, box shape)
Move = tuple[Box, Box, tuple[int, int, int]]

_TYPES = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long", 16: "ulonglong2"}
_THREADS, _PER_BLOCK = 256, 1024
_ROW = 16

_SOURCE = r"""
typedef {ctype} elem_t;
#define ROW {row}
#define PER_BLOCK {per_block}
#define THREADS {threads}
#define PER_THREAD (PER_BLOCK / THREADS)

// Wait until a flag written by a peer reaches this exchange's epoch, or give up after
// budget_ns: then mark gave_up (device memory, which later waits read) and failed
// (host-mapped: the host turns it into PeerTimeoutError; reading it here would cross PCIe).
// The poll is an acquire load at system scope: what the peer wrote before its flag is
// visible after it (to the rest of the CUDA block through the barrier that follows).
__device__ bool await_flag(const long long* flag, long long e, long long budget_ns,
                           volatile long long* gave_up, volatile int* failed)
{{
    if (*gave_up) return false;  // an earlier wait of this exchange gave up already
    unsigned long long t0, t;
    long long seen;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    for (;;) {{
        asm volatile("ld.acquire.sys.global.s64 %0, [%1];" : "=l"(seen) : "l"(flag) : "memory");
        if (seen >= e) return true;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        if ((long long)(t - t0) > budget_ns) {{ *gave_up = 1; *failed = 1; return false; }}
        __nanosleep(32);
    }}
}}

// Element t of a box of nj * nk elements per i-plane, C order.
__device__ __forceinline__ void box_index(int t, int njk, int nk, int& i, int& j, int& k)
{{
    i = t / njk;
    const int rem = t - i * njk;
    j = rem / nk;
    k = rem - j * nk;
}}

// One launch copies every box of a move list. Each CUDA block copies up to PER_BLOCK
// consecutive elements of one box and finds its box by binary search over the boxes'
// first CUDA-block index (the same for all its threads). Arrays are reached through
// a table of pointers; the exchange area (and peers' areas mapped by CUDA IPC) are
// among them, with strides that make them contiguous. Box sizes fit 32 bits.
// tab: per box {{first_item, n, nj, nk, src, src_base, src_s0, src_s1,
//                dst, dst_base, dst_s0, dst_s1, twin, wait, post, item base}}.
// twin: a second box of the same shape copied by the same threads (the mirror move
//   between two blocks: it reads the 32-byte sectors the first one writes, so a sector
//   of a thin ghost layer is in cache for the write that follows its read).
// wait: index into waits[] = {{flag, per_item}} of a flag to await before copying (a
//   peer's "free"; or, per_item, the first of the peer's "arrived" flags, one per work
//   item); post: index into posts[] of the first of a peer's per-item "arrived" flags,
//   written when the item is copied. item base: this box's first item in its group.
// fin (or null) = {{counter, n, flag_0 .. flag_n-1}}: the launch's last work item moves
//   the epoch on and writes the new epoch into the n flags (the senders' "free").
// 32 registers (8 blocks of 256 threads per SM): all work items of a mid-sized exchange
// are resident at once, so the unpack items, last in order, can start as soon as the
// peers' data is there instead of after the same-rank copies.
extern "C" __global__ void __launch_bounds__(THREADS, 8) {name}(elem_t* const* __restrict__ ptrs,
                                  const long long* __restrict__ tab, const int nbox,
                                  const int nwork, long long* epoch,
                                  const unsigned long long* __restrict__ waits,
                                  const unsigned long long* __restrict__ posts,
                                  const long long budget_ns, long long* gave_up, int* failed,
                                  const unsigned long long* __restrict__ fin)
{{
    __shared__ int go;
    // Grid-stride over work items, so a launch can be given fewer CUDA blocks than
    // items and leave SMs to concurrent work.
    for (int w = blockIdx.x; w < nwork; w += gridDim.x) {{
        int lo = 0, hi = nbox - 1;
        while (lo < hi) {{
            const int mid = (lo + hi + 1) >> 1;
            if (tab[ROW * mid] <= w) lo = mid; else hi = mid - 1;
        }}
        const long long* r = tab + ROW * lo;
        const long long wt = r[13], ps = r[14], item = r[15] + (w - r[0]);
        if (wt >= 0) {{
            if (threadIdx.x == 0) {{
                const long long* flag = (const long long*)waits[2 * wt] + (waits[2 * wt + 1] ? item : 0);
                go = await_flag(flag, epoch[0], budget_ns, gave_up, failed);
            }}
            __syncthreads();
        }}
        if (wt < 0 || go) {{
            const int n = (int)r[1], nj = (int)r[2], nk = (int)r[3], njk = nj * nk;
            const elem_t* __restrict__ src = ptrs[r[4]] + r[5];
            elem_t* __restrict__ dst = ptrs[r[8]] + r[9];
            const long long ss0 = r[6], ss1 = r[7], ds0 = r[10], ds1 = r[11];
            const long long tw = r[12];
            const int first = (int)(w - r[0]) * PER_BLOCK;
            elem_t v[PER_THREAD], u[PER_THREAD];
            const elem_t* src2 = src;
            elem_t* dst2 = dst;
            long long ts0 = 0, ts1 = 0, us0 = 0, us1 = 0;
            if (tw >= 0) {{
                const long long* q = tab + ROW * tw;
                src2 = ptrs[q[4]] + q[5];
                dst2 = ptrs[q[8]] + q[9];
                ts0 = q[6]; ts1 = q[7]; us0 = q[10]; us1 = q[11];
            }}
            // All loads (of both boxes) before any store: more requests in flight.
            // Indices are recomputed for the stores: holding them would cost the
            // registers that let every work item of an exchange be resident at once.
            #pragma unroll
            for (int e = 0; e < PER_THREAD; ++e) {{
                const int t = first + e * THREADS + threadIdx.x;
                if (t < n) {{
                    int i, j, k;
                    box_index(t, njk, nk, i, j, k);
                    v[e] = src[i * ss0 + j * ss1 + k];
                    if (tw >= 0) u[e] = src2[i * ts0 + j * ts1 + k];
                }}
            }}
            #pragma unroll
            for (int e = 0; e < PER_THREAD; ++e) {{
                const int t = first + e * THREADS + threadIdx.x;
                if (t < n) {{
                    int i, j, k;
                    box_index(t, njk, nk, i, j, k);
                    dst[i * ds0 + j * ds1 + k] = v[e];
                    if (tw >= 0) dst2[i * us0 + j * us1 + k] = u[e];
                }}
            }}
        }}
        if (ps >= 0 || fin != nullptr) {{
            __syncthreads();
            if (threadIdx.x == 0) {{
                const long long e = epoch[0];
                if (ps >= 0) {{
                    // One system-scope fence per CUDA block, after the barrier, orders all
                    // its threads' writes (into a peer's memory) before the item's flag.
                    __threadfence_system();
                    if (!*(volatile long long*)gave_up) *((volatile long long*)posts[ps] + item) = e;
                }}
                if (fin != nullptr) {{
                    // The last work item of the launch opens the next exchange: our area
                    // has been read (unpacked), so the senders may write it again.
                    __threadfence();
                    const unsigned long long done = atomicAdd((unsigned long long*)fin[0], 1ULL) + 1ULL;
                    if (done == (unsigned long long)e * nwork) {{
                        __threadfence_system();
                        epoch[0] = e + 1;
                        *(volatile long long*)gave_up = 0;
                        for (unsigned long long i = 0; i < fin[1]; ++i) *(volatile long long*)fin[2 + i] = e + 1;
                    }}
                }}
            }}
        }}
        if (wt >= 0 || ps >= 0 || fin != nullptr) __syncthreads();  // `go` is rewritten by the next item
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
    compiling(_log, f"the halo copy kernel {name}", cupy_cache_dir())
    return cupy.RawKernel(src, name)


class NumpyCopier:
    """Move by move slice copies (host arrays)."""

    def __init__(self, moves: Sequence[Move], dtype, shapes: dict[int, tuple[int, int, int]],
                 **options) -> None:
        del dtype, shapes, options  # slices need none of them (twins, gates: device only)
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


@dataclasses.dataclass(frozen=True)
class Gates:
    """Device-side synchronization of a move list with peers (see :mod:`.transports.p2p`).

    waits : ``(flag address, per_item)``; a move gated by ``waits[i]`` starts once that
        flag (per_item: the flag of its work item, counted from that address) holds the
        current epoch. posts : addresses of per-item flags; a work item of a move posting
        to group ``i`` writes the epoch into its own flag once copied. frees : flag
        addresses; when the whole launch is done, the epoch goes up by one and is
        written into each (so one launch per exchange needs no other kernel).
    """

    epoch: int  # address of the exchange's epoch counter (device)
    gave_up: int  # address of the exchange's give-up flag (device)
    failed: int  # address of the give-up flag the host reads (host-mapped)
    budget_ns: int
    waits: tuple[tuple[int, bool], ...]
    posts: tuple[int, ...]
    frees: tuple[int, ...]  # flags the launch's last work item sets to the next epoch


def work_items(n: int) -> int:
    """Work items (CUDA blocks) the copy kernel gives a box of `n` elements."""
    return -(-n // _PER_BLOCK)


class CupyCopier:
    """One table-driven kernel launch per move list (device arrays).

    The move table goes to the device once. The kernel reaches the arrays through a
    device table of their pointers; tables for the last few sets of arrays are kept,
    so a solver that keeps (or double-buffers) its arrays uploads nothing per step,
    and one that allocates new arrays each step uploads 8 bytes per block (counted).

    Options: ``max_blocks`` caps the grid; ``twins`` lists pairs ``(a, b)`` of move
    indices of one shape that the same threads copy (mirror moves between two blocks);
    ``extra`` maps further box keys (a peer's mapped area) to fixed device addresses;
    ``gates`` (a :class:`Gates`) with ``gate[i] = (wait, post)`` per move (-1: none)
    synchronizes moves with peers on the device. Work items are numbered per group
    (a per-item wait, or a post) in move order, so that a sender's items and the
    receiver's items of the same messages match one to one.
    """

    _KEEP = 8

    def __init__(self, moves: Sequence[Move], dtype, shapes: dict[int, tuple[int, int, int]],
                 *, max_blocks: int | None = None, twins: Sequence[tuple[int, int]] = (),
                 extra: dict[Any, int] | None = None, gates: Gates | None = None,
                 gate: Sequence[tuple[int, int]] | None = None) -> None:
        self._kernel = _get_halo_copy_kernel(np.dtype(dtype).itemsize)
        self._max_blocks = max_blocks
        self._order = sorted(shapes)
        extra = dict(extra or {})
        self._extra = tuple(extra.values())
        area_slot = len(self._order)
        slot = {g: i for i, g in enumerate(self._order)}
        slot.update({k: area_slot + 1 + i for i, k in enumerate(extra)})

        def ref(box: Box, shape):
            gid, where = box
            if gid is None or gid in extra:  # an area: contiguous, so strides from the box shape
                return (area_slot if gid is None else slot[gid], where, shape[1] * shape[2], shape[2])
            _, ny, nz = shapes[gid]
            i0, j0, k0 = where
            return (slot[gid], (i0 * ny + j0) * nz + k0, ny * nz, nz)

        twin = dict(twins)
        if len(set(twin) | set(twin.values())) != 2 * len(twin):
            raise ValueError("halo copy: a move is paired twice")
        gate = list(gate) if gate is not None else [(-1, -1)] * len(moves)
        # Moves with work items first (binary-searched by the kernel), their twins after.
        seconds = set(twin.values())
        lead = [i for i in range(len(moves)) if i not in seconds]
        where = {i: r for r, i in enumerate(lead + list(twin.values()))}
        rows, nblocks = [], 0
        counted: dict[tuple[str, int], int] = {}  # per-item group -> items so far
        for i in lead + list(twin.values()):
            s, d, (ni, nj, nk) = moves[i]
            n = ni * nj * nk
            if n >= 2**31:
                raise ValueError(f"halo exchange: a ghost box of {n} elements exceeds the kernel's 2^31 limit")
            first = -1 if i in seconds else nblocks
            tw = -1
            if i in twin:
                if moves[twin[i]][2] != moves[i][2]:
                    raise ValueError("halo copy: twin moves must have one shape")
                tw = where[twin[i]]
            w, p = gate[i]
            groups = ([("post", p)] if p >= 0 else []) + ([("wait", w)] if w >= 0 and gates.waits[w][1] else [])
            if len(groups) > 1 or (groups and i in seconds):
                raise ValueError("halo copy: a move has one per-item group at most, and no twin")
            base = counted.get(groups[0], 0) if groups else 0
            rows.append((first, n, nj, nk, *ref(s, (ni, nj, nk)), *ref(d, (ni, nj, nk)), tw, w, p, base))
            if first >= 0:
                nblocks += work_items(n)
                if groups:
                    counted[groups[0]] = base + work_items(n)
        self._nbox, self._nblocks = len(lead), nblocks
        self._table = arrays.to_device(np.asarray(rows, np.int64).ravel()) if rows else None
        self._ptr_tables: dict[tuple[int, ...], Any] = {}
        self._sync = (np.uint64(0),) * 3 + (np.int64(0),) + (np.uint64(0),) * 3
        if gates is not None:
            import cupy

            # Finished work items of the launch; never reset: in epoch e the launch is
            # complete when it reaches e * items.
            self._counter = cupy.zeros(1, np.uint64)
            self._waits = arrays.to_device(np.asarray([(a, int(b)) for a, b in gates.waits] or [(0, 0)],
                                                      np.uint64).ravel())
            self._posts = arrays.to_device(np.asarray(gates.posts or (0,), np.uint64))
            self._fin = arrays.to_device(np.asarray((self._counter.data.ptr, len(gates.frees), *gates.frees),
                                                    np.uint64))
            self._sync = (np.uint64(gates.epoch), self._waits, self._posts, np.int64(gates.budget_ns),
                          np.uint64(gates.gave_up), np.uint64(gates.failed), self._fin)

    def upload_pointers(self, blocks, area):
        """Device table of the arrays' pointers (uploaded once per set of arrays)."""
        if self._table is None:
            return None  # no boxes: nothing will read it
        key = (*(blocks[g].data.ptr for g in self._order), area.data.ptr, *self._extra)
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
        self._kernel((grid,), (_THREADS,), (ptrs, self._table, np.int32(self._nbox), np.int32(self._nblocks),
                                            *self._sync))
