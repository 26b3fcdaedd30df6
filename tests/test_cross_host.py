"""Blocks across hosts (issue 26): node identity, the TCP transport between daemons, and
daemons of separate network/mount namespaces that can reach each other over TCP only.

The namespace tests make real "hosts" (tests/netns.py) and skip, naming why, where this
process cannot make namespaces (no root).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import pytest

from insitu.errors import InsituError, PeerTimeoutError
from insitu.pool import BlockCache
from insitu.pool.cache import Handle
from insitu.pool.node import node_host, node_id
from insitu.transports import tcp

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from netns import (cluster_engine, jacobi, jacobi_block, jacobi_reference, spark_cluster,  # noqa: E402
                   spark_hosts_env)


# --------------------------------------------------------------------------- node identity


def test_node_id_is_host_and_directory_unless_given(monkeypatch):
    monkeypatch.delenv("INSITU_NODE_ID", raising=False)
    assert node_id("/tmp/d1") == f"{socket.gethostname()}:/tmp/d1"
    assert node_id("/tmp/d1") != node_id("/tmp/d2")  # two daemon directories: two nodes
    monkeypatch.setenv("INSITU_NODE_ID", "hostA")
    assert node_id("/tmp/d1") == node_id("/tmp/d2") == "hostA"
    monkeypatch.setenv("INSITU_NODE_HOST", "10.1.2.3")
    assert node_host() == "10.1.2.3"


# --------------------------------------------------------------------------- the tcp transport


@pytest.fixture
def server():
    cache = BlockCache()
    s = tcp.BlockServer(cache, "127.0.0.1", handle_type=Handle)
    yield cache, s, tcp.Endpoint(*s.address, s.token.hex())
    s.close()
    cache.close()


@pytest.mark.parametrize("dtype,shape", [(np.float32, (5, 6, 7)), (np.int16, (3,)), (np.float64, ()),
                                         (np.uint8, (0, 4))])
def test_fetch_gives_the_block_and_counts_its_bytes(server, dtype, shape):
    cache, _, ep = server
    a = (np.arange(int(np.prod(shape)), dtype=np.float64) * 1.5 - 3).astype(dtype).reshape(shape)
    h = cache.put(a)
    tcp.reset_stats()
    b = tcp.fetch(ep, h, key="blk")
    assert b.dtype == a.dtype and b.shape == a.shape and np.array_equal(a, b)
    assert tcp.stats()["bytes_received"] == a.nbytes == tcp.stats()["bytes_sent"]
    assert cache.handles() == [h]  # a get leaves it there


def test_fetch_receives_into_the_given_buffer_and_take_drops(server):
    cache, _, ep = server
    a = np.random.default_rng(1).random((8, 9))
    h = cache.put(np.asfortranarray(a))  # not contiguous: sent as C order
    out = np.empty((8, 9))
    got = tcp.fetch(ep, h, out=out, take=True)
    assert got is out and np.array_equal(out, a)
    assert cache.handles() == []
    with pytest.raises(InsituError, match=r"refused block 'k'.*KeyError"):
        tcp.fetch(ep, h, key="k")
    with pytest.raises(ValueError, match="out= must be a C-contiguous float64 array of shape"):
        tcp.fetch(ep, cache.put(a), out=np.empty((9, 8)))


def test_fetch_many_pipelines_within_the_window(server):
    cache, _, ep = server
    blocks = [np.full((100,), i, np.int32) for i in range(20)]
    hs = [cache.put(b) for b in blocks]
    got = tcp.fetch_many(ep, hs, window=3, what=list(range(20)))
    assert all(np.array_equal(g, b) for g, b in zip(got, blocks))
    tcp.drop(ep, hs[:10])
    assert cache.handles() == hs[10:]
    with pytest.raises(ValueError, match="window must be an int >= 1"):
        tcp.fetch_many(ep, hs, window=0)


def test_wrong_token_and_non_arrays_are_refused(server):
    cache, _, ep = server
    h = cache.put(np.zeros(3))
    with pytest.raises(InsituError, match="bad request"):
        tcp.fetch((ep[0], ep[1], "00" * 16), h)
    h2 = cache.put(np.zeros((1,) * 9))
    with pytest.raises(InsituError, match="only arrays of plain dtypes and <= 8 dimensions"):
        tcp.fetch(ep, h2, key="nine")
    assert np.array_equal(tcp.fetch(ep, h), np.zeros(3))  # the connection is fine after a refusal


def test_dead_peer_is_named_not_waited_for(server):
    cache, s, ep = server
    h = cache.put(np.ones(4))
    tcp.fetch(ep, h)  # a connection is open and pooled
    s.close()
    t0 = time.monotonic()
    with pytest.raises(tcp.PeerUnreachableError, match=rf"127\.0\.0\.1:{ep[1]}.*block 7"):
        tcp.fetch(ep, h, key=7, timeout=5.0)
    with pytest.raises(tcp.PeerUnreachableError, match=rf"cannot reach the worker daemon at 127\.0\.0\.1:{ep[1]}"):
        tcp.fetch(ep, h, key=7, timeout=5.0)
    assert time.monotonic() - t0 < 2.0


def test_silent_peer_times_out():
    lst = socket.create_server(("127.0.0.1", 0))  # accepts (backlog), never answers
    try:
        ep = ("127.0.0.1", lst.getsockname()[1], "ab" * 16)
        t0 = time.monotonic()
        with pytest.raises(PeerTimeoutError, match=r"did not send block 'b' within 0\.3 s"):
            tcp.fetch(ep, 1, key="b", timeout=0.3)
        assert time.monotonic() - t0 < 2.0
    finally:
        lst.close()


def test_record_exchange_gathers_in_partition_order_and_names_the_missing():
    ex = tcp.RecordExchange("127.0.0.1")
    try:
        out: dict = {}

        def post(i):
            out[i] = tcp.allgather(ex.endpoint, 5, 0, i, 3, f"p{i}".encode() * (i + 1), timeout=10.0)

        ts = [threading.Thread(target=post, args=(i,)) for i in range(3)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert all(out[i] == [b"p0", b"p1p1", b"p2p2p2"] for i in range(3))
        with pytest.raises(InsituError, match=r"partition\(s\) \[1\] did not reach round 1"):
            tcp.allgather(ex.endpoint, 5, 1, 0, 2, b"x", timeout=0.2)
    finally:
        ex.close()


def test_record_exchange_delivers_each_part_to_its_target_only():
    ex = tcp.RecordExchange("127.0.0.1")
    try:
        out: dict = {}
        posts = {0: {1: b"0->1", 2: b"0->2"}, 1: {}, 2: {0: b"2->0", 1: b"2->1"}, 3: [(tcp.ALL, b"3->all")]}

        def post(i):
            out[i] = tcp.alltoall(ex.endpoint, 9, 0, i, 4, posts[i], timeout=10.0)

        ts = [threading.Thread(target=post, args=(i,)) for i in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert out == {0: [(2, b"2->0"), (3, b"3->all")], 1: [(0, b"0->1"), (2, b"2->1"), (3, b"3->all")],
                       2: [(0, b"0->2"), (3, b"3->all")], 3: [(3, b"3->all")]}
        with pytest.raises(InsituError, match="bad request"):
            tcp.alltoall(ex.endpoint, 9, 1, 0, 2, {5: b"to nobody"}, timeout=1.0)
    finally:
        ex.close()


def test_nccl_rounds_pair_every_send_with_its_receive_in_order(monkeypatch):
    # GPU blocks cross nodes through NCCL, which matches a pair's sends and receives in the
    # order they are posted: each partition plans its group alone (from its cut slabs and
    # the records it got), so for every pair of daemons the slabs one sends must be, in
    # order, those the other receives, with the shapes the receiver allocates.
    from insitu import Domain
    from insitu.engine import _spark_tasks as T
    from insitu.pool import Package
    from insitu.pool.halo import extract_halo

    dom = Domain.create((13, 11, 9), blocks=(3, 2, 2), ghost=1, periodic=(True, False, False))
    nparts = 4
    node = {0: "a", 1: "b", 2: "a", 3: "c"}
    daemon = {p: (node[p], f"/tmp/d/gpu{p % 2}.sock", 100 + p) for p in range(nparts)}

    def part_of(gid):
        return (gid * 7 + 1) % nparts

    mesh = T._Mesh(("halo", tuple(daemon[p] for p in range(nparts))), {p: p for p in range(nparts)}, node,
                   {daemon[p]: p for p in range(nparts)})
    out = {p: [] for p in range(nparts)}
    shape_of, crossing = {}, set()
    for gid in range(dom.nblocks):
        p = part_of(gid)
        for (n, d), a in extract_halo(np.zeros(dom.block(gid).padded_shape, np.float32), gid, dom).items():
            h = len(shape_of)
            shape_of[h] = a.shape
            rec = T.BlockRecord(("slab", n, d), h, daemon[p][1], 0, daemon[p][2], node[p], ("10.0.0.1", 1, "00"))
            out[p].append((n, d, rec, T._slab_meta(a)))
            if node[part_of(n)] != node[p]:
                crossing.add(h)
    ctx = T._Ctx("/tmp/d", 2, 1, 10.0, ())
    sent, received, dropped = {}, {}, set()
    for p in range(nparts):
        monkeypatch.setenv("INSITU_NODE_ID", node[p])
        incoming: dict = {}
        for q in range(nparts):
            for n, d, rec, dsc in out[q]:
                if part_of(n) == p:
                    incoming.setdefault(n, []).append((d, rec, dsc))
        pkg, drops = Package(), []
        refs = T._nccl_round(pkg, mesh, out[p], incoming, part_of, drops, ctx)
        dropped.update(drops)
        swaps = [op for op in pkg.ops if op.kind == "exec" and getattr(op.args[0], "func", None) is T._nccl_swap]
        assert len(swaps) == 1
        key, peers, arrays, recvs = swaps[0].args[2]
        assert key == mesh.key
        handle_at = {i: op.args[0] for i, op in enumerate(pkg.ops) if op.kind == "get"}
        for peer, ref in zip(peers, arrays):
            assert node[peer] != node[p]
            sent.setdefault((p, peer), []).append(handle_at[ref.index])
        srec = {(n, d): rec for n, lst in incoming.items() for d, rec, _ in lst}
        by_index = {pkg.ops[r.index].args[2][1]: k for k, r in refs.items()}  # getitem(swap, i) -> (gid, d)
        assert sorted(by_index) == list(range(len(recvs)))
        for i, (peer, shape, dtype) in enumerate(recvs):
            h = srec[by_index[i]].handle
            assert tuple(shape) == shape_of[h] and dtype == np.dtype(np.float32).str
            received.setdefault((peer, p), []).append(h)
        # every slab from another node comes through NCCL, none from this one
        assert set(refs) == {k for k, r in srec.items() if r.node != node[p]}
    assert sent == received
    assert {h for hs in sent.values() for h in hs} == crossing == dropped
    assert len(crossing) > 0 and len(sent) >= 4


# --------------------------------------------------------------------------- the network engine on one host


@pytest.fixture(scope="class")
def net_engine():
    pytest.importorskip("pyspark", reason="PySpark is a dependency of insitu (pip install pyspark)")
    from spark_needs import require_java

    require_java()
    from insitu.engine.spark import SparkEngine

    e = SparkEngine("local[2]", app_name="insitu-test-cross-host", network=True, timeout=60)
    try:
        yield e
    finally:
        e.stop()


class TestNetworkEngineOnOneHost:
    """One local-mode engine with network=True for these (stopped before the clusters below start)."""

    def test_the_step_server_takes_its_tasks_connections_over_tcp(self, net_engine):
        # Network mode: each serving task connects to the driver (no socket file in the daemon
        # directory); a step returns what the per-step job returns; a killed task's
        # replacement connects again and the step is answered.
        from insitu.engine.serving import StepServer

        eng = net_engine
        blocks = eng.blocks({g: np.arange(6.0) + 10 * g for g in range(5)}, 2).cache_gpu()
        records = [src[2] for src in blocks.rdd.collect()]
        want = blocks.exec_gpu(_affine, None, 2.0, 0.5, with_key=True).recv_gpu()
        with StepServer(eng) as server:
            for step in range(2):
                got = server.run(records, _affine, None, 2.0, 0.5 + step, with_key=True)
                assert sorted(got) == sorted(want)
                assert all(np.array_equal(got[k], want[k] + step) for k in want)
            assert sorted(server._conns) == [0, 1] and not os.listdir(server.directory)
            assert server._nodes == {0: node_id(eng.daemon_dir), 1: node_id(eng.daemon_dir)}  # as they said
            for pid in {_tcp_peer_pid(c) for c in server._conns.values()}:
                os.kill(pid, signal.SIGKILL)
            got = server.run(records, _affine, None, 2.0, 0.5, with_key=True)
            assert server.restarts == 1 and all(np.array_equal(got[k], want[k]) for k in want)
            # A connection without the server's secret (as a task's, else) is closed unanswered.
            with socket.create_connection(server._address, timeout=10) as intruder:
                intruder.sendall(bytes(16) + server._token.encode() + (0).to_bytes(4, "big"))
                assert intruder.recv(1) == b""
            assert server.run(records, _affine, None, 1.0, 0.0, with_key=True).keys() == want.keys()
        blocks.drop_gpu()

    def test_network_engine_records_name_their_node_and_halo_iterate_uses_the_driver_exchange(self, net_engine):
        from insitu import Domain

        eng = net_engine
        dims = (16, 16, 8)
        dom = Domain.create(dims, nblocks=4, ghost=1)
        blocks = eng.blocks(jacobi_block, 2, keys=range(4), args=(dims, 4)).cache_gpu()
        recs = [s[2] for s in blocks.rdd.collect()]
        assert {r.node for r in recs} == {node_id(eng.daemon_dir)}
        assert all(r.addr is not None and len(r.addr) == 3 for r in recs)
        out = eng.halo_iterate(blocks, jacobi, 5, domain=dom, per_job=2)
        assert eng._exchange is not None  # the records went through the driver, not the daemon directory
        assert not os.path.exists(os.path.join(eng.daemon_dir, "rounds")) or not os.listdir(
            os.path.join(eng.daemon_dir, "rounds"))
        np.testing.assert_array_equal(dom.assemble(out.recv_gpu()), jacobi_reference(dims, 5))
        out.drop_gpu()

    def test_blocks_of_another_node_are_fetched_and_dropped_over_tcp(self, net_engine):
        # Records that say "another node": the task cannot use their sockets, so its daemon
        # fetches the blocks from the holding daemon's TCP endpoint, and drops go there too.
        import dataclasses

        from insitu.engine._spark_tasks import _fetch
        from insitu.pool import DaemonWorker, Package

        eng = net_engine
        data = {k: np.random.default_rng(k).random((6, 5, 4)) for k in range(4)}
        blocks = eng.blocks(data, 2).cache_gpu()
        recs = [s[2] for s in blocks.rdd.collect()]
        away = [dataclasses.replace(r, node="elsewhere:/x") for r in recs]
        w = DaemonWorker(eng.daemons()[0], timeout=20)
        pkg = Package()
        pkg.add("recv", pkg.add("exec", tcp.stats, None, ()))
        before = w.run(pkg)[0]["bytes_sent"]
        got = eng.adopt(away, 1).exec_gpu(jacobi).recv_gpu()
        assert all(np.array_equal(got[k], jacobi(data[k].copy())) for k in range(4))
        assert w.run(pkg)[0]["bytes_sent"] - before == sum(a.nbytes for a in data.values())
        with pytest.raises(Exception, match=r"InsituError: unpersist: block 0 lives on node elsewhere:/x"):  # via Spark
            eng.adopt(away, 1).unpersist_gpu()
        eng.adopt(away, 2).drop_gpu()  # over tcp: the handles are gone from the daemon
        with pytest.raises(InsituError, match=r"refused block 0.*KeyError"):
            _fetch(recs[0].addr, recs[0].handle, 0, False)
        assert w.stats().cache.resident_entries == 0

    def test_located_rdd_prefers_the_named_hosts(self, net_engine):
        from insitu.engine.spark import located_rdd

        r = located_rdd(net_engine.sc, [[(1, "a")], [(2, "b"), (3, "c")]], [["10.26.0.2"], ["10.26.0.3", "hostx"]])
        jr = r._jrdd.rdd()
        assert [jr.preferredLocations(p).mkString(",") for p in jr.partitions()] == ["10.26.0.2", "10.26.0.3,hostx"]
        assert r.glom().collect() == [[[(1, "a")]], [[(2, "b"), (3, "c")]]]


# --------------------------------------------------------------------------- across namespaces


def _affine(block, key, a, b):
    return block * a + b + key


def _tcp_peer_pid(conn: socket.socket) -> int:
    """The pid of the local process at the other end of the TCP connection `conn`."""
    port = conn.getpeername()[1]
    inode = None
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                parts = line.split()
                if int(parts[1].rsplit(":", 1)[1], 16) == port and parts[3] == "01":  # established, its end
                    inode = parts[9]
    assert inode is not None, f"no local socket on port {port}"
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if any(os.readlink(f"/proc/{d}/fd/{fd}") == f"socket:[{inode}]" for fd in os.listdir(f"/proc/{d}/fd")):
                    return int(d)
            except OSError:
                continue
    raise AssertionError(f"no process holds the socket on port {port}")


def _netns_hosts(n: int):
    from netns import Hosts, unavailable

    why = unavailable()
    if why:
        pytest.skip(f"several hosts on one machine: {why}")
    return Hosts(n)


def _host_env(h, **extra) -> dict:
    env = dict(os.environ, INSITU_DAEMON_TCP="1", INSITU_NODE_HOST=h.ip, INSITU_NODE_ID=h.name,
               PYTHONPATH=os.pathsep.join([ROOT, HERE]), INSITU_DAEMON_IDLE_TIMEOUT="30", **extra)
    env.pop("INSITU_DAEMON_DIR", None)
    return env


_AGENT = "import sys, test_cross_host as t; t.{}(*sys.argv[1:])"


def _agent_hold(seed: str, n: str) -> None:
    """In host A: a daemon caching a random block (also in shared memory); prints what a
    record of it would carry."""
    from insitu.engine._spark_tasks import _shareable, export_slab
    from insitu.pool import Package, start_daemon
    from insitu.pool.daemon import default_socket_path

    h = start_daemon(None, default_socket_path(directory="/tmp/insitu-d"), idle_timeout=30)
    w = h.client(timeout=20)
    a = np.random.default_rng(int(seed)).random((int(n),) * 3).astype(np.float32)
    pkg = Package()
    s = pkg.add("exec", _shareable, None, (pkg.add("send", a),))
    pkg.add("recv", pkg.add("exec", export_slab, None, (s,)))
    pkg.add("cache", s)
    pkg.add("recv", pkg.add("exec", tcp.endpoint, None, ()))
    desc, handle, ep = w.run(pkg)
    print(json.dumps({"pid": h.pid, "socket": h.socket_path, "handle": handle.id, "ep": list(ep),
                      "shm": desc[1].name, "node": node_id()}))


def _agent_fetch(record: str) -> None:
    """In host B: its own daemon takes A's block over TCP; prints what it got and saw."""
    from insitu.engine._spark_tasks import _fetch
    from insitu.pool import Package, start_daemon
    from insitu.pool.daemon import default_socket_path
    from insitu.pool.shared import _open

    rec = json.loads(record)
    seen = {"socket_visible": os.path.exists(rec["socket"])}
    try:
        _open(rec["shm"])
        seen["shm"] = "attached"
    except FileNotFoundError as e:
        seen["shm"] = f"FileNotFoundError: {e}"
    h = start_daemon(None, default_socket_path(directory="/tmp/insitu-d"), idle_timeout=30)
    w = h.client(timeout=20)
    pkg = Package()
    got = pkg.add("exec", _fetch, None, (tuple(rec["ep"]), rec["handle"], "A0", False))
    pkg.add("recv", pkg.add("exec", lambda x: hashlib.sha256(x.tobytes()).hexdigest(), None, (got,)))
    pkg.add("recv", pkg.add("exec", tcp.stats, None, ()))
    seen["sha"], seen["stats"] = w.run(pkg)
    seen["node"], seen["pid"] = node_id(), h.pid
    seen["same_pid_at_path"] = h.pid == rec["pid"]
    print(json.dumps(seen))


