"""Scenes drawn by Spark tasks on the worker daemons (``engine: spark``).

Each render of a step goes like this:

1. On the simulation's ranks, as with the embedded engine: pipelines (their filters are
   cheap or collective: contour and threshold set up what to draw, the eikonal solve
   exchanges halos between ranks), global colour ranges, bounds and the camera.
2. Every rank hands the fields its domains' plots need to its node's worker daemon in
   one command package (CUDA IPC on GPUs, shared memory on the CPU: no host copy of a
   device field), where they are packed into one cached block per domain (with the
   tile ranges the simulation gave for contoured fields).
3. Rank 0, the Spark driver, sends the blocks' records to its serving job
   (:class:`insitu.engine.serving.StepServer`: one long-lived barrier stage started at
   the first draw, so no step waits on a new Spark job); each of its tasks runs, on the
   daemon that holds its blocks, the package step the embedded engine's worker runs
   (:func:`adaptors.draw.draw_block`: marching cubes and rasterization for pseudocolor
   plots, ray casting for volume plots) and answers with one image per block; then each
   rank frees the blocks it handed over (a step has no side effects on the daemons, so a
   task Spark restarts may draw it again).
4. The driver composites the block images: surfaces by depth, volumes by "over" in
   visibility order, the volume over the surfaces; the base class adds the background.

Spark's executors must run on the simulation's nodes (``local[N]``, or a cluster whose
workers are there): the blocks live in the daemons of the node that made them. On several
hosts (``network: true``) every rank's daemon also serves its blocks over TCP, the records
name their host, and the serving job's tasks connect to the driver over TCP; a host's blocks
go to a task running there, else to one that fetches them.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Mapping

import numpy as np

from insitu import arrays
from insitu.engine import get_engine

from . import draw as _draw
from .draw import (BlockSpec, DomainImage, View, block_layout, describe_domain, draw_block, flatten, merge_domains,
                   pack_block)
from .context import Context
from .pipelines import Dataset
from .scenes import SceneRenderer

__all__ = ["SparkSceneRenderer", "start_spark"]


def start_spark(ctx: Context, params: Mapping[str, Any]) -> tuple[Any, str]:
    """Start ``engine: spark`` for the simulation's ranks (collective).

    Parameters
    ----------
    ctx : Context
        The simulation's ranks; rank 0 runs the Spark driver.
    params : mapping
        ``engine/params`` of the configuration: master, conf, cpu_daemons, timeout.

    Returns
    -------
    engine : insitu.engine.spark.SparkEngine or None
        The driver's engine at rank 0, None elsewhere.
    daemon_dir : str
        Where the worker daemons of every node listen (the same on every rank).

    Raises
    ------
    Exception
        On every rank, where Spark did not start at rank 0 (agreed through `ctx`).
    """
    engine, error, directory = None, None, None
    if params.get("network"):  # every rank's daemon serves its blocks to the tasks of other hosts
        os.environ["INSITU_DAEMON_TCP"] = "1"
    if ctx.rank == 0:
        try:
            engine = get_engine("spark")(params["master"], app_name="insitu-adaptor",
                                         conf={k: str(v) for k, v in (params.get("conf") or {}).items()},
                                         cpu_daemons=params["cpu_daemons"], timeout=params["timeout"],
                                         network=bool(params.get("network")))
            directory = engine.daemon_dir
        except Exception as e:  # every rank raises it below
            e.add_note("while starting Spark for engine: spark")
            error = e
    try:
        ctx.agree(error, "engine: spark")
        directory = ctx.bcast(directory, what="engine: spark (daemon directory)")
    except BaseException:
        if engine is not None:  # nobody will use it (the adaptor is not made); the agreed error is the one raised
            with contextlib.suppress(Exception):
                engine.stop()
        raise
    return engine, directory


class SparkSceneRenderer(SceneRenderer):
    """:class:`SceneRenderer` whose drawing runs as Spark tasks on worker daemons.

    Parameters
    ----------
    ctx : Context
        The simulation's ranks; rank 0 runs the Spark driver.
    params : mapping
        ``engine/params`` of the configuration: master, conf, cpu_daemons, timeout,
        npartitions.
    engine : insitu.engine.spark.SparkEngine or None
        The driver's engine at rank 0 (the adaptor owns and stops it), None elsewhere.
    daemon_dir : str
        Where the node's worker daemons listen (:func:`start_spark`).
    """

    def __init__(self, ctx: Context, params: Mapping[str, Any], engine, daemon_dir: str) -> None:
        super().__init__(ctx, engine)
        self.params = dict(params)
        self.daemon_dir = daemon_dir
        self._workers: dict = {}
        self._serving = None

    def close(self) -> None:
        """Close the renderers and this rank's daemon connections, each on its own, then
        wait for every rank (so that no rank still talks to a daemon when the adaptor
        stops Spark); raises the first failure after all of them were tried."""
        errors = []
        serving = () if self._serving is None else (self._serving.close,)
        for close in (*serving, super().close, *(w.close for w in self._workers.values())):
            try:
                close()
            except Exception as e:  # raised below, after the rest is closed
                errors.append(e)
        self._workers.clear()
        self._serving = None
        try:
            self.ctx.barrier(what="engine: spark (closing)")  # no rank still talks to a daemon the driver stops
        except Exception as e:  # raised below; the adaptor stops Spark all the same
            errors.append(e)
        if errors:
            raise errors[0]

    def _worker(self, device: int | None):
        """This rank's connection to its node's daemon for `device` (started if none runs)."""
        w = self._workers.get(device)
        if w is None:
            from insitu.pool.daemon import ensure_daemon

            t = float(self.params["timeout"])
            w = self._workers[device] = ensure_daemon(device, directory=self.daemon_dir,
                                                      timeout=max(t, 60.0)).client(timeout=t)
        return w

    def _hand_over(self, plots: list, raw: Dataset) -> tuple[list, dict]:
        """This rank's domains to its daemon: (block records, :class:`BlockSpec` by key)."""
        from insitu.engine.spark import block_record
        from insitu.pool import Package, WorkerDiedError

        per_domain = [describe_domain(plots, i, d) for i, d in enumerate(raw.domains)]
        if not per_domain:
            return [], {}
        devices = {arrays.device_id(f) if arrays.is_device_array(f) else None for fs, _ in per_domain for f in fs}
        if len(devices) != 1:
            raise ValueError(f"engine: spark: this rank's fields are on several devices ({sorted(map(str, devices))})")
        device = devices.pop()
        w = self._worker(device)
        pkg = Package()
        for fields, _ in per_domain:
            # The fields and their tile ranges in one cached array (one block per domain).
            pkg.add("cache", pkg.add("exec", pack_block, None, tuple(pkg.add("send", f) for f in fields)))
        try:
            handles = w.run(pkg)
        except WorkerDiedError as e:
            from insitu.pool.daemon import pid_alive

            if not str(e).startswith("no worker daemon listens") and pid_alive(w.pid):
                raise
            # The daemon died (since the last step, or under this package): whatever the
            # package did there died with it, so it can run again on a new daemon.
            self._workers.pop(device).close()
            w = self._worker(device)
            handles = w.run(pkg)
        rank = self.ctx.rank
        records, specs = [], {}
        where = self.daemon_dir if self.params.get("network") else None
        for i, ((fields, spec), h) in enumerate(zip(per_domain, handles)):
            key = (rank, i)
            records.append(block_record(w, key, h, device, daemon_dir=where))
            specs[key] = BlockSpec(spec, block_layout(fields))
        return records, specs

    def _draw(self, where: str, plots: list, cam, w: int, h: int, bounds, raw: Dataset, step: int):
        ctx = self.ctx
        records, specs, error = [], {}, None
        try:
            with self.prof.stage("handover"):
                records, specs = self._hand_over(plots, raw)
        except Exception as e:
            e.add_note(f"in {where} on rank {ctx.rank} (handing the fields to the worker daemon)")
            error = e
        mine = records
        try:
            ctx.agree(error, where)
            if ctx.size > 1:
                gathered = ctx.gather((records, specs), what=f"{where} (block records)")
                if ctx.rank == 0:
                    records = [r for rs, _ in gathered for r in rs]
                    specs = {k: v for _, sp in gathered for k, v in sp.items()}
            result, error = (None, None), None
            if ctx.rank == 0:
                try:
                    with self.prof.stage("spark"):
                        result = self._spark_draw(records, specs, cam, w, h, bounds, where)
                except Exception as e:
                    error = e
            ctx.agree(error, where)
            return result
        finally:
            # Each rank frees what it handed over, after the job: the job itself has no
            # side effects on the daemons, so Spark may retry its tasks freely.
            self._drop(mine)

    def _drop(self, records: list) -> None:
        """Free blocks this rank handed over (after the step, or when it failed)."""
        from insitu.pool import Package

        if not records:
            return
        pkg = Package()
        for r in records:
            pkg.add("drop", r.handle)
        try:
            self._worker(records[0].device).run(pkg)
        except Exception:  # the step's own error is the one reported
            pass

    def _server(self):
        """The driver's long-lived serving job (started at the first draw): each step's
        blocks are drawn by its tasks, without a Spark job per step."""
        if self._serving is None:
            from insitu.engine.serving import StepServer

            n = self.params.get("npartitions") or self.engine.default_parallelism
            self._serving = StepServer(self.engine, min(n, self.engine.default_parallelism))
        return self._serving

    def _spark_draw(self, records: list, specs: dict, cam, w: int, h: int, bounds, where: str):
        if not records:
            return np.zeros((h, w, 4), np.float32), None
        view = View(cam, w, h, tuple(map(float, bounds)))
        try:
            # The tasks run the embedded engine's package step (draw_block, with the
            # draw_domain this process names), packing each image into one array to move.
            server = self._server()
            packed = server.run(records, draw_block, None, specs, view, _draw.draw_domain, None, None, True,
                                with_key=True)
            self.prof.add("daemons", server.task_seconds)  # part of "spark": the drawing's own time
        except Exception as e:
            raise RuntimeError(f"{where}: the Spark job drawing {len(records)} blocks failed: "
                               f"{_python_error(e)}") from e
        keys = sorted(packed)
        images = [DomainImage.unpacked(packed[k], specs[k].domain) for k in keys]
        merged = merge_domains(images, [specs[k].domain.box for k in keys], cam.position)
        return flatten(merged, w, h)


def _python_error(e: BaseException) -> str:
    """The Python exception inside a Py4J error's Java trace (its last line), else `e`."""
    text = str(e)
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line and ("Error:" in line or "Exception:" in line) and not line.startswith(("at ", "org.apache", "py4j")):
            return line
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"
