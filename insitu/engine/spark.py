"""The Spark engine: PySpark schedules the work, worker daemons hold the data.

    engine = SparkEngine("local[2]")
    blocks = engine.blocks({gid: field for gid, field in ...}, 2)      # an RDD of small records
    for _ in range(n):
        blocks = engine.gpu_shuffle(blocks, "halo", domain=dom).exec_gpu(step).cache_gpu(drop_sources=True)
    result = blocks.recv_gpu()                                          # {key: array} at the driver
    engine.stop()

What the RDDs hold
------------------
Never block data. A partition of a :class:`SparkBlocks` is a list of *sources*, tiny
tuples ``(key, kind, ...)``: ``"array"`` (a driver array, pickled once when the blocks
are made), ``"load"`` (a loader the daemon calls, ``loader(key, *args)``), ``"handle"``
(a :class:`BlockRecord`: key, cache handle, daemon socket, device, daemon pid),
``"halo"`` (a cached block plus the records of the halo slabs addressed to it) and
``"group"`` (the records of the blocks a key shuffle grouped). Transformations
(``send_gpu``, ``exec_gpu``, ``exec_gpu_seq``, ``exec_gl``) only record steps; an
action runs one Spark job in which each partition's task builds one command package
for all its blocks and runs it on its node's worker daemon (:class:`DaemonWorker`, one
round trip per partition per action). Cached results come back as new records; the
RDD of records is kept by Spark with ``localCheckpoint`` (lineage of length one, and
its preferred locations are the executors that made the records, so later tasks run
there).

Where the daemons are
---------------------
One daemon per GPU per node, a CPU daemon where there is none, started on demand from
inside tasks with :func:`insitu.pool.ensure_daemon` (a file lock makes concurrent tasks
start it once), in a session of their own, so they outlive Spark's python workers.
Tasks run no GPU code and never initialise CUDA: they send packages, and name a GPU's
daemon by the ordinal Spark gave them (``default_socket_path(by_bus_id=False)``).
Which daemon a partition uses:

* Spark scheduled a GPU to the task (``spark.task.resource.gpu.amount``; the settings
  come from :meth:`SparkEngine.gpu_conf`, with the discovery script shipped here,
  ``insitu/engine/gpu_discovery.sh``): the first address it got;
* local mode, no GPU scheduling: ``partition index % gpus`` (``gpus`` counted on the
  driver from ``/proc/driver/nvidia/gpus`` and ``CUDA_VISIBLE_DEVICES``, or given);
* no GPU: the node's CPU daemon (``cpu_daemons=k`` starts k CPU daemons per node,
  partition ``p`` on daemon ``p % k``; useful to exercise hand-offs between daemons).

A task whose sources are cached blocks runs on the daemon that holds them (their
record names its socket). Daemons live in ``daemon_dir`` (default a fresh directory
per engine, on every node); :meth:`SparkEngine.stop` shuts down the daemons found there
on the driver's node. A daemon's owner is the parent of the Python worker that started
or found it (Spark's long-lived ``pyspark.daemon``, or the executor): once the executor
is gone (a driver killed by SIGKILL takes a local-mode executor with it) and no task
talks to it, the daemon exits after ``daemon_idle_timeout``, on every node.

Several hosts
-------------
``SparkEngine(..., network=True)``: each record also names its *node*
(:func:`insitu.pool.node.node_id`: hostname and daemon directory, or ``$INSITU_NODE_ID``)
and the TCP endpoint of its daemon's block server (:mod:`insitu.transports.tcp`; the
executors' daemons start one, at ``$INSITU_NODE_HOST``). Hand-offs are chosen per pair:
same daemon, by handle; same node, shared memory or CUDA IPC; another node, TCP, the
receiving daemon pulling the bytes straight into its own buffer. Partitions made from
records prefer the host that holds their blocks (:func:`located_rdd`); a task Spark runs
elsewhere fetches its blocks over TCP instead of failing. :meth:`SparkEngine.halo_iterate`
swaps its records through the driver (:class:`~insitu.transports.tcp.RecordExchange`)
instead of the node's daemon directory. Host blocks only: device blocks across hosts
(NCCL's network path) are not built. Without ``network=True`` shuffles hand data over
between daemons of one node only.

Shuffles
--------
Spark shuffles records, the daemons keep the data. ``gpu_shuffle(blocks, "halo",
domain=)``: the map side of the shuffle runs ``extract_halo`` on the daemons, caches
each slab there and emits ``(target gid, slab record)``; the records are partitioned
with the blocks' partitioner next to the target block's record; the target's task
takes each slab with a ``get`` (same daemon) or maps it from the other daemon of its
node (shared memory on the CPU, CUDA IPC on GPUs; see :func:`export_slab`), appends
it and drops it. ``gpu_shuffle(blocks, "key", key=f)`` groups block handles by
``f(block key)`` likewise; the group's value is the list of its arrays in source-key
order (pending: reduce it with ``exec_gpu`` before ``cache_gpu``).

:meth:`SparkEngine.halo_iterate` runs many (halo exchange, kernel) iterations in one job:
a barrier stage whose tasks drive their daemons round by round and swap the slabs'
records through files of the daemon directory (node-local, like the hand-offs), or through
the driver with ``network=True``.

Faults
------
A task whose daemon died raises :class:`~insitu.pool.WorkerDiedError`; Spark retries
it (``local[N,F]`` in local mode), and the retry starts a new daemon. Blocks cached by
the dead daemon are gone: a task that needs them raises :class:`LostBlocksError`.
:meth:`SparkEngine.iterate` runs an iterative job with a checkpoint of the cached
blocks every K iterations (``.npy`` files written by the daemons themselves) and, on
lost blocks, reloads the last checkpoint and replays the iterations since: the result
equals an undisturbed run's, and the lineage stays bounded however long the job. An
executor lost with the records it held (their local checkpoints) is recovered from alike.

Side effects on the daemons happen once per (action, partition): each action (and each
shuffle's map side) has a token, the same in every attempt of its tasks; a package that
caches or drops blocks begins by looking ``(token, partition)`` up in its daemon's ledger
and ends by entering its results there, so an attempt that Spark retries (the first one
failed after its package ran), runs speculatively or recomputes takes the results of the
attempt that completed instead of caching its blocks again (which would leak) or dropping
its sources twice. A package's cache operations come after all its computations, so an
attempt that failed in a user function cached nothing.
"""