def _agent_fetch_dead(record: str) -> None:
    from insitu.engine._spark_tasks import _fetch

    rec = json.loads(record)
    t0 = time.monotonic()
    try:
        _fetch(tuple(rec["ep"]), rec["handle"], "A0", False)
        print(json.dumps({"error": None}))
    except Exception as e:
        print(json.dumps({"error": f"{type(e).__name__}: {e}", "seconds": time.monotonic() - t0}))


def test_a_block_moves_between_namespace_hosts_over_tcp_only():
    n = 48
    with _netns_hosts(2) as hosts:
        a, b = hosts
        out = a.run([sys.executable, "-c", _AGENT.format("_agent_hold"), "7", str(n)], env=_host_env(a))
        rec = json.loads(out.strip().splitlines()[-1])
        assert rec["node"] == a.name and rec["ep"][0] == a.ip
        rx0, tx0 = a.link_bytes()
        out = b.run([sys.executable, "-c", _AGENT.format("_agent_fetch"), json.dumps(rec)], env=_host_env(b))
        rx1, tx1 = a.link_bytes()
        seen = json.loads(out.strip().splitlines()[-1])
        ref = np.random.default_rng(7).random((n,) * 3).astype(np.float32)
        # Nothing of host A shows in host B but its address: no socket file, no shared segment.
        assert seen["socket_visible"] is False and seen["shm"].startswith("FileNotFoundError")
        assert seen["node"] == b.name != rec["node"]
        assert seen["sha"] == hashlib.sha256(ref.tobytes()).hexdigest()
        assert seen["stats"]["bytes_received"] == ref.nbytes and seen["stats"]["fetches"] == 1
        # A's link carried the block once: its bytes plus TCP/IP headers and the handshakes.
        assert ref.nbytes <= tx1 - tx0 <= ref.nbytes * 1.06 + 16384, (tx1 - tx0, ref.nbytes)
        assert rx1 - rx0 < ref.nbytes * 0.1  # requests and acknowledgements only
        # The holding daemon dies: the fetch fails at once, naming the peer and the block.
        os.kill(rec["pid"], 9)
        out = b.run([sys.executable, "-c", _AGENT.format("_agent_fetch_dead"), json.dumps(rec)], env=_host_env(b))
        dead = json.loads(out.strip().splitlines()[-1])
        assert dead["error"] is not None and dead["seconds"] < 5.0
        assert f"{a.ip}:{rec['ep'][1]}" in dead["error"] and "'A0'" in dead["error"], dead
        assert dead["error"].startswith("PeerUnreachableError")


