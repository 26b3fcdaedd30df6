"""The Spark engine (insitu.engine.spark) in local mode: blocks as RDDs of records, command
packages on worker daemons, halo and key shuffles, the paper's listings against
single-process / embedded-engine references, and recovery from a killed daemon."""

import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("pyspark", reason="PySpark is a dependency of insitu (pip install pyspark)")

from insitu import Domain

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
if EXAMPLES not in sys.path:
    sys.path.insert(0, EXAMPLES)  # before the engine starts: its tasks and daemons import spark_listings

import spark_listings as L  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)  # the functions below go to the daemons by reference


@pytest.fixture(scope="module")
def engine():
    from insitu.engine.spark import SparkEngine

    e = SparkEngine("local[2]", app_name="insitu-test-spark-engine", timeout=60)
    try:
        yield e
    finally:
        e.stop()


def scale(block, factor):
    return block * factor


def add_one_in_place(block):
    block += 1


def total(parts):
    return np.concatenate([p.reshape(-1) for p in parts]).sum(keepdims=True)


def key_mod3(k):
    return k % 3


def round_trips(engine) -> int:
    from insitu.pool import DaemonWorker

    return sum(DaemonWorker(s, timeout=10).stats().round_trips for s in engine.daemons())


def padded(field, dom):
    out = {}
    for g in range(dom.nblocks):
        b = dom.block(g)
        a = np.zeros(b.padded_shape)
        a[b.interior] = field[tuple(slice(lo, hi) for lo, hi in zip(b.lo, b.hi))]
        out[g] = a
    return out


# --------------------------------------------------------------------------- the engine


