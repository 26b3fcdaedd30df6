"""GPU daemons on two "hosts" (Linux namespaces of one 2-GPU machine, tests/netns.py), one
Spark standalone worker and one GPU each: ``halo_iterate`` moves the halo slabs between
the hosts' daemons through NCCL, whose transport between hosts is the network (the hosts
have their own hostnames, /tmp and /dev/shm, and reach each other only over veth links).
The result equals the whole-grid sweeps; NCCL's own log says which transport it used. Then
the blocks cross the hosts over TCP (a task that reads the other host's blocks, the halo
and key shuffles), staged through host memory, and land on the reading daemon's GPU.

Needs root (namespaces), 2 GPUs (``nvidia-h200-x2``), PySpark and Java (staged on the GPU
node: ../shared/device/spark-stage.sh; tests/gpu/run_spark.sh runs this file).
"""

import glob
import os
import shutil
import sys
import tempfile

import numpy as np
import pytest

pytest.importorskip("pyspark", reason="needs PySpark (stage it on the GPU node: ../shared/device/spark-stage.sh)")
cp = pytest.importorskip("cupy", reason="needs CuPy")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TESTS = os.path.join(ROOT, "tests")
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)

import netns  # noqa: E402
from spark_needs import require_java  # noqa: E402

require_java()
_why = netns.unavailable()
if _why:
    pytest.skip(f"needs namespace hosts: {_why}", allow_module_level=True)
if cp.cuda.runtime.getDeviceCount() < 2:
    pytest.skip(f"needs 2 GPUs (nvidia-h200-x2), one per host; this machine has {cp.cuda.runtime.getDeviceCount()}",
                allow_module_level=True)

DIMS = (40, 36, 28)


def _stats(block):
    """In a daemon: its NCCL counters (bytes sent, received, swaps, communicators joined)."""
    from insitu.transports import nccl

    s = nccl.stats()
    return np.array([s["bytes_sent"], s["bytes_received"], s["swaps"], s["joins"]], np.int64)


def _is_device(block) -> bool:
    import insitu

    return insitu.arrays.is_device_array(block)


def _parity(k):
    return k % 2


def _total(values):
    return sum(values[1:], values[0].copy())


def _all_on_device(values) -> bool:
    import insitu

    return all(insitu.arrays.is_device_array(v) for v in values)


def _surface(dom, node_of) -> dict:
    """Bytes of the slabs each node receives from the other per iteration (float64)."""
    from insitu.pool.halo import extract_halo

    got: dict = {}
    for gid in range(dom.nblocks):
        for (n, _), s in extract_halo(np.zeros(dom.block(gid).padded_shape), gid, dom).items():
            if node_of[n] != node_of[gid]:
                got[node_of[n]] = got.get(node_of[n], 0) + s.nbytes
    return got