def test_hosts_are_removed_whatever_happens():
    hosts = _netns_hosts(1)
    h = hosts[0]
    p = h.popen(["sleep", "60"])
    with pytest.raises(RuntimeError, match="exited 3"):
        with hosts:
            h.run(["sh", "-c", "exit 3"])
    assert p.wait(timeout=5) == -9  # killed by close()
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert h.netns not in names and hosts._sw not in names


# --------------------------------------------------------------------------- MPI ranks across namespaces

# Hydra starts every rank from one proxy, so MPICH would take them all for one node's and join them
# through shared memory (SysV segments, cross-memory attach) that a mount namespace does not
# separate: every peer is made remote instead, over TCP, so ranks of different hosts meet only
# through their links (ranks of one host go through its loopback).
_MPI_APART = {"MPIR_CVAR_NOLOCAL": "1", "UCX_TLS": "tcp", "FI_PROVIDER": "tcp"}


def _require_mpich() -> None:
    from mpi4py import MPI

    found = MPI.Get_library_version()
    if not found.startswith("MPICH"):
        pytest.skip(f"needs MPICH's hydra to place ranks in namespace hosts (MPMD through nsenter); this mpi4py "
                    f"is built on {found.splitlines()[0].strip()}")


def _mpmd(hosts, per_host: int, argv: list[str], env=None) -> list[str]:
    """One mpiexec job with `per_host` ranks inside each host: rank r in hosts[r // per_host]
    (`env(host)`: environment of that host's ranks besides the job's)."""
    from insitu.launch import mpiexec

    cmd = mpiexec()
    for i, h in enumerate(hosts):
        extra = [f"{k}={v}" for k, v in (env(h) if env else {}).items()]
        cmd += ([":"] if i else []) + ["-n", str(per_host), *h.command(["env", *extra, *argv] if extra else argv)]
    return cmd