from __future__ import annotations

import functools
import glob
import operator
import os
import shutil
import sys
import tempfile
import time
import uuid
from typing import Any, Callable, Hashable, Mapping, Sequence

import numpy as np

from insitu.errors import InsituError, PeerTimeoutError
from insitu.log import get_logger
from insitu.pool import DaemonWorker, Package, WorkerDiedError
from insitu.pool.daemon import fingerprint
from insitu.transports import tcp

from .java import java_home
from ._spark_tasks import (BlockRecord, LostBlocksError, _action_task, _Ctx, _endpoint, _extract_task,
                           _group_assemble, _group_task, _halo_assemble, _identity, _order_key, _rounds_task, _stable,
                           export_slab, import_slab, load_checkpoint_block)

_log = get_logger(__name__)

__all__ = ["BlockRecord", "LostBlocksError", "SparkBlocks", "SparkEngine", "block_record", "export_slab",
           "import_slab"]


def block_record(worker: DaemonWorker, key: Hashable, handle: Any, device: int | None, *,
                 daemon_dir: str | None = None) -> BlockRecord:
    """The record of a block `worker`'s daemon cached under `handle`, as the engine's tasks
    make them (what :meth:`SparkEngine.adopt` takes).

    Parameters
    ----------
    daemon_dir : str, optional
        The node's daemon directory, given for a network engine's records: they then name
        the node and the daemon's TCP block server, where tasks of other hosts fetch it.
    """
    if daemon_dir is None:
        return BlockRecord(key, handle, worker.socket_path, device, worker.pid)
    from insitu.pool.node import node_id

    return BlockRecord(key, handle, worker.socket_path, device, worker.pid, node_id(os.path.abspath(daemon_dir)),
                       tuple(_endpoint(worker)))


# --------------------------------------------------------------------------- the driver side


def _count_gpus() -> int:
    """GPUs of this node, without initialising CUDA (the driver's children fork)."""
    try:
        n = len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return 0
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if vis is not None:
        n = min(n, len([v for v in vis.split(",") if v.strip() and not v.strip().startswith("-")]))
    return n


def _python_path() -> str:
    from insitu.pool.daemon import _pythonpath

    return _pythonpath()