def test_registered_without_importing_pyspark():
    code = ("import sys, insitu.engine as e; assert 'pyspark' not in sys.modules, 'pyspark imported'; "
            "print(e.get_engine('spark').__name__)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "SparkEngine"


def test_one_package_per_partition_per_action(engine):
    data = {k: np.full(5, float(k)) for k in range(6)}
    blocks = engine.blocks(data, 3)
    assert blocks.npartitions == 3 and blocks.keys() == list(range(6))
    got = blocks.send_gpu().exec_gpu(scale, None, 2.0).recv_gpu()
    assert {k: v.tolist() for k, v in got.items()} == {k: [2.0 * k] * 5 for k in range(6)}
    before = round_trips(engine)
    cached = blocks.send_gpu().exec_gpu(scale, None, 3.0).cache_gpu()
    assert round_trips(engine) - before == 3  # one package per partition
    before = round_trips(engine)
    got = cached.exec_gpu_seq([(add_one_in_place, None, ()), (scale, None, (0.5,))]).recv_gpu()
    assert round_trips(engine) - before == 3
    assert {k: v.tolist() for k, v in got.items()} == {k: [(3.0 * k + 1) * 0.5] * 5 for k in range(6)}
    # persist / unpersist / drop: one package per partition each, visible in the daemons' caches
    from insitu.pool import DaemonWorker

    (sock,) = engine.daemons()
    persisted = DaemonWorker(sock).stats().cache.persisted_entries
    cached.persist_gpu()
    assert DaemonWorker(sock).stats().cache.persisted_entries == persisted + 6
    cached.unpersist_gpu()
    assert DaemonWorker(sock).stats().cache.persisted_entries == persisted
    entries = DaemonWorker(sock).stats().cache.resident_entries
    cached.drop_gpu()
    assert DaemonWorker(sock).stats().cache.resident_entries == entries - 6


def test_loader_runs_in_the_daemon_and_lineage_stays_bounded(engine):
    blocks = engine.blocks(L.load_sphere_block, 2, keys=range(4), args=((10, 9, 8), 4)).cache_gpu()
    depth = []
    for i in range(12):
        blocks = blocks.exec_gpu(L.smooth).cache_gpu(drop_sources=True)
        if i in (1, 11):
            depth.append(len(blocks.rdd.toDebugString().splitlines()))
    assert depth[0] == depth[1]  # each action's records are checkpointed locally
    want = L.reference2(dims=(10, 9, 8), nblocks=4, iterations=12)
    got = blocks.recv_gpu()
    assert all(np.array_equal(got[g], want[g]) for g in range(4))
    blocks.drop_gpu()


@pytest.mark.parametrize("periodic", [False, (True, False, True)])
def test_halo_shuffle_fills_the_ghosts(engine, periodic):
    dom = Domain.create((14, 12, 10), nblocks=6, ghost=1, periodic=periodic)
    field = np.random.default_rng(3).random(dom.dims)
    blocks = engine.blocks(padded(field, dom), 3)
    got = engine.gpu_shuffle(blocks, "halo", domain=dom).recv_gpu()
    for g in range(dom.nblocks):
        np.testing.assert_array_equal(got[g], dom.extract(field, g), err_msg=f"block {g}")


def test_key_shuffle_groups_by_key(engine):
    data = {k: np.arange(4.0) + 10 * k for k in range(7)}
    grouped = engine.gpu_shuffle(engine.blocks(data, 2), "key", key=key_mod3)
    got = grouped.exec_gpu(total).recv_gpu()
    want = {m: sum((np.arange(4.0) + 10 * k).sum() for k in range(7) if k % 3 == m) for m in range(3)}
    assert {k: float(v[0]) for k, v in got.items()} == want


def test_shuffles_between_two_daemons_of_a_node(engine):
    # Two CPU daemons: partitions alternate between them, so slabs and groups move
    # between daemons through shared memory (export_slab / import_slab).
    from insitu.engine.spark import SparkEngine

    two = SparkEngine(sc=engine.sc, cpu_daemons=2, timeout=60)
    try:
        dom = Domain.create((12, 10, 8), nblocks=4, ghost=1)
        field = np.random.default_rng(5).random(dom.dims)
        blocks = two.blocks(padded(field, dom), 2).cache_gpu()
        assert len(two.daemons()) == 2
        got = two.gpu_shuffle(blocks, "halo", domain=dom).recv_gpu()
        for g in range(dom.nblocks):
            np.testing.assert_array_equal(got[g], dom.extract(field, g), err_msg=f"block {g}")
        sums = two.gpu_shuffle(blocks, "key", key=key_mod3).exec_gpu(total).recv_gpu()
        # The halo fill wrote into the cached blocks (in place, as GPUShuffleManager's does).
        want = {m: sum(dom.extract(field, g).sum() for g in range(4) if g % 3 == m) for m in range(3)}
        assert set(sums) == set(want)
        for m in want:
            assert float(sums[m][0]) == pytest.approx(want[m], rel=1e-12)
    finally:
        two.stop()
    assert engine.sc is not None and engine.sc._jsc is not None  # the shared context goes on


@pytest.mark.parametrize("cpu_daemons", [1, 2])
def test_halo_iterate_moves_halos_between_daemons_inside_one_job(engine, cpu_daemons):
    # Listing 8 with its ten-iteration jobs: a halo exchange every iteration, records
    # swapped between the tasks, slabs between the daemons; the same travel times as the
    # single-block solve, and nothing left on the daemons.
    from insitu.engine.spark import SparkEngine
    from insitu.pool import DaemonWorker

    eng = SparkEngine(sc=engine.sc, cpu_daemons=cpu_daemons, timeout=60)
    try:
        dims, seed = (12, 10, 8), (2, 3, 1)
        dom = Domain.create(dims, nblocks=4, ghost=1)
        blocks = eng.blocks(L.eikonal_block, 2, keys=range(4), args=(dims, 4, seed)).cache_gpu()
        out = eng.halo_iterate(blocks, L.eikonal_step, 24, domain=dom, component=0, args=(dom.spacing, 4), per_job=10)
        T = dom.assemble({g: a[0] for g, a in out.recv_gpu().items()})
        np.testing.assert_array_equal(T, L.reference8(dims=dims, seed=seed))
        assert len(eng.daemons()) == cpu_daemons
        out.drop_gpu()
        assert [DaemonWorker(s, timeout=10).stats().cache.resident_entries for s in eng.daemons()] == \
            [0] * cpu_daemons
        with pytest.raises(ValueError, match="per_job must be an int >= 1"):
            eng.halo_iterate(out, L.eikonal_step, 3, domain=dom, per_job=0)
        many = eng.blocks(L.eikonal_block, 4, keys=range(4), args=(dims, 4, seed)).cache_gpu()
        with pytest.raises(ValueError, match="4 partitions, but a barrier stage runs all of them at once and Spark "
                                             "has 2 task slots"):
            eng.halo_iterate(many, L.eikonal_step, 3, domain=dom)
        many.drop_gpu()
    finally:
        eng.stop()


def test_a_1000_iteration_eikonal_run_keeps_a_bounded_lineage(engine):
    # The paper's system overflowed after about 500 iterations; here 1000 iterations of
    # listing 8 (one sweep and a halo exchange each), 100 per job, end with the lineage
    # of the first job and the single-block answer.
    dims, seed = (12, 10, 8), (2, 3, 1)
    dom = Domain.create(dims, nblocks=4, ghost=1)
    blocks = engine.blocks(L.eikonal_block, 2, keys=range(4), args=(dims, 4, seed)).cache_gpu()
    depth = []
    for _ in range(10):
        blocks = engine.halo_iterate(blocks, L.eikonal_step, 100, domain=dom, component=0, args=(dom.spacing, 1),
                                     per_job=100)
        depth.append(len(blocks.rdd.toDebugString().splitlines()))
    assert len(set(depth)) == 1, depth
    T = dom.assemble({g: a[0] for g, a in blocks.recv_gpu().items()})
    np.testing.assert_array_equal(T, L.reference8(dims=dims, seed=seed))
    blocks.drop_gpu()


def test_errors_name_the_parameter(engine):
    with pytest.raises(ValueError, match="unknown shuffle 'ring'; expected 'halo' or 'key'"):
        engine.gpu_shuffle(engine.blocks({0: np.zeros(1)}, 1), "ring")
    with pytest.raises(ValueError, match="needs domain="):
        engine.gpu_shuffle(engine.blocks({0: np.zeros(1)}, 1), "halo")
    with pytest.raises(ValueError, match="npartitions must be an int in"):
        engine.blocks({0: np.zeros(1)}, 3)
    with pytest.raises(ValueError, match="a loader needs keys="):
        engine.blocks(L.load_sphere_block, 1)
    with pytest.raises(ValueError, match="not cached"):
        engine.blocks({0: np.zeros(1)}, 1).drop_gpu()


# --------------------------------------------------------------------------- the paper's listings


def test_listing1_load_send_exec_render_collect(engine):
    rgba, depth, images = L.listing1(engine)
    ref_rgba, ref_depth, ref_images = L.reference1()  # the embedded engine, same per-block functions
    assert set(images) == set(ref_images)
    for k in images:
        np.testing.assert_allclose(images[k], ref_images[k], atol=1e-6, err_msg=f"block {k}")
    np.testing.assert_allclose(rgba, ref_rgba, atol=1e-6)
    assert np.isfinite(depth).sum() > 100  # the sphere covers the middle of the image


def test_listing2_cache_and_iterate(engine):
    got, want = L.listing2(engine), L.reference2()
    assert set(got) == set(want)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


def test_listing6_sort_last_volume_rendering(engine):
    got = L.listing6(engine)
    rgba, depth = L.reference6()  # the whole field ray cast in one process
    np.testing.assert_allclose(got[..., :4], rgba, atol=1e-5)
    assert rgba[..., 3].max() > 0.3


def test_listing7_isosurface_with_halo(engine):
    v, f = L.listing7(engine)
    rv, rf = L.reference7()  # marching cubes of the whole field
    assert len(f) == len(rf) > 100
    assert L.mesh_key(v, f) == L.mesh_key(rv, rf)


def test_listing8_eikonal_with_a_halo_exchange_every_iteration(engine, tmp_path):
    got = L.listing8(engine, checkpoint_every=10, checkpoint_dir=str(tmp_path))
    np.testing.assert_allclose(got, L.reference8(), rtol=0, atol=1e-12)  # solvers.eikonal.solve, one block


# --------------------------------------------------------------------------- faults


def test_lost_blocks_are_named_after_a_daemon_dies(engine):
    # A task finding no daemon listening starts a new one and sends its package again;
    # the new daemon does not have the blocks the dead one cached: LostBlocksError.
    blocks = engine.blocks({k: np.full(3, float(k)) for k in range(4)}, 2).cache_gpu()
    assert L.kill_daemons(engine)
    with pytest.raises(Exception, match=r"LostBlocksError: blocks \d, \d were cached by a worker daemon at .* that "
                                        r"died \(now pid \d+\)"):
        blocks.recv_gpu()
    fresh = engine.blocks({0: np.ones(2)}, 1).exec_gpu(scale, None, 2.0).recv_gpu()  # the new daemon serves
    assert fresh[0].tolist() == [2.0, 2.0]


@pytest.mark.parametrize("fused", [False, True], ids=["job-per-iteration", "halo_iterate"])
def test_killed_daemon_recovers_from_the_last_checkpoint(fused):
    # Own process: retries need the master local[2,3] and a process has one SparkContext.
    # The daemon is SIGKILLed during iteration 6 (fused: during the third job of 4
    # iterations); tasks fail (WorkerDiedError), Spark retries them (the retry starts a
    # new daemon; the blocks are gone: LostBlocksError), and the engine reloads the
    # checkpoint of iteration 4 (fused: 8) and replays.
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    how = ["--per-job", "4", "--kill-after", "2", "--checkpoint-every", "8"] if fused else \
        ["--kill-after", "5", "--checkpoint-every", "4"]
    p = subprocess.run([sys.executable, os.path.join(EXAMPLES, "spark_listings.py"), "--master", "local[2,3]",
                        "--listing", "8", *how], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("listing 8 ")][0]
    assert "listing 8 on local[2,3]: OK" in line and "max_diff=0" in line and "recoveries=1" in line, line
    print(line)


def fail_first_attempt(index, it, *, marks):
    """Pipelined after an action's task (so its package has run on the daemon): the first
    attempt of every task fails; each attempt leaves a mark ``stage-partition-attempt``."""
    from pyspark import TaskContext

    out = list(it)
    tc = TaskContext.get()
    open(os.path.join(marks, f"{tc.stageId()}-{index}-{tc.attemptNumber()}"), "w").close()
    if tc.attemptNumber() == 0:
        raise RuntimeError("injected: the task fails after its package ran")
    return out


def extract_then_fail(index, it, *, marks, **kw):
    """The map side of a halo shuffle (its slabs cached), then :func:`fail_first_attempt`."""
    from insitu.engine._spark_tasks import _extract_task

    return fail_first_attempt(index, _extract_task(index, it, **kw), marks=marks)


def retried_tasks_scenario(marks: str) -> dict:
    """Run in its own process (retries need the master local[2,3]): listings 2 and 8 (two CPU
    daemons: slabs move between them), undisturbed and then with the first attempt of every
    task of every action and halo shuffle failing after its package ran; the daemons' caches
    after each."""
    import functools
    import json

    from insitu.engine import _spark_tasks, spark
    from insitu.engine.spark import SparkBlocks, SparkEngine
    from insitu.pool import DaemonWorker, Package

    def entries(engine):
        out = 0
        for sock in engine.daemons():
            c = DaemonWorker(sock, timeout=10).stats().cache
            out += c.resident_entries + c.host_entries + c.disk_entries
        return out

    def ledger(engine):
        out = {}
        for sock in engine.daemons():
            p = Package()
            p.add("recv", p.add("exec", _spark_tasks.ledger_entries, None, ()))
            out.update(DaemonWorker(sock, timeout=10).run(p)[0])
        return out

    job, extract = SparkBlocks._job, spark._extract_task

    def failing_job(self, final, **kw):
        return job(self, final, **kw).mapPartitionsWithIndex(functools.partial(fail_first_attempt, marks=marks),
                                                             preservesPartitioning=True)

    def inject(on: bool):
        SparkBlocks._job = failing_job if on else job
        spark._extract_task = functools.partial(extract_then_fail, marks=marks) if on else extract

    engine = SparkEngine("local[2,3]", app_name="insitu-test-retries", cpu_daemons=2, timeout=60)
    report = {}
    try:
        for on in (False, True):
            inject(on)
            two = L.listing2(engine, iterations=2)
            after2 = entries(engine)
            eight = L.listing8(engine, iterations=2)
            report["injected" if on else "undisturbed"] = {
                "listing2": {str(k): v.tolist() for k, v in two.items()}, "listing8": eight.tolist(),
                "entries_after_2": after2, "entries_after_8": entries(engine)}
        inject(False)
        report["ledger_attempts"] = sorted({at for _, at, _ in ledger(engine).values()})
        report["daemons"] = len(engine.daemons())
    finally:
        inject(False)
        engine.stop()
    print("REPORT " + json.dumps(report))
    return report


def test_side_effects_on_daemons_happen_once_per_partition_when_spark_retries(tmp_path):
    # Each action's task fails in its first attempt after its package ran on the daemon
    # (blocks cached, sources dropped): Spark's retry must neither leave a second copy of
    # the blocks behind (leaked handles) nor find its sources dropped by the first attempt.
    marks = tmp_path / "marks"
    marks.mkdir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, HERE, EXAMPLES, os.environ.get("PYTHONPATH", "")]))
    code = f"import test_spark_engine as T; T.retried_tasks_scenario({str(marks)!r})"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    import json

    report = json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("REPORT ")][0][len("REPORT "):])
    calm, hit = report["undisturbed"], report["injected"]
    assert report["daemons"] == 2
    attempts = [name.rsplit("-", 1)[1] for name in os.listdir(marks)]
    # Every task of the injected run failed once: the actions of listings 2 and 8 that run
    # Spark jobs (drop_gpu frees known records from the driver: no job) and 2 halo
    # shuffles, 10 jobs of 2 partitions.
    assert attempts.count("0") == attempts.count("1") == 20
    assert "2" not in attempts  # and its retry succeeded
    assert hit["listing2"] == calm["listing2"]
    want2 = L.reference2(iterations=2)
    assert set(hit["listing2"]) == {str(k) for k in want2}
    for k, v in want2.items():
        np.testing.assert_array_equal(np.asarray(hit["listing2"][str(k)]), v)
    np.testing.assert_array_equal(np.asarray(hit["listing8"]), np.asarray(calm["listing8"]))
    # Both listings drop what they cached: nothing left on the daemons, retries or not.
    assert calm["entries_after_2"] == calm["entries_after_8"] == 0
    assert hit["entries_after_2"] == hit["entries_after_8"] == 0
    # The packages committed were the first attempts' (the retries took their results).
    assert report["ledger_attempts"] == [0]