@pytest.mark.parametrize("per_host", [1, 2])
def test_embedded_ranks_on_two_hosts_draw_the_one_process_frame(per_host):
    # The default engine across hosts: each rank draws its blocks, the halo exchange (eikonal
    # filter) and the compositing cross between hosts by MPI; the frame is compared with one
    # process's render of the whole field, the arrival times with the whole-grid solve.
    _require_mpich()
    out = tempfile.mkdtemp(prefix="insitu-xhost-", dir="/var/tmp")  # each host has its own /tmp
    try:
        with _netns_hosts(2) as hosts:
            a, b = hosts
            env = dict(os.environ, PYTHONPATH=ROOT, NUMBA_NUM_THREADS="1", **_MPI_APART)
            before = a.link_bytes()
            p = subprocess.run(_mpmd(hosts, per_host, [sys.executable, os.path.join(HERE, "mpi", "adaptor_check.py"),
                                                       out]), capture_output=True, text=True, env=env, timeout=300)
            after = a.link_bytes()
        assert p.returncode == 0, p.stdout + p.stderr[-4000:]
        assert f"OK ranks={2 * per_host}" in p.stdout, p.stdout
        # The hosts' ranks met through the link: blocks' ghost layers, image pieces, gathers.
        assert after[0] - before[0] > 20_000 and after[1] - before[1] > 20_000, (before, after)
        print(f"link of {a.name}: {after[0] - before[0]} B in, {after[1] - before[1]} B out")
    finally:
        shutil.rmtree(out, ignore_errors=True)


