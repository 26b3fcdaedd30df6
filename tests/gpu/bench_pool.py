"""Benchmark: worker placements, in-process vs daemon: round-trip latency and hand-off cost.

    python tests/gpu/bench_pool.py [--reps 3000] [--mb 1024] [--md FILE]

Latency: a no-op package, one ``get`` of a tiny cached block (no output, so nothing
comes back but the empty result list), run by an in-process :class:`Worker` and by a
worker daemon over its Unix socket; also the daemon's ``ping`` (no package at all).
Median and 90th percentile of ``--reps`` calls after warm-up, wall clock.

Hand-off: a package that sends one ``--mb`` MB field to the worker and runs a no-op
function on it (no output), so the time is what handing the field over costs: shared
memory (a :func:`insitu.pool.shared.shared_empty` array) for the CPU worker, CUDA IPC
for the GPU worker, and a plain NumPy array (sent by value) for contrast; set against
a copy of the same bytes (``np.copy`` on the host, ``cupy.copy`` on the device, CUDA
events). Runs on the CPU alone where CuPy is absent (the GPU rows are left out).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from benchutil import commit, emit, host  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)


def touch(block):
    """The no-op the worker runs on a handed-over block (imported by the daemon as bench_pool.touch)."""
    return None


def _times(fn, reps: int, warmup: int = 20) -> np.ndarray:
    for _ in range(warmup):
        fn()
    t = np.empty(reps)
    for i in range(reps):
        t0 = time.perf_counter()
        fn()
        t[i] = time.perf_counter() - t0
    return t




def latency(worker, reps: int) -> dict:
    from insitu.pool import Package

    h = worker.run(_cache_pkg(np.zeros(4)))[0]
    pkg = Package()
    pkg.add("get", h)
    return {"run": _times(lambda: worker.run(pkg), reps)}


def _cache_pkg(a):
    from insitu.pool import Package

    pkg = Package()
    pkg.add("cache", pkg.add("send", a))
    return pkg


def handoff(worker, field, reps: int) -> np.ndarray:
    import bench_pool  # this file as a module the daemon can import: touch goes by reference

    from insitu.pool import Package

    pkg = Package()
    pkg.add("exec", bench_pool.touch, None, (pkg.add("send", field),))
    return _times(lambda: worker.run(pkg), reps, warmup=2)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3000, help="calls per latency row")
    ap.add_argument("--mb", type=int, default=1024, help="size of the handed-over field, MB")
    ap.add_argument("--handoff-reps", type=int, default=10)
    ap.add_argument("--md", help="append the tables to this Markdown file")
    args = ap.parse_args(argv)

    from insitu import arrays
    from insitu.pool import Worker, handoff as wire
    from insitu.pool.daemon import start_daemon
    from insitu.pool.shared import shared_empty

    cp = arrays.cupy_or_none()
    sock_dir = tempfile.mkdtemp(prefix="bench-pool-", dir="/tmp")
    n = args.mb * (1 << 20) // 4
    lat, hand = [], []
    daemons = []
    try:
        cpu_d = start_daemon(None, os.path.join(sock_dir, "cpu.sock"), timeout=120)
        daemons.append(cpu_d)
        with Worker() as local:
            lat.append(("in-process Worker (CPU)", "run: one get, no output", latency(local, args.reps)["run"]))
        with cpu_d.client() as w:
            lat.append(("daemon, Unix socket (CPU)", "run: one get, no output", latency(w, args.reps)["run"]))
            lat.append(("daemon, Unix socket (CPU)", "ping (no package)", _times(w.ping, args.reps)))
            field = shared_empty(n, np.float32)
            field[...] = 1
            hand.append(("CPU daemon", "shared memory (zero-copy)", handoff(w, field, args.handoff_reps)))
            plain = np.ones(n, np.float32)
            hand.append(("CPU daemon", "plain NumPy array (by value, through the socket)",
                         handoff(w, plain, max(3, args.handoff_reps // 3))))
            hand.append(("reference", "np.copy of the same bytes", _times(field.copy, 5, warmup=1)))
            del field, plain
        if cp is not None:
            gpu_d = start_daemon(0, os.path.join(sock_dir, "gpu0.sock"), timeout=120)
            daemons.append(gpu_d)
            with Worker(device=0) as local:
                lat.append(("in-process Worker (GPU 0)", "run: one get, no output", latency(local, args.reps)["run"]))
            x = cp.ones(n, cp.float32)
            with gpu_d.client() as w, arrays.count_transfers() as tc:
                lat.append(("daemon, Unix socket (GPU 0)", "run: one get, no output", latency(w, args.reps)["run"]))
                hand.append(("GPU daemon", "CUDA IPC (zero-copy)", handoff(w, x, args.handoff_reps)))
            assert tc.calls == 0, tc
            ev = (cp.cuda.Event(), cp.cuda.Event())
            ts = []
            for i in range(args.handoff_reps + 2):
                ev[0].record()
                cp.copy(x)  # allocation from the warm pool, then the device copy
                ev[1].record()
                ev[1].synchronize()
                if i >= 2:
                    ts.append(cp.cuda.get_elapsed_time(*ev) / 1e3)
            hand.append(("reference", "cupy.copy of the same bytes (CUDA events)", np.array(ts)))
    finally:
        for d in daemons:
            d.stop(timeout=10)

    dev = host()
    if cp is not None:
        dev = f"{cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}; host {dev}"
    cmd = f"python tests/gpu/bench_pool.py --reps {args.reps} --mb {args.mb}"
    head = (f"Device: {dev}; date {datetime.date.today()}; commit {commit()}; command `{cmd}`; "
            f"Python {platform.python_version()}, functions pickled with {wire.pickler_name()} where plain pickle "
            "cannot.")
    out = ["### Worker pool: round-trip latency, in-process vs daemon", "", head, "",
           "| placement | request | median, us | p90, us | target, us |", "| --- | --- | ---: | ---: | ---: |"]
    for place, what, t in lat:
        target = "< 20" if place.startswith("in-process") else "< 200" if what.startswith("run") else "-"
        out.append(f"| {place} | {what} | {np.median(t) * 1e6:.1f} | {np.percentile(t, 90) * 1e6:.1f} | {target} |")
    out += ["", f"### Worker pool: handing a {args.mb} MB field to a daemon", "", head, "",
            "| worker | how | median, ms | GB/s equivalent |", "| --- | --- | ---: | ---: |"]
    for place, how, t in hand:
        m = float(np.median(t))
        out.append(f"| {place} | {how} | {m * 1e3:.3f} | {args.mb * (1 << 20) / m / 1e9:.0f} |")
    emit("\n".join(out) + "\n", args.md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
