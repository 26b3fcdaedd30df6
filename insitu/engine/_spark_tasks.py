"""What runs in Spark's python workers (the tasks) and in the worker daemons for
:mod:`insitu.engine.spark`: finding the partition's daemon, building one command
package per partition, the two sides of the halo and key shuffles, and the functions the
daemons execute (slab hand-off between daemons of a node, checkpoint files).

Everything here is pickled into tasks by reference, so it must stay importable by
Spark's python workers and by the daemons (``insitu.engine._spark_tasks``).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import operator
import os
import re
from typing import Any, Callable, Iterable

import numpy as np

from insitu import arrays
from insitu.errors import InsituError
from insitu.pool import DaemonWorker, Package, WorkerDiedError, ensure_daemon
from insitu.pool.commands import Ref
from insitu.pool.halo import extract_halo
from insitu.pool.node import node_id
from insitu.pool.shuffle import stable_partition
from insitu.transports import tcp

__all__ = ["BlockRecord", "LostBlocksError", "export_slab", "import_slab", "load_checkpoint_block"]


class LostBlocksError(InsituError):
    """Cached blocks a task needs are gone: the daemon holding them died (and was restarted)."""


@dataclasses.dataclass(frozen=True)
class BlockRecord:
    """A block cached on a worker daemon: what an RDD of :class:`~insitu.engine.spark.SparkBlocks` holds."""

    key: Any
    handle: Any  # insitu.pool.cache.Handle
    socket: str
    device: int | None
    pid: int  # the daemon that cached it (a restarted daemon has another pid)
    node: str | None = None  # its node id (insitu.pool.node); None: the engine's only node
    addr: tuple | None = None  # (host, port, token) of its daemon's tcp block server (other nodes fetch there)

    @property
    def host(self) -> str | None:
        """The address of the node that holds the block (Spark's preferred location)."""
        return None if self.addr is None else self.addr[0]


@dataclasses.dataclass(frozen=True)
class _Ctx:
    """What a task needs to find its daemon (shipped with every task)."""

    daemon_dir: str
    gpus: int
    cpu_daemons: int
    timeout: float
    options: tuple  # (name, value) pairs for a daemon started by a task
    gpu_workers: bool = True  # False: a scheduled GPU's daemon is a CPU worker (fake GPUs in tests)
    network: bool = False  # blocks may live on other nodes: records name their node and tcp endpoint

    @property
    def node(self) -> str:
        """The node id of the task's host (that of every daemon it starts or finds there)."""
        return node_id(self.daemon_dir)

    @property
    def multi(self) -> bool:
        """Whether a node has several daemons (slabs may move between them)."""
        return self.gpus > 1 or self.cpu_daemons > 1


# --------------------------------------------------------------------------- exactly once per (job, partition)
#
# A package with side effects on its daemon (blocks cached, sources dropped) is *keyed*:
# ``(job token, partition index[, part])``, the token made on the driver for one action
# (or one shuffle's map side), so it is the same in every attempt of the partition: Spark's
# retries, a speculative copy, a stage run again, a cached partition recomputed. Its first
# operation, :func:`_begin`, looks the key up in the daemon's ledger; its last, :func:`_commit`,
# enters the package's results there. A later attempt whose key the daemon committed stops
# at :func:`_begin` (nothing done twice: no second copy of the blocks left behind by the
# attempt Spark discarded, no sources dropped twice) and returns the first attempt's results
# (:class:`_AlreadyDone`), so whichever attempt Spark keeps, the records name the same
# blocks. A package's outputs come after all its computing operations, so one that fails in
# a user function has cached nothing. Daemons run one package at a time, so two attempts on
# one daemon cannot both get past :func:`_begin`.

_LEDGER: collections.OrderedDict = collections.OrderedDict()  # in a daemon: key -> (stage, attempt, results)
_LEDGER_SIZE = 1 << 16  # keys kept (small: handles and hand-off descriptors, never blocks)


class _AlreadyDone(Exception):  # not an error: the reply of a package done before
    """An earlier attempt of this package's (job, partition) completed on this daemon."""

    def __init__(self, key, stage, attempt, results) -> None:
        super().__init__(key, stage, attempt, results)
        self.key, self.stage, self.attempt, self.results = key, stage, attempt, results


def _begin(key, stage: int, attempt: int) -> None:
    """In the daemon, a keyed package's first operation."""
    done = _LEDGER.get(key)
    if done is not None:
        raise _AlreadyDone(key, *done)


def _commit(key, stage: int, attempt: int, results) -> None:
    """In the daemon, a keyed package's last operation."""
    _LEDGER[key] = (stage, attempt, list(results))
    _LEDGER.move_to_end(key)
    while len(_LEDGER) > _LEDGER_SIZE:
        _LEDGER.popitem(last=False)


def ledger_entries() -> dict:
    """In the daemon: the committed keys, ``key -> (stage id, attempt number, number of
    results)`` (diagnostics, tests)."""
    return {k: (st, at, len(r)) for k, (st, at, r) in _LEDGER.items()}


def _task_attempt() -> tuple[int, int]:
    """(stage id, attempt number) of the running Spark task; (-1, 0) outside Spark."""
    try:
        from pyspark import TaskContext
    except ImportError:  # pragma: no cover - tasks run under PySpark
        return -1, 0
    tc = TaskContext.get()
    return (tc.stageId(), tc.attemptNumber()) if tc is not None else (-1, 0)


def _keyed_package(key) -> tuple[Package, tuple | None]:
    """A new package; with a `key`, opened by :func:`_begin`. Returns it and the ``(key,
    stage, attempt)`` that :func:`_seal` closes it with."""
    pkg = Package()
    if key is None:
        return pkg, None
    stage, attempt = _task_attempt()
    pkg.add("exec", _begin, None, (key, stage, attempt))
    return pkg, (key, stage, attempt)


def _seal(pkg: Package, keyed: tuple | None) -> None:
    if keyed is not None:
        pkg.add("exec", _commit, None, (*keyed, tuple(Ref(i) for i in pkg.outputs)))


# --------------------------------------------------------------------------- in the tasks

_CLIENTS: dict[str, DaemonWorker] = {}  # per python worker (reused between tasks): one connection per daemon
_DEVICES: dict[str, int | None] = {}  # socket -> device of the daemons this python worker used
_ENDPOINTS: dict[str, tuple] = {}  # socket -> (daemon pid, its tcp endpoint)


def _endpoint(w: DaemonWorker) -> tcp.Endpoint:
    """The tcp block server of the daemon `w` talks to (asked once per daemon)."""
    known = _ENDPOINTS.get(w.socket_path)
    if known is not None and known[0] == w.pid:
        return known[1]
    ep = w.run(_exec_package(tcp.endpoint))[0]
    if ep is None:
        raise InsituError(f"the worker daemon at {w.socket_path} (pid {w.pid}) serves no blocks over tcp: it was "
                          "started without INSITU_DAEMON_TCP=1 (SparkEngine(network=True) sets it for its "
                          "executors; stop the old daemon)")
    _ENDPOINTS[w.socket_path] = (w.pid, ep)
    return ep


def _record(ctx: _Ctx, w: DaemonWorker, key, handle, device) -> BlockRecord:
    """The record of a block `w`'s daemon cached under `handle`."""
    if not ctx.network:
        return BlockRecord(key, handle, w.socket_path, device, w.pid)
    ep = _endpoint(w)
    return BlockRecord(key, handle, w.socket_path, device, w.pid, ctx.node, tuple(ep))


def _remote(ctx: _Ctx, rec: BlockRecord) -> bool:
    """Whether `rec`'s block lives on another node (reached over tcp only)."""
    return rec.node is not None and rec.node != ctx.node


def _same_daemon(ctx: _Ctx, rec: BlockRecord, w: DaemonWorker) -> bool:
    # Socket paths repeat across hosts (same directory, same hostname in namespaces): the node decides.
    return rec.socket == w.socket_path and not _remote(ctx, rec)


def _fetch(addr, handle, key, take: bool, on_device: bool = False):
    """In a daemon: block `key` from the daemon of another node (`take`: dropped there once
    sent), onto this daemon's device where it has one (`on_device`). A GPU daemon's block
    travels through both hosts' memory (counted transfers): halo_iterate's slabs between
    GPU daemons go through NCCL instead, the shuffles' stages are not co-scheduled."""
    a = tcp.fetch(addr, handle, key=key, take=take)
    return arrays.to_device(a) if on_device else a


def _placement(ctx: _Ctx, index: int) -> tuple[int | None, str]:
    """(device, daemon directory) of partition `index` (see the module docstring)."""
    try:
        from pyspark import TaskContext

        tc = TaskContext.get()
        gpu = tc.resources().get("gpu") if tc is not None else None
        if gpu is not None and gpu.addresses:
            if not ctx.gpu_workers:
                return None, os.path.join(ctx.daemon_dir, f"gpu{gpu.addresses[0]}")
            return int(gpu.addresses[0]), ctx.daemon_dir
    except ImportError:  # pragma: no cover - tasks run under PySpark
        pass
    if ctx.gpus:
        return index % ctx.gpus, ctx.daemon_dir
    if ctx.cpu_daemons == 1:
        return None, ctx.daemon_dir
    return None, os.path.join(ctx.daemon_dir, f"cpu{index % ctx.cpu_daemons}")


def _client(ctx: _Ctx, device: int | None, directory: str) -> DaemonWorker:
    """The connection to the daemon for `device` in `directory`, starting it if none runs."""
    from insitu.pool.daemon import default_socket_path

    # By ordinal: a task must not initialise CUDA (its python worker is forked and reused).
    w = _CLIENTS.get(default_socket_path(device, directory=directory, by_bus_id=False))
    if w is None:
        # Owned by this python worker's parent (pyspark.daemon or the executor), which
        # outlives the worker: Spark stops idle workers, the daemon must not follow them.
        h = ensure_daemon(device, directory=directory, timeout=max(ctx.timeout, 60.0), by_bus_id=False,
                          owners=(os.getppid(),), **dict(ctx.options))
        w = _CLIENTS[h.socket_path] = h.client(timeout=ctx.timeout)
    # Always: a client made for another purpose (freeing slabs mapped from this daemon,
    # _finish) knows no device, and a GPU daemon's loaded blocks must go to its device.
    _DEVICES[w.socket_path] = device
    return w


def _client_at(ctx: _Ctx, rec: BlockRecord) -> DaemonWorker:
    """The connection to the daemon that holds `rec` (its socket, whoever named it)."""
    w = _CLIENTS.get(rec.socket)
    if w is None:
        w = _CLIENTS[rec.socket] = DaemonWorker(rec.socket, timeout=ctx.timeout)
    _DEVICES.setdefault(rec.socket, rec.device)
    return w


def _records_of(src) -> list[BlockRecord]:
    kind = src[1]
    if kind == "handle":
        return [src[2]]
    if kind == "halo":
        return [src[2]] + [s[1] for s in src[5]]
    if kind == "group":
        return [r for _, r, _ in src[2]]
    return []


def _worker_for(ctx: _Ctx, index: int, srcs: list) -> tuple[DaemonWorker, int | None]:
    """The daemon a partition's package runs on, and its device: the one holding the
    partition's cached blocks, else the partition's by the placement rule."""
    for src in srcs:
        if src[1] in ("handle", "halo") and not _remote(ctx, src[2]):
            return _client_at(ctx, src[2]), src[2].device
    device, directory = _placement(ctx, index)
    return _client(ctx, device, directory), device


def _run(w: DaemonWorker, pkg: Package, srcs: list, ctx: _Ctx) -> tuple[list, DaemonWorker]:
    """Run `pkg` on `w`; returns the results and the client that ran it. Lost handles
    are named (:class:`LostBlocksError`).

    A daemon that is not listening (killed since this python worker last used it; the
    package never reached it) is started again and the package sent once more; one that
    died while running the package gives :class:`~insitu.pool.WorkerDiedError` (Spark
    retries the task)."""
    try:
        try:
            return _run_once(w, pkg), w
        except WorkerDiedError as e:
            _CLIENTS.pop(w.socket_path, None)
            if not str(e).startswith("no worker daemon listens"):
                raise
            w = _client(ctx, _DEVICES.get(w.socket_path), os.path.dirname(w.socket_path))
            return _run_once(w, pkg), w
    except WorkerDiedError:
        _CLIENTS.pop(w.socket_path, None)
        raise
    except Exception as e:
        lost = sorted({repr(r.key) for s in srcs for r in _records_of(s)
                       if _same_daemon(ctx, r, w) and r.pid != w.pid})
        if lost:
            raise LostBlocksError(f"blocks {', '.join(lost[:8])}{' ...' if len(lost) > 8 else ''} were cached by "
                                  f"a worker daemon at {w.socket_path} that died (now pid {w.pid}); recompute "
                                  "them (SparkEngine.iterate reloads the last checkpoint)") from e
        raise


def _run_once(w: DaemonWorker, pkg: Package) -> list:
    try:
        return w.run(pkg)
    except _AlreadyDone as e:  # another attempt of this (job, partition) did it: its results
        return list(e.results)


def _add(pkg: Package, tags: list, kind: str, *args, tag=None, **kwargs):
    ref = pkg.add(kind, *args, **kwargs)
    if kind in ("init_gl", "recv", "cache", "persist", "unpersist", "drop"):
        tags.append(tag)
    return ref


def _take_slab(pkg: Package, tags: list, w: DaemonWorker, rec: BlockRecord, desc, remote_drops: dict | None,
               ctx: _Ctx):
    """A slab or grouped block from `rec`'s daemon into this package: a ``get`` on the same
    daemon (then dropped with this package unless `remote_drops` is None), fetched over tcp
    from another node's daemon (taken there, unless `remote_drops` is None), else mapped
    from the other daemon of the node through `desc`."""
    if _same_daemon(ctx, rec, w):
        return pkg.add("get", rec.handle)
    if _remote(ctx, rec):
        return pkg.add("exec", _fetch, None, (rec.addr, rec.handle, rec.key, remote_drops is not None,
                                               _DEVICES.get(w.socket_path) is not None))
    if desc is None:
        raise InsituError(f"block {rec.key!r} lives on the daemon at {rec.socket}, this task's daemon is "
                          f"{w.socket_path}, and it was not exported for a hand-off (another node?)")
    ref = pkg.add("exec", import_slab, None, (desc,))
    if remote_drops is not None:
        remote_drops.setdefault(rec, None)
    return ref


def _get(pkg: Package, ctx: _Ctx, rec: BlockRecord, w: DaemonWorker):
    """A cached block into this package (run on `w`): by handle, or fetched over tcp from
    another node (a task Spark placed away from the block's host)."""
    if _remote(ctx, rec):
        return pkg.add("exec", _fetch, None, (rec.addr, rec.handle, rec.key, False,
                                               _DEVICES.get(w.socket_path) is not None))
    return pkg.add("get", rec.handle)


def _build(pkg: Package, tags: list, w: DaemonWorker, src, steps: tuple, local_drops: list, remote_drops: dict,
           ctx: _Ctx):
    """Operations producing source `src` after `steps`; returns the reference to it."""
    key, kind = src[0], src[1]
    if kind == "array":
        ref = pkg.add("send", src[2])
    elif kind == "load":
        ref = pkg.add("exec", src[2], None, (key, *src[3]))
        if _DEVICES.get(w.socket_path) is not None:  # a GPU daemon's blocks are on its device, as sent ones are
            ref = pkg.add("exec", _on_device, None, (ref,))
    elif kind == "handle":
        ref = _get(pkg, ctx, src[2], w)
    elif kind == "halo":
        rec, domain, component, slabs = src[2], src[3], src[4], src[5]
        ref = _get(pkg, ctx, rec, w)
        dirs, refs = [], []
        for direction, srec, desc in slabs:
            dirs.append(direction)
            refs.append(_take_slab(pkg, tags, w, srec, desc, remote_drops, ctx))
            if _same_daemon(ctx, srec, w):
                local_drops.append(srec.handle)
        ref = pkg.add("exec", _append_slabs, None, (ref, key, domain, component, tuple(dirs), tuple(refs)))
    elif kind == "group":
        refs = []
        for _, rec, desc in src[2]:  # with a descriptor, the record is a copy made for this hand-off
            refs.append(_take_slab(pkg, tags, w, rec, desc, remote_drops if desc is not None else None, ctx))
            if desc is not None and _same_daemon(ctx, rec, w):
                local_drops.append(rec.handle)
        ref = pkg.add("exec", _as_list, None, tuple(refs))
    else:  # pragma: no cover - sources are made here
        raise ValueError(f"unknown block source {kind!r}")
    for step, args, kwargs in steps:
        if step == "send":
            continue
        if step == "exec":
            kw = dict(kwargs)
            front = (ref, key) if kw.pop("with_key", False) else (ref,)
            ref = pkg.add("exec", args[0], args[1], (*front, *args[2]), **kw)
        elif step == "exec_seq":
            ref = pkg.add("exec_seq", ref, args[0])
        elif step == "exec_gl":
            kw = dict(kwargs)
            front = (ref, key) if kw.pop("with_key", False) else (ref,)
            ref = pkg.add("exec_gl", args[0], (*front, *args[1]), **kw)
    return ref


def _finish(pkg, tags, w, remote_drops, local_drops, srcs, results_of, ctx, keyed=None) -> list:
    for h in local_drops:
        _add(pkg, tags, "drop", h)
    _seal(pkg, keyed)
    results, w = _run(w, pkg, srcs, ctx)
    by_socket: dict[str, list] = {}
    by_addr: dict[tuple, list] = {}
    for rec in remote_drops:  # slabs mapped from another daemon: free them there, one package per daemon
        if _remote(ctx, rec):
            by_addr.setdefault(tuple(rec.addr), []).append(rec.handle)
        else:
            by_socket.setdefault(rec.socket, []).append(rec.handle)
    for addr, handles in sorted(by_addr.items()):  # another node's: over tcp
        tcp.drop(addr, handles, timeout=ctx.timeout)
    for sock, handles in sorted(by_socket.items()):
        p, k = _keyed_package(None if keyed is None else (*keyed[0], sock))
        for h in handles:
            p.add("drop", h)
        _seal(p, k)
        other = _CLIENTS.setdefault(sock, DaemonWorker(sock, timeout=w.timeout))
        _run_once(other, p)
    return results_of([(t, r) for t, r in zip(tags, results) if t is not None], w)


def _action_task(index: int, it: Iterable, *, ctx: _Ctx, steps: tuple, final: str, drop_sources: bool,
                 directory: str | None = None, token: str | None = None) -> list:
    """One partition of an action: one package on the partition's daemon; with a `token`
    (the action's), a package with side effects is done once per partition (see
    :func:`_begin`)."""
    srcs = list(it)
    if not srcs:
        return []
    w, device = _worker_for(ctx, index, srcs)
    # Results kept by the daemon's ledger are handles; recv and checkpoint keep none (a
    # retried recv with drop_sources finds its sources gone).
    effects = final not in ("recv", "checkpoint")
    pkg, keyed = _keyed_package((token, index) if token is not None and effects else None)
    tags, local_drops, remote_drops, outs = [], [], {}, []
    for src in srcs:
        if final in ("drop", "unpersist", "persist_handle"):
            rec = src[2]
            if _remote(ctx, rec):
                if final != "drop":
                    raise InsituError(f"{final}: block {rec.key!r} lives on node {rec.node}, this task runs on "
                                      f"{ctx.node}: (un)persisting goes to the block's own node")
                remote_drops.setdefault(rec, None)
                continue
            outs.append(("persist" if final == "persist_handle" else final, rec.handle, {}, ("rec", rec.key)))
            continue
        ref = _build(pkg, tags, w, src, steps, local_drops, remote_drops, ctx)
        if final == "recv":
            outs.append(("recv", ref, {"host": True}, ("val", src[0])))
        elif final in ("cache", "persist"):
            outs.append((final, ref, {}, ("rec", src[0])))
        elif final == "checkpoint":
            outs.append(("recv", pkg.add("exec", _save_block, None, (ref, src[0], directory)), {}, ("val", src[0])))
        if drop_sources and src[1] in ("handle", "halo"):
            if _remote(ctx, src[2]):
                remote_drops.setdefault(src[2], None)
            else:
                local_drops.append(src[2].handle)
    for kind, ref, kw, tag in outs:  # after every computing operation: a failing one has cached nothing
        _add(pkg, tags, kind, ref, tag=tag, **kw)

    def results_of(pairs, w):
        out = []
        for (what, key), r in pairs:
            if final in ("cache", "persist"):
                out.append((key, "handle", _record(ctx, w, key, r, device)))
            elif final in ("drop", "unpersist", "persist_handle"):
                out.append(key)
            else:
                out.append((key, r))
        return out

    return _finish(pkg, tags, w, remote_drops, local_drops, srcs, results_of, ctx, keyed)


def _extract_task(index: int, it: Iterable, *, ctx: _Ctx, domain, component, token: str | None = None) -> list:
    """Map side of a halo shuffle: cut and cache the slabs; emit ``(target gid, slab)``
    (once per partition and `token`, see :func:`_begin`)."""
    srcs = list(it)
    if not srcs:
        return []
    w, device = _worker_for(ctx, index, srcs)
    slabs, _ = _cut_slabs(ctx, w, device, srcs, domain, component, None if token is None else (token, index))
    return [(n, ("slab", d, rec, desc)) for n, d, rec, desc in slabs]


def _cut_slabs(ctx: _Ctx, w: DaemonWorker, device, srcs: list, domain, component, key=None, meta: bool = False):
    """One package on `w`: each cached block's slabs for its neighbours, copied and
    cached there (exported too where the node has several daemons). Returns
    ``([(target gid, direction from the target to the sender, record, descriptor)], w)``;
    with a `key`, done once per key (see :func:`_begin`). `meta`: every slab gets a
    descriptor naming its shape and dtype at least (what an NCCL receiver allocates)."""
    pkg, keyed = _keyed_package(key)
    tags, outs = [], []
    for src in srcs:
        gid = src[0]
        whole = pkg.add("exec", _extract, None, (_get(pkg, ctx, src[2], w), gid, domain, component))
        for d, n in sorted(domain.neighbors(gid).items()):
            slab_key = (n, tuple(-x for x in d))
            s = pkg.add("exec", operator.getitem, None, (whole, slab_key))
            if ctx.multi:
                s = pkg.add("exec", _shareable, None, (s,))
                outs.append(("recv", pkg.add("exec", export_slab, None, (s,)), ("desc", slab_key)))
            elif meta:
                outs.append(("recv", pkg.add("exec", _slab_meta, None, (s,)), ("desc", slab_key)))
            outs.append(("cache", s, ("slab", slab_key)))
    for kind, ref, tag in outs:
        _add(pkg, tags, kind, ref, tag=tag)
    _seal(pkg, keyed)
    results, w = _run(w, pkg, srcs, ctx)
    out, desc = [], {}
    for (what, (n, d)), r in zip(tags, results):
        if what == "desc":
            desc[(n, d)] = r
        else:
            out.append((n, d, _record(ctx, w, ("slab", n, d), r, device), desc.get((n, d))))
    return out, w


def _group_task(index: int, it: Iterable, *, ctx: _Ctx, key: Callable, token: str | None = None) -> list:
    """Map side of a key shuffle: ``(group key, (source key, record, hand-off descriptor))``
    (once per partition and `token`, see :func:`_begin`)."""
    srcs = list(it)
    if not srcs:
        return []
    if not ctx.multi:
        return [(key(s[0]), (s[0], s[2], None)) for s in srcs]
    w, _ = _worker_for(ctx, index, srcs)
    pkg, keyed = _keyed_package(None if token is None else (token, index))
    tags, outs = [], []
    for src in srcs:
        s = pkg.add("exec", _shareable, None, (_get(pkg, ctx, src[2], w),))
        outs.append((pkg.add("exec", export_slab, None, (s,)), s, src[0]))
    for desc, s, k in outs:
        _add(pkg, tags, "recv", desc, tag=k)
        _add(pkg, tags, "cache", s, tag=k)
    _seal(pkg, keyed)
    res, w = _run(w, pkg, srcs, ctx)
    out = []
    recs = {s[0]: s[2] for s in srcs}
    for i in range(0, len(res), 2):
        k = tags[i]
        r = recs[k]
        out.append((key(k), (k, _record(ctx, w, k, res[i + 1], r.device), res[i])))
    return out


def _rendezvous(directory: str, rnd: int, index: int, nparts: int, payload, timeout: float) -> list:
    """Every partition's `payload` for round `rnd`, in partition order, swapped through
    files in `directory` (the node's daemon directory): Spark's own ``allGather`` waits in
    one-second steps, this in half-milliseconds."""
    import pickle
    import time as _t

    mine = os.path.join(directory, f"r{rnd}-p{index}")
    with open(mine + ".tmp", "wb") as f:
        pickle.dump(payload, f)
    os.replace(mine + ".tmp", mine)  # atomic: a reader sees all of it or nothing
    deadline = _t.monotonic() + timeout
    out: list = [None] * nparts
    missing = set(range(nparts))
    while missing:
        for p in sorted(missing):
            try:
                with open(os.path.join(directory, f"r{rnd}-p{p}"), "rb") as f:
                    out[p] = pickle.load(f)
                missing.discard(p)
            except FileNotFoundError:
                pass
        if missing:
            if _t.monotonic() > deadline:
                raise InsituError(f"halo_iterate: partition(s) {sorted(missing)} did not reach round {rnd} within "
                                  f"{timeout:g} s (a task died, or the stage's tasks do not all run at once)")
            _t.sleep(0.0005)
    if rnd > 0:  # all wrote round rnd, so all have read round rnd - 1
        try:
            os.remove(os.path.join(directory, f"r{rnd - 1}-p{index}"))
        except FileNotFoundError:
            pass
    return out


def _swap(exchange, rnd: int, index: int, nparts: int, payload, timeout: float) -> list:
    """The `payload` lists of round `rnd` (items ``(target gid, ...)``): through the
    driver's :class:`~insitu.transports.tcp.RecordExchange` where `exchange` is
    ``(endpoint, job, partition of a gid)`` (tasks on several nodes; each partition gets
    only the items addressed to its blocks), else every partition's, through files of the
    node's daemon directory."""
    if isinstance(exchange, str):
        return _rendezvous(exchange, rnd, index, nparts, payload, timeout)
    import pickle

    ep, job, partition_of = exchange
    by_part: dict[int, list] = {}
    for item in payload:  # each slab's record goes to the partition of its target block only
        by_part.setdefault(partition_of(item[0]), []).append(item)
    got = tcp.alltoall(ep, job, rnd, index, nparts, {p: pickle.dumps(v, protocol=5) for p, v in by_part.items()},
                       timeout=timeout)
    return [pickle.loads(b) for _, b in got]  # from the driver, which sends the tasks their code anyway


_NCCL_SETUP_ROUND = 0x7FFF0000  # record-exchange rounds of the NCCL set-up (halo rounds count from 0)


@dataclasses.dataclass(frozen=True)
class _Mesh:
    """The NCCL communicator of a halo job's GPU daemons, one rank per partition that holds blocks."""

    key: tuple  # the communicator's key in each daemon: its members
    rank: dict  # partition index -> rank
    node: dict  # partition index -> node id
    by_daemon: dict  # (node, socket, pid) -> rank


def _nccl_mesh(ctx: _Ctx, w: DaemonWorker | None, index: int, nparts: int, exchange) -> _Mesh | None:
    """Set up (or find, from an earlier job) the NCCL communicator of the job's GPU daemons;
    None where all of them are on one node (no network between them) or records go through
    files (one node). Every task of the barrier stage calls it: one swap of the record
    exchange (who is where, what each daemon holds), a second for the unique id when a
    communicator has to be made."""
    if isinstance(exchange, str):
        return None
    import pickle

    from insitu.transports import nccl

    ep, job = exchange[0], exchange[1]
    me, have = None, ()
    if w is not None:
        me = (ctx.node, w.socket_path, w.pid)
        have = _run_once(w, _exec_package(nccl.held))[0]
    got = [pickle.loads(b) for b in tcp.allgather(ep, job, _NCCL_SETUP_ROUND, index, nparts,
                                                  pickle.dumps((me, have)), timeout=ctx.timeout)]
    members = [(p, g[0]) for p, g in enumerate(got) if g[0] is not None]
    if len({m[0] for _, m in members}) < 2:
        return None
    daemons = [m for _, m in members]
    if len(set(daemons)) != len(daemons):
        raise InsituError("halo_iterate: GPU blocks on several nodes need one partition per GPU daemon (NCCL gives "
                          f"each daemon one rank); partitions {[p for p, _ in members]} share daemons {daemons}")
    mesh = _Mesh(("halo", tuple(daemons)), {p: r for r, (p, _) in enumerate(members)},
                 {p: m[0] for p, m in members}, {m: r for r, (_, m) in enumerate(members)})
    if all(mesh.key in g[1] for g in got if g[0] is not None):
        return mesh  # every daemon kept the communicator of an earlier job
    uid = _run_once(w, _exec_package(nccl.unique_id))[0] if index == members[0][0] else None
    uids = [pickle.loads(b) for b in tcp.allgather(ep, job, _NCCL_SETUP_ROUND + 1, index, nparts,
                                                   pickle.dumps(uid), timeout=ctx.timeout)]
    if w is not None:
        pkg = Package()
        pkg.add("exec", functools.partial(nccl.join, timeout=ctx.timeout), None,
                (mesh.key, len(members), uids[members[0][0]], mesh.rank[index]))
        _run_once(w, pkg)
    return mesh


def _exec_package(fn) -> Package:
    """A package that runs ``fn()`` in the daemon and returns its result."""
    pkg = Package()
    pkg.add("recv", pkg.add("exec", fn, None, ()))
    return pkg


def _nccl_round(pkg: Package, mesh: _Mesh, out: list, incoming: dict, partition_of, local_drops: list,
                ctx: _Ctx) -> dict:
    """One NCCL group in `pkg`: this daemon's slabs for blocks of other nodes go out (then
    dropped here), those of other nodes' daemons for this partition's blocks come in.
    Returns ``{(gid, direction): reference to the received slab}``. Both sides order a
    pair's slabs by (target gid, direction): NCCL matches a pair's sends and receives in
    the order they are posted."""
    sends = []
    for n, d, rec, _ in sorted(out, key=lambda x: (_order_key(x[0]), x[1])):
        p = partition_of(n)
        if mesh.node.get(p, ctx.node) != ctx.node:
            sends.append((mesh.rank[p], pkg.add("get", rec.handle)))
            local_drops.append(rec.handle)
    recvs, keys = [], []
    for gid in sorted(incoming, key=_order_key):
        for d, srec, dsc in sorted(incoming[gid], key=lambda x: x[0]):
            if _remote(ctx, srec):
                shape, dtype = _slab_shape(dsc)
                recvs.append((mesh.by_daemon[(srec.node, srec.socket, srec.pid)], shape, dtype))
                keys.append((gid, d))
    if not sends and not recvs:
        return {}
    got = pkg.add("exec", functools.partial(_nccl_swap, timeout=ctx.timeout), None,
                  (mesh.key, tuple(p for p, _ in sends), tuple(r for _, r in sends), tuple(recvs)))
    return {k: pkg.add("exec", operator.getitem, None, (got, i)) for i, k in enumerate(keys)}


def _nccl_swap(key, peers: tuple, arrays: tuple, recvs: tuple, *, timeout: float) -> list:
    """In a daemon: :func:`insitu.transports.nccl.swap` of `arrays` to `peers` and `recvs`."""
    from insitu.transports import nccl

    return nccl.swap(key, list(zip(peers, arrays)), recvs, timeout=timeout)


def _slab_meta(a) -> tuple:
    """A slab's descriptor for an NCCL receiver: its shape and dtype."""
    return ("meta", tuple(a.shape), a.dtype.str)


def _slab_shape(desc) -> tuple:
    """(shape, dtype) of the slab a descriptor names (:func:`_slab_meta`, :func:`export_slab`)."""
    if desc is None or desc[0] == "shm":
        raise InsituError(f"halo_iterate: a slab from another node came without its shape ({desc!r}): GPU blocks "
                          "cross nodes through NCCL, host blocks over tcp")
    if desc[0] in ("meta", "empty"):
        return tuple(desc[1]), desc[2]
    return tuple(desc[4]), desc[5]


def _rounds_task(index: int, it: Iterable, *, ctx: _Ctx, domain, component, kernel, function_name, args: tuple,
                 launch: dict, rounds: int, nparts: int, exchange_dir: str | tuple, parts: list | None = None) -> list:
    """`rounds` x (halo exchange, `kernel`) for one partition's cached blocks, in a barrier
    stage: per round one package cuts, copies and caches the slabs on this partition's
    daemon (exported where the node has several daemons), the tasks swap the slabs'
    records through files in `exchange_dir` (:func:`_rendezvous`, the round's barrier;
    the data stays in the daemons; with `exchange_dir` ``(endpoint, job, partitioner)``, through the
    driver's :class:`~insitu.transports.tcp.RecordExchange`: tasks on several nodes), and
    a second package appends the slabs addressed to these blocks (same daemon: by handle;
    another daemon of the node: mapped through shared memory or CUDA IPC; another node:
    taken over tcp by the daemon itself, or for GPU daemons swapped through NCCL, one group per
    round, see :func:`_nccl_mesh`), runs `kernel` and caches the results. The blocks of the round before are
    dropped as it goes, except the job's sources: a retried stage starts from them again.
    With `parts` (every partition's records, from the driver) the task's records are
    ``parts[index]`` and `it` is ignored."""
    if isinstance(exchange_dir, str):
        _clear_exchange(exchange_dir, index)
    srcs = list(it)  # read even when unused: a python worker that leaves input unread is not reused
    if parts is not None:
        srcs = list(parts[index])
    moved = any(_remote(ctx, s[2]) for s in srcs)
    if moved:  # Spark placed the task away from its blocks' node: bring them here first
        srcs = _localize(ctx, index, srcs)
    return _rounds(index, srcs, ctx=ctx, domain=domain, component=component, kernel=kernel,
                   function_name=function_name, args=args, launch=launch, rounds=rounds, nparts=nparts,
                   exchange=exchange_dir, keep_sources=not moved)


def _localize(ctx: _Ctx, index: int, srcs: list) -> list:
    """`srcs` (cached blocks) fetched from other nodes onto this partition's daemon here, as
    new records (the job's sources there stay, as a retried stage needs them)."""
    device, directory = _placement(ctx, index)
    w = _client(ctx, device, directory)
    pkg, tags, refs = Package(), [], []
    for s in srcs:
        refs.append((s[0], _get(pkg, ctx, s[2], w) if _remote(ctx, s[2]) else pkg.add("get", s[2].handle)))
    for key, ref in refs:
        _add(pkg, tags, "cache", ref, tag=key)
    results, w = _run(w, pkg, srcs, ctx)
    return [(key, "handle", _record(ctx, w, key, h, device)) for key, h in zip(tags, results)]


def _clear_exchange(exchange_dir: str, index: int) -> None:
    os.makedirs(exchange_dir, exist_ok=True)
    # A rerun of the stage (Spark retries barrier stages whole) starts from the job's
    # sources; this partition's files of the failed attempt go first. Another partition
    # may still read one of them: the rounds are deterministic, so its records name the
    # same slab values, or blocks already freed (an error, and the job is run again).
    for name in os.listdir(exchange_dir):
        if name.endswith(f"-p{index}") or name.endswith(f"-p{index}.tmp"):
            try:
                os.remove(os.path.join(exchange_dir, name))
            except FileNotFoundError:
                pass


def _rounds(index: int, srcs: list, *, ctx: _Ctx, domain, component, kernel, function_name, args: tuple,
            launch: dict, rounds: int, nparts: int, exchange, keep_sources: bool = True) -> list:
    recs = {s[0]: s[2] for s in srcs}
    w, device = _worker_for(ctx, index, srcs) if srcs else (None, None)
    others = [r for r in recs.values() if not _same_daemon(ctx, r, w)] if srcs else []
    if others:
        raise InsituError(f"halo_iterate: partition {index} holds blocks on two daemons ({w.socket_path}, "
                          f"{others[0].socket}); cache each partition's blocks on one")
    sources = dict(recs) if keep_sources else {}  # copies fetched from another node are this task's to free
    # GPU blocks cross nodes through NCCL (its network transport) between the daemons; CPU ones over tcp.
    mesh = _nccl_mesh(ctx, w, index, nparts, exchange) if ctx.network and device is not None else None
    for rnd in range(rounds):
        out = []  # (target gid, direction from the target to the sender, record, descriptor)
        if recs:
            out, w = _cut_slabs(ctx, w, device, srcs, domain, component, meta=mesh is not None)
        everyone = _swap(exchange, rnd, index, nparts, out, ctx.timeout)
        if not recs:
            continue
        incoming: dict = {}
        for msg in everyone:
            for n, d, srec, dsc in msg:
                if n in recs:
                    incoming.setdefault(n, []).append((d, srec, dsc))
        pkg, tags, local_drops, remote_drops, outs = Package(), [], [], {}, []
        received = _nccl_round(pkg, mesh, out, incoming, exchange[2], local_drops, ctx) if mesh else {}
        for gid, rec in recs.items():
            ref = pkg.add("get", rec.handle)
            dirs, refs = [], []
            for d, srec, dsc in sorted(incoming.get(gid, []), key=lambda x: x[0]):
                dirs.append(d)
                refs.append(received[(gid, d)] if (gid, d) in received
                            else _take_slab(pkg, tags, w, srec, dsc, remote_drops, ctx))
                if _same_daemon(ctx, srec, w):
                    local_drops.append(srec.handle)
            ref = pkg.add("exec", _append_slabs, None, (ref, gid, domain, component, tuple(dirs), tuple(refs)))
            ref = pkg.add("exec", kernel, function_name, (ref, *args), **launch)
            outs.append((ref, gid))
            if rec is not sources.get(gid):
                local_drops.append(rec.handle)
        for ref, gid in outs:  # after every computing operation: a failing one has cached nothing
            _add(pkg, tags, "cache", ref, tag=gid)

        def new_records(pairs, w):
            return {gid: _record(ctx, w, gid, h, device) for gid, h in pairs}

        recs = _finish(pkg, tags, w, remote_drops, local_drops, srcs, new_records, ctx)
        srcs = [(gid, "handle", r) for gid, r in recs.items()]
    return [(gid, "handle", r) for gid, r in recs.items()]


def _halo_assemble(it: Iterable, *, domain, component, order: Callable) -> list:
    """Reduce side of a halo shuffle: each block with the slabs addressed to it."""
    blocks, slabs = {}, {}
    for k, v in it:
        if v[0] == "block":
            blocks[k] = v[1]
        else:
            slabs.setdefault(k, []).append((v[1], v[2], v[3]))
    out = []
    for k in sorted(blocks, key=order):
        src = blocks[k]
        if src[1] != "handle":  # pragma: no cover - the shuffle caches first
            raise ValueError(f"halo shuffle: block {k!r} is not cached")
        out.append((k, "halo", src[2], domain, component, sorted(slabs.get(k, []), key=lambda s: s[0])))
    return out


def _group_assemble(it: Iterable) -> list:
    out = []
    for k, items in it:
        out.append((k, "group", sorted(items, key=lambda t: _order_key(t[0]))))
    return sorted(out, key=lambda s: _order_key(s[0]))


def _order_key(k):
    return (0, k) if isinstance(k, (int, float, np.integer)) else (1, repr(k))


# --------------------------------------------------------------------------- in the daemons


def _extract(block, gid, domain, component):
    return extract_halo(block if component is None else block[component], gid, domain)


def _append_slabs(block, gid, domain, component, dirs, slabs):
    from insitu.pool.halo import append_halo

    append_halo(block if component is None else block[component], gid, domain, dict(zip(dirs, slabs)))
    return block


def _on_device(x):
    """`x` (an array, or tuples, lists and dicts of them) on the worker's current device."""
    if isinstance(x, (list, tuple)):
        return type(x)(_on_device(v) for v in x)
    if isinstance(x, dict):
        return {k: _on_device(v) for k, v in x.items()}
    return x if x is None or isinstance(x, (str, bytes, int, float, complex)) else arrays.to_device(x)


def _as_list(*arrays_):
    return list(arrays_)


def _shareable(a):
    """`a` where another daemon of the node can map it: host arrays into shared memory."""
    if isinstance(a, np.ndarray):
        from insitu.pool.shared import is_shared, shared_copy

        return a if is_shared(a) else shared_copy(a)
    return a


def export_slab(a) -> tuple:
    """A small descriptor through which another daemon of this node maps array `a`
    (kept alive by this daemon's cache): a shared segment's view for host arrays made
    by :func:`insitu.pool.shared_empty`, a CUDA IPC handle for device arrays (the
    hand-off of :mod:`insitu.pool.handoff`)."""
    from insitu.pool import handoff, shared

    if isinstance(a, np.ndarray):
        view = shared.segment_of(a)
        if view is None:
            raise ValueError("export_slab: host array is not in shared memory (use _shareable first)")
        return ("shm", view)
    cp = handoff._cupy()
    dev = int(a.device.id)
    if not a.nbytes:
        return ("empty", tuple(a.shape), a.dtype.str, dev)
    base, size = handoff._allocation(int(a.data.ptr), dev)
    with cp.cuda.Device(dev):
        handle = bytes(cp.cuda.runtime.ipcGetMemHandle(base))
        cp.cuda.runtime.deviceSynchronize()  # the slab is complete before anyone maps it
    return ("ipc", handle, size, int(a.data.ptr) - base, tuple(a.shape), a.dtype.str, tuple(a.strides),
            handoff._pci_bus_id(dev), os.getpid())


def import_slab(desc: tuple):
    """The array `desc` (from :func:`export_slab` in another daemon) describes, copied
    into this daemon's memory: a host copy; on GPUs a device copy on the same GPU, a
    peer copy (``cudaMemcpyPeer``) from another GPU onto this daemon's current device."""
    from insitu.pool import handoff, shared

    if desc[0] == "shm":
        return shared.attach(desc[1]).copy()
    cp = handoff._cupy()
    if desc[0] == "empty":
        with cp.cuda.Device(desc[3]):
            return cp.empty(desc[1], np.dtype(desc[2]))
    _, handle, size, offset, shape, dtype, strides, bus, pid = desc
    if pid == os.getpid():  # CUDA cannot open a process's own IPC handle; the engine uses a `get` here
        raise ValueError("import_slab: the slab was exported by this daemon; take it from the cache by its handle")
    dev = handoff._ordinal(bus)
    here = cp.cuda.runtime.getDevice()  # the daemon's own device (Worker.run made it current)
    m = handoff._open(handle, size, dev)
    with cp.cuda.Device(dev):
        src = handoff._wrap(cp, m.base, size, m, dev, offset, shape, dtype, strides)
        if dev == here:
            out = src.copy()
            cp.cuda.get_current_stream().synchronize()  # before the mapping closes
            return out
        src = cp.ascontiguousarray(src)
        cp.cuda.get_current_stream().synchronize()
    out = cp.empty(tuple(shape), np.dtype(dtype))  # on this daemon's device: a peer copy
    if out.nbytes:
        cp.cuda.runtime.memcpyPeer(out.data.ptr, here, src.data.ptr, dev, out.nbytes)
        cp.cuda.runtime.deviceSynchronize()
    return out


def _ckpt_name(key) -> str:
    return "block_" + re.sub(r"[^\w.-]", "_", repr(key)) + ".npy"


def _save_block(block, key, directory: str):
    """Write a block to ``directory`` (atomically); runs in the daemon, returns its path."""
    from insitu import arrays

    path = os.path.join(directory, _ckpt_name(key))
    tmp = path + f".tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        np.save(f, arrays.to_host(block) if arrays.is_device_array(block) else np.asarray(block))
    os.replace(tmp, path)
    return path


def load_checkpoint_block(key, directory: str):
    """A block written by a checkpoint (runs in the daemon: the file never goes through Spark)."""
    a = np.load(os.path.join(directory, _ckpt_name(key)))
    return a


def _identity(x):
    return x


def _stable(k, n: int) -> int:
    return stable_partition(k, n)