# --------------------------------------------------------------------------- Spark across namespaces


@pytest.fixture(scope="class", params=[2, 3], ids=["2-hosts", "3-hosts"])
def cluster(tmp_path_factory, request):
    """2 or 3 namespace hosts, a Spark standalone worker of 2 cores in each, a network engine."""
    _skip_if_spark_hosts_off()
    with _netns_hosts(request.param) as hosts, spark_cluster(hosts, log_dir=str(tmp_path_factory.mktemp("spark")),
                                                 host_env=spark_hosts_env) as url:
        eng = cluster_engine(hosts, url)
        try:
            yield hosts, eng
        finally:
            eng.stop()


JDIMS = (64, 64, 32)  # four 32^3 blocks, 2 x 2 x 1


def _skip_if_spark_hosts_off():
    """Skip where INSITU_TEST_SPARK_HOSTS=0: a machine too slow for a JVM master, worker and
    executor per namespace host can turn these off."""
    if os.environ.get("INSITU_TEST_SPARK_HOSTS") == "0":
        pytest.skip("INSITU_TEST_SPARK_HOSTS=0 turns off the Spark standalone clusters over namespace hosts")


def _jacobi_blocks(eng):
    from insitu import Domain

    dom = Domain.create(JDIMS, nblocks=4, ghost=1)
    assert {dom.block(g).padded_shape for g in range(4)} == {(34, 34, 34)}
    return dom, eng.blocks(jacobi_block, 4, keys=range(4), args=(JDIMS, 4)).cache_gpu()