def test_halo_iterate_moves_gpu_slabs_between_hosts_through_nccl():
    from insitu import Domain

    logs = tempfile.mkdtemp(prefix=".nccl-logs-", dir=ROOT)  # not /tmp: each host has its own

    def host_env(h):
        return dict(netns.spark_hosts_env(h), NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT,NET,P2P",
                    NCCL_DEBUG_FILE=os.path.join(logs, f"{h.name}.%p.log"), NCCL_IB_DISABLE="1")

    dom = Domain.create(DIMS, nblocks=4, ghost=1)
    try:
        with netns.Hosts(2) as hosts, netns.spark_cluster(hosts, cores=1, log_dir=logs, host_env=host_env) as url:
            eng = netns.cluster_engine(hosts, url, timeout=120)
            try:
                blocks = eng.blocks(netns.jacobi_block, 2, keys=range(4), args=(DIMS, 4)).cache_gpu()
                node_of = {s[0]: s[2].node for s in blocks.rdd.collect()}
                assert set(node_of.values()) == {h.name for h in hosts}  # one partition (a GPU) per host
                out = eng.halo_iterate(blocks, netns.jacobi, 8, domain=dom, per_job=4)
                got = out.recv_gpu()
                stats = out.exec_gpu(_stats).recv_gpu()
                # One task for all four blocks, on one host: the other host's blocks come over
                # TCP (through both hosts' memory) onto its daemon's GPU.
                one = eng.adopt([s[2] for s in out.rdd.collect()], 1)
                assert one.exec_gpu(_is_device).recv_gpu() == {g: True for g in range(4)}
                fetched = one.recv_gpu()
                # The halo shuffle across the hosts (a map and a reduce stage, not co-scheduled:
                # slabs over TCP), then one more sweep.
                shuffled = eng.gpu_shuffle(out, "halo", domain=dom).exec_gpu(netns.jacobi).cache_gpu(drop_sources=True)
                after = shuffled.recv_gpu()
                # The key shuffle across the hosts: blocks grouped by parity onto one daemon each.
                grouped = eng.gpu_shuffle(shuffled, "key", key=_parity)
                sums = grouped.exec_gpu(_total).recv_gpu()
                on_device = eng.gpu_shuffle(shuffled, "key", key=_parity).exec_gpu(_all_on_device).recv_gpu()
                shuffled.drop_gpu()
            finally:
                eng.stop()
        np.testing.assert_allclose(dom.assemble(got), netns.jacobi_reference(DIMS, 8), rtol=1e-13, atol=0)
        assert all(np.array_equal(fetched[g], got[g]) for g in range(4))
        np.testing.assert_allclose(dom.assemble(after), netns.jacobi_reference(DIMS, 9), rtol=1e-13, atol=0)
        assert sorted(sums) == [0, 1] and on_device == {0: True, 1: True}
        for p in (0, 1):
            np.testing.assert_allclose(sums[p], sum(after[g] for g in range(4) if g % 2 == p), rtol=1e-13, atol=0)
        want = _surface(dom, node_of)
        per_node = {}
        for gid, s in stats.items():  # each daemon's counters, read through its blocks
            per_node[node_of[gid]] = s
        for node, s in per_node.items():
            sent, received, swaps, joins = (int(x) for x in s)
            assert received == 8 * want[node], (node, s, want)
            assert swaps == 8 and joins == 1  # one communicator, kept across the two jobs
        text = "".join(open(f, errors="replace").read() for f in glob.glob(os.path.join(logs, "*.log")))
        assert "NET/Socket" in text, text[-3000:]
        # between the two GPUs NCCL went through the network, not P2P or shared memory
        channels = [ln for ln in text.splitlines() if " via " in ln]
        assert channels and all("NET/" in ln for ln in channels), "\n".join(channels[:20])
    finally:
        if os.environ.get("OUT"):  # a device run brings the Spark and NCCL logs back
            shutil.copytree(logs, os.path.join(os.environ["OUT"], "spark-hosts-logs"), dirs_exist_ok=True)
        shutil.rmtree(logs, ignore_errors=True)


def test_a_killed_gpu_host_is_recovered_from_the_checkpoint():
    # 3 hosts of 1 slot, 2 partitions on two of them (GPU 0 and GPU 1); after the second job a
    # host holding blocks dies whole (worker, executor, python workers, daemon). The survivor's
    # NCCL swap times out and its communicator is aborted; halo_iterate reloads the last
    # checkpoint (on storage every host sees) onto the two live hosts and replays.
    from insitu import Domain

    shared = tempfile.mkdtemp(prefix=".ckpt-", dir=ROOT)  # not /tmp: each host has its own
    logs = tempfile.mkdtemp(prefix=".kill-logs-", dir=ROOT)
    dom = Domain.create(DIMS, nblocks=4, ghost=1)

    def host_env(h):
        return dict(netns.spark_hosts_env(h), NCCL_IB_DISABLE="1")

    try:
        with netns.Hosts(3) as hosts, netns.spark_cluster(hosts, cores=1, log_dir=logs, host_env=host_env) as url:
            eng = netns.cluster_engine(hosts, url, timeout=20)
            try:
                blocks = eng.blocks(netns.jacobi_block, 2, keys=range(4), args=(DIMS, 4)).cache_gpu()
                held = {s[2].node for s in blocks.rdd.collect()}
                assert len(held) == 2
                victim = next(h for h in hosts if h.name in held)
                killed = []

                def kill_once(jobs, b):
                    if jobs == 2 and not killed:
                        killed.append(victim.kill())

                out = eng.halo_iterate(blocks, netns.jacobi, 16, domain=dom, per_job=4, checkpoint_every=4,
                                       checkpoint_dir=shared, on_job=kill_once)
                got = out.recv_gpu()
                nodes = {s[2].node for s in out.rdd.collect()}
                recoveries = list(eng.recoveries)
            finally:
                eng.stop()
        assert killed and killed[0] > 0
        np.testing.assert_allclose(dom.assemble(got), netns.jacobi_reference(DIMS, 16), rtol=1e-13, atol=0)
        assert victim.name not in nodes and recoveries
        rec = recoveries[0]
        print(f"GPU host {victim.name} killed after job 2: recovered from the checkpoint of iteration "
              f"{rec['resumed_from']} in {rec['seconds']:.2f} s ({rec['lost_seconds']:.2f} s lost in the failed job, "
              f"{rec['error']})")
    finally:
        if os.environ.get("OUT"):
            shutil.copytree(logs, os.path.join(os.environ["OUT"], "kill-logs"), dirs_exist_ok=True)
        shutil.rmtree(shared, ignore_errors=True)
        shutil.rmtree(logs, ignore_errors=True)
