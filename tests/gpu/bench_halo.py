"""Benchmark: halo exchange of a 512^3 float32 domain in 8 blocks, per transport.

    python tests/gpu/bench_halo.py [--n 512] [--md OUT.md]

The driver starts one ``mpiexec`` job per configuration (this same file with
``--worker``), and sets each against two references measured in the same job:
a plain device-to-device copy of the same bytes on one GPU, and (on two GPUs) raw
NCCL send/recv of the same per-peer byte counts. Times are medians over repeats
after warm-up, each repeat synchronized across ranks.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def worker(args) -> None:
    import cupy as cp
    from mpi4py import MPI

    sys.path.insert(0, ROOT)
    import insitu
    from insitu import Domain, HaloExchange

    comm = MPI.COMM_WORLD
    rank, size = comm.rank, comm.size
    insitu.arrays.select_device(comm)
    n = args.n
    dom = Domain.create((n, n, n), blocks=args.blocks, ghost=1, nranks=size)
    blocks = {g: cp.random.random(dom.block(g).padded_shape, dtype=cp.float32) for g in dom.blocks_of(rank)}
    ex = HaloExchange(dom, comm, transport=args.transport, graphs=not args.no_graphs, fuse=not args.no_fuse)
    for _ in range(args.warmup):
        ex.exchange(blocks)
    stream = cp.cuda.get_current_stream()
    times = []
    with insitu.count_transfers() as tc:
        for _ in range(args.reps):
            comm.Barrier()
            t0 = time.perf_counter()
            ex.exchange(blocks)
            stream.synchronize()
            comm.Barrier()
            times.append(time.perf_counter() - t0)
    t = float(np.median(times))
    # Bytes the exchange must deliver: every ghost cell inside the domain, once.
    ghost_bytes = sum(m.size for m in ex._local_msgs) + sum(m.size for ms in ex._recvs.values() for m in ms)
    remote_bytes = sum(m.size for ms in ex._recvs.values() for m in ms)
    ghost_bytes = comm.allreduce(ghost_bytes) * 4
    remote_bytes = comm.allreduce(remote_bytes) * 4
    kinds = sorted(set().union(*comm.allgather(set(ex.peer_transport.values()))))
    staged = comm.allreduce(tc.calls)

    # Reference 1: a plain device copy of the same bytes on this GPU (CUDA events).
    src = cp.empty(ghost_bytes // 4, cp.float32)
    dst = cp.empty_like(src)
    ev = [cp.cuda.Event(), cp.cuda.Event()]
    copy_t = []
    for i in range(args.warmup + args.reps):
        ev[0].record()
        dst[...] = src
        ev[1].record()
        ev[1].synchronize()
        if i >= args.warmup:
            copy_t.append(cp.cuda.get_elapsed_time(ev[0], ev[1]) / 1e3)
    copy = float(np.median(copy_t))

    # Reference 2: raw NCCL send/recv of the same per-peer bytes (only where NCCL was used).
    nccl_t = None
    if "nccl" in kinds or "p2p" in kinds:
        from insitu.transports.nccl import _pair_comm

        nccl_peers = [p for p, k in ex.peer_transport.items() if k in ("nccl", "p2p")]
        # The NCCL pair communicators (the exchange's own, or made here when it used p2p).
        comms = {p: _pair_comm(ex._ctx, p, time.monotonic() + 60) for p in nccl_peers}
        segs = {p: (sum(m.size for m in ex._sends.get(p, [])), sum(m.size for m in ex._recvs.get(p, [])))
                for p in nccl_peers}
        sb = {p: cp.empty(s, cp.float32) for p, (s, _) in segs.items()}
        rb = {p: cp.empty(r, cp.float32) for p, (_, r) in segs.items()}
        from cupy.cuda import nccl

        ts = []
        for i in range(args.warmup + args.reps):
            comm.Barrier()
            t0 = time.perf_counter()
            nccl.groupStart()
            for p in nccl_peers:
                c = comms[p]
                pp = 0 if p < rank else 1
                c.send(sb[p].data.ptr, sb[p].nbytes, nccl.NCCL_UINT8, pp, stream.ptr)
                c.recv(rb[p].data.ptr, rb[p].nbytes, nccl.NCCL_UINT8, pp, stream.ptr)
            nccl.groupEnd()
            stream.synchronize()
            comm.Barrier()
            if i >= args.warmup:
                ts.append(time.perf_counter() - t0)
        nccl_t = float(np.median(ts))
    # Where an exchange's time goes on this rank: argument checks, pack and unpack kernels.
    arrs = ex._validate(blocks)
    t0 = time.perf_counter()
    for _ in range(100):
        ex._validate(blocks)
    validate = (time.perf_counter() - t0) / 100
    kern = {}
    for name, fn in (("pack", ex._pack.run), ("unpack", ex._unpack.run), ("direct", ex._direct.run)):
        ts = []
        for _ in range(20):
            ev[0].record()
            fn(arrs, ex._area)
            ev[1].record()
            ev[1].synchronize()
            ts.append(cp.cuda.get_elapsed_time(ev[0], ev[1]) / 1e3)
        kern[name] = float(np.median(ts))
    t = comm.allreduce(t, op=MPI.MAX)
    ex.close()
    if rank == 0:
        print("RESULT " + json.dumps(dict(
            ranks=size, gpus=cp.cuda.runtime.getDeviceCount(), transports=kinds, time=t,
            ghost_bytes=ghost_bytes, remote_bytes=remote_bytes, copy_time=copy, nccl_time=nccl_t,
            staged_calls=staged, validate=validate, pack=kern["pack"], unpack=kern["unpack"],
            direct=kern["direct"], device=cp.cuda.runtime.getDeviceProperties(0)["name"].decode())), flush=True)


CONFIGS = [
    # label, ranks, visible GPUs, extra worker arguments
    ("8 blocks in 1 rank (same-device copies), CUDA graph", 1, "0", []),
    ("8 blocks in 1 rank (same-device copies), eager", 1, "0", ["--no-graphs"]),
    ("2 ranks on 1 GPU (CUDA IPC)", 2, "0", []),
    ("8 ranks on 1 GPU (CUDA IPC)", 8, "0", []),
    ("2 ranks on 1 GPU, MPI staged through host", 2, "0", ["--transport", "mpi"]),
    ("2 ranks on 2 GPUs (NCCL), CUDA graph", 2, "0,1", ["--transport", "nccl"]),
    ("2 ranks on 2 GPUs (NCCL), eager", 2, "0,1", ["--transport", "nccl", "--no-graphs"]),
    ("2 ranks on 2 GPUs (p2p: one fused kernel; the default), CUDA graph", 2, "0,1", []),
    ("2 ranks on 2 GPUs (p2p: one fused kernel; the default), eager", 2, "0,1", ["--no-graphs"]),
    ("2 ranks on 2 GPUs (p2p: pack, CUDA IPC copy, unpack), CUDA graph", 2, "0,1",
     ["--transport", "p2p", "--no-fuse"]),
    ("8 ranks on 2 GPUs (CUDA IPC, peer-to-peer)", 8, "0,1", []),
]


def driver(args) -> None:
    sys.path.insert(0, ROOT)
    import cupy as cp

    from insitu.launch import run_mpi

    ngpu = cp.cuda.runtime.getDeviceCount()
    rows = []
    for label, ranks, vis, extra in CONFIGS:
        if args.only not in label:
            continue
        if len(vis.split(",")) > ngpu:
            print(f"skip {label}: needs {len(vis.split(','))} GPUs, have {ngpu}", flush=True)
            continue
        cmd = [os.path.abspath(__file__), "--worker", "--n", str(args.n), "--reps", str(args.reps),
               "--blocks", *map(str, args.blocks), *extra]
        p = run_mpi(ranks, cmd, env={"CUDA_VISIBLE_DEVICES": vis}, timeout=300)
        line = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
        if p.returncode or not line:
            print(f"FAILED {label}:\n{p.stdout}\n{p.stderr}", flush=True)
            continue
        r = json.loads(line[0][7:])
        r["label"] = label
        rows.append(r)
        print(label, r, flush=True)
    sys.path.insert(0, HERE)
    from benchutil import commit as measured

    commit = measured()
    dev = rows[0]["device"] if rows else "?"
    out = [
        f"### Halo exchange, {args.n}^3 float32 in {np.prod(args.blocks)} blocks "
        f"({'x'.join(map(str, args.blocks))}), ghost 1",
        "",
        f"Device: {dev} (x{ngpu}); date {datetime.date.today()}; commit {commit}; "
        f"command `python tests/gpu/bench_halo.py --n {args.n} --blocks {' '.join(map(str, args.blocks))}"
        f"{' --only ' + repr(args.only) if args.only else ''}"
        f"{' --reps ' + str(args.reps) if args.reps != 50 else ''}`; "
        f"median of {args.reps} exchanges after warm-up.",
        "",
        "| configuration | transports | ms / exchange | ghost MB | GB/s (all ghosts) | "
        "device copy of same bytes, GB/s | "
        "remote MB | GB/s (remote) | raw NCCL same bytes, GB/s | vs NCCL | host transfers / exchange | "
        "rank 0: checks / pack / unpack / same-rank copies, us |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        t = r["time"]
        rem = r["remote_bytes"] / t / 1e9 if r["remote_bytes"] else None
        nc = r["remote_bytes"] / r["nccl_time"] / 1e9 if r["nccl_time"] else None
        cells = [
            r["label"], ", ".join(r["transports"]) or "inproc", f"{t * 1e3:.3f}",
            f"{r['ghost_bytes'] / 1e6:.1f}", f"{r['ghost_bytes'] / t / 1e9:.1f}",
            f"{r['ghost_bytes'] / r['copy_time'] / 1e9:.0f}", f"{r['remote_bytes'] / 1e6:.1f}",
            f"{rem:.1f}" if rem else "-", f"{nc:.1f}" if nc else "-",
            f"{100 * rem / nc:.0f}%" if nc else "-", f"{r['staged_calls'] / args.reps:g}",
            f"{r['validate'] * 1e6:.0f} / {r['pack'] * 1e6:.0f} / {r['unpack'] * 1e6:.0f} / {r['direct'] * 1e6:.0f}",
        ]
        out.append("| " + " | ".join(cells) + " |")
    text = "\n".join(out) + "\n"
    print(text)
    if args.md:
        with open(args.md, "w") as f:
            f.write(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--blocks", type=int, nargs=3, default=(2, 2, 2), help="blocks per axis")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--transport", default=None)
    ap.add_argument("--md", default=None)
    ap.add_argument("--no-graphs", action="store_true")
    ap.add_argument("--no-fuse", action="store_true", help="p2p: separate pack, transfer and unpack steps")
    ap.add_argument("--only", default="", help="run only configurations whose label contains this")
    args = ap.parse_args()
    worker(args) if args.worker else driver(args)


if __name__ == "__main__":
    main()