def test_spark_adaptor_ranks_on_two_hosts_draw_the_one_process_frame(tmp_path):
    # engine: spark with network: true, one rank in each of 2 hosts, a Spark standalone worker
    # in each and the driver in rank 0 (host0): each rank hands its blocks to its own host's
    # daemon, the serving job's tasks connect to the driver over TCP and draw the blocks of
    # their host (or fetch them); the frame equals one process's render of the whole field.
    _skip_if_spark_hosts_off()
    _require_mpich()
    out = tempfile.mkdtemp(prefix="insitu-xhost-", dir="/var/tmp")
    try:
        with _netns_hosts(2) as hosts, spark_cluster(hosts, log_dir=str(tmp_path), host_env=spark_hosts_env) as url:
            a = hosts[0]
            engine = {"type": "spark", "params": {"master": url, "network": True, "timeout": 120, "conf": {
                "spark.driver.host": a.ip, "spark.driver.bindAddress": a.ip, "spark.executor.memory": "512m",
                "spark.cores.max": "4", "spark.executorEnv.PYTHONPATH": os.pathsep.join([ROOT, HERE])}}}
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, HERE]), NUMBA_NUM_THREADS="1", **_MPI_APART)
            p = subprocess.run(_mpmd(hosts, 1, [sys.executable, os.path.join(HERE, "mpi", "adaptor_check.py"), out,
                                                json.dumps(engine)],
                                     env=lambda h: {"INSITU_NODE_ID": h.name, "INSITU_NODE_HOST": h.ip}),
                               capture_output=True, text=True, env=env, timeout=600)
        assert p.returncode == 0, p.stdout + p.stderr[-6000:]
        assert "OK ranks=2 engine=spark" in p.stdout, p.stdout
        # The drawing tasks ran on both hosts (a task takes the blocks of the host it runs on).
        assert "serving tasks on nodes: ['host0', 'host1']" in p.stdout, p.stdout
    finally:
        shutil.rmtree(out, ignore_errors=True)


