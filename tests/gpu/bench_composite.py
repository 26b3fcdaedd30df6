"""Benchmark: sort-last compositing of a 2048x2048 RGBA float32 + depth image across ranks.

    python tests/gpu/bench_composite.py --device gpu [--size 2048] [--md OUT.md]
    python tests/gpu/bench_composite.py --device cpu --ranks 2 4 8 [--size 512]

The driver starts one ``mpiexec`` job per configuration (this same file with
``--worker``); each job times every method and mode. One repeat = barrier, then
``composite`` to rank 0 (which returns with the result ready: stream-ordered work is
waited for), then barrier; the slowest rank's time counts. Median over ``--reps``
after warm-up (a call before them sets the configuration's transports up). On the GPU
rank 0 also times the call with CUDA events. Host transfers are the library's counted
host<->device copies per call (0 on every path but staged MPI). Transports are chosen
per pair as for the halo exchange (CUDA IPC between ranks of one GPU, p2p or NCCL
between GPUs) unless a configuration forces one.
``--md FILE`` appends the Markdown table to FILE.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import commit  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))
METHODS = ("direct-send", "binary-swap", "radix-k")
MODES = ("depth", "over")


def make_image(rank: int, n: int, xp):
    rng = np.random.default_rng([7, rank])
    a = rng.random((n, n, 1), dtype=np.float32)
    rgba = np.concatenate([rng.random((n, n, 3), dtype=np.float32) * a, a], axis=2)
    depth = rng.random((n, n), dtype=np.float32)
    depth[rng.random((n, n)) < 0.3] = np.inf
    return xp.asarray(rgba), xp.asarray(depth)


def time_one(comm, call, reps: int, warmup: int, events) -> tuple[float, float | None]:
    """Median over repeats of the slowest rank's wall time (and rank 0's CUDA-event time)."""
    from mpi4py import MPI

    walls, gpu = [], []
    for i in range(warmup + reps):
        comm.Barrier()
        t0 = time.perf_counter()
        if events:
            events[0].record()
        call()
        if events:
            events[1].record()
            events[1].synchronize()
        comm.Barrier()
        t = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
        if i >= warmup:
            walls.append(t)
            if events:
                import cupy

                gpu.append(cupy.cuda.get_elapsed_time(events[0], events[1]) / 1e3)
    return float(np.median(walls)), (float(np.median(gpu)) if gpu else None)


def worker(args) -> None:
    from mpi4py import MPI

    sys.path.insert(0, ROOT)
    import insitu
    from render.composite import composite

    comm = MPI.COMM_WORLD
    xp, events, device = np, None, cpu_name()
    if args.backend == "cupy":
        import cupy as xp

        insitu.arrays.select_device(comm)
        events = [xp.cuda.Event(), xp.cuda.Event()]
        device = xp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    rgba, depth = make_image(comm.rank, args.size, xp)
    for method in args.methods:
        for mode in MODES:
            info: dict = {}
            d = depth if mode == "depth" else None

            def call():
                composite(rgba, d, comm=comm, mode=mode, method=method, transport=args.transport, info=info)

            call()  # sets the configuration up (p2p uploads its flag addresses: not a per-call transfer)
            with insitu.count_transfers() as tc:
                wall, gpu = time_one(comm, call, args.reps, args.warmup, events)
            calls = comm.allreduce(tc.calls) / (args.reps + args.warmup)
            used = sorted({n for t in comm.allgather(info["transport"]) for n in t.split("+")})
            if comm.rank == 0:
                print("RESULT " + json.dumps(dict(
                    ranks=comm.size, method=info["method"], radices=info["radices"], mode=mode,
                    transport="+".join(used), wall=wall, gpu=gpu, calls=calls, device=device,
                    nbytes=rgba.nbytes + (depth.nbytes if mode == "depth" else 0))), flush=True)


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            name = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        name = platform.processor() or platform.machine()
    return f"{name} ({os.cpu_count()} cores)"


def configs(args) -> list[tuple[str, int, str | None, list[str]]]:
    """(label, ranks, CUDA_VISIBLE_DEVICES, worker arguments) for the chosen device."""
    if args.device == "cpu":
        return [(f"{n} ranks, CPU (NumPy, MPI)", n, None, ["--backend", "numpy"]) for n in args.ranks]
    mpi = ["--transport", "mpi"]
    return [(label, n, vis, ["--backend", "cupy", *extra]) for label, n, vis, extra in [
        ("2 ranks on 2 GPUs, default (p2p where the GPUs reach each other)", 2, "0,1", []),
        ("2 ranks on 2 GPUs, NCCL", 2, "0,1", ["--transport", "nccl"]),
        ("2 ranks on 2 GPUs, MPI (staged unless CUDA-aware)", 2, "0,1", mpi),
        ("2 ranks on 1 GPU, default (CUDA IPC)", 2, "0", []),
        ("2 ranks on 1 GPU, MPI (staged unless CUDA-aware)", 2, "0", mpi),
        ("4 ranks on 1 GPU, default (CUDA IPC)", 4, "0", []),
        ("4 ranks on 1 GPU, MPI (staged unless CUDA-aware)", 4, "0", mpi),
    ]]


def driver(args) -> None:
    sys.path.insert(0, ROOT)
    from insitu.launch import run_mpi

    ngpu = 0
    if args.device == "gpu":
        import cupy

        ngpu = cupy.cuda.runtime.getDeviceCount()
    rows = []
    for label, ranks, vis, extra in configs(args):
        if vis and len(vis.split(",")) > ngpu:
            print(f"skip {label}: needs {len(vis.split(','))} GPUs, have {ngpu}", flush=True)
            continue
        cmd = [os.path.abspath(__file__), "--worker", "--size", str(args.size), "--reps", str(args.reps),
               "--warmup", str(args.warmup), "--methods", *args.methods, *extra]
        env = {"CUDA_VISIBLE_DEVICES": vis} if vis else {"NUMBA_NUM_THREADS": "1"}
        p = run_mpi(ranks, cmd, env=env, timeout=600)
        results = [json.loads(line[7:]) for line in p.stdout.splitlines() if line.startswith("RESULT ")]
        if p.returncode or not results:
            print(f"FAILED {label}:\n{p.stdout}\n{p.stderr}", flush=True)
            continue
        for r in results:
            r["label"] = label
            rows.append(r)
            print(label, r, flush=True)
    text = table(args, rows, ngpu)
    print(text)
    if args.md:
        with open(args.md, "a") as f:
            f.write("\n" + text)


def table(args, rows, ngpu: int) -> str:
    dev = rows[0]["device"] if rows else "?"
    if ngpu:
        dev += f" (x{ngpu})"
    command = " ".join(["python tests/gpu/bench_composite.py", "--device", args.device, "--size", str(args.size),
                        *(["--ranks", *map(str, args.ranks)] if args.device == "cpu" else []),
                        "--reps", str(args.reps)])
    out = [
        f"#### Sort-last compositing, {args.size}x{args.size} RGBA float32 (+ depth float32 in depth mode)",
        "",
        f"Device: {dev}; date {datetime.date.today()}; commit {commit()}; command `{command}`; "
        f"median of {args.reps} calls after {args.warmup} warm-up, slowest rank, barriers around each call.",
        "",
        "| configuration | method | rounds | mode | transport | ms / call (wall) | ms (CUDA events, rank 0) | "
        "image MB per rank | GB/s (image bytes of all ranks / wall) | host transfers / call |",
        "| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        mb = r["nbytes"] / 1e6
        cells = [
            r["label"], r["method"], "x".join(map(str, r["radices"])) or "-", r["mode"], r["transport"],
            f"{r['wall'] * 1e3:.2f}", f"{r['gpu'] * 1e3:.2f}" if r["gpu"] is not None else "-",
            f"{mb:.1f}", f"{r['ranks'] * r['nbytes'] / r['wall'] / 1e9:.2f}", f"{r['calls']:g}",
        ]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    ap.add_argument("--backend", choices=("numpy", "cupy"), default="numpy", help="worker only")
    ap.add_argument("--transport", choices=("mpi", "nccl", "ipc", "p2p"), default=None,
                    help="worker only: force this transport for every pair (default: chosen per pair)")
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4], help="CPU: rank counts to run")
    ap.add_argument("--size", type=int, default=2048)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    ap.add_argument("--md", default=None, help="append the table to this file")
    args = ap.parse_args()
    worker(args) if args.worker else driver(args)


if __name__ == "__main__":
    main()