# All five listings on a cluster, as in local mode; listing 8 with 10 halo exchanges (it
# converges after 8: the result is compared with the converged travel time) and iterate()'s
# checkpoint every 4 iterations (the daemons write them into a directory the driver made).
CLUSTER_LISTINGS = ["--listing", "1,2,6,7,8", "--iterations", "10", "--checkpoint-every", "4"]


def test_listings_on_a_local_cluster_with_gpus_as_a_spark_resource():
    # Two executors (own JVMs and python workers); GPUs scheduled by Spark from the shipped
    # discovery script (fake addresses, served by CPU daemons on this machine). During
    # listing 8's 6th iteration an executor JVM is SIGKILLed: the records it held (local
    # checkpoints) are gone, the job fails (CHECKPOINT_RDD_BLOCK_ID_NOT_FOUND), iterate()
    # reloads the checkpoint of iteration 4 on a new executor and replays. Listings 1 (a
    # loader on the daemons) and 8 here; all five run on the standalone cluster below.
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    listings = ["--listing", "1,8", *CLUSTER_LISTINGS[2:]]
    p = subprocess.run([sys.executable, os.path.join(EXAMPLES, "spark_listings.py"), "--master",
                        "local-cluster[2,1,1024]", "--gpus", "--fake-gpus", "0", *listings,
                        "--kill-executor-after", "5"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    for n in (1, 8):
        assert f"listing {n} on local-cluster[2,1,1024]: OK" in p.stdout, p.stdout
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("listing 8 ")][0]
    assert "max_diff=0 recoveries=1 " in line and "killed_executor=None" not in line, line
    print(line)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(path, text, proc, timeout=90.0):
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(path, errors="replace") as f:
            if text in f.read():
                return
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    with open(path, errors="replace") as f:
        pytest.fail(f"{os.path.basename(path)}: no {text!r} within {timeout:g} s:\n{f.read()[-3000:]}")


@pytest.fixture
def standalone_cluster(tmp_path):
    """A Spark standalone master and two workers (1 core each) on loopback; stopped after."""
    import pyspark

    home = os.path.dirname(pyspark.__file__)
    env = dict(os.environ, SPARK_HOME=home, SPARK_LOCAL_IP="127.0.0.1")
    from insitu.engine.java import java_home

    jh = java_home()  # the runtime in use, made usable by Spark 4 (insitu/engine/java.py)
    if jh is not None:
        env["JAVA_HOME"] = jh
    spark_class = os.path.join(home, "bin", "spark-class")
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    procs = []

    def start(name, *args):
        log = tmp_path / f"{name}.log"
        with open(log, "w") as out:  # spark-class execs java: the pid is the JVM's
            procs.append(subprocess.Popen([spark_class, *args], stdout=out, stderr=subprocess.STDOUT, env=env,
                                          stdin=subprocess.DEVNULL, start_new_session=True))
        return str(log)

    try:
        log = start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                    "--webui-port", "0")
        _wait_for(log, "I have been elected leader", procs[-1])
        for i in (1, 2):
            log = start(f"worker{i}", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "1",
                        "--memory", "1g", "--webui-port", "0", "--work-dir", str(tmp_path / f"work{i}"), url)
            _wait_for(log, "Successfully registered with master", procs[-1])
        yield url, env
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def test_listings_on_a_standalone_cluster_on_loopback(standalone_cluster):
    url, env = standalone_cluster
    env = dict(env, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, os.path.join(EXAMPLES, "spark_listings.py"), "--master", url,
                        *CLUSTER_LISTINGS, "--conf", "spark.driver.host=127.0.0.1",
                        "--conf", "spark.driver.bindAddress=127.0.0.1"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    for n in (1, 2, 6, 7, 8):
        assert f"listing {n} on {url}: OK" in p.stdout, p.stdout
    assert "max_diff=0 recoveries=0" in p.stdout, p.stdout


def test_a_daemon_first_reached_to_free_slabs_still_gets_its_device(tmp_path):
    # A python worker may first reach a daemon to free slabs mapped from it (_finish), with
    # no device known; when a later task is placed on that daemon, its loaded blocks must
    # still go to the daemon's GPU (on 2 GPUs, listing 8 then met host and device arrays).
    from insitu.engine import _spark_tasks as T
    from insitu.pool import DaemonWorker
    from insitu.pool.daemon import default_socket_path

    ctx = T._Ctx(str(tmp_path), 2, 1, 10.0, ())
    path = default_socket_path(1, directory=str(tmp_path), by_bus_id=False)
    saved = dict(T._CLIENTS), dict(T._DEVICES)
    try:
        T._CLIENTS.clear()
        T._DEVICES.clear()
        T._CLIENTS.setdefault(path, DaemonWorker(path, timeout=1.0))  # as _finish leaves it
        w = T._client(ctx, 1, str(tmp_path))
        assert w.socket_path == path and T._DEVICES[path] == 1
        rec = T.BlockRecord("k", 0, path, 1, 123)
        T._DEVICES.clear()
        assert T._client_at(ctx, rec) is w and T._DEVICES[path] == 1
    finally:
        T._CLIENTS.clear()
        T._CLIENTS.update(saved[0])
        T._DEVICES.clear()
        T._DEVICES.update(saved[1])