class SparkEngine:
    """Blocks as RDD partitions of records, work as command packages on worker daemons.

    Parameters
    ----------
    master : str
        Spark master URL: ``"local[2]"``, ``"local[2,3]"`` (3 attempts per task),
        ``"local-cluster[2,1,1024]"``, ``"spark://host:7077"``...
    app_name : str
    conf : mapping, optional
        More Spark settings (they override the engine's defaults).
    daemon_dir : str, optional
        Where the daemons' sockets live (short: Unix socket paths hold 107 bytes);
        default a new temporary directory, removed by :meth:`stop`.
    timeout : float
        Seconds a task waits for its daemon on one request.
    gpus : int, optional
        GPUs per node for the local-mode rule (default: counted on the driver).
    cpu_daemons : int
        CPU daemons per node where there is no GPU (default 1).
    budget_bytes, host_budget_bytes, spill_dir
        Cache limits of daemons started by tasks.
    daemon_idle_timeout : float, optional
        Seconds a daemon waits for work once its owners are gone (the Spark executor
        process that runs the task that started or found it; see
        :mod:`insitu.pool.daemon`); default ``$INSITU_DAEMON_IDLE_TIMEOUT`` or 120 s.
    gpu_workers : bool
        False: the daemon of a GPU Spark scheduled to a task is a CPU worker (one per
        GPU address; for clusters with a fake discovery script on machines without GPUs).
    network : bool
        Executors on several hosts: daemons serve their blocks over TCP
        (:mod:`insitu.transports.tcp`; ``INSITU_DAEMON_TCP=1`` for the executors), records
        name their node (:mod:`insitu.pool.node`) and that node's address, partitions of
        cached blocks prefer that host, a task elsewhere fetches its blocks over TCP, and
        :meth:`halo_iterate` swaps records through the driver. Host (CPU) blocks only.
    sc : SparkContext, optional
        Use this running context (`master`, `app_name` and `conf` are then ignored); it is
        not stopped by :meth:`stop`. A process has one SparkContext at a time.
    """

    name = "spark"

    def __init__(self, master: str = "local[2]", *, app_name: str = "insitu", conf: Mapping[str, str] | None = None,
                 daemon_dir: str | None = None, timeout: float = 60.0, gpus: int | None = None,
                 cpu_daemons: int = 1, budget_bytes: int | None = None, host_budget_bytes: int | None = None,
                 spill_dir: str | None = None, daemon_idle_timeout: float | None = None, gpu_workers: bool = True,
                 network: bool = False, sc=None) -> None:
        if not timeout > 0:
            raise ValueError(f"SparkEngine: timeout must be > 0 seconds, got {timeout!r}")
        if not (isinstance(cpu_daemons, int) and cpu_daemons >= 1):
            raise ValueError(f"SparkEngine: cpu_daemons must be an int >= 1, got {cpu_daemons!r}")
        jh = java_home()
        if jh is not None:
            os.environ["JAVA_HOME"] = jh
            os.environ["PATH"] = os.path.join(jh, "bin") + os.pathsep + os.environ.get("PATH", "")
        # Spark's python workers (and the daemons they start) import what the driver can.
        os.environ["PYTHONPATH"] = _python_path()
        # ...and agree on the code of this job's daemons, even with python workers started
        # after the sources were edited (a daemon of other code is replaced, not reused).
        os.environ["INSITU_DAEMON_CODE_HASH"] = fingerprint()["code"]
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        try:
            from pyspark import SparkConf, SparkContext
        except ImportError:
            raise ImportError("engine: spark needs PySpark: pip install 'insitu[spark]'") from None

        self._own_dir = daemon_dir is None
        self.daemon_dir = daemon_dir or tempfile.mkdtemp(prefix="insitu-spark-", dir="/tmp")
        os.makedirs(self.daemon_dir, mode=0o700, exist_ok=True)
        options = tuple((k, v) for k, v in (("budget_bytes", budget_bytes), ("host_budget_bytes", host_budget_bytes),
                                            ("spill_dir", spill_dir), ("idle_timeout", daemon_idle_timeout))
                        if v is not None)
        self._env_tcp = os.environ.get("INSITU_DAEMON_TCP")
        if network:  # the daemons of tasks on this node too (local mode: the python workers inherit it)
            os.environ["INSITU_DAEMON_TCP"] = "1"
        self._ctx = _Ctx(os.path.abspath(self.daemon_dir), _count_gpus() if gpus is None else int(gpus),
                         cpu_daemons, float(timeout), options, bool(gpu_workers), bool(network))
        self._exchange = None
        self._slot_rdds: dict = {}
        settings = {"spark.ui.enabled": "false", "spark.locality.wait": "0s", "spark.python.worker.reuse": "true",
                    "spark.python.unix.domain.socket.enabled": "true",  # JVM <-> python workers: ~40 ms less per job
                    "spark.executorEnv.PYTHONPATH": os.environ["PYTHONPATH"], "spark.ui.showConsoleProgress": "false",
                    "spark.executorEnv.INSITU_DAEMON_CODE_HASH": os.environ["INSITU_DAEMON_CODE_HASH"]}
        if network:
            settings["spark.executorEnv.INSITU_DAEMON_TCP"] = "1"
        settings.update(conf or {})
        self._own_sc = sc is None
        if sc is None:
            sconf = SparkConf().setMaster(master).setAppName(app_name)
            for k, v in settings.items():
                sconf.set(k, str(v))
            sc = SparkContext(conf=sconf)
            sc.setLogLevel("ERROR")
        self.sc = sc
        self.master = sc.master
        self.recoveries: list[dict] = []  # what iterate() recovered from, and how long it took

    def __repr__(self) -> str:
        return f"<SparkEngine {self.master} daemons in {self.daemon_dir}>"

    @staticmethod
    def gpu_conf(*, per_executor: int = 1, per_task: float = 1, discovery_script: str | None = None) -> dict:
        """Spark settings that schedule GPUs to executors and tasks (standalone,
        local-cluster, YARN, Kubernetes), found by `discovery_script` (default the one
        shipped here, ``insitu/engine/gpu_discovery.sh``)."""
        script = discovery_script or os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu_discovery.sh")
        return {"spark.executor.resource.gpu.amount": str(per_executor),
                "spark.task.resource.gpu.amount": str(per_task),
                "spark.executor.resource.gpu.discoveryScript": script,
                "spark.worker.resource.gpu.amount": str(per_executor),
                "spark.worker.resource.gpu.discoveryScript": script}

    @property
    def default_parallelism(self) -> int:
        return self.sc.defaultParallelism

    # -- blocks ------------------------------------------------------------------------------

    def blocks(self, data: Mapping[Hashable, Any] | Callable, npartitions: int | None = None, *,
               keys: Sequence[Hashable] | None = None, args: tuple = ()) -> "SparkBlocks":
        """Blocks as an RDD of `npartitions` partitions (contiguous runs of keys).

        Parameters
        ----------
        data : mapping key -> array, or callable
            Arrays on the driver (pickled once into the tasks, then sent to the daemons);
            or a loader ``loader(key, *args) -> array`` that the daemons call (a
            module-level function; the data then never passes through Spark; on a GPU
            daemon its result is moved to the daemon's device, as sent arrays are).
        npartitions : int, optional
            Default ``min(len(keys), defaultParallelism)``.
        keys : sequence, optional
            With a loader: the block keys.
        """
        if callable(data) and not isinstance(data, Mapping):
            if keys is None:
                raise ValueError("SparkEngine.blocks: a loader needs keys=: the block keys to load")
            keys = list(keys)
            srcs = [(k, "load", data, tuple(args)) for k in keys]
        elif isinstance(data, Mapping):
            keys = list(data)
            srcs = [(k, "array", data[k]) for k in keys]
        else:
            raise TypeError(f"SparkEngine.blocks: data must be a mapping key -> array or a loader, "
                            f"got {type(data).__name__}")
        if not keys:
            raise ValueError("SparkEngine.blocks: no blocks")
        n = npartitions or min(len(keys), self.sc.defaultParallelism)
        if not (isinstance(n, int) and 1 <= n <= len(keys)):
            raise ValueError(f"SparkEngine.blocks: npartitions must be an int in [1, {len(keys)}], got {npartitions!r}")
        placement = {k: i * n // len(keys) for i, k in enumerate(keys)}
        parts = [[] for _ in range(n)]
        for s in srcs:
            parts[placement[s[0]]].append(s)
        # One element per slice: element p lands in partition p.
        rdd = self.sc.parallelize(parts, n).flatMap(_identity)
        return SparkBlocks(self, rdd, placement, n)

    def gpu_shuffle(self, blocks: "SparkBlocks", how: str, *, domain=None, component: int | None = None,
                    key: Callable[[Hashable], Hashable] | None = None) -> "SparkBlocks":
        """The paper's shuffle: Spark moves records, the daemons keep the data.

        Parameters
        ----------
        blocks : SparkBlocks
            Pending operations are carried out first (``cache_gpu``).
        how : {"halo", "key"}
            ``"halo"``: blocks keyed by gid of `domain` (padded arrays) get their ghost
            layers from their neighbours (the fill is pending: it runs with the next
            action, in the same package, and writes into the cached blocks in place, as
            :class:`~insitu.pool.GPUShuffleManager`'s does). ``"key"``: blocks grouped by ``key(block
            key)``; each group's value is the list of its arrays in source-key order.
        domain : Domain
            For ``"halo"``.
        component : int, optional
            For ``"halo"``: the halo is of ``block[component]`` (blocks stacking several
            fields on axis 0).
        key : callable
            For ``"key"``: a module-level or lambda function of the block key.
        """
        if how not in ("halo", "key"):
            raise ValueError(f"gpu_shuffle: unknown shuffle {how!r}; expected 'halo' or 'key'")
        blocks = blocks if blocks.cached else blocks.cache_gpu()
        ctx, n = self._ctx, blocks.npartitions
        if how == "halo":
            if domain is None:
                raise ValueError("gpu_shuffle(blocks, 'halo') needs domain=: the decomposition the blocks belong to")
            bad = [k for k in blocks.keys() if not (isinstance(k, (int, np.integer)) and 0 <= k < domain.nblocks)]
            if bad:
                raise ValueError(f"gpu_shuffle(blocks, 'halo'): keys {bad[:5]} are not block ids of the domain "
                                 f"(0..{domain.nblocks - 1})")
            slabs = blocks.rdd.mapPartitionsWithIndex(
                functools.partial(_extract_task, ctx=ctx, domain=domain, component=component, token=_token()))
            keyed = blocks.rdd.map(lambda s: (s[0], ("block", s))).union(slabs)
            placement = blocks.placement
            rdd = keyed.partitionBy(n, blocks.partitioner).mapPartitions(
                functools.partial(_halo_assemble, domain=domain, component=component, order=_order_key))
            return SparkBlocks(self, rdd, placement, n)
        if key is None:
            raise ValueError("gpu_shuffle(blocks, 'key') needs key=: a function of the block key")
        pairs = blocks.rdd.mapPartitionsWithIndex(functools.partial(_group_task, ctx=ctx, key=key, token=_token()))
        rdd = pairs.groupByKey(n, functools.partial(_stable, n=n)).mapPartitions(_group_assemble)
        return SparkBlocks(self, rdd, None, n)

    def iterate(self, blocks: "SparkBlocks", step: Callable[["SparkBlocks", int], "SparkBlocks"], iterations: int, *,
                checkpoint_every: int | None = None, checkpoint_dir: str | None = None,
                on_iteration: Callable[[int, "SparkBlocks"], None] | None = None,
                max_recoveries: int = 3) -> "SparkBlocks":
        """Run ``blocks = step(blocks, i)`` for ``i`` in ``range(iterations)``, each step
        cached (``cache_gpu(drop_sources=True)`` is the step's to call, or done here).

        With `checkpoint_every` = K the cached blocks are written to `checkpoint_dir`
        every K iterations (and before the first); when a step fails because a daemon
        died (:class:`~insitu.pool.WorkerDiedError` after Spark's retries, or
        :class:`LostBlocksError`) or an executor holding records was lost (Spark's
        ``CHECKPOINT_RDD_BLOCK_ID_NOT_FOUND``: the records are local checkpoints), the
        last checkpoint is loaded into the daemons (new ones, started by the tasks, where
        the old ones died) and the iterations since are replayed. Each
        recovery is appended to :attr:`recoveries`: ``lost_seconds`` (the failed
        iteration with Spark's task retries) and ``seconds`` (reloading the checkpoint);
        the replayed iterations come on top.
        """
        if checkpoint_every is not None and (not isinstance(checkpoint_every, int) or checkpoint_every < 1):
            raise ValueError(f"iterate: checkpoint_every must be an int >= 1, got {checkpoint_every!r}")
        if checkpoint_every is not None and checkpoint_dir is None:
            raise ValueError("iterate: checkpoint_every needs checkpoint_dir=")
        blocks = blocks if blocks.cached else blocks.cache_gpu()
        keys, placement, nparts = blocks.keys(), blocks.placement, blocks.npartitions
        saved = None
        if checkpoint_every:
            saved = (0, blocks.checkpoint_gpu(os.path.join(checkpoint_dir, "it-0")))
        i, recoveries = 0, 0
        while i < iterations:
            t_start = time.perf_counter()
            try:
                new = step(blocks, i)
                blocks = new if new.cached else new.cache_gpu(drop_sources=True)
                i += 1
                if checkpoint_every and i % checkpoint_every == 0:
                    d = blocks.checkpoint_gpu(os.path.join(checkpoint_dir, f"it-{i}"))
                    if saved is not None:
                        shutil.rmtree(saved[1], ignore_errors=True)
                    saved = (i, d)
                if on_iteration is not None:
                    on_iteration(i, blocks)
            except Exception as e:  # only lost daemons are recovered
                if saved is None or recoveries >= max_recoveries or not _daemon_lost(e):
                    raise
                t0 = time.perf_counter()
                recoveries += 1
                blocks = self.restore(saved[1], keys, placement=placement, npartitions=nparts)
                self.recoveries.append({"failed_at": i, "resumed_from": saved[0], "error": type(e).__name__,
                                        "lost_seconds": t0 - t_start,  # the failed iteration, Spark's retries
                                        "seconds": time.perf_counter() - t0})  # reloading the checkpoint
                i = saved[0]
        return blocks

    def halo_iterate(self, blocks: "SparkBlocks", kernel: Any, iterations: int, *, domain, component: int | None = None,
                     function_name: str | None = None, args: tuple = (), per_job: int = 10,
                     drop_sources: bool = True, checkpoint_every: int | None = None,
                     checkpoint_dir: str | None = None,
                     on_job: Callable[[int, "SparkBlocks"], None] | None = None, **launch: Any) -> "SparkBlocks":
        """``iterations`` x (halo exchange, then ``kernel(block, *args)`` on every block),
        `per_job` of them in each Spark job.

        Each job is a barrier stage (its tasks run together, one per partition); per
        iteration, each task cuts its blocks' slabs on its daemon, the tasks swap the
        slabs' records through files of the node's daemon directory (with ``network=True``,
        through the driver; Spark's own ``allGather`` waits in one-second steps), and each
        task appends the slabs addressed to its blocks (taken from the same daemon by
        handle, mapped from another daemon of the node through shared memory or CUDA IPC,
        or taken over TCP from a daemon of another node; GPU daemons of different nodes
        swap them through NCCL, whose communicator the job's tasks set up once through the
        driver and the daemons keep for the jobs after) and runs `kernel`. Halo data moves
        between the daemons only; Spark carries records. The per-job cost of Spark is
        paid once per `per_job` iterations instead of twice per iteration
        (``gpu_shuffle(..., "halo")`` then ``exec_gpu``): one Spark job each, the driver
        freeing its sources itself.

        Parameters
        ----------
        blocks : SparkBlocks
            Cached blocks (padded, ghost layers included) of `domain`; at most
            ``defaultParallelism`` partitions (a barrier stage runs them all at once).
        kernel, function_name, args, **launch
            As :meth:`SparkBlocks.exec_gpu` (a Python callable, or CUDA source and name).
        per_job : int
            Iterations per Spark job.
        drop_sources : bool
            Free `blocks` once the first job has made their successors.
        checkpoint_every, checkpoint_dir
            As :meth:`iterate`, in iterations (a multiple of `per_job`): the blocks are
            written every so many iterations, and a job that lost blocks (a daemon or an
            executor died) resumes from the last checkpoint.
        on_job : callable, optional
            ``on_job(jobs done, blocks)`` after each job (as :meth:`iterate`'s
            `on_iteration`).

        Returns
        -------
        SparkBlocks
            The cached result. A task that fails makes Spark rerun the job's whole stage
            from the job's sources (the blocks of the rounds done are freed as they go).
        """
        if not isinstance(iterations, int) or iterations < 0:
            raise ValueError(f"halo_iterate: iterations must be an int >= 0, got {iterations!r}")
        if not isinstance(per_job, int) or per_job < 1:
            raise ValueError(f"halo_iterate: per_job must be an int >= 1, got {per_job!r}")
        blocks._require_cached("halo_iterate")
        if blocks.npartitions > self.sc.defaultParallelism:
            raise ValueError(f"halo_iterate: {blocks.npartitions} partitions, but a barrier stage runs all of them "
                             f"at once and Spark has {self.sc.defaultParallelism} task slots")
        if checkpoint_every is not None and (not isinstance(checkpoint_every, int) or checkpoint_every < 1
                                             or checkpoint_every % per_job):
            raise ValueError(f"halo_iterate: checkpoint_every must be a multiple of per_job ({per_job}), "
                             f"got {checkpoint_every!r}")
        first = blocks

        def job(b: "SparkBlocks", j: int) -> "SparkBlocks":
            k = min(per_job, iterations - j * per_job)
            # Records are swapped through files of the node's daemon directory where the tasks
            # of a job run on the driver's node (local and local-cluster masters), else
            # through the driver (tasks on several nodes).
            exchange: str | tuple = os.path.join(self.daemon_dir, "rounds", uuid.uuid4().hex[:12])
            if self._ctx.network:
                exchange = (self._record_exchange().endpoint, uuid.uuid4().int >> 64, b.partitioner)
            task = functools.partial(
                _rounds_task, ctx=self._ctx, domain=domain, component=component, kernel=kernel,
                function_name=function_name, args=tuple(args), launch=dict(launch), rounds=k,
                nparts=b.npartitions, exchange_dir=exchange)
            if b._records is not None:  # the records travel with the tasks, which run on the blocks' hosts
                parts, hosts = self._partition_records(b)
                rdd = self._slots(hosts).barrier().mapPartitionsWithIndex(functools.partial(task, parts=parts))
            else:
                rdd = b.rdd.barrier().mapPartitionsWithIndex(task)
            try:
                records = rdd.collect()
            finally:
                if isinstance(exchange, str):
                    shutil.rmtree(exchange, ignore_errors=True)
            new = self._from_records(records, b)
            if b is not first or drop_sources:
                b.drop_gpu()
            return new

        jobs = -(-iterations // per_job)
        return self.iterate(blocks, job, jobs, checkpoint_every=None if checkpoint_every is None
                            else checkpoint_every // per_job, checkpoint_dir=checkpoint_dir, on_iteration=on_job)

    def _record_exchange(self):
        """The driver's record exchange for tasks on several nodes (started once)."""
        if self._exchange is None:
            from insitu.transports.tcp import RecordExchange

            host = self.sc.getConf().get("spark.driver.host", None) or "127.0.0.1"
            self._exchange = RecordExchange("0.0.0.0", advertise=host)
        return self._exchange

    def _from_records(self, records: list, like: "SparkBlocks") -> "SparkBlocks":
        """Cached blocks of `records` (as tasks return them), partitioned as `like` (their
        RDD is made when first used: a halo job's successor runs on :meth:`_slots`)."""
        return SparkBlocks(self, None, like.placement, like.npartitions, cached=True, records=records)

    def _partition_records(self, blocks: "SparkBlocks") -> tuple[list, list]:
        """`blocks`' records by partition, and the hosts each partition's blocks are on."""
        part = blocks.partitioner
        parts: list[list] = [[] for _ in range(blocks.npartitions)]
        for src in blocks._records:
            parts[part(src[0])].append(src)
        hosts = [sorted({s[2].host for s in p if s[1] == "handle" and s[2].host}) for p in parts]
        return parts, hosts

    def _records_rdd(self, blocks: "SparkBlocks"):
        """An RDD of `blocks`' records; each partition prefers the host holding its blocks
        where records name one."""
        parts, hosts = self._partition_records(blocks)
        return self._parts_rdd(parts, hosts)

    def _parts_rdd(self, parts: list, hosts: list):
        """An RDD whose partition p holds the elements ``parts[p]``, preferring ``hosts[p]``
        where any partition names a host."""
        return (located_rdd(self.sc, parts, hosts) if any(hosts) else
                self.sc.parallelize(parts, len(parts))).flatMap(_identity)

    def _slots(self, hosts: list) -> Any:
        """An RDD of one element per partition (its index), partition p preferring
        ``hosts[p]``; made once per placement: jobs whose tasks take their records from the
        job's closure run on it (no RDD of records to build on the JVM per job)."""
        key = tuple(tuple(h) for h in hosts)
        rdd = self._slot_rdds.get(key)
        if rdd is None:
            rdd = self._slot_rdds[key] = self._parts_rdd([[p] for p in range(len(hosts))], hosts)
        return rdd

    def _drop_records(self, records: list) -> bool:
        """Free the blocks of `records` from the driver, without a Spark job: over TCP from
        their daemons' block servers (network engines), else through the daemon sockets of
        this node. False (nothing done) where some record is not a cached block the driver
        can reach so; the caller then runs a job. A daemon that died, or was replaced,
        took its blocks with it: it is skipped."""
        recs = [s[2] for s in records if len(s) > 2 and s[1] == "handle" and isinstance(s[2], BlockRecord)]
        if len(recs) != len(records):
            return False
        by: dict = {}
        if self._ctx.network:
            if any(r.addr is None for r in recs):
                return False
            for r in recs:
                by.setdefault(tuple(r.addr), []).append(r.handle)
            for addr, handles in by.items():
                try:
                    tcp.drop(addr, handles, timeout=self._ctx.timeout)
                except (PeerTimeoutError, InsituError) as e:  # unreachable, silent, or a stranger now
                    _log.info("dropping %d blocks: their daemon is gone (%s)", len(handles), e)
            return True
        if any(not os.path.exists(r.socket) for r in recs):  # a daemon of another node, or gone
            return False
        for r in recs:
            by.setdefault((r.socket, r.pid), []).append(r.handle)
        for (sock, pid), handles in by.items():
            w = DaemonWorker(sock, timeout=self._ctx.timeout)
            try:
                if w.ping() != pid:
                    continue  # a new daemon: the blocks died with the old one
                pkg = Package()
                for h in handles:
                    pkg.add("drop", h)
                w.run(pkg)
            except WorkerDiedError:
                continue
            finally:
                w.close()
        return True

    def restore(self, directory: str, keys: Sequence[Hashable], *, placement: Mapping | None = None,
                npartitions: int | None = None) -> "SparkBlocks":
        """Blocks written by :meth:`SparkBlocks.checkpoint_gpu`, loaded by the daemons, cached."""
        b = self.blocks(load_checkpoint_block, npartitions, keys=list(keys), args=(directory,))
        return b.cache_gpu()

    def adopt(self, records: Sequence["BlockRecord"], npartitions: int | None = None) -> "SparkBlocks":
        """Blocks that processes outside Spark cached on this engine's daemons (with
        :meth:`insitu.pool.DaemonWorker.run` and the daemon socket of
        :func:`insitu.pool.daemon.default_socket_path` in :attr:`daemon_dir`), as cached
        :class:`SparkBlocks`; their tasks run on the daemons that hold them.

        Parameters
        ----------
        records : sequence of BlockRecord
            One per block (unique keys).
        npartitions : int, optional
            Default ``min(len(records), defaultParallelism)``; contiguous runs of records.
        """
        records = list(records)
        if not records:
            raise ValueError("SparkEngine.adopt: no records")
        bad = [r for r in records if not isinstance(r, BlockRecord)]
        if bad:
            raise TypeError(f"SparkEngine.adopt: expected BlockRecord, got {type(bad[0]).__name__}")
        keys = [r.key for r in records]
        if len(set(keys)) != len(keys):
            raise ValueError("SparkEngine.adopt: block keys repeat")
        n = npartitions or min(len(records), self.sc.defaultParallelism)
        if not (isinstance(n, int) and 1 <= n <= len(records)):
            raise ValueError(f"SparkEngine.adopt: npartitions must be an int in [1, {len(records)}], "
                             f"got {npartitions!r}")
        placement = {k: i * n // len(keys) for i, k in enumerate(keys)}
        parts = [[] for _ in range(n)]
        for r in records:
            parts[placement[r.key]].append((r.key, "handle", r))
        return SparkBlocks(self, self.sc.parallelize(parts, n).flatMap(_identity), placement, n, cached=True,
                           records=[s for p in parts for s in p])

    def daemons(self) -> list[str]:
        """Sockets of the daemons of this engine's directory (on this node)."""
        return sorted(glob.glob(os.path.join(self.daemon_dir, "**", "*.sock"), recursive=True))

    def stop(self) -> None:
        """Stop the SparkContext and this node's daemons in the engine's directory (those of
        other nodes exit after their idle timeout once their executors are gone)."""
        if self._exchange is not None:
            self._exchange.close()
            self._exchange = None
        self._slot_rdds.clear()
        if self._ctx.network:  # as it was before this engine
            if self._env_tcp is None:
                os.environ.pop("INSITU_DAEMON_TCP", None)
            else:
                os.environ["INSITU_DAEMON_TCP"] = self._env_tcp
        try:
            if self.sc is not None and self._own_sc:
                self.sc.stop()
        finally:
            self.sc = None
            for path in self.daemons():
                try:
                    DaemonWorker(path, timeout=5.0).shutdown()
                except Exception:  # already gone
                    pass
            if self._own_dir:
                shutil.rmtree(self.daemon_dir, ignore_errors=True)

    close = stop

    def __enter__(self) -> "SparkEngine":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def located_rdd(sc, parts: Sequence[list], hosts: Sequence[Sequence[str]]):
    """An RDD of one element per partition, ``parts[p]``, whose partition p prefers
    `hosts[p]` (Spark's ``makeRDD`` with locations, which PySpark does not wrap)."""
    import pickle

    from pyspark import RDD
    from pyspark.serializers import CPickleSerializer

    jvm = sc._jvm
    items = jvm.java.util.ArrayList()
    for p, hs in zip(parts, hosts):
        locs = jvm.java.util.ArrayList()
        for h in hs:
            locs.add(h)
        # One element per partition: its pickled list (read back by the serializer below).
        items.add(jvm.scala.Tuple2(bytearray(pickle.dumps(p, protocol=pickle.HIGHEST_PROTOCOL)),
                                   jvm.org.apache.spark.api.python.PythonUtils.toSeq(locs)))
    tag = jvm.scala.reflect.ClassTag.apply(jvm.java.lang.Class.forName("[B"))
    jrdd = sc._jsc.sc().makeRDD(jvm.org.apache.spark.api.python.PythonUtils.toSeq(items), tag)
    return RDD(jrdd.toJavaRDD(), sc, CPickleSerializer())


def _token() -> str:
    """Names one action (or one shuffle's map side) in every attempt of its tasks: their
    side effects on the daemons happen once per partition (``_spark_tasks._begin``)."""
    return uuid.uuid4().hex


def _daemon_lost(e: BaseException) -> bool:
    """Whether `e` says cached blocks or their records are gone: a daemon died, an executor
    holding records (the local checkpoint of an RDD of records) was lost, or the daemon of
    another node no longer answers (its host died: ``PeerUnreachableError``)."""
    text = f"{type(e).__name__}: {e}"
    return any(name in text for name in ("WorkerDiedError", "LostBlocksError", "CHECKPOINT_RDD_BLOCK_ID_NOT_FOUND",
                                         "PeerUnreachableError"))


class SparkBlocks:
    """Blocks on worker daemons as an RDD of records; the paper's API on Spark.

    Transformations are lazy and record steps (as :class:`insitu.pool.GPUBlocks`); each
    action is one Spark job running one command package per partition.
    """

    def __init__(self, engine: SparkEngine, rdd, placement: dict | None, npartitions: int, steps: tuple = (),
                 cached: bool = False, records: list | None = None) -> None:
        self.engine, self._rdd, self.placement, self.npartitions = engine, rdd, placement, npartitions
        self._steps, self.cached = tuple(steps), cached
        # The cached RDD's contents where the driver has them (they never change: the RDD is
        # checkpointed or parallelized from them), so freeing the blocks needs no Spark job.
        self._records = records if cached else None
        if rdd is None and self._records is None:
            raise ValueError("SparkBlocks: an RDD or the records of cached blocks is needed")

    @property
    def rdd(self):
        """The RDD of the blocks' records (made from the driver's records when first asked)."""
        if self._rdd is None:
            self._rdd = self.engine._records_rdd(self)
        return self._rdd

    @property
    def partitioner(self) -> Callable:
        """``key -> partition`` of these blocks."""
        if self.placement is not None:
            return self.placement.__getitem__
        return functools.partial(_stable, n=self.npartitions)

    def keys(self) -> list:
        if self.placement is not None:
            return list(self.placement)
        return sorted(self.rdd.map(operator.itemgetter(0)).collect(), key=_order_key)

    def _with(self, kind: str, *args: Any, **kwargs: Any) -> "SparkBlocks":
        return SparkBlocks(self.engine, self.rdd, self.placement, self.npartitions,
                           self._steps + ((kind, args, kwargs),))

    # -- transformations (lazy) ----------------------------------------------------------------

    def send_gpu(self) -> "SparkBlocks":
        """Hand the blocks to the daemons (at the next action)."""
        return self._with("send")

    def exec_gpu(self, kernel: Any, function_name: str | None = None, *args: Any, **launch: Any) -> "SparkBlocks":
        """As :meth:`insitu.pool.GPUBlocks.exec_gpu` (``with_key=True`` passes the block key
        as the second argument)."""
        return self._with("exec", kernel, function_name, args, **launch)

    def exec_gpu_seq(self, kernels: Sequence[tuple]) -> "SparkBlocks":
        return self._with("exec_seq", [(k, n, tuple(a)) for k, n, a in kernels])

    def exec_gl(self, fn: Callable, *args: Any, **kwargs: Any) -> "SparkBlocks":
        """``fn(block, *args)`` with the daemon's OpenGL context current (``with_key=True``:
        ``fn(block, key, *args)``)."""
        return self._with("exec_gl", fn, args, **kwargs)

    # -- actions ---------------------------------------------------------------------------------

    def _job(self, final: str, *, drop_sources: bool = False, directory: str | None = None):
        return self.rdd.mapPartitionsWithIndex(functools.partial(
            _action_task, ctx=self.engine._ctx, steps=self._steps, final=final, drop_sources=drop_sources,
            directory=directory, token=_token()), preservesPartitioning=True)

    def _materialize(self, rdd) -> "SparkBlocks":
        # Records stay on the executors (cache: PySpark then runs count() on this RDD
        # rather than pipelining a copy of it), lineage truncated by the local checkpoint.
        rdd.cache()
        rdd.localCheckpoint()
        records = rdd.collect()  # as cheap as count(): records are a few bytes a block
        return SparkBlocks(self.engine, rdd, self.placement, self.npartitions, cached=True, records=records)

    def recv_gpu(self, *, drop_sources: bool = False) -> dict:
        """Carry out the pending operations and return the blocks to the driver (host
        arrays); `drop_sources` frees the cached blocks they were computed from."""
        return dict(self._job("recv", drop_sources=drop_sources).collect())

    def cache_gpu(self, *, drop_sources: bool = False) -> "SparkBlocks":
        """Carry out the pending operations, keep the results in the daemons' caches;
        `drop_sources` frees the cached blocks these were computed from in the same package."""
        return self._materialize(self._job("cache", drop_sources=drop_sources))

    def persist_gpu(self) -> "SparkBlocks":
        """As :meth:`cache_gpu`, pinned until :meth:`unpersist_gpu`."""
        if self.cached and not self._steps:
            self._job("persist_handle").count()
            return self
        return self._materialize(self._job("persist"))

    def unpersist_gpu(self) -> "SparkBlocks":
        """Make persisted blocks evictable again."""
        self._require_cached("unpersist_gpu")
        self._job("unpersist").count()
        return self

    def drop_gpu(self) -> None:
        """Free the cached blocks on the daemons (from the driver where it knows their
        records and reaches their daemons, else in a Spark job)."""
        self._require_cached("drop_gpu")
        if self._records is None or not self.engine._drop_records(self._records):
            self._job("drop").count()

    def checkpoint_gpu(self, directory: str) -> str:
        """Write every block to `directory` (``.npy`` per block, by the daemons); returns it."""
        self._require_cached("checkpoint_gpu")
        os.makedirs(directory, exist_ok=True)
        self._job("checkpoint", directory=os.path.abspath(directory)).count()
        return directory

    def _require_cached(self, what: str) -> None:
        if not self.cached or self._steps:
            raise ValueError(f"{what}: these blocks are not cached (call cache_gpu or persist_gpu first)")