class TestNamespaceHosts:
    """One cluster of 2, then of 3 namespace hosts for these (each stopped before the next starts)."""

    def test_halo_iterate_across_namespace_hosts(self, cluster):
        # 4 partitions on the hosts (2 slots each): the halos between hosts' blocks travel over TCP
        # (daemon to daemon), the records through the driver; the result is the whole-grid
        # sweeps'. A task with blocks of both hosts fetches the other host's.
        hosts, eng = cluster
        dom, blocks = _jacobi_blocks(eng)
        out = eng.halo_iterate(blocks, jacobi, 7, domain=dom, per_job=4)
        recs = [s[2] for s in out.rdd.collect()]
        # Blocks on several hosts (4 partitions, 2 slots a host): halos crossed between them.
        assert len({r.node for r in recs}) >= 2 and {r.node for r in recs} <= {h.name for h in hosts}
        assert {(r.node, r.host) for r in recs} <= {(h.name, h.ip) for h in hosts}
        got = out.recv_gpu()
        np.testing.assert_array_equal(dom.assemble(got), jacobi_reference(JDIMS, 7))
        # One task for all four blocks: it runs on one host and fetches the other's.
        one = eng.adopt(recs, 1).recv_gpu()
        assert all(np.array_equal(one[g], got[g]) for g in range(4))
        out.drop_gpu()

    def test_gpu_shuffles_across_namespace_hosts(self, cluster):
        # The halo shuffle (slab records shuffled by Spark, slabs taken over TCP where the
        # target is on the other host), then the key shuffle (blocks grouped across hosts).
        hosts, eng = cluster
        dom, blocks = _jacobi_blocks(eng)
        for _ in range(3):
            blocks = eng.gpu_shuffle(blocks, "halo", domain=dom).exec_gpu(jacobi).cache_gpu(drop_sources=True)
        assert len({s[2].node for s in blocks.rdd.collect()}) >= 2
        want = jacobi_reference(JDIMS, 3)
        got = blocks.recv_gpu()
        np.testing.assert_array_equal(dom.assemble(got), want)
        sums = eng.gpu_shuffle(blocks, "key", key=_parity).exec_gpu(_total).recv_gpu()
        assert sorted(sums) == [0, 1]
        for p in (0, 1):
            np.testing.assert_array_equal(sums[p], sum(got[g] for g in range(4) if g % 2 == p))
        blocks.drop_gpu()


    def test_the_paper_listings_across_namespace_hosts(self, cluster):
        # Listings 1, 2, 6, 7 and 8 (halo_iterate) of the paper on the hosts, each
        # against its own reference (examples/spark_listings.py).
        sys.path.insert(0, os.path.join(ROOT, "examples"))
        import spark_listings as L

        hosts, eng = cluster
        for n, kw in (("1", {}), ("2", {}), ("6", {}), ("7", {}), ("8", {"per_job": 12})):
            r = L.run(n, eng, **kw)
            assert r["ok"], (n, r)


