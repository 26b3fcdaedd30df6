"""Benchmark: halo iteration across "hosts" over veth links (issue 26); CPU daemons over TCP,
or with ``--gpu`` GPU daemons over NCCL (a machine of 2 GPUs).

    python tests/gpu/bench_cross_host.py [--gpu] [--n 128] [--iterations 30] [--per-job 10] [--md docs/BENCHMARKS.md]

Needs root (it makes Linux network, mount and UTS namespaces: tests/netns.py) and Java.
Two namespace hosts, each a Spark standalone worker of 2 cores; the master and the driver
in this process's namespace, joined to the hosts by veth links through a bridge. A domain
of four ``n^3`` float64 blocks (2 x 2 x 1), one per partition, two partitions per host;
``SparkEngine.halo_iterate(..., per_job=10)``: per iteration each task cuts its blocks'
halo slabs on its daemon, the records go through the driver, the daemons take the slabs of
the other host over TCP. Kernels: ``touch`` (nothing: the exchange alone) and ``jacobi``
(a 7-point sweep in NumPy).

Reported per iteration (after one warm-up job): wall time (amortized over the jobs), bytes
that crossed the hosts' links (both directions, all traffic: halos, records, Spark's own),
and the halo surface that had to cross (the slabs addressed to a block of the other host,
computed from the domain), against one block's bytes. The one-host row runs the same job
in ``local[4]`` with two CPU daemons (slabs between them through shared memory).

With ``--gpu`` each host is a worker of 1 core with one partition of two blocks on its own
GPU daemon (partition p on GPU p); the slabs between the hosts go daemon to daemon through
NCCL (sockets over the veth links), the records through the driver. The one-host row:
``local[2]`` with a GPU daemon per GPU (slabs through CUDA IPC).
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, TESTS)
from benchutil import commit, emit, host  # noqa: E402

import netns  # noqa: E402


def _surface(dom, nodes: dict) -> tuple[int, int]:
    """(bytes of the slabs addressed to a block on another node, all slabs' bytes), per iteration."""
    import numpy as np

    from insitu.pool.halo import extract_halo

    cross = total = 0
    for gid in range(dom.nblocks):
        slabs = extract_halo(np.zeros(dom.block(gid).padded_shape), gid, dom)
        for (n, _), s in slabs.items():
            total += s.nbytes
            cross += s.nbytes if nodes[n] != nodes[gid] else 0
    return cross, total


def _device(gpu: bool) -> str:
    if not gpu:
        return f"{host()} (CPU only, shared with other jobs: noisy)"
    import cupy

    names = [cupy.cuda.runtime.getDeviceProperties(i)["name"].decode() for i in range(2)]
    return f"{' + '.join(names)} ({host()} CPUs)"


def _run(eng, dom, kernel, n_it: int, per_job: int, links, nparts: int = 4) -> tuple[float, float, dict]:
    blocks = eng.blocks(netns.jacobi_block, nparts, keys=range(4), args=(dom.dims, 4)).cache_gpu()
    blocks = eng.halo_iterate(blocks, kernel, per_job, domain=dom, per_job=per_job)  # warm-up job
    before = [link() for link in links]
    t0 = time.perf_counter()
    out = eng.halo_iterate(blocks, kernel, n_it, domain=dom, per_job=per_job)
    dt = time.perf_counter() - t0
    after = [link() for link in links]
    moved = sum((a[0] - b[0]) + (a[1] - b[1]) for a, b in zip(after, before)) / 2  # each byte: tx here, rx there
    nodes = {s[0]: s[2].node for s in out.rdd.collect()}
    out.drop_gpu()
    return dt / n_it * 1e3, moved / n_it, nodes


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=128, help="block edge (cells)")
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--per-job", type=int, default=10)
    ap.add_argument("--long-job", type=int, default=40,
                    help="also run `touch` with this many iterations in one job (the per-job cost apart)")
    ap.add_argument("--gpu", action="store_true",
                    help="GPU daemons: one partition and one GPU per host (2 GPUs), slabs between hosts over NCCL")
    ap.add_argument("--md", default=None, help="append the table to this Markdown file")
    args = ap.parse_args(argv)
    nparts, cores = (2, 1) if args.gpu else (4, 2)

    def host_env(h):
        env = netns.spark_hosts_env(h)
        if args.gpu:
            env["NCCL_IB_DISABLE"] = "1"  # the veth links are the network
        return env

    why = netns.unavailable()
    if why:
        print(f"cannot make namespace hosts: {why}")
        return 1
    from insitu import Domain
    from insitu.engine.spark import SparkEngine

    dims = (2 * args.n, 2 * args.n, args.n)
    dom = Domain.create(dims, nblocks=4, ghost=1)
    block_bytes = 8 * math.prod(dom.block(0).padded_shape)
    rows = []
    with tempfile.TemporaryDirectory() as logs, netns.Hosts(2) as hosts, \
            netns.spark_cluster(hosts, cores=cores, log_dir=logs, host_env=host_env) as url:
        eng = netns.cluster_engine(hosts, url, timeout=300)
        try:
            for name, k, it, pj in (("touch", netns.touch, args.iterations, args.per_job),
                                    ("jacobi", netns.jacobi, args.iterations, args.per_job),
                                    ("touch", netns.touch, args.long_job, args.long_job)):
                ms, moved, nodes = _run(eng, dom, k, it, pj, [h.link_bytes for h in hosts], nparts)
                cross, total = _surface(dom, nodes)
                how = "2 hosts x 1 GPU, NCCL over veth" if args.gpu else "2 hosts x 2 partitions, veth TCP"
                rows.append((f"{how} ({name}, per_job={pj})", ms, moved, cross, total))
                print(rows[-1], flush=True)
        finally:
            eng.stop()
    # The first context left its driver address in the JVM's properties: name this one's.
    local = dict(master="local[2]") if args.gpu else dict(master="local[4]", cpu_daemons=2)
    eng = SparkEngine(**local, timeout=300,
                      conf={"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"})
    try:
        for name, k, it, pj in (("touch", netns.touch, args.iterations, args.per_job),
                                ("jacobi", netns.jacobi, args.iterations, args.per_job),
                                ("touch", netns.touch, args.long_job, args.long_job)):
            ms, _, _ = _run(eng, dom, k, it, pj, [], nparts)
            how = ("1 host, local[2], 2 GPU daemons, CUDA IPC" if args.gpu
                   else "1 host, local[4], 2 daemons, shared memory")
            rows.append((f"{how} ({name}, per_job={pj})", ms, None, None, None))
            print(rows[-1], flush=True)
    finally:
        eng.stop()
    lines = [
        f"### Halo iteration across hosts: {args.n}^3 float64 blocks, 2 x 2 x 1 (issue 26)", "",
        f"Device: {_device(args.gpu)}; date "
        f"{datetime.date.today().isoformat()}; commit {commit()}; command "
        f"`sudo python tests/gpu/bench_cross_host.py{' --gpu' if args.gpu else ''} --n {args.n} "
        f"--iterations {args.iterations} "
        f"--per-job {args.per_job} --long-job {args.long_job}`. One block: {block_bytes / 1e6:.1f} MB.", "",
        "| run | ms / iteration | bytes over the links / iteration | halo surface crossing hosts / iteration "
        "| all halo slabs / iteration |",
        "|---|---:|---:|---:|---:|"]
    def fmt(v):
        return "" if v is None else f"{v / 1e6:.3f} MB"

    for name, ms, moved, cross, total in rows:
        lines.append(f"| {name} | {ms:.1f} | {fmt(moved)} | {fmt(cross)} | {fmt(total)} |")
    emit("\n".join(lines) + "\n", args.md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
