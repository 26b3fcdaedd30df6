"""Where a two-GPU halo exchange spends its time: GPU time of its parts against raw NCCL.

    mpiexec -n 2 python tests/gpu/bench_halo_parts.py [--n 512]

Run with one rank per GPU. Each GPU time is taken with CUDA events around the work,
enqueued behind a 200 us spin kernel so that the host's launch cost is hidden (both
ranks barrier first, so their GPUs start within a few microseconds of each other);
wall times are host clocks from a barrier to the end of a stream synchronize. Medians
of 30; one line per rank.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def main() -> None:
    import cupy as cp
    from cupy.cuda import nccl
    from mpi4py import MPI

    import insitu
    from insitu import Domain, HaloExchange
    from insitu._halo_copy import CupyCopier
    from insitu.transports.nccl import _pair_comm

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=512)
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    rank = comm.rank
    if comm.size != 2:
        raise SystemExit("run with 2 ranks, one per GPU")
    insitu.arrays.select_device(comm)
    dom = Domain.create((args.n,) * 3, blocks=(2, 2, 2), ghost=1, nranks=2)
    blocks = {g: cp.random.random(dom.block(g).padded_shape, dtype=cp.float32) for g in dom.blocks_of(rank)}
    spin = cp.RawKernel(r'''extern "C" __global__ void spin(long long ns) {
        unsigned long long t0, t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
        do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while ((long long)(t - t0) < ns); }''', "spin")
    s = cp.cuda.get_current_stream()
    ev = [cp.cuda.Event(), cp.cuda.Event()]

    def gpu(fn, reps=30):
        ts = []
        for _ in range(reps):
            comm.Barrier()
            spin((1,), (1,), (np.int64(200_000),))
            ev[0].record()
            fn()
            ev[1].record()
            ev[1].synchronize()
            ts.append(cp.cuda.get_elapsed_time(ev[0], ev[1]) * 1e3)
        return float(np.median(ts))

    def wall(fn, reps=30):
        ts = []
        for _ in range(reps):
            comm.Barrier()
            t0 = time.perf_counter()
            fn()
            s.synchronize()
            ts.append((time.perf_counter() - t0) * 1e6)
        return float(np.median(ts))

    out = {}

    class RemoteOnly(HaloExchange):  # the fused kernel without its same-rank copies
        def _layout(self, dtype, backend):
            super()._layout(dtype, backend)
            pack, _, _, unpack = self._moves
            self._moves = (pack, [], [], unpack)

    with RemoteOnly(dom, comm, transport="p2p") as ex:
        for _ in range(5):
            ex.exchange(blocks)
        g = next(iter(ex._graphs.values()))
        out["p2p kernel, remote boxes only (GPU)"] = gpu(lambda: g.launch(s))
    with HaloExchange(dom, comm, transport="p2p") as ex:
        for _ in range(5):
            ex.exchange(blocks)
        arrs = ex._validate(blocks)
        _, direct, twins, _ = ex._moves
        local = CupyCopier(direct, "float32", ex._shapes, twins=twins)
        out["same-rank copies only (GPU)"] = gpu(lambda: local.run(arrs, ex._area))
        g = next(iter(ex._graphs.values()))
        out["p2p exchange graph (GPU)"] = gpu(lambda: g.launch(s))
        out["p2p graph launch + sync (wall)"] = wall(lambda: g.launch(s))
        out["p2p exchange() (wall)"] = wall(lambda: ex.exchange(blocks))
    with HaloExchange(dom, comm, transport="nccl") as ex:
        for _ in range(5):
            ex.exchange(blocks)
        g = next(iter(ex._graphs.values()))
        out["NCCL exchange graph (GPU)"] = gpu(lambda: g.launch(s))
        out["NCCL exchange() (wall)"] = wall(lambda: ex.exchange(blocks))
        peer = 1 - rank
        c = _pair_comm(ex._ctx, peer, time.monotonic() + 60)
        nb = sum(m.size for m in ex._sends[peer]) * 4
        sb, rb = cp.empty(nb, cp.uint8), cp.empty(nb, cp.uint8)

        def raw():
            nccl.groupStart()
            c.send(sb.data.ptr, nb, nccl.NCCL_UINT8, peer, s.ptr)
            c.recv(rb.data.ptr, nb, nccl.NCCL_UINT8, peer, s.ptr)
            nccl.groupEnd()

        for _ in range(5):
            raw()
        out["raw NCCL send/recv of the remote bytes (GPU)"] = gpu(raw)
        out["raw NCCL send/recv of the remote bytes (wall)"] = wall(raw)
    rows = comm.gather(out)
    if rank == 0:
        print(f"| part ({args.n}^3 float32, 8 blocks, 2 ranks on 2 GPUs), us | rank 0 | rank 1 |")
        print("| --- | ---: | ---: |")
        for k in out:
            print(f"| {k} | {rows[0][k]:.1f} | {rows[1][k]:.1f} |")


if __name__ == "__main__":
    main()