def _parity(k):
    return k % 2


def _total(values):
    return sum(values[1:], values[0].copy())


def test_a_killed_host_is_recovered_from_the_checkpoint(tmp_path):
    # 3 hosts x 2 cores, 4 partitions: after a whole host dies (its worker, executor,
    # python workers and daemon) the other two still have the 4 slots of a barrier stage;
    # halo_iterate reloads the last checkpoint (on storage all hosts see) and replays.
    import shutil
    import tempfile

    from insitu import Domain

    _skip_if_spark_hosts_off()
    shared = tempfile.mkdtemp(prefix="insitu-ckpt-", dir="/var/tmp")  # not /tmp: each host has its own
    try:
        with _netns_hosts(3) as hosts, spark_cluster(hosts, log_dir=str(tmp_path), host_env=spark_hosts_env) as url:
            eng = cluster_engine(hosts, url, timeout=20)
            try:
                dom = Domain.create(JDIMS, nblocks=4, ghost=1)
                blocks = eng.blocks(jacobi_block, 4, keys=range(4), args=(JDIMS, 4)).cache_gpu()
                held = {s[2].node for s in blocks.rdd.collect()}
                victim = next(h for h in hosts if h.name in held)
                killed = []

                def kill_once(jobs, b):
                    if jobs == 2 and not killed:
                        killed.append(victim.kill())

                out = eng.halo_iterate(blocks, jacobi, 16, domain=dom, per_job=4, checkpoint_every=4,
                                       checkpoint_dir=shared, on_job=kill_once)
                assert killed and killed[0] > 0
                np.testing.assert_array_equal(dom.assemble(out.recv_gpu()), jacobi_reference(JDIMS, 16))
                assert victim.name not in {s[2].node for s in out.rdd.collect()}
                assert len(eng.recoveries) >= 1
                rec = eng.recoveries[0]
                print(f"host {victim.name} killed after job 2: recovered from the checkpoint of iteration "
                      f"{rec['resumed_from']} in {rec['seconds']:.2f} s ({rec['lost_seconds']:.2f} s lost in the "
                      f"failed job, {rec['error']})")
            finally:
                eng.stop()
    finally:
        shutil.rmtree(shared, ignore_errors=True)
